package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/muxflow/muxflow/libxcuda/ctlblock"
	"github.com/muxflow/muxflow/muxd/api"
)

// TestOfflineContainersShareOneCeiling (issue 14): two offline containers and one online
// on one simulated GPU. The GPU's offline ceiling is one budget: the two offline
// containers' launch-gate shares and MPS active-thread percentages sum to at most it,
// and the one that asked for sm-percent 40 never gets more than 40.
func TestOfflineContainersShareOneCeiling(t *testing.T) {
	n := startNode(t, "")
	ctx := context.Background()
	n.infer("svc", 30)
	a := n.runLimits("asks40", api.Offline, api.Limits{SMPercent: 40}, n.sim.Artifacts.Train, "--duration", "30", "--mem", "1G")
	limits := func(w *workload) ctlblock.Limits {
		blk, err := ctlblock.Open(w.ctl.Dir)
		if err != nil {
			t.Fatal(err)
		}
		defer blk.Close()
		return blk.Limits()
	}
	// Alone with the online service, the GPU's ceiling (about 70%) is above what it
	// asked: its own 40 binds.
	n.waitFor("asks40 gets its own 40", 5*time.Second, func() bool {
		c, err := n.client.Container(ctx, "asks40")
		return err == nil && c.Ceiling != nil && c.Ceiling.BoundBy == "own sm-percent" && n.gpu().OfflineCeiling > 40
	})
	if l := limits(a); l.ShareBP != 4000 || l.MPSActiveThreadPercent != 40 {
		t.Errorf("alone, the container asking sm-percent 40 has share %v%%, MPS %d%%; want 40 and 40", float64(l.ShareBP)/100, l.MPSActiveThreadPercent)
	}
	b := n.train("plain", 30)
	n.waitFor("the guard splits the GPU's ceiling between the two", 5*time.Second, func() bool {
		g := n.gpu()
		return g.OfflineContainers == 2 && g.CeilingReason != ""
	})
	deadline := time.Now().Add(3 * time.Second)
	checks := 0
	for time.Now().Before(deadline) {
		g := n.gpu()
		la, lb := limits(a), limits(b)
		sum := float64(la.ShareBP+lb.ShareBP) / 100
		// The blocks and the GPU's ceiling are read a moment apart and the ceiling may
		// have risen by one give-back step (2%) in between.
		if sum > g.OfflineCeiling+2.01 {
			t.Errorf("offline gate shares %v%% + %v%% = %v%%, above the GPU's offline ceiling %v%%", float64(la.ShareBP)/100, float64(lb.ShareBP)/100, sum, g.OfflineCeiling)
		}
		if la.MPSActiveThreadPercent+lb.MPSActiveThreadPercent > 70 {
			t.Errorf("MPS active-thread percentages %d + %d, above the class's sm_max 70", la.MPSActiveThreadPercent, lb.MPSActiveThreadPercent)
		}
		if la.ShareBP > 4000 || la.MPSActiveThreadPercent > 40 || la.MPSActiveThreadPercent == 0 {
			t.Errorf("the container asking sm-percent 40 has share %v%%, MPS %d%%", float64(la.ShareBP)/100, la.MPSActiveThreadPercent)
		}
		checks++
		time.Sleep(100 * time.Millisecond)
	}
	c, err := n.client.Container(ctx, "asks40")
	if err != nil || c.Ceiling == nil || c.Ceiling.Own != 40 || c.Ceiling.Percent > 40 {
		t.Errorf("API ceiling of asks40: %+v %v", c.Ceiling, err)
	}
	g := n.gpu()
	t.Logf("GPU: offline ceiling %.0f%% split by %d, online demand %.0f%% (%s); why: %s; %d checks",
		g.OfflineCeiling, g.OfflineContainers, g.OnlineDemand, g.DemandSource, g.CeilingReason, checks)
	for _, id := range []string{"asks40", "plain"} {
		c, _ := n.client.Container(ctx, id)
		t.Logf("%s: %s", id, fmt.Sprintf("%+v", c.Ceiling))
	}
}
