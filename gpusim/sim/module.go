package sim

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ModuleMagic starts every gpusim module image. A fake module is text:
//
//	gpusim-module 1
//	# name        cost of one wave of blocks on one SM, bandwidth share, ...
//	func gemm     block_us=40 bw=0.3
//	func softmax  block_us=4  bw=0.8 blocks_per_sm=4 fixed_us=2
//	func conv     block_us=30 bw=0.4 regs=64 smem=49152
//
// block_us is how long one block takes on an SM that its kernel's blocks
// alone fill (a full wave of resident blocks finishes in block_us); bw is the
// fraction of the device's memory bandwidth the kernel uses while it runs at
// full speed; regs (registers per thread, default 32) and smem (shared memory
// per block, bytes, default 0) decide, with the threads per block, how many
// blocks fit on an SM, alone or beside other kernels' blocks; blocks_per_sm
// overrides that count for the kernel itself; fixed_us is a per-launch cost
// that does not shrink with more SMs. Any other image (a real cubin or fatbin)
// is accepted and every function in it gets DefaultFunction's cost.
const ModuleMagic = "gpusim-module"

// Function is the declared cost of one kernel.
type Function struct {
	Name        string
	BlockNs     float64 // time for one SM to run one wave of its resident blocks
	BW          float64 // memory-bandwidth intensity in [0,1]
	BlocksPerSM int     // resident blocks per SM; 0 = derived from threads per block
	FixedNs     float64 // per-launch cost independent of SM count
	Regs        int     // registers per thread; 0 = DefaultRegs
	SmemBytes   int     // static shared memory per block
}

// DefaultRegs is the register count per thread of a function that does not
// declare one (a common figure for compiled DL kernels).
const DefaultRegs = 32

// DefaultFunction is the cost given to functions of images that are not gpusim
// modules.
var DefaultFunction = Function{BlockNs: 5000, BW: 0.2}

// Module is a loaded image: either declared functions or "anything goes".
type Module struct {
	funcs  map[string]Function
	opaque bool
}

// ParseModule reads a module image. Images that do not start with ModuleMagic
// are opaque: every name resolves to DefaultFunction.
func ParseModule(data []byte) (*Module, error) {
	if !bytes.HasPrefix(data, []byte(ModuleMagic)) {
		return &Module{opaque: true}, nil
	}
	m := &Module{funcs: map[string]Function{}}
	sc := bufio.NewScanner(bytes.NewReader(data))
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if i := strings.IndexByte(text, '#'); i >= 0 {
			text = strings.TrimSpace(text[:i])
		}
		if text == "" {
			continue
		}
		f := strings.Fields(text)
		if line == 1 {
			if f[0] != ModuleMagic || len(f) != 2 || f[1] != "1" {
				return nil, fmt.Errorf("module line 1: want %q", ModuleMagic+" 1")
			}
			continue
		}
		if f[0] != "func" || len(f) < 2 {
			return nil, fmt.Errorf("module line %d: want \"func NAME key=value...\"", line)
		}
		fn := Function{Name: f[1], BlockNs: DefaultFunction.BlockNs, BW: DefaultFunction.BW}
		for _, kv := range f[2:] {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				return nil, fmt.Errorf("module line %d: %q is not key=value", line, kv)
			}
			x, err := strconv.ParseFloat(v, 64)
			if err != nil || x < 0 || x != x {
				return nil, fmt.Errorf("module line %d: %s must be a non-negative number", line, k)
			}
			switch k {
			case "block_us":
				fn.BlockNs = x * 1000
			case "bw":
				if x > 1 {
					return nil, fmt.Errorf("module line %d: bw must be in [0,1]", line)
				}
				fn.BW = x
			case "blocks_per_sm":
				if x < 1 || x > 64 || x != float64(int(x)) {
					return nil, fmt.Errorf("module line %d: blocks_per_sm must be an integer in [1,64]", line)
				}
				fn.BlocksPerSM = int(x)
			case "fixed_us":
				fn.FixedNs = x * 1000
			case "regs":
				if x < 1 || x > 255 || x != float64(int(x)) {
					return nil, fmt.Errorf("module line %d: regs must be an integer in [1,255]", line)
				}
				fn.Regs = int(x)
			case "smem":
				if x > 256<<10 || x != float64(int(x)) {
					return nil, fmt.Errorf("module line %d: smem must be a whole number of bytes up to 256 KiB", line)
				}
				fn.SmemBytes = int(x)
			default:
				return nil, fmt.Errorf("module line %d: unknown key %q", line, k)
			}
		}
		if fn.BlockNs > 60e9 || fn.FixedNs > 60e9 {
			return nil, fmt.Errorf("module line %d: a kernel may not cost more than 60 s", line)
		}
		m.funcs[fn.Name] = fn
	}
	if len(m.funcs) == 0 {
		return nil, fmt.Errorf("module declares no functions")
	}
	return m, nil
}

// Lookup finds a function by name.
func (m *Module) Lookup(name string) (Function, bool) {
	if m.opaque {
		f := DefaultFunction
		f.Name = name
		return f, true
	}
	f, ok := m.funcs[name]
	return f, ok
}

// shape is what the block scheduler needs to know about one launch.
type shape struct {
	blocks  int     // grid size
	bps     int     // blocks of this kernel that fit on an empty SM
	threads int     // per block
	regs    int     // per block
	smem    int     // per block
	nominal float64 // ns alone on an idle GPU at max clock (for tests and docs)
}

// kernelShape works out a launch's per-block resources and how many of its
// blocks an SM holds: the least of the thread, register, shared-memory and
// block limits (CUDA's occupancy rules), or the function's declared
// blocks_per_sm, which then also reserves that share of the SM's registers
// so that other kernels' blocks see the SM as full as it is.
func kernelShape(p *Profile, f Function, grid, block [3]uint32) (shape, error) {
	blocks := uint64(grid[0]) * uint64(grid[1]) * uint64(grid[2])
	threads := uint64(block[0]) * uint64(block[1]) * uint64(block[2])
	if blocks == 0 || blocks > 1<<31 || threads == 0 || threads > 1024 {
		return shape{}, fmt.Errorf("launch dims grid=%v block=%v out of range", grid, block)
	}
	sh := shape{blocks: int(blocks), threads: int(threads), smem: f.SmemBytes}
	regs := f.Regs
	if regs == 0 {
		regs = DefaultRegs
	}
	sh.regs = regs * sh.threads
	if sh.regs > p.RegsPerSM || sh.smem > p.SmemPerSMBytes || sh.threads > p.MaxThreadsPerSM {
		return shape{}, fmt.Errorf("a block of %d threads, %d registers and %d bytes of shared memory does not fit on an SM", sh.threads, sh.regs, sh.smem)
	}
	bps := min(p.MaxBlocksPerSM, p.MaxThreadsPerSM/sh.threads, p.RegsPerSM/sh.regs)
	if sh.smem > 0 {
		bps = min(bps, p.SmemPerSMBytes/sh.smem)
	}
	if f.BlocksPerSM > 0 {
		bps = min(f.BlocksPerSM, p.MaxBlocksPerSM)
		sh.regs = max(sh.regs, p.RegsPerSM/bps)
		sh.threads = min(sh.threads, p.MaxThreadsPerSM/bps)
	}
	sh.bps = max(1, bps)
	waves := math.Ceil(float64(sh.blocks) / float64(sh.bps*p.SMs))
	sh.nominal = f.FixedNs + waves*f.BlockNs
	return sh, nil
}
