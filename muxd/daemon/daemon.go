// Package daemon is muxd: it loads the policy, keeps the container registry, serves the
// node API on a root-only unix socket, exports metrics, and talks to systemd (readiness,
// reload, watchdog, socket activation). The control loops (monitor, SM allocation, error
// handling) plug into it.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/coreos/go-systemd/v22/activation"
	sddaemon "github.com/coreos/go-systemd/v22/daemon"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/muxflow/muxflow/monitor"
	"github.com/muxflow/muxflow/muxd/api"
	"github.com/muxflow/muxflow/muxd/blocks"
	"github.com/muxflow/muxflow/muxd/buildinfo"
	"github.com/muxflow/muxflow/muxd/guard"
	"github.com/muxflow/muxflow/muxd/inventory"
	"github.com/muxflow/muxflow/muxd/mps"
	"github.com/muxflow/muxflow/muxd/procwatch"
	"github.com/muxflow/muxflow/muxd/registry"
	"github.com/muxflow/muxflow/muxd/workloadprofile"
	"github.com/muxflow/muxflow/policy"
)

// Options configure a Daemon.
type Options struct {
	// PolicyPath is the policy file. If it is policy.DefaultPath and does not exist, the
	// embedded default is used; any other missing file is an error.
	PolicyPath string
	// Inventory lists the GPUs; nil means none.
	Inventory inventory.Inventory
	// Log receives structured logs; nil means JSON on stderr at the policy's level.
	Log *slog.Logger
	// ReconcileEvery is how often dead containers are looked for; 0 means 5 s.
	ReconcileEvery time.Duration
	// MPSEnv is added to the MPS control tool's environment (gpusim points its fake
	// control tool at the simulator this way).
	MPSEnv []string
	// NVML is the GPUs' management library (initialised), real or gpusim's adapter; nil
	// runs muxd without GPUs (registry and API only).
	NVML nvml.Interface
	// Timeouts bound the API's connections; zero fields take DefaultTimeouts' values.
	Timeouts Timeouts
}

// Timeouts bound how long the API waits for a client (see newAPIServer).
type Timeouts struct {
	// Header is how long a client has to send a request's headers.
	Header time.Duration
	// Read is how long a client has to send a whole request, body included.
	Read time.Duration
	// Write is how long muxd has to handle a request and write the answer.
	Write time.Duration
	// Idle is how long a keep-alive connection may wait for its next request.
	Idle time.Duration
}

// DefaultTimeouts are the API's timeouts unless Options say otherwise. Every client of the
// socket is a local program making a short call; these only end connections that hang.
var DefaultTimeouts = Timeouts{Header: 5 * time.Second, Read: 30 * time.Second, Write: 30 * time.Second, Idle: 30 * time.Second}

func (t Timeouts) orDefault() Timeouts {
	pick := func(v, def time.Duration) time.Duration {
		if v > 0 {
			return v
		}
		return def
	}
	return Timeouts{
		Header: pick(t.Header, DefaultTimeouts.Header),
		Read:   pick(t.Read, DefaultTimeouts.Read),
		Write:  pick(t.Write, DefaultTimeouts.Write),
		Idle:   pick(t.Idle, DefaultTimeouts.Idle),
	}
}

// Daemon is one muxd.
type Daemon struct {
	opts     Options
	log      *slog.Logger
	level    *slog.LevelVar
	pol      atomic.Pointer[loadedPolicy]
	reloadMu sync.Mutex
	reg      *registry.Registry
	ids      idLocks            // serialises registry and control-block changes per id
	exits    *procwatch.Watcher // unregisters containers whose process exits
	pidw     pidWatches         // pid files watched for muxflow-runtime (pidwatch.go)
	stopping atomic.Bool
	controls *blocks.Manager
	inv      inventory.Inventory
	metrics  *metrics
	started  time.Time
	mps      *mps.Supervisor           // nil when the policy disables MPS
	mon      *monitor.Monitor          // nil without NVML
	guard    *guard.Guard              // nil without NVML
	prof     *workloadprofile.Profiler // nil without NVML
}

type loadedPolicy struct {
	p      *policy.Policy
	source string
	loaded time.Time
}

// New loads the policy and the registry; it does not listen yet.
func New(opts Options) (*Daemon, error) {
	d := &Daemon{opts: opts, inv: opts.Inventory, started: time.Now().UTC(), level: new(slog.LevelVar)}
	if d.inv == nil {
		d.inv = inventory.None{}
	}
	d.log = opts.Log
	if d.log == nil {
		d.log = slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: d.level}))
	}
	d.exits = procwatch.New(d.containerExited)
	lp, err := d.loadPolicy()
	if err != nil {
		return nil, err
	}
	d.setPolicy(lp)
	p := lp.p
	d.reg, err = registry.Open(filepath.Join(p.Node.StateDir, "containers"), registry.ProcFS{}, d.log)
	if err != nil {
		return nil, fmt.Errorf("open registry: %w", err)
	}
	d.controls, err = blocks.NewManager(p.Node.RunDir)
	if err != nil {
		return nil, err
	}
	d.controls.Peers = d.reg.List
	d.controls.GPUs = func() []api.GPU { g, _ := d.inv.GPUs(context.Background()); return g }
	if err := d.controls.EnsureSignalPage(); err != nil {
		return nil, err
	}
	d.metrics = newMetrics(d)
	if p.MPS.Enabled && opts.NVML == nil {
		d.log.Warn("MPS is enabled by policy but there are no GPUs: not starting it")
	}
	if p.MPS.Enabled && opts.NVML != nil {
		gpus, _ := d.inv.GPUs(context.Background())
		d.mps = &mps.Supervisor{
			Control: mps.Control{Binary: p.MPS.Control, PipeDir: p.MPS.PipeDir, LogDir: p.MPS.LogDir, Env: opts.MPSEnv},
			Defaults: mps.Defaults{
				ActiveThreadPercentage: float64(p.MPS.DefaultActiveThreadPercentage),
				PinnedMemLimit:         uint64(p.MPS.DefaultPinnedMemory),
				Devices:                len(gpus),
			},
			Log:        d.log.With("part", "mps"),
			KeepOnExit: true,
		}
	}
	if opts.NVML != nil {
		if err := d.setupGPUs(); err != nil {
			return nil, err
		}
		if d.mps != nil {
			gpus, _ := d.inv.GPUs(context.Background())
			d.mps.Defaults.Devices = len(gpus)
		}
	}
	return d, nil
}

func (d *Daemon) loadPolicy() (*loadedPolicy, error) {
	path := d.opts.PolicyPath
	if path == "" {
		path = policy.DefaultPath
	}
	p, err := policy.Load(path)
	if errors.Is(err, os.ErrNotExist) && path == policy.DefaultPath {
		d.log.Warn("no policy file, using the embedded default", "path", path)
		return &loadedPolicy{p: policy.Default(), source: "embedded default", loaded: time.Now().UTC()}, nil
	}
	if err != nil {
		return nil, err
	}
	return &loadedPolicy{p: p, source: path, loaded: time.Now().UTC()}, nil
}

func (d *Daemon) setPolicy(lp *loadedPolicy) {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(lp.p.Node.LogLevel))
	d.level.Set(lvl)
	d.pol.Store(lp)
}

func (d *Daemon) policy() *policy.Policy { return d.pol.Load().p }

// reload re-reads the policy file; an invalid file is rejected and the old policy kept.
// Settings that only apply at start (socket, directories) are reported, not applied.
func (d *Daemon) reload() error {
	d.reloadMu.Lock()
	defer d.reloadMu.Unlock()
	old := d.policy()
	lp, err := d.loadPolicy()
	if err != nil {
		d.metrics.reloads.WithLabelValues("rejected").Inc()
		d.log.Error("policy reload rejected, keeping the policy in force", "err", err)
		return fmt.Errorf("policy reload rejected, the policy in force is kept: %w", err)
	}
	if lp.p.Node.StateDir != old.Node.StateDir || lp.p.Node.RunDir != old.Node.RunDir || lp.p.Node.Socket != old.Node.Socket || lp.p.Node.MetricsAddress != old.Node.MetricsAddress {
		d.log.Warn("node directories, socket and metrics address change only on restart")
	}
	d.setPolicy(lp)
	d.metrics.reloads.WithLabelValues("ok").Inc()
	d.log.Info("policy reloaded", "source", lp.source)
	return nil
}

func (d *Daemon) policyInfo() api.PolicyInfo {
	lp := d.pol.Load()
	text, err := lp.p.Encode()
	if err != nil {
		text = "# " + err.Error()
	}
	return api.PolicyInfo{Source: lp.source, Loaded: lp.loaded, TOML: text}
}

func (d *Daemon) gpus(ctx context.Context) ([]api.GPU, error) {
	g, err := d.inv.GPUs(ctx)
	if err != nil {
		return nil, fmt.Errorf("list GPUs: %w", err)
	}
	return g, nil
}

func (d *Daemon) nodeInfo() api.NodeInfo {
	host, _ := os.Hostname()
	gpus, _ := d.inv.GPUs(context.Background())
	name := d.policy().Node.Name
	if name == "" {
		name = host
	}
	n := api.NodeInfo{
		Name: name, Time: time.Now().UTC(), Hostname: host, Version: buildinfo.Version, Started: d.started,
		GPUCount: len(gpus), Containers: d.reg.Len(), Policy: d.pol.Load().source,
		MPS: api.MPSInfo{State: "disabled"},
	}
	if d.mps != nil {
		n.MPS = api.MPSInfo{State: "down", PID: d.mps.PID(), Restarts: d.mps.Restarts()}
		if d.mps.Healthy() {
			n.MPS.State = "running"
		}
	}
	return n
}

// Run serves until ctx is cancelled or SIGTERM/SIGINT arrives; SIGHUP reloads the policy.
func (d *Daemon) Run(ctx context.Context) error {
	// Nothing is served yet: the registry and the control directories are put back in
	// agreement before the first request.
	d.reconcile()
	for _, c := range d.reg.List() {
		if err := d.controls.Ensure(c, d.policy()); err != nil {
			d.log.Error("cannot restore control directory", "id", c.ID, "err", err)
		}
		if c.State == api.StateRunning {
			d.watchExit(c)
		}
	}
	d.removeOrphanControls()
	defer func() {
		d.stopping.Store(true)
		d.pidw.closeAll()
		d.exits.Close()
	}()
	ln, err := d.listen()
	if err != nil {
		return err
	}
	srv := d.newAPIServer(d.routes())
	srv.ConnContext = connContext
	errc := make(chan error, 2)
	go func() { errc <- srv.Serve(ln) }()

	var msrv *http.Server
	if addr := d.policy().Node.MetricsAddress; addr != "" {
		mln, err := net.Listen("tcp", addr)
		if err != nil {
			srv.Close()
			return fmt.Errorf("listen for metrics on %s: %w", addr, err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(d.metrics.reg, promhttp.HandlerOpts{}))
		// The node report is read-only and holds no secrets: muxmatch reads it here
		// when it runs elsewhere in the cluster.
		mux.HandleFunc("GET "+api.Prefix+"/node", func(w http.ResponseWriter, r *http.Request) {
			d.reply(w, "GET /v1/node (tcp)", http.StatusOK, d.nodeReport(), nil)
		})
		msrv = d.newAPIServer(mux)
		go func() { errc <- msrv.Serve(mln) }()
		d.log.Info("serving metrics", "address", mln.Addr().String())
	}

	var wg sync.WaitGroup
	loopCtx, stopLoops := context.WithCancel(ctx)
	defer func() {
		stopLoops()
		wg.Wait()
		if d.mon != nil {
			d.mon.Close()
		}
		d.stopMPSIfIdle()
	}()
	spawn := func(f func()) {
		wg.Add(1)
		go func() { defer wg.Done(); f() }()
	}
	if d.mps != nil {
		spawn(func() {
			if err := d.mps.Run(loopCtx); err != nil {
				d.log.Error("MPS supervision stopped", "err", err)
			}
		})
	}
	d.runGPUs(loopCtx, spawn)

	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)

	d.log.Info("muxd ready", "version", buildinfo.Version, "socket", ln.Addr().String(),
		"policy", d.pol.Load().source, "containers", d.reg.Len())
	notify(sddaemon.SdNotifyReady)
	watchdog := time.NewTicker(time.Hour)
	defer watchdog.Stop()
	if iv, err := sddaemon.SdWatchdogEnabled(false); err == nil && iv > 0 {
		watchdog.Reset(iv / 2)
	}
	every := d.opts.ReconcileEvery
	if every <= 0 {
		every = 5 * time.Second
	}
	reconcile := time.NewTicker(every)
	defer reconcile.Stop()

	var runErr error
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case s := <-sigs:
			if s == syscall.SIGHUP {
				notify(sddaemon.SdNotifyReloading)
				_ = d.reload()
				notify(sddaemon.SdNotifyReady)
				continue
			}
			d.log.Info("stopping", "signal", s.String())
			break loop
		case err := <-errc:
			runErr = fmt.Errorf("server stopped: %w", err)
			break loop
		case <-watchdog.C:
			notify(sddaemon.SdNotifyWatchdog)
		case <-reconcile.C:
			d.reconcile()
		}
	}
	notify(sddaemon.SdNotifyStopping)
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	if msrv != nil {
		_ = msrv.Shutdown(sctx)
	}
	return runErr
}

// stopMPSIfIdle runs when muxd stops. The supervisor leaves the MPS control daemon
// running (KeepOnExit) so that GPU work survives a restart or upgrade of muxd; here muxd
// quits it after all when nothing would notice: no MPS server has a client and no GPU
// container is registered as running. Otherwise it is left for the next muxd to adopt,
// and the log says why. A client can only lose its MPS server to this if it connects in
// the moment between the check and the quit.
func (d *Daemon) stopMPSIfIdle() {
	if d.mps == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	log := d.log.With("part", "mps")
	running := 0
	for _, c := range d.reg.List() {
		if c.State == api.StateRunning {
			running++
		}
	}
	ctl := d.mps.Control
	servers, err := ctl.ServerList(ctx)
	if errors.Is(err, mps.ErrNotRunning) {
		return
	}
	if err != nil {
		log.Warn("leaving the MPS control daemon running: cannot list its servers", "err", err)
		return
	}
	clients := 0
	for _, s := range servers {
		pids, err := ctl.ClientList(ctx, s)
		if err != nil {
			log.Warn("leaving the MPS control daemon running: cannot list a server's clients", "server", s, "err", err)
			return
		}
		clients += len(pids)
	}
	if clients > 0 || running > 0 {
		log.Info("leaving the MPS control daemon running for the next muxd: GPU work is using it",
			"clients", clients, "running_containers", running)
		return
	}
	if err := ctl.Quit(ctx); err != nil {
		log.Warn("cannot stop the idle MPS control daemon", "err", err)
		return
	}
	log.Info("stopped the MPS control daemon: no client and no running GPU container")
}

// watchExit has the container unregistered when its process exits.
func (d *Daemon) watchExit(c api.Container) {
	if err := d.exits.Watch(c.ID, c.PID); err != nil {
		// The periodic reconciliation still drops it once its process is gone.
		d.log.Warn("cannot watch the container's process", "id", c.ID, "pid", c.PID, "err", err)
	}
}

// exitGrace is how long a container stays registered, control block included, after its
// process exited. A process killed by a GPU error often exits before muxd has acted on the
// error (the NVML event, or the sticky error libxcuda recorded in its control block), and
// the error handler needs to see it among the GPU's containers.
const exitGrace = 2 * time.Second

// containerExited unregisters a container whose process has exited, after exitGrace.
func (d *Daemon) containerExited(id string, pid int) {
	d.log.Info("container process exited", "id", id, "pid", pid)
	time.AfterFunc(exitGrace, func() { d.dropExited(id, pid) })
}

// dropExited unregisters an exited container, unless muxd is stopping or the id was
// started again by another process meanwhile.
func (d *Daemon) dropExited(id string, pid int) {
	if d.stopping.Load() {
		return
	}
	defer d.ids.lock(id)()
	c, err := d.reg.Get(id)
	if err != nil || c.State != api.StateRunning || c.PID != pid {
		return
	}
	if err := d.unregisterLocked(id, "its process exited"); err != nil && !errors.Is(err, registry.ErrNotFound) {
		d.log.Error("cannot unregister exited container", "id", id, "err", err)
	}
}

// unregisterContainer removes a container from the registry and releases what muxd
// holds for it; why is logged.
func (d *Daemon) unregisterContainer(id, why string) error {
	if err := api.ValidateID(id); err != nil {
		return err
	}
	defer d.ids.lock(id)()
	return d.unregisterLocked(id, why)
}

// unregisterLocked is unregisterContainer for a caller that holds id's lock. The entry
// goes first: once it is gone nothing hands out the control paths, and a crash between
// the two steps leaves an orphan directory that the next start removes.
func (d *Daemon) unregisterLocked(id, why string) error {
	if err := d.reg.Remove(id); err != nil {
		return err
	}
	d.forget(id)
	d.log.Info("container unregistered", "id", id, "why", why)
	return nil
}

// reconcile drops the containers whose process has gone and registrations that never
// started, each under its id's lock together with its control block.
func (d *Daemon) reconcile() {
	for _, s := range d.reg.Stale() {
		func() {
			defer d.ids.lock(s.ID)()
			why, err := d.reg.RemoveStale(s.ID)
			switch {
			case errors.Is(err, registry.ErrNotFound) || (err == nil && why == ""):
				// Unregistered, started again or re-registered meanwhile.
			case err != nil:
				d.log.Error("cannot drop stale container", "id", s.ID, "err", err)
			default:
				d.forget(s.ID)
				d.log.Info("dropped stale container", "id", s.ID, "reason", why)
			}
		}()
	}
}

// forget releases what muxd holds for a container that is gone. Callers hold id's lock.
func (d *Daemon) forget(id string) {
	d.exits.Stop(id)
	if err := d.controls.Remove(id); err != nil {
		d.log.Error("cannot remove control block", "id", id, "err", err)
	}
	if d.prof != nil {
		d.prof.Forget(id, time.Now())
	}
}

func notify(state string) { _, _ = sddaemon.SdNotify(false, state) }

// listen takes the socket systemd passed (socket activation) or creates the policy's.
func (d *Daemon) listen() (net.Listener, error) {
	lns, err := activation.Listeners()
	if err != nil {
		return nil, fmt.Errorf("socket activation: %w", err)
	}
	for _, ln := range lns {
		if ln != nil && ln.Addr().Network() == "unix" {
			d.log.Info("using the socket passed by systemd", "socket", ln.Addr().String())
			return ln, nil
		}
	}
	path := d.policy().Node.Socket
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("create socket directory: %w", err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("%s exists and is not a socket; refusing to replace it", path)
		}
		if c, err := net.Dial("unix", path); err == nil {
			c.Close()
			return nil, fmt.Errorf("another muxd is already serving %s", path)
		}
		_ = os.Remove(path) // stale socket of a muxd that died
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("restrict %s to root: %w", path, err)
	}
	return ln, nil
}
