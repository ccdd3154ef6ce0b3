// Package deviceplugin is a Kubernetes device plugin (kubelet's device-plugin API
// v1beta1) that advertises the node's GPUs — real ones through NVML, simulated ones
// through gpusim's NVML adapter — as nvidia.com/gpu for online pods, and writes the CDI
// spec of those GPUs that the muxflow runtime uses to give offline pods the GPU the
// scheduler chose for them (annotation muxflow.io/gpu), so one description of how a GPU
// reaches a container serves both paths.
//
// Allocate answers with the device nodes, mounts and environment of the allocated GPUs
// (from the same edits as the CDI spec) plus NVIDIA_VISIBLE_DEVICES=<UUIDs>, which is how
// the muxflow runtime recognises a GPU container; this works on every containerd,
// including 1.6, which does not apply CDI itself.
package deviceplugin

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// GPU is one GPU as the plugin advertises it.
type GPU struct {
	Index   int
	UUID    string
	Minor   int
	Healthy bool
}

// ListGPUs reads the GPUs NVML reports. A GPU whose UUID cannot be read is left out.
func ListGPUs(lib nvml.Interface) ([]GPU, error) {
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("NVML device count: %s", lib.ErrorString(ret))
	}
	var out []GPU
	for i := 0; i < n; i++ {
		d, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			continue
		}
		uuid, ret := d.GetUUID()
		if ret != nvml.SUCCESS || uuid == "" {
			continue
		}
		minor, ret := d.GetMinorNumber()
		if ret != nvml.SUCCESS {
			minor = i
		}
		out = append(out, GPU{Index: i, UUID: uuid, Minor: minor, Healthy: true})
	}
	return out, nil
}

// Plugin serves the device-plugin API for one resource.
type Plugin struct {
	pluginapi.UnimplementedDevicePluginServer

	// ResourceName is the extended resource advertised, nvidia.com/gpu by default.
	ResourceName string
	// Dir is kubelet's device-plugin directory (its kubelet.sock and the plugins' sockets).
	Dir string
	// Socket is this plugin's socket name inside Dir.
	Socket string
	// List re-reads the GPUs; called every Period.
	List     func() ([]GPU, error)
	Injector Injector
	// CDIDir and CDIName say where the CDI spec goes ("" CDIDir: no spec is written).
	CDIDir, CDIName string
	// Strategy is how Allocate names the GPUs, as the NVIDIA device plugin's
	// deviceListStrategy: StrategyEnvvar (default), StrategyVolumeMounts or
	// StrategyCDIAnnotations.
	Strategy string
	Period   time.Duration
	Log      *slog.Logger

	mu      sync.Mutex
	gpus    []GPU
	changed chan struct{}
}

// Run lists the GPUs, writes the CDI spec, serves the API and registers with kubelet,
// and does it again whenever kubelet restarts (it removes the plugins' sockets).
func (p *Plugin) Run(ctx context.Context) error {
	if p.ResourceName == "" {
		p.ResourceName = "nvidia.com/gpu"
	}
	if p.Dir == "" {
		p.Dir = pluginapi.DevicePluginPath
	}
	if p.Socket == "" {
		p.Socket = "muxflow-gpu.sock"
	}
	if p.Period == 0 {
		p.Period = 5 * time.Second
	}
	if p.Log == nil {
		p.Log = slog.Default()
	}
	p.changed = make(chan struct{}, 1)
	if err := p.refresh(); err != nil {
		return err
	}
	go p.watch(ctx)
	for {
		stopped, err := p.serveOnce(ctx)
		if err != nil {
			return err
		}
		if !stopped {
			return nil
		}
		p.Log.Info("kubelet removed the plugin socket (it restarted): registering again")
	}
}

func (p *Plugin) refresh() error {
	gpus, err := p.List()
	if err != nil {
		return err
	}
	p.mu.Lock()
	old := p.gpus
	same := slices.Equal(old, gpus)
	p.gpus = gpus
	p.mu.Unlock()
	if same && old != nil {
		return nil
	}
	if p.CDIDir != "" {
		path, err := WriteSpec(p.CDIDir, p.CDIName, Spec(p.Injector, gpus))
		if err != nil {
			return err
		}
		p.Log.Info("wrote CDI spec", "path", path, "gpus", len(gpus))
	}
	select {
	case p.changed <- struct{}{}:
	default:
	}
	return nil
}

// watch re-lists the GPUs every Period; a GPU that disappears leaves the list kubelet
// sees and the CDI spec, so that the runtime refuses pods still planned onto it. (Health
// is muxd's business: it evicts offline work from a failing GPU; the plugin reports
// every GPU it can list as healthy.)
func (p *Plugin) watch(ctx context.Context) {
	t := time.NewTicker(p.Period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := p.refresh(); err != nil {
				p.Log.Warn("listing GPUs failed", "err", err)
			}
		}
	}
}

func (p *Plugin) serveOnce(ctx context.Context) (restarted bool, err error) {
	sock := filepath.Join(p.Dir, p.Socket)
	// kubelet empties its device-plugin directory when it starts and then creates its
	// socket: create ours only after that, or kubelet would remove it.
	kubelet := filepath.Join(p.Dir, filepath.Base(pluginapi.KubeletSocket))
	for {
		if st, err := os.Stat(kubelet); err == nil && st.Mode()&os.ModeSocket != 0 {
			break
		}
		select {
		case <-ctx.Done():
			return false, nil
		case <-time.After(500 * time.Millisecond):
		}
	}
	os.Remove(sock)
	l, err := net.Listen("unix", sock)
	if err != nil {
		return false, fmt.Errorf("listen on %s: %w", sock, err)
	}
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, p)
	go srv.Serve(l)
	defer srv.Stop()
	if err := p.register(ctx); err != nil {
		return false, err
	}
	p.Log.Info("registered with kubelet", "resource", p.ResourceName, "socket", sock)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return false, nil
		case <-t.C:
			if _, err := os.Lstat(sock); err != nil {
				return true, nil
			}
		}
	}
}

func (p *Plugin) register(ctx context.Context) error {
	kubelet := filepath.Join(p.Dir, filepath.Base(pluginapi.KubeletSocket))
	var lastErr error
	for range 60 { // kubelet may still be starting
		conn, err := grpc.NewClient("unix://"+kubelet, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err == nil {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err = pluginapi.NewRegistrationClient(conn).Register(cctx, &pluginapi.RegisterRequest{
				Version: pluginapi.Version, Endpoint: p.Socket, ResourceName: p.ResourceName,
				Options: &pluginapi.DevicePluginOptions{},
			})
			cancel()
			conn.Close()
			if err == nil {
				return nil
			}
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
	return fmt.Errorf("register with kubelet at %s: %w", kubelet, lastErr)
}

// GetDevicePluginOptions implements the device-plugin API.
func (p *Plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

func (p *Plugin) devices() []*pluginapi.Device {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []*pluginapi.Device
	for _, g := range p.gpus {
		h := pluginapi.Healthy
		if !g.Healthy {
			h = pluginapi.Unhealthy
		}
		out = append(out, &pluginapi.Device{ID: g.UUID, Health: h})
	}
	return out
}

// ListAndWatch implements the device-plugin API: the GPUs now and after every change.
func (p *Plugin) ListAndWatch(_ *pluginapi.Empty, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	for {
		if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: p.devices()}); err != nil {
			return err
		}
		select {
		case <-stream.Context().Done():
			return nil
		case <-p.changed:
		}
	}
}

// Allocate implements the device-plugin API.
func (p *Plugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	p.mu.Lock()
	byUUID := map[string]GPU{}
	for _, g := range p.gpus {
		byUUID[g.UUID] = g
	}
	p.mu.Unlock()
	resp := &pluginapi.AllocateResponse{}
	for _, cr := range req.ContainerRequests {
		var gs []GPU
		for _, id := range cr.DevicesIds {
			g, ok := byUUID[id]
			if !ok {
				return nil, fmt.Errorf("muxflow device plugin: GPU %s is not on this node any more", id)
			}
			gs = append(gs, g)
		}
		resp.ContainerResponses = append(resp.ContainerResponses, p.containerResponse(gs))
	}
	return resp, nil
}

// The device-list strategies, named as the NVIDIA device plugin names them.
const (
	StrategyEnvvar         = "envvar"
	StrategyVolumeMounts   = "volume-mounts"
	StrategyCDIAnnotations = "cdi-annotations"
)

func (p *Plugin) containerResponse(gs []GPU) *pluginapi.ContainerAllocateResponse {
	if p.Strategy == StrategyCDIAnnotations {
		// The runtime applies the devices from the CDI spec (annotation keys as the
		// NVIDIA device plugin writes them; containerd must pass them: the runtime
		// entry's container_annotations = ["cdi.k8s.io/*"]).
		var names []string
		for _, g := range gs {
			names = append(names, CDIKind+"="+g.UUID)
		}
		return &pluginapi.ContainerAllocateResponse{Annotations: map[string]string{
			"cdi.k8s.io/muxflow-device-plugin_" + strings.ToLower(strings.Join(uuidsOf(gs), "_")): strings.Join(names, ","),
		}}
	}
	r := &pluginapi.ContainerAllocateResponse{Envs: map[string]string{}}
	var uuids []string
	edits := []Edits{p.Injector.Common()}
	for _, g := range gs {
		uuids = append(uuids, g.UUID)
		edits = append(edits, p.Injector.Device(g))
	}
	edits = append(edits, Edits{Env: p.Injector.Env(gs)})
	for _, e := range edits {
		for _, kv := range e.Env {
			if k, v, ok := strings.Cut(kv, "="); ok {
				r.Envs[k] = v
			}
		}
		for _, d := range e.Devices {
			host := d.HostPath
			if host == "" {
				host = d.Path
			}
			perm := d.Permissions
			if perm == "" {
				perm = "rwm"
			}
			r.Devices = append(r.Devices, &pluginapi.DeviceSpec{ContainerPath: d.Path, HostPath: host, Permissions: perm})
		}
		for _, m := range e.Mounts {
			r.Mounts = append(r.Mounts, &pluginapi.Mount{ContainerPath: m.ContainerPath, HostPath: m.HostPath, ReadOnly: slices.Contains(m.Options, "ro")})
		}
	}
	// The muxflow runtime (and NVIDIA's) recognise a GPU container by this variable.
	r.Envs["NVIDIA_VISIBLE_DEVICES"] = strings.Join(uuids, ",")
	if p.Strategy == StrategyVolumeMounts {
		r.Envs["NVIDIA_VISIBLE_DEVICES"] = "/var/run/nvidia-container-devices"
		for _, u := range uuids {
			r.Mounts = append(r.Mounts, &pluginapi.Mount{HostPath: "/dev/null", ContainerPath: "/var/run/nvidia-container-devices/" + u, ReadOnly: true})
		}
	}
	return r
}

func uuidsOf(gs []GPU) []string {
	var out []string
	for _, g := range gs {
		out = append(out, g.UUID)
	}
	return out
}
