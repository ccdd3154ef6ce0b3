package daemon

import (
	"context"
	"fmt"
	"testing"

	"github.com/muxflow/muxflow/muxd/api"
)

// BenchmarkContainerLifecycle measures what one GPU container costs muxd: register (the
// runtime at create), start (the createRuntime hook) and unregister (poststop), each a
// durable registry write, through the real client and socket.
func BenchmarkContainerLifecycle(b *testing.B) {
	n := startNode(b, b.TempDir())
	defer n.stop()
	ctx := context.Background()
	pid := containerProcess(b)
	b.ResetTimer()
	for i := range b.N {
		id := fmt.Sprintf("bench-%d", i)
		if _, err := n.client.Register(ctx, api.RegisterRequest{ID: id, Class: api.Offline, GPUs: []string{"0"}}); err != nil {
			b.Fatal(err)
		}
		if _, err := n.client.Start(ctx, id, pid); err != nil {
			b.Fatal(err)
		}
		if err := n.client.Unregister(ctx, id); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkNodeInfo is the cost of a read-only API call (muxctl status, probes).
func BenchmarkNodeInfo(b *testing.B) {
	n := startNode(b, b.TempDir())
	defer n.stop()
	ctx := context.Background()
	b.ResetTimer()
	for range b.N {
		if _, err := n.client.Node(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
