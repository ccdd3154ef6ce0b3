package guard

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/muxflow/muxflow/libxcuda/ctlblock"
	"github.com/muxflow/muxflow/monitor"
	"github.com/muxflow/muxflow/muxd/api"
	"github.com/muxflow/muxflow/muxd/blocks"
	"github.com/muxflow/muxflow/muxd/workloadprofile"
	"github.com/muxflow/muxflow/policy"
)

// BenchmarkStep is one period of the loop on the nodes tests/bench runs muxd on (issue
// 19): 8 GPUs with 16 running containers each, and 1 GPU with 1,000; one online
// container per GPU, every container with a control block. Its CPU and allocations per
// period.
func BenchmarkStep(b *testing.B) {
	b.Run("8x16", func(b *testing.B) { benchStep(b, 8, 16) })
	b.Run("1x1000", func(b *testing.B) { benchStep(b, 1, 1000) })
}

func benchStep(b *testing.B, gpus, per int) {
	p := policy.Default()
	dir := b.TempDir()
	var cs list
	blk := fakeBlocks{}
	mon := &fakeMonitor{}
	for i := range gpus {
		util := uint32(20)
		mon.gpus = append(mon.gpus, monitor.GPUStatus{Index: i, UUID: fmt.Sprintf("GPU-%d", i), State: monitor.Healthy,
			Sample: &monitor.Sample{GPUUtilPercent: &util, Processes: []monitor.ProcessSample{{PID: uint32(1000 + i), SMUtilPercent: &util}}}})
	}
	for i := range gpus * per {
		class := api.Offline
		if i < gpus {
			class = api.Online
		}
		c := running("c-"+strconv.Itoa(i), class, 1000+i, strconv.Itoa(i%gpus))
		cs = append(cs, c)
		bl, err := ctlblock.Create(filepath.Join(dir, c.ID), blocks.InitialLimits(c, p, nil))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { bl.Close() })
		blk[c.ID] = bl
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	g := &Guard{Monitor: mon, Containers: cs, Blocks: blk, Policy: func() *policy.Policy { return p }, Log: log,
		Owner:    func(pid int, inits map[int]string) (string, bool) { id, ok := inits[pid]; return id, ok },
		Profiler: workloadprofile.New()} // as muxd's
	now := time.Now()
	for i := range 3 {
		g.Step(context.Background(), now.Add(time.Duration(i)*100*time.Millisecond))
	}
	now = now.Add(time.Second)
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(100 * time.Millisecond)
		g.Step(context.Background(), now)
	}
}
