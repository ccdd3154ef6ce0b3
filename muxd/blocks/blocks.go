// Package blocks manages each registered container's control block under muxd's run
// directory (<run_dir>/c/<id>/): the limits file muxd writes (mounted read-only into the
// container) and the usage file libxcuda writes back. The block layout is libxcuda's
// (package ctlblock); this package decides what goes in it from the container's class,
// its annotations and the policy, and keeps the blocks open so limits can change at once.
package blocks

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/muxflow/muxflow/libxcuda/ctlblock"
	"github.com/muxflow/muxflow/muxd/alloc"
	"github.com/muxflow/muxflow/muxd/api"
	"github.com/muxflow/muxflow/policy"
)

// Manager owns <run_dir>/c/<id>/ for every registered container.
type Manager struct {
	root string // <run_dir>/c
	// Peers, when set, lists the registered containers, so that a new offline
	// container's first limits are its part of its GPUs' offline budget (see
	// InitialLimits). Set once before use.
	Peers func() []api.Container
	// GPUs, when set, is the node's GPU inventory, used to map containers' GPUs to slots
	// of the GPU signal page (see signal.go). Set once before use.
	GPUs func() []api.GPU

	mu     sync.Mutex
	blocks map[string]*ctlblock.Block

	// page is the node's GPU signal page, mapped once and kept: opening and mapping it
	// for every registration and removal cost a TLB shootdown each on the start path.
	pageMu sync.Mutex
	page   *ctlblock.SignalPage
}

// NewManager prepares <runDir>/c.
func NewManager(runDir string) (*Manager, error) {
	root := filepath.Join(runDir, "c")
	if err := os.MkdirAll(root, 0o711); err != nil {
		return nil, fmt.Errorf("create control directory: %w", err)
	}
	if fi, err := os.Lstat(root); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("control directory %s is not a directory (a symlink is refused)", root)
	}
	return &Manager{root: root, blocks: map[string]*ctlblock.Block{}}, nil
}

// Paths returns where a container's files live; id must already be validated.
func (m *Manager) Paths(id string) api.ControlPaths {
	dir := filepath.Join(m.root, id)
	return api.ControlPaths{
		Dir:    dir,
		Limits: filepath.Join(dir, ctlblock.LimitsFile),
		Usage:  filepath.Join(dir, ctlblock.UsageFile),
	}
}

// InitialLimits derives a new container's limits from its registration (class and limits
// as policy/classify accepted them), the policy and the node's GPUs (the inventory with the
// guard's figures; may be nil). Its MPS active-thread percentage is its MPSThreadCeiling.
// An offline container's SM ceiling (launch-gate share and
// MPS active-thread percentage) is min(its own sm-percent, its part of its GPUs' MPS budget
// — the guard's, fitted to the online kernels, or the class's sm_max where the guard has
// none yet), the budget being split with the other offline containers in peers that share
// one of its GPUs, as the guard splits it (alloc.SplitBudget): the first process can start
// before the guard's next period, and MPS fixes its percentage then. Where the GPUs'
// budget fits their online kernels and that part does not fit beside what the peers'
// processes may hold, its MPS percentage is the whole budget up to its own ceiling, as the
// guard offers it (alloc.TurnOffer): it will take turns with them. The guard changes share
// and MPS percentage afterwards, never above the ceiling; memory caps stay.
func InitialLimits(c api.Container, p *policy.Policy, gpus []api.GPU, peers ...Peer) ctlblock.Limits {
	l, _ := initialLimits(c, p, gpus, peers)
	return l
}

// initialLimits is InitialLimits, and whether an offline container's processes fit its
// GPUs' MPS budget beside what its peers' processes may hold (the budget fits the online
// kernels, and it is not to take turns with them).
func initialLimits(c api.Container, p *policy.Policy, gpus []api.GPU, peers []Peer) (l ctlblock.Limits, fitsBeside bool) {
	cl, _ := p.ClassLimits(string(c.Class))
	l = ctlblock.Unlimited()
	mem := c.Limits.GPUMemory
	if mem == 0 {
		mem = uint64(cl.MemoryLimit)
	}
	if mem > 0 {
		// The cap is per GPU; the container sees its GPUs as ordinals 0..n-1.
		l.MemoryBytes = make([]uint64, ctlblock.MaxDevices)
		for i := range l.MemoryBytes {
			l.MemoryBytes[i] = mem
		}
	}
	l.MPSActiveThreadPercent = MPSThreadCeiling(c, p)
	if c.Class == api.Offline {
		budget, fits := offlineMPSBudget(c, p, gpus)
		part, held := offlinePart(c, p, peers, budget, true)
		// the launch gate's share is a part of the time ceiling, sm_max, also where the
		// MPS budget is the whole GPU
		share, _ := offlinePart(c, p, peers, math.Min(budget, p.Classes.Offline.SMMax.Fraction()), false)
		l.MPSActiveThreadPercent, l.ShareBP = MPSThreadPercent(part*100), MPSThreadPercent(share*100)*100
		if fits {
			l.MPSActiveThreadPercent = MPSThreadPercent(alloc.TurnOffer(part, budget, OwnCeiling(c, p), held) * 100)
			fitsBeside = alloc.FitsBeside(part, budget, held)
		}
	}
	if p.Hook.FailClosed {
		l.FailPolicy = ctlblock.FailClosed
	}
	return l, fitsBeside
}

// offlineMPSBudget is the MPS budget (0..1) an offline container's GPUs have now: the
// smallest of the guard's budgets over them (api.GPU.OfflineMPS), the class's sm_max for a
// GPU the guard has no figure for yet, and whether every one of them fits its online
// kernels. GPUs that cannot be resolved count as every GPU (SignalSlots).
func offlineMPSBudget(c api.Container, p *policy.Policy, gpus []api.GPU) (budget float64, fits bool) {
	smMax := p.Classes.Offline.SMMax.Fraction()
	budget, fits = math.Inf(1), true
	slots, seen := SignalSlots(c.GPUs, gpus), 0
	for _, g := range gpus {
		if g.Index < 0 || g.Index >= ctlblock.SignalSlots || slots&(1<<uint(g.Index)) == 0 {
			continue
		}
		seen++
		b := smMax
		if g.OfflineMPS > 0 {
			b = math.Min(g.OfflineMPS/100, alloc.Whole)
		}
		budget = math.Min(budget, b)
		fits = fits && g.OfflineMPSFits
	}
	if seen == 0 {
		budget = smMax
	}
	return budget, fits && seen > 0
}

// MPSThreadCeiling is the most MPS active-thread percentage a container may ever get: its
// own sm-percent, else its class's sm_max when that is below 100; 0 (none) for a container
// with neither, and for an offline container without an sm-percent while alloc.fit is on
// (its GPUs' budget may then be the whole GPU, alloc.Whole). The MPS percentage can only be tightened when a process creates its CUDA
// context, so the wiring puts this ceiling into the container's
// CUDA_MPS_ACTIVE_THREAD_PERCENTAGE; the control block holds it (InitialLimits) or, for
// offline work, the container's part of its GPUs' budget below it (InitialLimits, then the
// guard), and libxcuda tightens the variable to the block's value when a process loads.
func MPSThreadCeiling(c api.Container, p *policy.Policy) uint32 {
	if c.Limits.SMPercent > 0 {
		return MPSThreadPercent(float64(c.Limits.SMPercent))
	}
	if c.Class == api.Offline && p.Alloc.Fit {
		return 0 // its GPUs' budget may be the whole GPU (alloc.Whole): the block says
	}
	if cl, ok := p.ClassLimits(string(c.Class)); ok && cl.SMMax < 100 {
		return MPSThreadPercent(float64(cl.SMMax))
	}
	return 0
}

// MPSThreadPercent turns a share of the GPU, in percent, into an MPS active-thread
// percentage: rounded down to a whole percent (the MPS unit: parts split from a budget never
// sum above it), at least 1 (0 would mean unset), at most 100. It is the one rounding rule
// of MPS percentages.
func MPSThreadPercent(pct float64) uint32 {
	return uint32(max(1, min(100, math.Floor(pct+1e-6))))
}

// OfflineClaim is an offline container's claim on its GPU's offline budget: the class's
// priority as its weight, and its own ceiling (OwnCeiling) as its cap. It is the one
// statement of both, for the first limits here and for the guard's split every period.
func OfflineClaim(c api.Container, p *policy.Policy) alloc.Claim {
	return alloc.Claim{Weight: float64(p.Classes.Offline.Priority) + 1, Cap: OwnCeiling(c, p)}
}

// MPSClaim is an offline container's claim on a GPU's MPS budget (0..1): OfflineClaim's,
// except on a budget above the class's sm_max — the whole GPU, where no offline part
// leaves the online kernels room (alloc.FitBudget) — where only its own sm-percent caps
// it: sm_max then bounds offline work through the launch gate's time share alone.
func MPSClaim(c api.Container, p *policy.Policy, budget float64) alloc.Claim {
	cl := OfflineClaim(c, p)
	if max := p.Classes.Offline.SMMax.Fraction(); budget > max {
		cl.Cap = math.Min(budget, 1)
		if c.Limits.SMPercent > 0 {
			cl.Cap = math.Min(float64(c.Limits.SMPercent)/100, cl.Cap)
		}
	}
	return cl
}

// OwnCeiling is an offline container's own ceiling (0..1): its sm-percent, else the
// offline class's sm_max, and never above sm_max.
func OwnCeiling(c api.Container, p *policy.Policy) float64 {
	max := p.Classes.Offline.SMMax.Fraction()
	if c.Limits.SMPercent > 0 {
		return math.Min(float64(c.Limits.SMPercent)/100, max)
	}
	return max
}

// Peer is a container registered beside a new one, with the MPS active-thread percentage
// its block offers its processes (HeldMPS: 1..100; 0 where it has no block yet).
type Peer struct {
	api.Container
	HeldMPS uint32
}

// offlinePart is an offline container's part (0..1) of its GPUs' MPS budget (mps: with
// MPSClaim's caps) or time ceiling (OfflineClaim's), split with the offline peers that
// share one of its GPUs, capped by its own ceiling, and the
// percentages those peers' processes may hold, summed.
func offlinePart(c api.Container, p *policy.Policy, peers []Peer, budget float64, mps bool) (part float64, held uint32) {
	claim := func(c api.Container) alloc.Claim {
		if mps {
			return MPSClaim(c, p, budget)
		}
		return OfflineClaim(c, p)
	}
	claims := []alloc.Claim{claim(c)}
	for _, o := range peers {
		if o.ID == c.ID || o.Class != api.Offline || !shareGPU(c.GPUs, o.GPUs) {
			continue
		}
		claims = append(claims, claim(o.Container))
		held += o.HeldMPS
	}
	shares, _ := alloc.SplitBudget(budget, claims)
	return shares[0], held
}

// shareGPU reports whether two GPU lists (indexes, UUIDs or "all") may name the same GPU.
func shareGPU(a, b []string) bool {
	for _, x := range a {
		for _, y := range b {
			if x == y || x == "all" || y == "all" {
				return true
			}
		}
	}
	return false
}

// Ensure creates the container's control block, or reattaches to the one a previous muxd
// made (see ctlblock.Attach).
func (m *Manager) Ensure(c api.Container, p *policy.Policy) error {
	if err := api.ValidateID(c.ID); err != nil {
		return err
	}
	// Peers and GPUs are asked before m.mu is taken: they call into the registry and
	// the guard, and the guard's step holds its own lock while it calls Block, so asking
	// them under m.mu deadlocks a registration against a guard step.
	var peers []api.Container
	if m.Peers != nil {
		peers = m.Peers()
	}
	var gpus []api.GPU
	if m.GPUs != nil {
		gpus = m.GPUs()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.blocks[c.ID]; ok {
		return nil
	}
	dir := m.Paths(c.ID).Dir
	if fi, err := os.Lstat(dir); err == nil && !fi.IsDir() {
		return fmt.Errorf("control directory for %s is not a directory", c.ID)
	}
	// Attach, never recreate: a running process keeps the inodes it mapped, so a block
	// whose usage file the container broke is reattached (and reported corrupt by every
	// read) instead of being replaced by a second one the process never sees.
	l, fitsBeside := initialLimits(c, p, gpus, m.peersHolding(peers))
	l.Signal = Signal(c, p, gpus)
	if fitsBeside && l.Signal.Role == ctlblock.SignalFollow {
		l.Signal.FitPercent = l.MPSActiveThreadPercent // as the guard would write it
	}
	b, err := ctlblock.Attach(dir, l)
	if err != nil {
		return fmt.Errorf("attach control block for %s: %w", c.ID, err)
	}
	m.blocks[c.ID] = b
	if l.Signal.Role == ctlblock.SignalFollow {
		m.countFollowers()
	}
	return nil
}

// peersHolding pairs each registered container with the MPS percentage its block offers
// its processes (OfferedMPS). m.mu held.
func (m *Manager) peersHolding(cs []api.Container) []Peer {
	peers := make([]Peer, len(cs))
	for i, c := range cs {
		peers[i].Container = c
		if b := m.blocks[c.ID]; b != nil {
			peers[i].HeldMPS = OfferedMPS(b.Limits().MPSActiveThreadPercent)
		}
	}
	return peers
}

// OfferedMPS is what an MPS active-thread percentage in a block lets a process take:
// 0 (no limit) and anything past 100 are the whole GPU.
func OfferedMPS(p uint32) uint32 {
	if p == 0 || p > 100 {
		return 100
	}
	return p
}

// Block returns the open control block of a container, or nil.
func (m *Manager) Block(id string) *ctlblock.Block {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.blocks[id]
}

// Usage summarises what a container's processes report through libxcuda.
func (m *Manager) Usage(id string) *api.Usage {
	b := m.Block(id)
	if b == nil {
		return nil
	}
	// Untrusted: clamped by ctlblock; a corrupt block reports what could be read.
	u, l := b.Usage(), b.Limits()
	out := &api.Usage{
		Launches:     u.Launches,
		Throttled:    u.Throttled,
		GPUTime:      u.GPUTime,
		InFlight:     u.InFlight,
		OOMDenials:   u.OOMDenials,
		StickyErrors: u.StickyErrors,
		Processes:    len(u.Procs),
		SharePercent: float64(l.ShareBP) / 100,
		Paused:       l.Paused,
	}
	if l.ConfinePercent > 0 || u.Confine != ctlblock.ConfineNone {
		out.ConfinedSMs, out.Confine = u.ConfinedSMs, u.Confine.String()
	}
	out.ReservedBytes = u.TotalReserved() // saturating: 16 × 2⁶³ is not 0
	if !u.Heartbeat.IsZero() {
		out.Heartbeat = u.Heartbeat.UTC().Truncate(time.Millisecond)
	}
	return out
}

// Remove closes and deletes the container's control block.
func (m *Manager) Remove(id string) error {
	if err := api.ValidateID(id); err != nil {
		return err
	}
	m.mu.Lock()
	b := m.blocks[id]
	delete(m.blocks, id)
	if b != nil && b.Limits().Signal.Role == ctlblock.SignalFollow {
		m.countFollowers()
	}
	m.mu.Unlock()
	var errs []error
	if b != nil {
		m.clearOnlineSlots(b.Limits().Signal)
		errs = append(errs, b.Close())
	}
	if err := os.RemoveAll(m.Paths(id).Dir); err != nil {
		errs = append(errs, fmt.Errorf("remove control block for %s: %w", id, err))
	}
	return errors.Join(errs...)
}
