// Package inventory tells muxd which GPUs the node has. The source is behind a small
// interface: NVML on real nodes and gpusim's NVML adapter on simulated ones (both through
// go-nvml's nvml.Interface), or None on a node without GPUs.
package inventory

import (
	"context"

	"github.com/muxflow/muxflow/muxd/api"
)

// Inventory lists the node's GPUs.
type Inventory interface {
	GPUs(ctx context.Context) ([]api.GPU, error)
}

// None is the inventory of a node without GPUs: muxd still serves its API and registry.
type None struct{}

// GPUs returns no devices.
func (None) GPUs(context.Context) ([]api.GPU, error) { return []api.GPU{}, nil }
