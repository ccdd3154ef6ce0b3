package calibration

import (
	"fmt"

	"github.com/muxflow/muxflow/gpusim/sim"
)

// The workloads below stand for the programs of the published setups. Their
// kernel shapes are chosen from what the sources say of them (time per
// request or iteration, GPU utilisation alone, kind of kernels) and written
// down in docs/gpusim-calibration.md; they are not fitted per point.

func profile(name string) sim.Profile {
	p, err := sim.LookupProfile(name)
	if err != nil {
		panic(err)
	}
	return p
}

// rtx3090 is the GPU of elvinger_atp_tpc: 82 SMs (GA102 as sold in the
// RTX 3090). Only its SM count matters to the point.
func rtx3090() sim.Profile {
	p := profile("a100")
	p.Name, p.SMs = "NVIDIA GeForce RTX 3090", 82
	return p
}

// sleepKernel is Elvinger et al.'s sleep kernel: 1024 threads a block, no
// memory traffic, one block time of 1 ms.
func sleepKernel(blocks int) Workload {
	return Workload{Name: fmt.Sprintf("sleep%d", blocks), Arrival: Loop, Kernels: []Kernel{{BlockUs: 1000, Grid: blocks, Threads: 1024}}}
}

// yolos is nos's saturating YOLOS-small inference loop on one image: a long
// chain of small kernels (a few SMs' worth of blocks each) whose time is
// about half GPU front-end setup and half execution.
func yolos() Workload {
	var ks []Kernel
	for i := 0; i < 1000; i++ {
		ks = append(ks, Kernel{FixedUs: 4, BlockUs: 5, BW: 0.2, Grid: 96, Threads: 256})
	}
	return Workload{Name: "yolos-small", Arrival: Loop, Kernels: ks}
}

// bertInfer is Tally's BERT-base inference server: 4.05 ms a request of 12
// layers of short kernels (GEMMs over two blocks per SM, small element-wise
// and normalisation kernels), offered at half the rate it can serve alone.
func bertInfer() Workload {
	var ks []Kernel
	for layer := 0; layer < 12; layer++ {
		for i := 0; i < 4; i++ { // QKV, attention output and FFN GEMMs
			ks = append(ks, Kernel{FixedUs: 3, BlockUs: 40, BW: 0.3, Grid: 216, Threads: 128})
		}
		for i := 0; i < 8; i++ { // softmax, layer norms, bias/GELU, attention batches
			ks = append(ks, Kernel{FixedUs: 3, BlockUs: 17, BW: 0.5, Grid: 48, Threads: 128})
		}
	}
	return Workload{Name: "bert-infer", Arrival: Poisson, Rate: 0.5 / 4.05e-3, NoQueue: true, Kernels: ks}
}

// resnetTrain is Tally's ResNet-50 training (batch 128, fp32): GPU-filling
// convolutions of several waves and bandwidth-bound element-wise and
// normalisation kernels, 99.5% utilisation alone.
func resnetTrain() Workload {
	var ks []Kernel
	for i := 0; i < 20; i++ {
		ks = append(ks,
			Kernel{FixedUs: 3, BlockUs: 60, BW: 0.3, Grid: 108 * 8 * 3, Threads: 256},
			Kernel{FixedUs: 3, BlockUs: 20, BW: 0.9, Grid: 108 * 8, Threads: 256})
	}
	return Workload{Name: "resnet50-train", Arrival: Stream, Kernels: ks}
}

// bertTrain is Tally's BERT training (batch 32): large GEMMs of two waves.
func bertTrain() Workload {
	var ks []Kernel
	for i := 0; i < 20; i++ {
		ks = append(ks, Kernel{FixedUs: 3, BlockUs: 100, BW: 0.4, Grid: 108 * 8 * 2, Threads: 256})
	}
	return Workload{Name: "bert-train", Arrival: Stream, Kernels: ks}
}

// llamaDecode is Tally's Llama-2-7B inference: decoding steps of
// bandwidth-bound matrix-vector kernels that spread over every SM but hold
// few threads on each (91% utilisation alone). A unit is a slice of one
// 2 s request.
func llamaDecode() Workload {
	var ks []Kernel
	for i := 0; i < 1000; i++ {
		ks = append(ks, Kernel{FixedUs: 3, BlockUs: 30, BW: 0.9, Grid: 216, Threads: 128})
	}
	return Workload{Name: "llama2-7b-decode", Arrival: Loop, Kernels: ks}
}

func times(w Workload, n int) []Workload {
	out := make([]Workload, n)
	for i := range out {
		out[i] = w
	}
	return out
}

const (
	tally   = "Tally (ASPLOS'25), artifact tally_results/priority-aware-perf.csv"
	nos     = "Nebuly nos, demos/gpu-sharing-comparison README, Results table"
	elvTB   = "Elvinger et al. (SoCC'25) §4.1.1, artifact README (thread-block scheduler)"
	elvATP  = "Elvinger et al. (SoCC'25), artifact memory-bandwidth README"
	seconds = 2
)

// Points are the calibration points (docs/gpusim-calibration.md).
func Points() []Point {
	a100, h100 := profile("a100"), profile("h100")
	return []Point{
		{ID: "elvinger_tb_fit", Source: elvTB, GPU: h100, Sharing: Streams, Metric: MeanLatency,
			Subject: sleepKernel(132), Others: []Workload{sleepKernel(132)}, Lockstep: true, Published: 1.00, Seconds: 0.5, Short: true},
		{ID: "elvinger_tb_full", Source: elvTB, GPU: h100, Sharing: Streams, Metric: MeanLatency,
			Subject: sleepKernel(264), Others: []Workload{sleepKernel(264)}, Lockstep: true, Published: 2.00, Seconds: 0.5, Short: true},
		{ID: "elvinger_atp_tpc", Source: elvATP, GPU: rtx3090(), Metric: SMsGranted, ATP: 50, Published: 40, Short: true},
		{ID: "nos_ts_3", Source: nos, GPU: a100, Sharing: TimeSlice, Metric: MeanLatency,
			Subject: yolos(), Others: times(yolos(), 2), Published: 3.33, Seconds: seconds, Short: true},
		{ID: "nos_ts_5", Source: nos, GPU: a100, Sharing: TimeSlice, Metric: MeanLatency,
			Subject: yolos(), Others: times(yolos(), 4), Published: 5.55, Seconds: seconds},
		{ID: "nos_ts_7", Source: nos, GPU: a100, Sharing: TimeSlice, Metric: MeanLatency,
			Subject: yolos(), Others: times(yolos(), 6), Published: 7.77, Seconds: seconds},
		{ID: "nos_mps_3", Source: nos, GPU: a100, Sharing: MPS, Metric: MeanLatency,
			Subject: yolos(), Others: times(yolos(), 2), Published: 1.86, Seconds: seconds, Short: true},
		{ID: "nos_mps_5", Source: nos, GPU: a100, Sharing: MPS, Metric: MeanLatency,
			Subject: yolos(), Others: times(yolos(), 4), Published: 2.74, Seconds: seconds},
		{ID: "nos_mps_7", Source: nos, GPU: a100, Sharing: MPS, Metric: MeanLatency,
			Subject: yolos(), Others: times(yolos(), 6), Published: 3.64, Seconds: seconds},
		{ID: "tally_bert_resnet_mps_p99", Source: tally, GPU: a100, Sharing: MPS, Metric: P99Latency,
			Subject: bertInfer(), Others: []Workload{resnetTrain()}, Published: 2.20, Seconds: 2 * seconds},
		{ID: "tally_bert_resnet_ts_p99", Source: tally, GPU: a100, Sharing: TimeSlice, Metric: P99Latency,
			Subject: bertInfer(), Others: []Workload{resnetTrain()}, Published: 2.73, Seconds: 2 * seconds},
		{ID: "tally_bert_berttrain_ts_p99", Source: tally, GPU: a100, Sharing: TimeSlice, Metric: P99Latency,
			Subject: bertInfer(), Others: []Workload{bertTrain()}, Published: 2.72, Seconds: 2 * seconds},
		{ID: "tally_resnet_tput_mps", Source: tally, GPU: a100, Sharing: MPS, Metric: Throughput,
			Subject: resnetTrain(), Others: []Workload{bertInfer()}, Published: 0.78, Seconds: seconds},
		{ID: "tally_resnet_tput_ts", Source: tally, GPU: a100, Sharing: TimeSlice, Metric: Throughput,
			Subject: resnetTrain(), Others: []Workload{bertInfer()}, Published: 0.56, Seconds: seconds, Short: true},
		{ID: "tally_llama_resnet_mps", Source: tally, GPU: a100, Sharing: MPS, Metric: MeanLatency,
			Subject: llamaDecode(), Others: []Workload{resnetTrain()}, Published: 1.29, Seconds: seconds},
		{ID: "tally_llama_resnet_ts", Source: tally, GPU: a100, Sharing: TimeSlice, Metric: MeanLatency,
			Subject: llamaDecode(), Others: []Workload{resnetTrain()}, Published: 2.29, Seconds: seconds},
	}
}
