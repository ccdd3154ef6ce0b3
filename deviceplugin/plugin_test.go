package deviceplugin

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"tags.cncf.io/container-device-interface/pkg/cdi"
)

type fakeKubelet struct {
	pluginapi.UnimplementedRegistrationServer
	got chan *pluginapi.RegisterRequest
}

func (k *fakeKubelet) Register(_ context.Context, r *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	k.got <- r
	return &pluginapi.Empty{}, nil
}

func TestPluginRegistersListsAndAllocates(t *testing.T) {
	dir, err := os.MkdirTemp("", "mfdp") // short: unix socket paths are limited
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	l, err := net.Listen("unix", filepath.Join(dir, "kubelet.sock"))
	if err != nil {
		t.Fatal(err)
	}
	kl := &fakeKubelet{got: make(chan *pluginapi.RegisterRequest, 4)}
	srv := grpc.NewServer()
	pluginapi.RegisterRegistrationServer(srv, kl)
	go srv.Serve(l)
	t.Cleanup(srv.Stop)

	var gpus atomic.Pointer[[]GPU]
	all := []GPU{{Index: 0, UUID: "GPU-aaaa", Healthy: true}, {Index: 1, UUID: "GPU-bbbb", Healthy: true}}
	gpus.Store(&all)
	cdiDir := filepath.Join(dir, "cdi")
	p := &Plugin{Dir: dir, CDIDir: cdiDir, CDIName: "muxflow-gpus.json", Period: 50 * time.Millisecond,
		Injector: SimInjector{Socket: "/tmp/sim.sock", LibDir: "/opt/gpusim/lib"},
		List:     func() ([]GPU, error) { return *gpus.Load(), nil },
		Log:      slog.New(slog.NewTextHandler(io.Discard, nil))}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	var reg *pluginapi.RegisterRequest
	select {
	case reg = <-kl.got:
	case <-time.After(10 * time.Second):
		t.Fatal("the plugin did not register")
	}
	if reg.ResourceName != "nvidia.com/gpu" || reg.Version != "v1beta1" || reg.Endpoint != "muxflow-gpu.sock" {
		t.Fatalf("registration = %+v", reg)
	}
	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, reg.Endpoint), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := pluginapi.NewDevicePluginClient(conn)
	stream, err := c.ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	lw, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if len(lw.Devices) != 2 || lw.Devices[1].ID != "GPU-bbbb" || lw.Devices[1].Health != pluginapi.Healthy {
		t.Fatalf("devices = %v", lw.Devices)
	}
	resp, err := c.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"GPU-bbbb"}}}})
	if err != nil {
		t.Fatal(err)
	}
	cr := resp.ContainerResponses[0]
	if cr.Envs["NVIDIA_VISIBLE_DEVICES"] != "GPU-bbbb" || cr.Envs["CUDA_VISIBLE_DEVICES"] != "1" || cr.Envs["GPUSIM_SOCKET"] != SimSocketInContainer {
		t.Errorf("envs = %v", cr.Envs)
	}
	if len(cr.Mounts) != 2 || cr.Mounts[1].HostPath != "/opt/gpusim/lib/libcuda.so.1" || !cr.Mounts[1].ReadOnly {
		t.Errorf("mounts = %v", cr.Mounts)
	}
	if _, err := c.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"GPU-gone"}}}}); err == nil {
		t.Error("allocating an unknown GPU succeeded")
	}

	// The CDI spec resolves as the runtime resolves it.
	cache, err := cdi.NewCache(cdi.WithSpecDirs(cdiDir), cdi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	if d := cache.GetDevice("nvidia.com/gpu=GPU-bbbb"); d == nil {
		t.Fatalf("CDI device missing; devices %v, errors %v", cache.ListDevices(), cache.GetErrors())
	}

	// A GPU that goes away leaves the list kubelet sees and the CDI spec.
	one := all[:1]
	gpus.Store(&one)
	for len(lw.Devices) != 1 {
		if lw, err = stream.Recv(); err != nil {
			t.Fatalf("after a GPU vanished: %v", err)
		}
	}
	time.Sleep(100 * time.Millisecond)
	cache.Refresh()
	if cache.GetDevice("nvidia.com/gpu=GPU-bbbb") != nil {
		t.Error("the vanished GPU is still in the CDI spec")
	}

	// kubelet restarting removes the socket: the plugin registers again.
	os.Remove(filepath.Join(dir, reg.Endpoint))
	select {
	case <-kl.got:
	case <-time.After(10 * time.Second):
		t.Fatal("the plugin did not register again after its socket went")
	}
}

func TestAllocateStrategies(t *testing.T) {
	gs := []GPU{{Index: 1, UUID: "GPU-bbbb"}}
	p := &Plugin{Injector: SimInjector{Socket: "/s", LibDir: "/l"}}
	p.Strategy = StrategyVolumeMounts
	r := p.containerResponse(gs)
	if r.Envs["NVIDIA_VISIBLE_DEVICES"] != "/var/run/nvidia-container-devices" || r.Mounts[len(r.Mounts)-1].ContainerPath != "/var/run/nvidia-container-devices/GPU-bbbb" {
		t.Errorf("volume-mounts: %v %v", r.Envs, r.Mounts)
	}
	p.Strategy = StrategyCDIAnnotations
	r = p.containerResponse(gs)
	if len(r.Envs) != 0 || len(r.Mounts) != 0 || r.Annotations["cdi.k8s.io/muxflow-device-plugin_gpu-bbbb"] != "nvidia.com/gpu=GPU-bbbb" {
		t.Errorf("cdi-annotations: %+v", r)
	}
}
