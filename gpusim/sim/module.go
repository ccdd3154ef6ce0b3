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
//
// block_us is how long one SM takes to run the blocks it holds at once
// (blocks_per_sm of them, by default as many as its thread budget allows);
// bw is the fraction of the device's memory bandwidth the kernel uses while it
// runs at full speed; fixed_us is a per-launch cost that does not shrink with
// more SMs. Any other image (a real cubin or fatbin) is accepted and every
// function in it gets DefaultFunction's cost.
const ModuleMagic = "gpusim-module"

// Function is the declared cost of one kernel.
type Function struct {
	Name        string
	BlockNs     float64 // time for one SM to run one wave of its resident blocks
	BW          float64 // memory-bandwidth intensity in [0,1]
	BlocksPerSM int     // resident blocks per SM; 0 = derived from threads per block
	FixedNs     float64 // per-launch cost independent of SM count
}

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

// kernelCost turns a launch into the SMs it can use and its nominal duration
// on those SMs at max clock, without contention.
func kernelCost(p *Profile, f Function, grid, block [3]uint32) (sReq int, nominalNs float64, err error) {
	blocks := float64(grid[0]) * float64(grid[1]) * float64(grid[2])
	threads := uint64(block[0]) * uint64(block[1]) * uint64(block[2])
	if blocks == 0 || threads == 0 || threads > 1024 {
		return 0, 0, fmt.Errorf("launch dims grid=%v block=%v out of range", grid, block)
	}
	bps := f.BlocksPerSM
	if bps == 0 {
		bps = p.MaxThreadsPerSM / int(threads)
	}
	bps = max(1, min(bps, p.MaxBlocksPerSM))
	smNeed := blocks / float64(bps)
	s := int(smNeed)
	if float64(s) < smNeed {
		s++
	}
	s = max(1, min(s, p.SMs))
	waves := math.Max(1, smNeed/float64(s)) // a partial wave still takes a full block time
	return s, f.FixedNs + waves*f.BlockNs, nil
}
