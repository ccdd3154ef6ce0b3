package guard

import (
	"context"
	"fmt"
	"time"

	"github.com/muxflow/muxflow/monitor"
	"github.com/muxflow/muxflow/muxd/api"
	"github.com/muxflow/muxflow/muxd/evict"
	"github.com/muxflow/muxflow/policy"
)

// Sticky errors: the fifth step of a period, the node side of error handling
// (docs/errors.md, "What a restart needs"). A container's usage block is its own word:
// it decides what happens to that container, never to others.

// Evidence rules for sticky errors.
const (
	// StickyWindow is how far apart a container's sticky-error report and the evidence
	// that confirms it may be.
	StickyWindow = 10 * time.Second
	// MaxLaunchRate bounds the launches per second a container can make: each launch
	// costs a few microseconds of CPU in the driver, and a container has at most
	// ctlblock.MaxProcs processes. A faster rise of the counter is forged.
	MaxLaunchRate = 50e6
)

// stickyState is what the guard remembers of sticky-error reports between periods.
type stickyState struct {
	last map[string]uint32 // container id -> sticky errors seen at the previous step
	// reports are sticky errors that online containers reported and that await
	// evidence from outside the container before anything is done to other containers.
	reports map[string]stickyReport
	// lastAt is when each container last reported a sticky error (for corroboration).
	lastAt map[string]time.Time
}

// stickyReport is one container's unconfirmed report of a dead GPU context.
type stickyReport struct {
	at   time.Time // when muxd saw the count rise (the container's own clock is not trusted)
	code uint32
}

// stickyErrors looks for context-destroying errors the containers' libxcuda reported
// since the last step. A report is the container's own word, so it decides only what
// happens to that container:
//   - an offline container's own context died: it is evicted, alone;
//   - an online container's died: under MPS that is the mark of a fault spread through
//     the shared server (a client killed mid-kernel, a kernel fault of a neighbour),
//     which calls for evicting the GPU's offline work and restarting the MPS server once
//     it is gone. That acts on others, so it waits for evidence the online container
//     cannot forge: an NVML fault event (Xid) on that GPU within StickyWindow of the
//     report, or a sticky error reported by another container on that GPU within the
//     window. A report that nothing confirms is recorded as an event and dropped.
func (g *Guard) stickyErrors(ctx context.Context, sv *stepView, r *usageReads, p *policy.Policy, now time.Time) {
	s := &g.loop.sticky
	for _, v := range sv.views {
		for _, c := range v.all {
			u, ok := r.usage[c.ID]
			if !ok {
				continue
			}
			prev, seen := s.last[c.ID]
			s.last[c.ID] = u.errors
			changed := seen && u.errors != prev
			if changed {
				s.lastAt[c.ID] = now
				if c.Class == api.Online {
					if _, pending := s.reports[c.ID]; !pending {
						s.reports[c.ID] = stickyReport{at: now, code: u.last}
					}
				}
			}
			if !changed {
				continue
			}
			g.Log.Error("a container reports its GPU context died", "id", c.ID, "class", c.Class, "gpu", v.status.UUID,
				"cuda_error", u.last, "errors", u.errors-prev, "at", u.lastAt)
			if g.OnSticky != nil {
				g.OnSticky(v.status.UUID, c)
			}
			if c.Class != api.Online {
				reason := fmt.Sprintf("offline container %s reports CUDA error %d (its own context died)", c.ID, u.last)
				g.event(v.status.UUID, c.ID, reason+": it is evicted, alone")
				t := evict.Target{ID: c.ID, Namespace: c.Namespace, PID: c.PID, Pod: c.Pod}
				grace := p.Evict.Grace.D()
				uuid := v.status.UUID
				go func() {
					if err := g.Evictor.EvictAlone(ctx, uuid, reason, grace, t); err != nil {
						g.Log.Error("eviction incomplete", "id", t.ID, "err", err)
					}
				}()
			}
		}
		g.confirmReports(ctx, v, p, now)
	}
}

// confirmReports acts on the online containers' pending reports on one GPU that
// evidence now confirms, and drops those whose window has passed.
func (g *Guard) confirmReports(ctx context.Context, v gpuView, p *policy.Policy, now time.Time) {
	uuid := v.status.UUID
	s := &g.loop.sticky
	for _, c := range v.online {
		r, ok := s.reports[c.ID]
		if !ok {
			continue
		}
		var other string
		for _, o := range v.all {
			if t, seen := s.lastAt[o.ID]; seen && o.ID != c.ID && absDur(t.Sub(r.at)) <= StickyWindow {
				other = o.ID
				break
			}
		}
		var evidence string
		if f := v.status.LastFault; f != nil && f.Class != monitor.FaultInformational && absDur(f.Time.Sub(r.at)) <= StickyWindow {
			evidence = fmt.Sprintf("NVML reported %s on the GPU", faultName(f))
		} else if other != "" {
			evidence = fmt.Sprintf("container %s on the same GPU also reported a dead context", other)
		}
		switch {
		case evidence != "":
			delete(s.reports, c.ID)
			reason := fmt.Sprintf("online container %s saw CUDA error %d and %s", c.ID, r.code, evidence)
			g.event(uuid, c.ID, reason+": evicting the GPU's offline work, then restarting MPS")
			g.evictAsync(ctx, v, reason, p, handling{restartMPS: true})
		case now.Sub(r.at) > StickyWindow:
			delete(s.reports, c.ID)
			g.event(uuid, c.ID, fmt.Sprintf("online container reported CUDA error %d, but no NVML fault and no other client of the GPU confirmed it within %v: nothing done to other containers", r.code, StickyWindow))
			g.Log.Warn("unconfirmed sticky-error report: nothing done to other containers", "id", c.ID, "gpu", uuid, "cuda_error", r.code)
		}
	}
}

func faultName(f *monitor.Fault) string {
	if f.Xid != 0 {
		return fmt.Sprintf("Xid %d (%s)", f.Xid, f.Description)
	}
	return f.Description
}

func absDur(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}
