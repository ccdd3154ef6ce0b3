package sim

import (
	"fmt"
	"sort"
)

// MPSServer is the model of one nvidia-cuda-mps-server: the contexts of its
// clients on a device share one time-slicing group (they run concurrently),
// and a fatal fault of one of them reaches all of them.
type MPSServer struct {
	PID      int
	UID      int
	ATP      float64          // default active-thread percentage for new clients
	MemLimit map[int]uint64   // per-device default pinned memory limit (0 = none)
	clients  map[*Client]bool // processes that created a context through it
	faulted  bool             // refusing new clients until the current ones exit
	waitFor  map[*Client]bool // clients that must exit before it accepts again
}

// RegisterServer records an MPS server process (called by the fake server
// when it starts). atp is its default active-thread percentage.
func (s *Sim) RegisterServer(pid, uid int, atp float64, memLimit map[int]uint64) error {
	if pid <= 0 {
		return fmt.Errorf("MPS server pid %d is not a process id", pid)
	}
	if atp <= 0 || atp > 100 {
		return fmt.Errorf("active thread percentage %v out of range (0,100]", atp)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dup := s.servers[pid]; dup {
		return fmt.Errorf("MPS server %d already registered", pid)
	}
	ml := map[int]uint64{}
	for d, v := range memLimit {
		if d < 0 || d >= len(s.devs) {
			return fmt.Errorf("pinned memory limit names device %d, which does not exist", d)
		}
		ml[d] = v
	}
	s.servers[pid] = &MPSServer{PID: pid, UID: uid, ATP: atp, MemLimit: ml, clients: map[*Client]bool{}}
	s.log.Info("MPS server registered", "pid", pid, "uid", uid, "atp", atp)
	return nil
}

// SetServerLimits changes a running server's defaults for clients that join
// later (set_active_thread_percentage / set_device_pinned_mem_limit on a
// server PID). atp 0 or a nil map leave that setting alone.
func (s *Sim) SetServerLimits(pid int, atp float64, memLimit map[int]uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	srv := s.servers[pid]
	if srv == nil {
		return fmt.Errorf("no MPS server with pid %d", pid)
	}
	if atp < 0 || atp > 100 {
		return fmt.Errorf("active thread percentage %v out of range (0,100]", atp)
	}
	if atp > 0 {
		srv.ATP = atp
	}
	for d, v := range memLimit {
		if d < 0 || d >= len(s.devs) {
			return fmt.Errorf("pinned memory limit names device %d, which does not exist", d)
		}
		srv.MemLimit[d] = v
	}
	return nil
}

// UnregisterServer removes a server whose process ended. Its clients lose
// their server: every context they hold through it fails.
func (s *Sim) UnregisterServer(pid int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	srv := s.servers[pid]
	if srv == nil {
		return
	}
	for c := range srv.clients {
		for _, x := range c.ctxs {
			if x.mps == srv {
				x.dev.advance(s.nowNs())
				s.faultContext(x, ErrMPSRPCFailure)
			}
		}
	}
	delete(s.servers, pid)
	s.log.Info("MPS server gone", "pid", pid)
}

// ServerInfo describes an MPS server for the control tool.
type ServerInfo struct {
	PID     int     `json:"pid"`
	UID     int     `json:"uid"`
	ATP     float64 `json:"atp"`
	Faulted bool    `json:"faulted"`
	Clients []int   `json:"clients"`
}

// Servers lists the registered MPS servers, by PID.
func (s *Sim) Servers() []ServerInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []ServerInfo
	for _, srv := range s.servers {
		si := ServerInfo{PID: srv.PID, UID: srv.UID, ATP: srv.ATP, Faulted: srv.faulted, Clients: []int{}}
		for c := range srv.clients {
			si.Clients = append(si.Clients, c.PID)
		}
		sort.Ints(si.Clients)
		out = append(out, si)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PID < out[j].PID })
	return out
}

// mpsFault is a fatal fault inside server srv on device d: every client
// context of the server on that device gets code, and the server refuses new
// clients until all of its current clients have exited. Lock held.
func (s *Sim) mpsFault(srv *MPSServer, d *Device, code Result, origin *Context) {
	for _, g := range d.groups {
		if g.srv != srv {
			continue
		}
		for _, x := range g.ctxs {
			s.faultContext(x, code)
		}
	}
	if !srv.faulted {
		srv.faulted = true
		srv.waitFor = map[*Client]bool{}
	}
	for c := range srv.clients {
		if origin == nil || c != origin.c {
			srv.waitFor[c] = true
		}
	}
	if len(srv.waitFor) == 0 {
		srv.faulted = false
	}
}

// mpsClientMaybeGone drops c from srv when c holds no more contexts through
// it or has exited; lock held.
func (s *Sim) mpsClientMaybeGone(srv *MPSServer, c *Client) {
	if !srv.clients[c] && !srv.waitFor[c] {
		return
	}
	if !c.closed {
		for _, x := range c.ctxs {
			if x.mps == srv {
				return
			}
		}
	}
	delete(srv.clients, c)
	if srv.faulted {
		delete(srv.waitFor, c)
		if len(srv.waitFor) == 0 {
			srv.faulted = false
			s.log.Info("MPS server accepts clients again", "pid", srv.PID)
		}
	}
}

// TerminateClient fails the contexts client holds through server srvPID with
// CUDA_ERROR_MPS_CLIENT_TERMINATED; the server and its other clients go on
// (terminate_client).
func (s *Sim) TerminateClient(srvPID, clientPID int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	srv := s.servers[srvPID]
	if srv == nil {
		return fmt.Errorf("no MPS server with pid %d", srvPID)
	}
	found := false
	for c := range srv.clients {
		if c.PID != clientPID {
			continue
		}
		for _, x := range c.ctxs {
			if x.mps == srv {
				x.dev.advance(s.nowNs())
				s.faultContext(x, ErrMPSClientTerminated)
				found = true
			}
		}
	}
	if !found {
		return fmt.Errorf("MPS server %d has no client %d", srvPID, clientPID)
	}
	return nil
}
