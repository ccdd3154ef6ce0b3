// timing.cu — a probe for gpusim/gpucheck/timing.sh: launches N spin
// kernels (each block spins for a fixed number of SM clock cycles) and prints
// the GPU time per kernel measured with events, or, in request mode, the GPU
// time of single-kernel requests issued every PERIOD_MS.
//
//   timing steps N GRID THREADS CYCLES
//   timing requests N GRID THREADS CYCLES PERIOD_MS
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>

__global__ void spin(long long cycles)
{
	long long start = clock64();
	while (clock64() - start < cycles) {
	}
}

static void check(cudaError_t e, const char *what)
{
	if (e != cudaSuccess) {
		fprintf(stderr, "timing: %s: %s\n", what, cudaGetErrorString(e));
		exit(3);
	}
}

int main(int argc, char **argv)
{
	if (argc < 6) {
		fprintf(stderr, "usage: timing steps|requests N GRID THREADS CYCLES [PERIOD_MS]\n");
		return 2;
	}
	bool req = strcmp(argv[1], "requests") == 0;
	int n = atoi(argv[2]), grid = atoi(argv[3]), threads = atoi(argv[4]);
	long long cycles = atoll(argv[5]);
	int period = argc > 6 ? atoi(argv[6]) : 20;
	if (n < 1 || grid < 1 || threads < 1 || threads > 1024 || cycles < 1 || (req && argc < 7)) {
		fprintf(stderr, "timing: bad arguments\n");
		return 2;
	}
	cudaStream_t s;
	check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream");
	cudaEvent_t a, b;
	check(cudaEventCreate(&a), "event");
	check(cudaEventCreate(&b), "event");
	spin<<<grid, threads, 0, s>>>(1000);
	check(cudaStreamSynchronize(s), "warm-up");
	if (!req) {
		check(cudaEventRecord(a, s), "record");
		for (int i = 0; i < n; i++)
			spin<<<grid, threads, 0, s>>>(cycles);
		check(cudaEventRecord(b, s), "record");
		check(cudaEventSynchronize(b), "sync");
		float ms;
		check(cudaEventElapsedTime(&ms, a, b), "elapsed");
		printf("{\"ms_per_kernel\":%.4f}\n", ms / n);
		return 0;
	}
	std::vector<float> v;
	for (int i = 0; i < n; i++) {
		check(cudaEventRecord(a, s), "record");
		spin<<<grid, threads, 0, s>>>(cycles);
		check(cudaEventRecord(b, s), "record");
		check(cudaEventSynchronize(b), "sync");
		float ms;
		check(cudaEventElapsedTime(&ms, a, b), "elapsed");
		v.push_back(ms);
		usleep(period * 1000 + (i * 7919 % 1000) * period); // spread the phase
	}
	std::sort(v.begin(), v.end());
	printf("{\"p50_ms\":%.4f,\"p90_ms\":%.4f}\n", v[v.size() / 2], v[v.size() * 9 / 10]);
	return 0;
}
