// Package simd is gpusimd, the daemon that owns the simulated GPUs. It serves
// one unix socket in two dialects: the binary protocol of the fake libcuda
// (gpusim/driver/gsproto.h; a connection is a process) and JSON lines for
// tools (stats, fault injection, MPS server registration).
package simd

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/muxflow/muxflow/gpusim/sim"
)

// Server serves a simulator on a unix socket.
type Server struct {
	Sim *sim.Sim
	ln  net.Listener
	log *slog.Logger
	wg  sync.WaitGroup

	mu    sync.Mutex
	conns map[net.Conn]bool
}

// Listen creates the socket (replacing a stale one) and returns a server
// ready to Serve.
func Listen(path string, s *sim.Sim, log *slog.Logger) (*Server, error) {
	if path == "" {
		return nil, fmt.Errorf("socket path is empty")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("create socket directory: %w", err)
	}
	if c, err := net.Dial("unix", path); err == nil {
		c.Close()
		return nil, fmt.Errorf("another gpusimd already serves %s", path)
	}
	_ = os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	// processes of any user may use the simulated GPU, as with /dev/nvidia*
	_ = os.Chmod(path, 0o666)
	if log == nil {
		log = slog.Default()
	}
	return &Server{Sim: s, ln: ln, log: log, conns: map[net.Conn]bool{}}, nil
}

// Serve accepts connections until ctx ends.
func (sv *Server) Serve(ctx context.Context) error {
	go func() {
		<-ctx.Done()
		sv.ln.Close()
		sv.mu.Lock()
		for c := range sv.conns {
			c.Close()
		}
		sv.mu.Unlock()
	}()
	for {
		c, err := sv.ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				sv.wg.Wait()
				return nil
			}
			return fmt.Errorf("accept: %w", err)
		}
		sv.mu.Lock()
		sv.conns[c] = true
		sv.mu.Unlock()
		sv.wg.Add(1)
		go func() {
			defer sv.wg.Done()
			defer func() {
				sv.mu.Lock()
				delete(sv.conns, c)
				sv.mu.Unlock()
				c.Close()
			}()
			sv.handle(c)
		}()
	}
}

func (sv *Server) handle(c net.Conn) {
	r := bufio.NewReaderSize(c, 64<<10)
	first, err := r.Peek(1)
	if err != nil {
		return
	}
	if first[0] == '{' {
		sv.handleJSON(c, r)
		return
	}
	m := make([]byte, len(magic))
	if _, err := io.ReadFull(r, m); err != nil || string(m) != magic {
		sv.log.Warn("connection spoke neither dialect; closing")
		return
	}
	sv.handleBinary(c, r)
}

// binConn is one driver connection.
type binConn struct {
	sv *Server
	c  net.Conn
	// wmu guards pending (messages queued for writer, in order) and events (event
	// completions among them); kick wakes writer.
	wmu     sync.Mutex
	pending []byte
	events  int
	kick    chan struct{}
	cl      *sim.Client
	stop    chan struct{}
	// peer is the kernel's word on who connected (SO_PEERCRED); it, not the pid and
	// uid in the hello, is the process's identity.
	peer      Peer
	peerKnown bool
}

// eventDone tells the process that record gen of its event id completed. It is
// queued in the simulator's delivery order, ahead of the reply to any sync that
// waited for it, so that an event a sync returned for also queries complete.
func (b *binConn) eventDone(id uint32, gen uint64, atNs float64) {
	var msg [eventDoneSize]byte
	le := binary.LittleEndian
	le.PutUint32(msg[0:], eventDoneSize)
	le.PutUint16(msg[4:], opEventDone)
	le.PutUint32(msg[16:], id)
	le.PutUint64(msg[24:], gen)
	le.PutUint64(msg[32:], math.Float64bits(atNs))
	b.enqueue(msg[:], true)
}

// maxQueuedEvents is how many event completions may wait for a process that is slow
// to read its socket; more are dropped (the driver then asks gpusimd, see
// gpusim/driver/event.c), so a process that stops reading costs only its own memory.
const maxQueuedEvents = 1024

// write queues msg for the connection's writer, in order.
func (b *binConn) write(msg []byte) { b.enqueue(msg, false) }

func (b *binConn) enqueue(msg []byte, event bool) {
	b.wmu.Lock()
	if event {
		if b.events >= maxQueuedEvents {
			b.wmu.Unlock()
			return
		}
		b.events++
	}
	b.pending = append(b.pending, msg...)
	b.wmu.Unlock()
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

// writer writes what write queued, in order, in as few writes as it can: neither the
// simulator's delivery (which every process's syncs and event completions go through)
// nor the connection's reader ever waits on a process that is slow to read its socket.
func (b *binConn) writer() {
	var buf []byte
	for {
		select {
		case <-b.kick:
		case <-b.stop:
			return
		}
		b.wmu.Lock()
		buf, b.pending = b.pending, buf[:0]
		b.events = 0
		b.wmu.Unlock()
		if len(buf) == 0 {
			continue
		}
		if _, err := b.c.Write(buf); err != nil {
			b.c.Close()
			return
		}
	}
}

// reply sends result and extra payload for request id.
func (b *binConn) reply(id uint64, res sim.Result, extra []byte) {
	msg := make([]byte, replySize+len(extra))
	le := binary.LittleEndian
	le.PutUint32(msg[0:], uint32(len(msg)))
	le.PutUint16(msg[4:], opReply)
	le.PutUint64(msg[8:], id)
	le.PutUint32(msg[16:], uint32(int32(res)))
	copy(msg[replySize:], extra)
	b.write(msg)
}

func (b *binConn) notify(ctx uint32, code sim.Result) {
	msg := make([]byte, 24)
	le := binary.LittleEndian
	le.PutUint32(msg[0:], 24)
	le.PutUint16(msg[4:], opNotify)
	le.PutUint32(msg[16:], ctx)
	le.PutUint32(msg[20:], uint32(int32(code)))
	b.write(msg)
}

func (sv *Server) handleBinary(c net.Conn, r *bufio.Reader) {
	b := &binConn{sv: sv, c: c, stop: make(chan struct{}), kick: make(chan struct{}, 1)}
	b.peer, b.peerKnown = PeerOf(c)
	defer close(b.stop)
	go b.writer()
	le := binary.LittleEndian
	hdr := make([]byte, hdrSize)
	buf := make([]byte, 4096)
	for {
		if _, err := io.ReadFull(r, hdr); err != nil {
			break
		}
		n := le.Uint32(hdr[0:])
		op := le.Uint16(hdr[4:])
		id := le.Uint64(hdr[8:])
		want, known := payloadSize[op]
		if n < hdrSize || n > maxMsg || !known || int(n-hdrSize) < want {
			sv.log.Warn("malformed driver message; closing connection", "op", op, "len", n)
			break
		}
		if b.cl == nil && op != opHello {
			sv.log.Warn("driver message before hello; closing connection", "op", op)
			break
		}
		pl := int(n - hdrSize)
		if pl > len(buf) {
			buf = make([]byte, pl)
		}
		p := buf[:pl]
		if _, err := io.ReadFull(r, p); err != nil {
			break
		}
		if !b.dispatch(op, id, p) {
			break
		}
	}
	if b.cl != nil {
		b.cl.Close()
	}
}

func u32(p []byte, i int) uint32 { return binary.LittleEndian.Uint32(p[4*i:]) }

// dispatch handles one message; false ends the connection.
func (b *binConn) dispatch(op uint16, id uint64, p []byte) bool {
	le := binary.LittleEndian
	s := b.sv.Sim
	cl := b.cl
	switch op {
	case opHello:
		if b.cl != nil {
			return false
		}
		pid, uid, ver := u32(p, 0), u32(p, 1), u32(p, 2)
		if ver != protoVersion {
			b.reply(id, sim.ErrNotSupported, make([]byte, 8))
			return false
		}
		// The process's own getpid() is its pid inside its container; stats, NVML,
		// faults and MPS client lists use the host pid, as a real driver does.
		hpid, huid := identity(b.peer, b.peerKnown, int(pid), int(uid))
		if hpid != int(pid) || huid != int(uid) {
			b.sv.log.Debug("process identified by its peer credential", "pid", hpid, "uid", huid,
				"claimed_pid", pid, "claimed_uid", uid)
		}
		b.cl = s.Connect(hpid, huid, b.notify)
		b.cl.NotifyEvents(b.eventDone)
		extra := make([]byte, 8)
		le.PutUint32(extra, uint32(s.DeviceCount()))
		b.reply(id, sim.Success, extra)
	case opDevInfo:
		st, ok := s.Stats(int(u32(p, 0)))
		if !ok {
			b.reply(id, sim.ErrInvalidDevice, make([]byte, 208))
			return true
		}
		d := s.Device(st.Index)
		pr := d.Profile()
		x := make([]byte, 208)
		copy(x[0:95], st.Name)
		copy(x[96:159], st.UUID)
		le.PutUint64(x[160:], st.MemTotal)
		for i, v := range []int{pr.SMs, pr.CCMajor, pr.CCMinor, pr.MaxSMClockMHz * 1000, pr.MemClockMHz * 1000,
			pr.BusWidthBits, pr.L2Bytes, pr.MaxThreadsPerSM, pr.MaxBlocksPerSM, st.Index + 0x18} {
			le.PutUint32(x[168+4*i:], uint32(v))
		}
		b.reply(id, sim.Success, x)
	case opCtxCreate:
		atp := math.Float64frombits(le.Uint64(p[16:]))
		lim := le.Uint64(p[24:])
		ctx := u32(p, 0)
		res := cl.CreateContext(ctx, int(u32(p, 1)), u32(p, 2), int(u32(p, 3)), atp, lim)
		if prio := int32(u32(p, 8)); res == sim.Success && prio != 0 {
			res = cl.SetPriority(ctx, int(prio))
		}
		b.reply(id, res, ctxInfo(cl, ctx, res))
	case opGreenCtxCreate:
		// the model checks the rest: parent is one of this process's contexts, and
		// the SM count fits its device
		ctx, parent, def, sms := u32(p, 0), u32(p, 1), u32(p, 2), u32(p, 3)
		res := sim.ErrInvalidValue
		if sms >= 1 {
			res = cl.CreateGreenContext(ctx, parent, def, int(sms))
		}
		b.reply(id, res, ctxInfo(cl, ctx, res))
	case opCtxDestroy:
		cl.DestroyContext(u32(p, 0), func(r sim.Result) { b.replyIf(id, r, nil) })
	case opStreamCreate:
		b.noReply(op, id, cl.CreateStream(u32(p, 0), u32(p, 1)))
	case opStreamDestroy:
		b.noReply(op, id, cl.DestroyStream(u32(p, 0)))
	case opModuleLoad:
		size := int(u32(p, 1))
		if size > len(p)-8 {
			return false
		}
		b.replyIf(id, cl.LoadModule(u32(p, 0), p[8:8+size]), nil)
	case opModuleUnload:
		b.replyIf(id, cl.UnloadModule(u32(p, 0)), nil)
	case opFuncGet:
		nl := int(u32(p, 2))
		if nl > len(p)-16 || nl > 4096 {
			return false
		}
		b.replyIf(id, cl.GetFunction(u32(p, 0), u32(p, 1), string(p[16:16+nl])), nil)
	case opLaunch:
		res := cl.Launch(u32(p, 0), u32(p, 1), [3]uint32{u32(p, 2), u32(p, 3), u32(p, 4)}, [3]uint32{u32(p, 5), u32(p, 6), u32(p, 7)})
		b.noReply(op, id, res)
		if !cl.WaitRoom(b.stop) {
			return false
		}
	case opCopy:
		b.noReply(op, id, cl.Copy(u32(p, 0), int(u32(p, 1)), le.Uint64(p[8:])))
		if !cl.WaitRoom(b.stop) {
			return false
		}
	case opEventCreate:
		b.noReply(op, id, cl.CreateEvent(u32(p, 0), u32(p, 1)))
	case opEventDestroy:
		b.noReply(op, id, cl.DestroyEvent(u32(p, 0)))
	case opEventRecord:
		b.noReply(op, id, cl.RecordEvent(u32(p, 0), u32(p, 1)))
	case opStreamWaitEvent:
		b.noReply(op, id, cl.WaitEvent(u32(p, 0), u32(p, 1)))
	case opSync:
		cl.Sync(int(u32(p, 0)), u32(p, 1), func(r sim.Result) { b.reply(id, r, nil) })
	case opQuery:
		b.reply(id, cl.Query(int(u32(p, 0)), u32(p, 1)), nil)
	case opEventElapsed:
		ms, res := cl.ElapsedMs(u32(p, 0), u32(p, 1))
		x := make([]byte, 8)
		le.PutUint32(x, math.Float32bits(ms))
		b.reply(id, res, x)
	case opMemAlloc:
		ptr, res := cl.MemAlloc(u32(p, 0), le.Uint64(p[8:]))
		x := make([]byte, 8)
		le.PutUint64(x, ptr)
		b.reply(id, res, x)
	case opMemFree:
		b.reply(id, cl.MemFree(le.Uint64(p[0:])), nil)
	case opMemInfo:
		free, total, res := cl.MemInfo(u32(p, 0))
		x := make([]byte, 16)
		le.PutUint64(x[0:], free)
		le.PutUint64(x[8:], total)
		b.reply(id, res, x)
	default:
		return false
	}
	return true
}

// ctxInfo is the payload of a gs_ctx_create_reply: context ctx's effective limits
// when res says it was created, zeros otherwise.
func ctxInfo(cl *sim.Client, ctx uint32, res sim.Result) []byte {
	x := make([]byte, 24)
	if res == sim.Success {
		le := binary.LittleEndian
		a, sm, ml, _ := cl.ContextInfo(ctx)
		le.PutUint64(x[0:], math.Float64bits(a))
		le.PutUint32(x[8:], uint32(sm))
		le.PutUint64(x[16:], ml)
	}
	return x
}

func (b *binConn) replyIf(id uint64, r sim.Result, extra []byte) {
	if id != 0 {
		b.reply(id, r, extra)
	}
}

// noReply handles the pipelined operations: a caller may still ask for a
// reply (id != 0), which tests use; otherwise failures are only logged, since
// the driver validated its own handles before sending.
func (b *binConn) noReply(op uint16, id uint64, r sim.Result) {
	if id != 0 {
		b.reply(id, r, nil)
		return
	}
	if r != sim.Success && r != sim.ErrLaunchFailed && r != sim.ErrIllegalAddress {
		b.sv.log.Debug("pipelined operation failed", "pid", b.cl.PID, "op", op, "result", r.Error())
	}
}

// Request is one JSON-lines request. PIDs are host pids (gpusimd's pid namespace), as
// NVML and the stats report them.
type Request struct {
	Op        string            `json:"op"`
	Device    int               `json:"device"`
	Fault     *sim.Fault        `json:"fault,omitempty"`
	Hung      bool              `json:"hung,omitempty"`
	Watts     float64           `json:"watts,omitempty"`
	After     uint64            `json:"after,omitempty"`
	PID       int               `json:"pid,omitempty"` // mps_register: used only where the kernel does not tell the peer's
	UID       int               `json:"uid,omitempty"` // mps_register: the user the server serves
	ATP       float64           `json:"atp,omitempty"`
	MemLimits map[string]uint64 `json:"mem_limits,omitempty"` // device index -> bytes
	Client    int               `json:"client,omitempty"`     // client PID (mps_terminate)
	// Packed asks "stats" for its answer in Response.Packed (sim.AppendStats), which a
	// sampler decodes at a fraction of the cost of the devices' JSON.
	Packed bool `json:"packed,omitempty"`
}

// Response is one JSON-lines response.
type Response struct {
	Error   string            `json:"error,omitempty"`
	Devices []sim.DeviceStats `json:"devices,omitempty"`
	Xids    []sim.XidEvent    `json:"xids,omitempty"`
	Servers []sim.ServerInfo  `json:"servers,omitempty"`
	Count   int               `json:"count,omitempty"`
	Packed  []byte            `json:"packed,omitempty"` // "stats" asked packed: sim.DecodeStats
}

func parseLimits(m map[string]uint64) (map[int]uint64, error) {
	out := map[int]uint64{}
	for k, v := range m {
		var d int
		if _, err := fmt.Sscanf(k, "%d", &d); err != nil {
			return nil, fmt.Errorf("mem_limits key %q is not a device index", k)
		}
		out[d] = v
	}
	return out, nil
}

func (sv *Server) handleJSON(c net.Conn, r *bufio.Reader) {
	enc := json.NewEncoder(c)
	var serverPID int
	peer, peerKnown := PeerOf(c)
	defer func() {
		if serverPID != 0 {
			sv.Sim.UnregisterServer(serverPID)
		}
	}()
	for {
		line, err := r.ReadBytes('\n')
		if len(strings.TrimSpace(string(line))) == 0 {
			if err != nil {
				return
			}
			continue
		}
		var q Request
		var resp Response
		if e := json.Unmarshal(line, &q); e != nil {
			resp.Error = fmt.Sprintf("bad request: %v", e)
		} else if e := sv.do(&q, &resp, &serverPID, peer, peerKnown); e != nil {
			resp.Error = e.Error()
		}
		if enc.Encode(&resp) != nil {
			return
		}
		if err != nil {
			return
		}
	}
}

// do runs one JSON request; peer is the connection's peer credential (when known).
func (sv *Server) do(q *Request, resp *Response, serverPID *int, peer Peer, peerKnown bool) error {
	s := sv.Sim
	switch q.Op {
	case "ping":
		resp.Count = s.DeviceCount()
	case "stats":
		for i := 0; i < s.DeviceCount(); i++ {
			st, _ := s.Stats(i)
			resp.Devices = append(resp.Devices, st)
		}
		if q.Packed {
			resp.Packed, resp.Devices = sim.AppendStats(nil, resp.Devices), nil
		}
	case "fault":
		if q.Fault == nil {
			return errors.New("fault request needs a fault")
		}
		return s.InjectFault(*q.Fault)
	case "hang":
		return s.SetHung(q.Device, q.Hung)
	case "reset":
		return s.ResetDevice(q.Device)
	case "power_limit":
		return s.SetPowerLimit(q.Device, q.Watts)
	case "xids":
		x, err := s.Xids(q.Device, q.After)
		resp.Xids = x
		return err
	case "mps_register":
		if *serverPID != 0 {
			return errors.New("this connection already registered a server")
		}
		ml, err := parseLimits(q.MemLimits)
		if err != nil {
			return err
		}
		// A server registers itself: its pid is the connection's peer (the host pid,
		// like its clients'); q.PID counts only where the kernel does not tell. q.UID is
		// the user it serves: a process other than root may serve only its own.
		pid := q.PID
		if peerKnown {
			if peer.PID > 0 {
				if q.PID != 0 && q.PID != peer.PID {
					sv.log.Debug("MPS server identified by its peer credential", "pid", peer.PID, "claimed_pid", q.PID)
				}
				pid = peer.PID
			}
			if peer.UID != 0 && peer.UID != q.UID {
				return fmt.Errorf("a process of uid %d cannot serve uid %d", peer.UID, q.UID)
			}
		}
		if err := s.RegisterServer(pid, q.UID, q.ATP, ml); err != nil {
			return err
		}
		*serverPID = pid
	case "mps_set":
		ml, err := parseLimits(q.MemLimits)
		if err != nil {
			return err
		}
		return s.SetServerLimits(q.PID, q.ATP, ml)
	case "mps_servers":
		resp.Servers = s.Servers()
	case "mps_terminate":
		return s.TerminateClient(q.PID, q.Client)
	default:
		return fmt.Errorf("unknown op %q", q.Op)
	}
	return nil
}

// Run is gpusimd's main: parse flags, serve until ctx ends.
func Run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("gpusimd", flag.ContinueOnError)
	socket := fs.String("socket", envOr("GPUSIM_SOCKET", DefaultSocket), "unix socket to serve (env GPUSIM_SOCKET)")
	gpus := fs.String("gpus", "h100", "comma-separated GPU profiles, one per simulated device ("+strings.Join(sim.ProfileNames(), ", ")+"); NAMExN repeats")
	slice := fs.Duration("timeslice", sim.DefaultTimeSlice, "time slice between contexts without MPS")
	window := fs.Duration("window", time.Second, "utilisation averaging window (NVML sample period)")
	maxPending := fs.Int("max-pending", 1024, "queued operations per process before launches block")
	level := fs.String("log-level", "info", "debug, info, warn or error")
	opTrace := fs.String("op-trace", "", "write one CSV line per finished GPU operation to this file (explaining a slow request)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(*level)); err != nil {
		return fmt.Errorf("log level %q: %w", *level, err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lv}))
	profs, err := ParseGPUs(*gpus)
	if err != nil {
		return err
	}
	cfg := sim.Config{Devices: profs, TimeSlice: *slice, Window: *window, MaxPending: *maxPending, Logger: log}
	if *opTrace != "" {
		f, err := os.Create(*opTrace)
		if err != nil {
			return fmt.Errorf("op trace: %w", err)
		}
		defer f.Close()
		cfg.OpTrace = f
	}
	s, err := sim.New(cfg)
	if err != nil {
		return fmt.Errorf("start simulator: %w", err)
	}
	defer s.Close()
	sv, err := Listen(*socket, s, log)
	if err != nil {
		return err
	}
	defer os.Remove(*socket)
	log.Info("gpusimd serving", "socket", *socket, "gpus", *gpus, "timeslice", *slice)
	return sv.Serve(ctx)
}

// ParseGPUs turns "h100,t4" or "h200x4" into profiles.
func ParseGPUs(spec string) ([]sim.Profile, error) {
	var out []sim.Profile
	for _, part := range strings.Split(spec, ",") {
		part = strings.TrimSpace(part)
		name, n := part, 1
		if i := strings.LastIndexByte(part, 'x'); i > 0 {
			var k int
			if _, err := fmt.Sscanf(part[i+1:], "%d", &k); err == nil {
				name, n = part[:i], k
			}
		}
		if n < 1 || n > 64 {
			return nil, fmt.Errorf("GPU count in %q must be 1..64", part)
		}
		p, err := sim.LookupProfile(name)
		if err != nil {
			return nil, err
		}
		for i := 0; i < n; i++ {
			out = append(out, p)
		}
	}
	if len(out) > 64 {
		return nil, fmt.Errorf("at most 64 simulated GPUs")
	}
	return out, nil
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
