package calibration

import (
	"fmt"
	"sort"
)

// realH200 holds the points measured on a real NVIDIA H200 (141 GB SXM,
// driver 580.159.04, CUDA 13.0) on 2026-12-04 by gpusim/gpucheck/calibration.sh,
// which tests/gpu/check.sh runs: the same setups played with synthetic CUDA
// kernels of the same shapes (block time spun on clock64, bandwidth share
// copied), kernels of whole waves scaled to the H200's 132 SMs. They are not
// the published programs on the published GPUs, so they check the model on
// the same workloads rather than replace the published figures.
var realH200 = map[string]float64{
	"elvinger_tb_fit":             1.01,
	"elvinger_tb_full":            1.99,
	"elvinger_atp_tpc":            66,
	"nos_ts_3":                    3.26,
	"nos_ts_5":                    5.42,
	"nos_ts_7":                    7.66,
	"nos_mps_3":                   1.18,
	"nos_mps_5":                   1.40,
	"nos_mps_7":                   1.59,
	"tally_bert_resnet_mps_p99":   3.86,
	"tally_bert_resnet_ts_p99":    2.27,
	"tally_bert_berttrain_ts_p99": 2.27,
	"tally_resnet_tput_mps":       0.98,
	"tally_resnet_tput_ts":        0.48,
	"tally_llama_resnet_mps":      4.22,
	"tally_llama_resnet_ts":       2.26,
}

// RealGPUs names the GPUs whose measured figures OnRealGPU knows.
func RealGPUs() []string { return []string{"h200"} }

// OnRealGPU returns points replayed on gpusim's model of the named GPU and
// judged against what that GPU measured (Published then holds the
// measurement): kernels sized in whole waves of the point's GPU are resized
// to the new GPU's SMs, as the real-GPU script sizes them.
func OnRealGPU(name string, pts []Point) ([]Point, error) {
	if name != "h200" {
		return nil, fmt.Errorf("no real-GPU measurements for %q (known: %v)", name, RealGPUs())
	}
	gpu := profile(name)
	var out []Point
	for _, p := range pts {
		v, ok := realH200[p.ID]
		if !ok {
			continue
		}
		q := p
		q.Subject = rescale(p.Subject, p.GPU.SMs, gpu.SMs)
		q.Others = nil
		for _, w := range p.Others {
			q.Others = append(q.Others, rescale(w, p.GPU.SMs, gpu.SMs))
		}
		q.GPU, q.Published = gpu, v
		q.Source = "real " + gpu.Name + ", gpusim/gpucheck/calibration.sh, 2026-12-04"
		out = append(out, q)
	}
	if len(out) == 0 {
		ids := make([]string, 0, len(realH200))
		for id := range realH200 {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		return nil, fmt.Errorf("none of the points was measured on %s (measured: %v)", name, ids)
	}
	return out, nil
}

// wavesBlocksPerSM is how the points size a GPU-filling kernel: a multiple
// of eight blocks per SM (calibration.cu's per-SM shapes).
const wavesBlocksPerSM = 8

// rescale resizes the kernels of w that are whole multiples of
// wavesBlocksPerSM blocks on every one of fromSMs SMs to toSMs SMs.
func rescale(w Workload, fromSMs, toSMs int) Workload {
	if fromSMs == toSMs {
		return w
	}
	ks := make([]Kernel, len(w.Kernels))
	for i, k := range w.Kernels {
		if unit := fromSMs * wavesBlocksPerSM; k.Grid%unit == 0 {
			k.Grid = k.Grid / fromSMs * toSMs
		}
		ks[i] = k
	}
	w.Kernels = ks
	return w
}
