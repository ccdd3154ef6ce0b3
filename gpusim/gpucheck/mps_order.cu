// mps_order.cu — which MPS client gets the SM room that frees up: one
// process (A) launches a kernel of several full waves, another (B) a small
// kernel DELAY_US later; B's completion time says whether B's blocks start as
// A's first wave retires (room shared between clients) or only once A's
// pending blocks are all placed (queue order across clients). Run by
// mps_order.sh; prints the median, p10 and p90 of the completion times.
//   mps_order GRID THREADS BLOCK_US START_NS DELAY_US REPS PERIOD_MS
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <vector>

__global__ void spin(unsigned long long ns)
{
	unsigned long long t0, t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
	do {
		asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	} while (t - t0 < ns);
}

static long long now_ns()
{
	timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(int argc, char **argv)
{
	if (argc != 8) {
		fprintf(stderr, "usage: mps_order GRID THREADS BLOCK_US START_NS DELAY_US REPS PERIOD_MS\n");
		return 2;
	}
	int grid = atoi(argv[1]), threads = atoi(argv[2]);
	if (grid == 0) { // the SM count, for the script
		int sms = 0;
		cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
		printf("%d\n", sms);
		return 0;
	}
	unsigned long long block_ns = (unsigned long long)(atof(argv[3]) * 1000);
	long long start = atoll(argv[4]), delay = (long long)(atof(argv[5]) * 1000);
	int reps = atoi(argv[6]);
	long long period = (long long)(atof(argv[7]) * 1e6);
	spin<<<1, 32>>>(1000);
	if (cudaDeviceSynchronize() != cudaSuccess) {
		fprintf(stderr, "mps_order: warm-up failed: %s\n", cudaGetErrorString(cudaGetLastError()));
		return 3;
	}
	std::vector<double> done;
	for (int i = 0; i < reps; i++) {
		long long t0 = start + i * period, at = t0 + delay;
		while (now_ns() < at) {
		}
		spin<<<grid, threads>>>(block_ns);
		if (cudaDeviceSynchronize() != cudaSuccess) {
			fprintf(stderr, "mps_order: kernel failed\n");
			return 3;
		}
		done.push_back((now_ns() - t0) / 1000.0);
	}
	std::sort(done.begin(), done.end());
	int n = (int)done.size();
	printf("grid=%d threads=%d block_us=%.0f delay_us=%.0f done_us median=%.0f p10=%.0f p90=%.0f\n", grid, threads,
	       block_ns / 1000.0, delay / 1000.0, done[n / 2], done[n / 10], done[n * 9 / 10]);
	return 0;
}
