package blocks

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/muxflow/muxflow/libxcuda/ctlblock"
	"github.com/muxflow/muxflow/muxd/api"
	"github.com/muxflow/muxflow/policy"
)

// Online-aware gating (issue 14): muxd creates one GPU signal page per node
// (<run_dir>/gpu/signal, one slot per GPU; see ctlblock.SignalPage), the runtime mounts it
// read-write into online containers and read-only into offline ones, and each
// container's limits page says which slots are its GPUs and what its libxcuda does with
// them: online processes publish their pending work, offline ones hold their launches
// while there is some, within the hold budget of policy [hold].

// EnsureSignalPage creates the node's GPU signal page (ctlblock.SignalPagePath: a 0666
// file in a 0700 directory), or keeps the one running processes have mapped (a header
// that is not a signal page's is rewritten in place).
func (m *Manager) EnsureSignalPage() error {
	path := ctlblock.SignalPagePath(filepath.Dir(m.root))
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create GPU signal directory: %w", err)
	}
	if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
		return fmt.Errorf("GPU signal directory %s is not a directory (a symlink is refused)", dir)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("restrict GPU signal directory: %w", err)
	}
	s, err := ctlblock.OpenSignalPage(path, 0o666)
	if err != nil {
		return err
	}
	m.pageMu.Lock()
	defer m.pageMu.Unlock()
	if m.page != nil {
		m.page.Close()
	}
	m.page = s
	return nil
}

// Signal is a container's part in online-aware gating: its role by class, the signal
// slots of its GPUs and the hold policy. gpus is the node's inventory, used to resolve
// GPU UUIDs and "all"; it may be nil.
func Signal(c api.Container, p *policy.Policy, gpus []api.GPU) ctlblock.Signal {
	h := p.Hold
	if !h.Enabled {
		return ctlblock.Signal{}
	}
	s := ctlblock.Signal{
		GPUs:       SignalSlots(c.GPUs, gpus),
		HoldWindow: h.Window.D(),
		HoldPeriod: h.Period.D(),
		HoldMaxBP:  uint32(float64(h.Max)*100 + 0.5),
		Queue:      h.Queue.D(),
		Ahead:      ctlblock.AheadOff,
		Linger:     h.Linger.D(),
	}
	if s.Linger == 0 {
		s.Linger = ctlblock.NoLinger
	}
	if h.Ahead {
		s.Ahead = ctlblock.AheadOn
	}
	switch c.Class {
	case api.Online:
		s.Role = ctlblock.SignalPublish
	case api.Offline:
		if h.Max > 0 { // 0%: never hold
			s.Role = ctlblock.SignalFollow
		}
	}
	return s
}

// SignalSlots maps a container's GPU list (NVIDIA_VISIBLE_DEVICES entries) to signal
// slots, one bit per NVML index. "all" is every GPU of the inventory; a UUID is looked up
// in it. What cannot be resolved (a MIG instance, a GPU the inventory does not know, "all"
// without an inventory) counts as every slot: an online container then marks every GPU
// busy and an offline one follows every GPU, which errs towards protecting online work
// (and costs offline work at most its hold budget).
func SignalSlots(list []string, gpus []api.GPU) uint64 {
	const every = ^uint64(0)
	var mask uint64
	bit := func(i int) bool {
		if i < 0 || i >= ctlblock.SignalSlots {
			return false
		}
		mask |= 1 << uint(i)
		return true
	}
	for _, g := range list {
		if g == "all" {
			if len(gpus) == 0 {
				return every
			}
			for _, x := range gpus {
				if !bit(x.Index) {
					return every
				}
			}
			continue
		}
		if n, err := strconv.Atoi(g); err == nil {
			if !bit(n) {
				return every
			}
			continue
		}
		found := false
		for _, x := range gpus {
			if x.UUID == g {
				found = bit(x.Index)
				break
			}
		}
		if !found {
			return every
		}
	}
	return mask
}

// clearOnlineSlots clears the signal slots of an online container that is gone. Its
// processes clear them when they synchronise and when they exit, but one killed with
// SIGKILL leaves its slot set: offline work on that GPU would then hold until the slot
// went stale, and take the slow path on every launch after that. Another online process
// still running on the GPU sets its slot again at its next launch.
func (m *Manager) clearOnlineSlots(s ctlblock.Signal) {
	if s.Role != ctlblock.SignalPublish || s.GPUs == 0 {
		return
	}
	page := m.signalPage()
	if page == nil {
		return
	}
	for i := range ctlblock.SignalSlots {
		if s.GPUs&(1<<uint(i)) != 0 {
			page.SetOnline(i, 0)
		}
	}
}

// countFollowers stores in the signal page how many registered offline containers follow
// each GPU, so that online processes wake holders only where there are some. m.mu held.
func (m *Manager) countFollowers() {
	counts := make([]uint32, ctlblock.SignalSlots)
	for _, b := range m.blocks {
		s := b.Limits().Signal
		if s.Role != ctlblock.SignalFollow {
			continue
		}
		for i := range counts {
			if s.GPUs&(1<<uint(i)) != 0 {
				counts[i]++
			}
		}
	}
	if page := m.signalPage(); page != nil {
		page.SetFollowers(counts)
	}
}

// OnlineBusy returns the online busy periods published in the signal page for the GPU of
// NVML index i: their total length and how many (ctlblock.SignalPage.Busy); 0 without a
// page. Untrusted.
func (m *Manager) OnlineBusy(i int) (ns, spans uint64) {
	if page := m.signalPage(); page != nil {
		return page.Busy(i)
	}
	return 0, 0
}

// signalPage is the node's signal page, mapped on first use if EnsureSignalPage made it
// (muxd without online-aware gating has none, and none is created here); nil without one.
func (m *Manager) signalPage() *ctlblock.SignalPage {
	m.pageMu.Lock()
	defer m.pageMu.Unlock()
	if m.page == nil {
		path := ctlblock.SignalPagePath(filepath.Dir(m.root))
		if _, err := os.Lstat(path); err != nil {
			return nil
		}
		page, err := ctlblock.OpenSignalPage(path, 0o666)
		if err != nil {
			return nil
		}
		m.page = page
	}
	return m.page
}
