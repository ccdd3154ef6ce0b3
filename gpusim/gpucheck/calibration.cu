// calibration.cu — measures gpusim's calibration points
// (gpusim/calibration/points.go) on a real GPU with synthetic kernels. It is
// driven by calibration.sh, which starts the processes (and the MPS daemon)
// each point needs, and which prints the table. Each mode prints one line or a
// few lines of "key=value" words on stdout; errors go to stderr as
// "calibration: ..." and exit 3 (bad arguments: 2).
//
//   calibration info                    GPU name, SMs as this process sees them, versions
//   calibration plan PLAN               SM clock and copy sizes of every kernel shape -> PLAN
//   calibration tb PLAN                 two 1 ms sleep kernels of 1024 threads, alone and on
//                                       two streams of one context, grid = SMs and 2 x SMs
//   calibration smids                   SMs the blocks of a GPU-filling kernel ran on: at
//                                       one instant at most, and in all
//   calibration run PLAN WORKLOAD SYNC_DIR WARM_MS MEASURE_MS TAIL_MS
//        WORKLOAD (yolos, bert, resnet, berttrain, llama): sets up, runs one
//        unit, writes SYNC_DIR/ready.PID and waits (at most 60 s) for
//        SYNC_DIR/go, which holds T0 in ms since the epoch (so that the
//        processes of one point start together); then warm-up until T0+WARM,
//        measured for MEASURE ms, kept running TAIL ms more so that the
//        neighbours stay busy to the end of their windows.
//
// A kernel of a shape is block_us of work per block: (1 - bw) of it spinning on
// clock64 and bw of it copying memory (float4 loads and stores through 128 MiB
// buffers, so through DRAM, not L2), in four alternating phases. The copy is
// work-bounded, so it slows when neighbours take bandwidth; the spin is
// time-bounded, so it slows only when the block waits for an SM or a time slice.
// `plan` sizes the copies on the idle GPU so that each shape alone takes about
// what points.go says (it prints target and measured microseconds).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>
#include <unistd.h>

#define CK(call) check((call), #call, __FILE__, __LINE__)

static void check(cudaError_t e, const char *what, const char *file, int line)
{
	if (e != cudaSuccess) {
		fprintf(stderr, "calibration: %s:%d: %s failed: %s (%s)\n", file, line, what,
			cudaGetErrorName(e), cudaGetErrorString(e));
		exit(3);
	}
}

static void die(const char *msg)
{
	fprintf(stderr, "calibration: %s\n", msg);
	exit(3);
}

// ---------------------------------------------------------------- kernels

// sleeper: every thread spins for `cycles` SM clock cycles (Elvinger et al.'s
// sleep kernel; 1024 threads a block, two blocks fit on an SM).
__global__ void __launch_bounds__(1024, 2) sleeper(long long cycles)
{
	long long t0 = clock64();
	while (clock64() - t0 < cycles) {
	}
}

// where: block b writes the id of the SM it runs on to sm[b] and its start
// and end on the GPU's global timer (ns) to t0[b], t1[b], spinning between
// so that the blocks spread over every SM the context may use.
__global__ void where(unsigned *sm, unsigned long long *t0, unsigned long long *t1, long long cycles)
{
	unsigned long long g0 = 0, g1 = 0;
	if (threadIdx.x == 0)
		asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g0));
	long long c0 = clock64();
	while (clock64() - c0 < cycles) {
	}
	if (threadIdx.x == 0) {
		unsigned id;
		asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
		asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g1));
		sm[blockIdx.x] = id;
		t0[blockIdx.x] = g0;
		t1[blockIdx.x] = g1;
	}
}

// work: one kernel of a shape. Each thread copies n float4 elements (at
// offset + its block's region, wrapped by mask) and spins phases x spin
// cycles, in `phases` alternating copy and spin phases.
__global__ void __launch_bounds__(256, 8) work(const float4 *__restrict__ src, float4 *__restrict__ dst,
					    unsigned long long mask, unsigned long long offset, int n, int phases,
					    long long spin)
{
	unsigned long long base = offset + (unsigned long long)blockIdx.x * blockDim.x * n + threadIdx.x;
	int per = (n + phases - 1) / phases;
	for (int p = 0; p < phases; p++) {
		int j0 = p * per, j1 = min(n, j0 + per);
#pragma unroll 4
		for (int j = j0; j < j1; j++) {
			unsigned long long i = (base + (unsigned long long)j * blockDim.x) & mask;
			dst[i] = src[i];
		}
		long long t0 = clock64();
		while (clock64() - t0 < spin) {
		}
	}
}

// ---------------------------------------------------------------- shapes and workloads

// Shape is a kernel of points.go. Grids that points.go writes as multiples of
// the A100's 108 SMs are per-SM multiples here (of this GPU's SM count).
struct Shape {
	const char *name;
	double block_us, bw;
	int grid; // blocks, or blocks per SM when per_sm
	int threads;
	bool per_sm;
};

static const Shape shapes[] = {
	{"yolos", 5, 0.2, 96, 256, false},	  // nos YOLOS-small loop kernel
	{"bert_gemm", 40, 0.3, 216, 128, false},  // BERT inference GEMMs
	{"bert_small", 17, 0.5, 48, 128, false},  // BERT softmax, norms, GELU
	{"resnet_conv", 60, 0.3, 24, 256, true},  // ResNet-50 training convolutions (108*8*3)
	{"resnet_bn", 20, 0.9, 8, 256, true},	  // ResNet-50 element-wise/normalisation (108*8)
	{"berttrain_gemm", 100, 0.4, 16, 256, true}, // BERT training GEMMs (108*8*2)
	{"llama_mv", 30, 0.9, 216, 128, false},	  // Llama-2 decode matrix-vector
};
enum { YOLOS, BERT_GEMM, BERT_SMALL, RESNET_CONV, RESNET_BN, BERTTRAIN_GEMM, LLAMA_MV, NSHAPES };

// Tuned is a shape as sized for this GPU by `plan`.
struct Tuned {
	int grid = 0, threads = 0, n = 0, phases = 1;
	long long spin = 0; // cycles per phase
};

enum Arrival { LOOP, POISSON, STREAM };

struct Workload {
	std::string name;
	Arrival arrival;
	double rate; // POISSON: requests per second
	std::vector<int> seq;
};

static bool workload(const std::string &name, Workload &w)
{
	w.name = name;
	w.rate = 0;
	w.seq.clear();
	if (name == "yolos") { // saturating inference loop: 1000 small kernels
		w.arrival = LOOP;
		w.seq.assign(1000, YOLOS);
	} else if (name == "bert") { // 12 layers, Poisson at half the rate it serves alone
		w.arrival = POISSON;
		w.rate = 0.5 / 4.05e-3;
		for (int l = 0; l < 12; l++) {
			for (int i = 0; i < 4; i++)
				w.seq.push_back(BERT_GEMM);
			for (int i = 0; i < 8; i++)
				w.seq.push_back(BERT_SMALL);
		}
	} else if (name == "resnet") { // training: two iterations queued at all times
		w.arrival = STREAM;
		for (int i = 0; i < 20; i++) {
			w.seq.push_back(RESNET_CONV);
			w.seq.push_back(RESNET_BN);
		}
	} else if (name == "berttrain") {
		w.arrival = STREAM;
		w.seq.assign(20, BERTTRAIN_GEMM);
	} else if (name == "llama") { // a slice of a decode request: 1000 kernels
		w.arrival = LOOP;
		w.seq.assign(1000, LLAMA_MV);
	} else {
		return false;
	}
	return true;
}

// ---------------------------------------------------------------- helpers

static int sm_count()
{
	int dev = 0, sms = 0;
	CK(cudaGetDevice(&dev));
	CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
	if (sms < 1)
		die("the device reports no SMs");
	return sms;
}

static void init_device()
{
	CK(cudaSetDevice(0));
	CK(cudaFree(0)); // creates the context
}

static const unsigned long long kBufElems = 1ull << 23; // float4s: 128 MiB a buffer

struct Buffers {
	float4 *src = nullptr, *dst = nullptr;
	unsigned long long offset = 0;
	void alloc()
	{
		CK(cudaMalloc(&src, kBufElems * sizeof(float4)));
		CK(cudaMalloc(&dst, kBufElems * sizeof(float4)));
		CK(cudaMemset(src, 0, kBufElems * sizeof(float4)));
		CK(cudaMemset(dst, 0, kBufElems * sizeof(float4)));
		CK(cudaDeviceSynchronize());
	}
};

static void launch(const Tuned &t, Buffers &b, cudaStream_t s)
{
	work<<<t.grid, t.threads, 0, s>>>(b.src, b.dst, kBufElems - 1, b.offset, t.n, t.phases, t.spin);
	CK(cudaGetLastError());
	b.offset = (b.offset + (unsigned long long)t.grid * t.threads * t.n) & (kBufElems - 1);
}

// ms_per: GPU time of reps calls of f on stream s, in ms per call
template <class F> static float ms_per(cudaStream_t s, int reps, F f)
{
	cudaEvent_t a, b;
	CK(cudaEventCreate(&a));
	CK(cudaEventCreate(&b));
	CK(cudaEventRecord(a, s));
	for (int i = 0; i < reps; i++)
		f();
	CK(cudaEventRecord(b, s));
	CK(cudaEventSynchronize(b));
	float ms = 0;
	CK(cudaEventElapsedTime(&ms, a, b));
	CK(cudaEventDestroy(a));
	CK(cudaEventDestroy(b));
	return ms / reps;
}

static double measure_cycles_per_us(cudaStream_t s)
{
	sleeper<<<1, 32, 0, s>>>(100000); // warm-up
	CK(cudaGetLastError());
	CK(cudaStreamSynchronize(s));
	float t1 = ms_per(s, 3, [&] { sleeper<<<1, 32, 0, s>>>(1000000); });
	float t2 = ms_per(s, 3, [&] { sleeper<<<1, 32, 0, s>>>(5000000); });
	CK(cudaGetLastError());
	if (t2 <= t1)
		die("clock calibration: a longer spin did not take longer");
	return 4e6 / ((t2 - t1) * 1000.0);
}

// ---------------------------------------------------------------- plan file

struct Plan {
	double cycles_per_us = 0;
	Tuned t[NSHAPES];
};

static void read_plan(const char *path, Plan &p)
{
	FILE *f = fopen(path, "r");
	if (!f) {
		fprintf(stderr, "calibration: cannot read plan %s: %s\n", path, strerror(errno));
		exit(3);
	}
	char line[512];
	int seen = 0;
	while (fgets(line, sizeof line, f)) {
		char name[64];
		Tuned t;
		double c;
		if (sscanf(line, "cycles_per_us %lf", &c) == 1) {
			p.cycles_per_us = c;
		} else if (sscanf(line, "shape %63s %d %d %d %d %lld", name, &t.grid, &t.threads, &t.n, &t.phases,
				  &t.spin) == 6) {
			for (int i = 0; i < NSHAPES; i++)
				if (strcmp(name, shapes[i].name) == 0) {
					p.t[i] = t;
					seen |= 1 << i;
				}
		}
	}
	fclose(f);
	if (p.cycles_per_us <= 0 || seen != (1 << NSHAPES) - 1) {
		fprintf(stderr, "calibration: plan %s is incomplete; run 'calibration plan %s' first\n", path, path);
		exit(3);
	}
}

static int do_plan(const char *path)
{
	init_device();
	int sms = sm_count();
	cudaStream_t s;
	CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	Buffers b;
	b.alloc();
	Plan p;
	p.cycles_per_us = measure_cycles_per_us(s);
	printf("plan sms=%d cycles_per_us=%.1f\n", sms, p.cycles_per_us);
	for (int i = 0; i < NSHAPES; i++) {
		const Shape &sh = shapes[i];
		Tuned &t = p.t[i];
		t.grid = sh.per_sm ? sh.grid * sms : sh.grid;
		t.threads = sh.threads;
		int occ = 0;
		CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, work, t.threads, 0));
		if (occ < 1)
			die("occupancy of the work kernel is 0");
		double waves = std::max(1.0, (double)t.grid / ((double)occ * sms));
		double target_copy_us = sh.bw * sh.block_us * waves;
		t.n = 0;
		if (sh.bw > 0) {
			// copy time per kernel grows linearly with n: fit the slope
			const int n0 = 8, n1 = 40;
			Tuned c = t;
			c.phases = 1;
			c.spin = 0;
			c.n = n0;
			launch(c, b, s);
			CK(cudaStreamSynchronize(s));
			float ta = ms_per(s, 10, [&] { launch(c, b, s); });
			c.n = n1;
			float tb = ms_per(s, 10, [&] { launch(c, b, s); });
			double slope_us = (tb - ta) * 1000.0 / (n1 - n0);
			if (slope_us <= 0) {
				fprintf(stderr, "calibration: plan: %s: copy time did not grow with size; no copy\n", sh.name);
			} else {
				t.n = std::min(4096L, std::max(0L, lround(target_copy_us / slope_us)));
			}
		}
		t.phases = t.n > 0 ? 4 : 1;
		t.spin = llround((1 - sh.bw) * sh.block_us * p.cycles_per_us / t.phases);
		launch(t, b, s);
		CK(cudaStreamSynchronize(s));
		float got = ms_per(s, 20, [&] { launch(t, b, s); });
		printf("shape %s grid=%d threads=%d blocks_per_sm=%d waves=%.2f copy_elems_per_thread=%d "
		       "target_us=%.1f measured_us=%.1f\n",
		       sh.name, t.grid, t.threads, occ, waves, t.n, sh.block_us * waves, got * 1000.0);
	}
	FILE *f = fopen(path, "w");
	if (!f) {
		fprintf(stderr, "calibration: cannot write plan %s: %s\n", path, strerror(errno));
		return 3;
	}
	fprintf(f, "cycles_per_us %.3f\n", p.cycles_per_us);
	for (int i = 0; i < NSHAPES; i++)
		fprintf(f, "shape %s %d %d %d %d %lld\n", shapes[i].name, p.t[i].grid, p.t[i].threads, p.t[i].n,
			p.t[i].phases, p.t[i].spin);
	if (fclose(f) != 0) {
		fprintf(stderr, "calibration: cannot write plan %s\n", path);
		return 3;
	}
	return 0;
}

// ---------------------------------------------------------------- modes

static int do_info()
{
	init_device();
	cudaDeviceProp prop;
	CK(cudaGetDeviceProperties(&prop, 0));
	int drv = 0, rt = 0;
	CK(cudaDriverGetVersion(&drv));
	CK(cudaRuntimeGetVersion(&rt));
	int occ = 0;
	CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, sleeper, 1024, 0));
	std::string name = prop.name;
	std::replace(name.begin(), name.end(), ' ', '_');
	printf("info name=%s sms=%d cc=%d.%d mem_mib=%zu driver=%d runtime=%d sleeper_blocks_per_sm=%d\n",
	       name.c_str(), sm_count(), prop.major, prop.minor, prop.totalGlobalMem >> 20, drv, rt, occ);
	return 0;
}

static int do_tb(const char *plan_path)
{
	Plan p;
	read_plan(plan_path, p);
	init_device();
	int sms = sm_count();
	long long cycles = llround(1000.0 * p.cycles_per_us); // 1 ms
	cudaStream_t s1, s2;
	CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
	CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
	cudaEvent_t a, b1, b2;
	CK(cudaEventCreate(&a));
	CK(cudaEventCreate(&b1));
	CK(cudaEventCreate(&b2));
	const int reps = 10;
	for (int mult = 1; mult <= 2; mult++) {
		int grid = mult * sms;
		double alone = 0, shared = 0;
		for (int r = -2; r < reps; r++) { // two warm-up rounds
			CK(cudaEventRecord(a, s1));
			sleeper<<<grid, 1024, 0, s1>>>(cycles);
			CK(cudaGetLastError());
			CK(cudaEventRecord(b1, s1));
			CK(cudaEventSynchronize(b1));
			float ms = 0;
			CK(cudaEventElapsedTime(&ms, a, b1));
			if (r >= 0)
				alone += ms;

			CK(cudaEventRecord(a, s1));
			CK(cudaStreamWaitEvent(s2, a, 0)); // both start together
			sleeper<<<grid, 1024, 0, s1>>>(cycles);
			CK(cudaGetLastError());
			sleeper<<<grid, 1024, 0, s2>>>(cycles);
			CK(cudaGetLastError());
			CK(cudaEventRecord(b1, s1));
			CK(cudaEventRecord(b2, s2));
			CK(cudaEventSynchronize(b1));
			CK(cudaEventSynchronize(b2));
			float m1 = 0, m2 = 0;
			CK(cudaEventElapsedTime(&m1, a, b1));
			CK(cudaEventElapsedTime(&m2, a, b2));
			if (r >= 0)
				shared += std::max(m1, m2);
		}
		printf("%s grid=%d threads=1024 alone_ms=%.4f shared_ms=%.4f\n", mult == 1 ? "tb_fit" : "tb_full", grid,
		       alone / reps, shared / reps);
	}
	return 0;
}

static int do_smids()
{
	init_device();
	int sms = sm_count(); // under MPS this may already show the client's limit
	int grid = 32 * std::max(sms, 132);
	unsigned *d_sm = nullptr;
	unsigned long long *d_t0 = nullptr, *d_t1 = nullptr;
	CK(cudaMalloc(&d_sm, grid * sizeof(unsigned)));
	CK(cudaMalloc(&d_t0, grid * sizeof(unsigned long long)));
	CK(cudaMalloc(&d_t1, grid * sizeof(unsigned long long)));
	CK(cudaMemset(d_sm, 0xff, grid * sizeof(unsigned)));
	where<<<grid, 128>>>(d_sm, d_t0, d_t1, 40000); // ~20 us a block
	CK(cudaGetLastError());
	CK(cudaDeviceSynchronize());
	std::vector<unsigned> sm(grid);
	std::vector<unsigned long long> t0(grid), t1(grid);
	CK(cudaMemcpy(sm.data(), d_sm, grid * sizeof(unsigned), cudaMemcpyDeviceToHost));
	CK(cudaMemcpy(t0.data(), d_t0, grid * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
	CK(cudaMemcpy(t1.data(), d_t1, grid * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
	std::set<unsigned> ids;
	int missing = 0;
	for (unsigned v : sm) {
		if (v == 0xffffffffu)
			missing++;
		else
			ids.insert(v);
	}
	// the most SMs holding blocks at one instant (at each block's start)
	size_t concurrent = 0;
	for (int b = 0; b < grid; b += 7) { // a sample of instants is enough
		std::set<unsigned> at;
		for (int o = 0; o < grid; o++)
			if (sm[o] != 0xffffffffu && t0[o] <= t0[b] && t0[b] < t1[o])
				at.insert(sm[o]);
		concurrent = std::max(concurrent, at.size());
	}
	const char *atp = getenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE");
	printf("smids sms_attr=%d sms_concurrent=%zu sms_used=%zu max_smid=%u blocks=%d missing=%d atp=%s\n", sms,
	       concurrent, ids.size(), ids.empty() ? 0 : *ids.rbegin(), grid, missing, atp ? atp : "-");
	CK(cudaFree(d_sm));
	CK(cudaFree(d_t0));
	CK(cudaFree(d_t1));
	return 0;
}

using Clock = std::chrono::steady_clock;

static double pct(std::vector<double> v, double q)
{
	if (v.empty())
		return 0;
	std::sort(v.begin(), v.end());
	size_t i = (size_t)std::ceil(q * v.size());
	return v[i > 0 ? i - 1 : 0];
}

static double mean(const std::vector<double> &v)
{
	double s = 0;
	for (double x : v)
		s += x;
	return v.empty() ? 0 : s / v.size();
}

static int do_run(int argc, char **argv)
{
	if (argc != 8) {
		fprintf(stderr, "usage: calibration run PLAN WORKLOAD SYNC_DIR WARM_MS MEASURE_MS TAIL_MS\n");
		return 2;
	}
	Plan p;
	read_plan(argv[2], p);
	Workload w;
	if (!workload(argv[3], w)) {
		fprintf(stderr, "calibration: unknown workload %s\n", argv[3]);
		return 2;
	}
	const std::string sync = argv[4];
	double warm = atof(argv[5]), meas = atof(argv[6]), tail = atof(argv[7]);
	if (warm < 0 || meas <= 0 || tail < 0) {
		fprintf(stderr, "calibration: bad times\n");
		return 2;
	}
	Clock::time_point T0;
	auto rel = [&](Clock::time_point t) { return std::chrono::duration<double, std::milli>(t - T0).count(); };
	auto at = [&](double ms) {
		return T0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::milli>(ms));
	};
	const double w0 = warm, w1 = warm + meas, end = w1 + tail;

	init_device();
	cudaStream_t s;
	CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	Buffers b;
	b.alloc();
	cudaEvent_t ev[4];
	for (auto &e : ev)
		CK(cudaEventCreate(&e));
	auto unit = [&] {
		for (int k : w.seq)
			launch(p.t[k], b, s);
	};
	unit(); // warm-up (module load, first launches)
	CK(cudaStreamSynchronize(s));

	// ready, then wait for the common start
	std::string ready = sync + "/ready." + std::to_string(getpid()), go = sync + "/go";
	FILE *rf = fopen(ready.c_str(), "w");
	if (!rf || fclose(rf) != 0) {
		fprintf(stderr, "calibration: cannot write %s: %s\n", ready.c_str(), strerror(errno));
		return 3;
	}
	double t0_epoch = 0;
	for (int i = 0; i < 60000 && t0_epoch <= 0; i++) {
		if (FILE *g = fopen(go.c_str(), "r")) {
			if (fscanf(g, "%lf", &t0_epoch) != 1)
				t0_epoch = 0;
			fclose(g);
		}
		if (t0_epoch <= 0)
			usleep(1000);
	}
	if (t0_epoch <= 0)
		die("no start signal (SYNC_DIR/go) within 60 s");
	double now_epoch = std::chrono::duration<double, std::milli>(
				   std::chrono::system_clock::now().time_since_epoch())
				   .count();
	T0 = Clock::now() + std::chrono::duration_cast<Clock::duration>(
				    std::chrono::duration<double, std::milli>(t0_epoch - now_epoch));
	double late = rel(Clock::now()); // > 0: the start signal came after T0
	std::this_thread::sleep_until(T0);

	std::vector<double> lat, gpu; // ms per counted unit
	long served = 0, offered = 0;
	if (w.arrival == LOOP || w.arrival == POISSON) {
		std::mt19937_64 rng((unsigned long long)getpid() * 7919 + 17);
		std::exponential_distribution<double> gap(w.arrival == POISSON ? w.rate / 1000.0 : 1.0); // per ms
		double arrival = w.arrival == POISSON ? gap(rng) : 0;
		while (rel(Clock::now()) < end) {
			if (w.arrival == POISSON) {
				if (arrival >= w0 && arrival < w1)
					offered++;
				if (arrival > rel(Clock::now()))
					std::this_thread::sleep_until(at(arrival));
				arrival += gap(rng);
				if (rel(Clock::now()) >= end)
					break;
			}
			Clock::time_point a = Clock::now();
			CK(cudaEventRecord(ev[0], s));
			unit();
			CK(cudaEventRecord(ev[1], s));
			CK(cudaEventSynchronize(ev[1]));
			Clock::time_point z = Clock::now();
			float g = 0;
			CK(cudaEventElapsedTime(&g, ev[0], ev[1]));
			if (rel(a) >= w0 && rel(z) <= w1) {
				lat.push_back(std::chrono::duration<double, std::milli>(z - a).count());
				gpu.push_back(g);
				served++;
			}
		}
		printf("result workload=%s units=%zu mean_ms=%.4f p99_ms=%.4f gpu_mean_ms=%.4f gpu_p99_ms=%.4f", w.name.c_str(),
		       lat.size(), mean(lat), pct(lat, 0.99), mean(gpu), pct(gpu, 0.99));
		if (w.arrival == POISSON)
			printf(" offered=%ld served=%ld", offered, served);
	} else { // STREAM: two units in flight; count completions inside the window
		long i = 0;
		while (rel(Clock::now()) < end) {
			unit();
			CK(cudaEventRecord(ev[i % 2], s));
			if (i > 0) {
				CK(cudaEventSynchronize(ev[(i - 1) % 2]));
				double t = rel(Clock::now());
				if (t >= w0 && t <= w1)
					served++;
			}
			i++;
		}
		CK(cudaStreamSynchronize(s));
		printf("result workload=%s units=%ld units_per_s=%.3f", w.name.c_str(), served, served / (meas / 1000.0));
	}
	printf(" late_ms=%.0f\n", late);
	fflush(stdout);
	for (auto &e : ev)
		CK(cudaEventDestroy(e));
	CK(cudaFree(b.src));
	CK(cudaFree(b.dst));
	CK(cudaStreamDestroy(s));
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, nullptr, _IOLBF, 0);
	if (argc >= 2 && strcmp(argv[1], "info") == 0)
		return do_info();
	if (argc == 3 && strcmp(argv[1], "plan") == 0)
		return do_plan(argv[2]);
	if (argc == 3 && strcmp(argv[1], "tb") == 0)
		return do_tb(argv[2]);
	if (argc >= 2 && strcmp(argv[1], "smids") == 0)
		return do_smids();
	if (argc >= 2 && strcmp(argv[1], "run") == 0)
		return do_run(argc, argv);
	fprintf(stderr, "usage: calibration info | plan PLAN | tb PLAN | smids | run PLAN WORKLOAD SYNC_DIR WARM_MS MEASURE_MS TAIL_MS\n");
	return 2;
}
