package guard

import (
	"context"

	"github.com/muxflow/muxflow/monitor"
	"github.com/muxflow/muxflow/muxd/evict"
	"github.com/muxflow/muxflow/policy"
)

// Health handling: the fourth step of a period. A GPU that turned Unhealthy loses its
// offline work; one that Faulted gets the node side of the mixed error handling (evict
// the offline work, restart the MPS server for a reset-class fault, then tell the
// monitor). One handling per GPU runs at a time, in the background.

// handleHealth runs what each GPU's change of health state since the last period calls
// for.
func (g *Guard) handleHealth(ctx context.Context, sv *stepView, p *policy.Policy) {
	last := g.loop.lastState
	for _, v := range sv.views {
		uuid := v.status.UUID
		prev := last[uuid]
		last[uuid] = v.status.State
		if prev != v.status.State {
			g.onTransition(ctx, v, prev, p)
		}
	}
}

// onTransition runs the actions a new health state calls for.
func (g *Guard) onTransition(ctx context.Context, v gpuView, prev monitor.State, p *policy.Policy) {
	uuid := v.status.UUID
	switch v.status.State {
	case monitor.Unhealthy:
		g.evictAsync(ctx, v, "GPU unhealthy: "+v.status.Reason.Text, p, handling{})
	case monitor.Faulted:
		var online []string
		for _, c := range v.online {
			online = append(online, c.ID)
		}
		g.Log.Error("GPU faulted: running error handling", "gpu", uuid, "reason", v.status.Reason.Text, "online_containers", online)
		// Restarting MPS takes every client of the GPU down with it, online ones
		// included. Only a reset-class fault (the GPU needs a reset; every context on
		// it is lost anyway) justifies it; an application fault is handled by
		// removing the offline work.
		reset := v.status.LastFault != nil && v.status.LastFault.Class == monitor.FaultReset
		g.evictAsync(ctx, v, "GPU faulted: "+v.status.Reason.Text, p, handling{restartMPS: reset, clearFault: true})
	default:
		if prev != "" {
			g.Log.Info("GPU state", "gpu", uuid, "from", prev, "to", v.status.State)
		}
	}
}

// handling says what to do after evicting a GPU's offline work.
type handling struct {
	restartMPS bool // restart the MPS control daemon and its servers
	clearFault bool // tell the monitor the error handler ran
}

func (g *Guard) evictAsync(ctx context.Context, v gpuView, reason string, p *policy.Policy, then handling) {
	uuid := v.status.UUID
	g.mu.Lock()
	if g.handling[uuid] {
		// One handling per GPU at a time; a restart asked for meanwhile is done by it.
		g.restartAsked[uuid] = g.restartAsked[uuid] || then.restartMPS
		g.mu.Unlock()
		return
	}
	g.handling[uuid] = true
	g.restartAsked[uuid] = then.restartMPS
	g.mu.Unlock()
	var targets []evict.Target
	for _, c := range v.offline {
		targets = append(targets, evict.Target{ID: c.ID, Namespace: c.Namespace, PID: c.PID, Pod: c.Pod})
	}
	grace := p.Evict.Grace.D()
	go func() {
		if err := g.Evictor.Evict(ctx, uuid, reason, grace, targets); err != nil {
			g.Log.Error("eviction incomplete", "gpu", uuid, "err", err)
		}
		g.mu.Lock()
		restart := g.restartAsked[uuid]
		delete(g.handling, uuid)
		delete(g.restartAsked, uuid)
		g.mu.Unlock()
		if restart && p.Errors.RestartMPS && g.MPS != nil {
			g.MPS.Restart("GPU " + uuid + ": " + reason)
		}
		if then.clearFault {
			if err := g.Monitor.ClearFault(uuid); err != nil {
				g.Log.Error("cannot clear the GPU's fault", "gpu", uuid, "err", err)
			}
		}
	}()
}
