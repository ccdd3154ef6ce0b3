// confine.cu — libxcuda's confinement (limits confine_pct) on a real GPU: a kernel of
// 4 blocks per SM, each recording the SM it ran on and spinning, launched through the
// CUDA runtime (which reaches libxcuda's launch wrapper through cuGetProcAddress) after
// 64 warm-up launches (a confined process takes the slow path from its 32nd launch on).
// Prints how many distinct SMs the blocks used, whether every block's write was visible
// after cudaStreamSynchronize on the launching stream (the green stream is ordered with
// it by events), and the kernel's time from events on that stream.
// Build: nvcc -O2 -o confine confine.cu; run under LD_PRELOAD=libxcuda.so with a control
// block (tests/gpu/confine.sh).
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>
#include <vector>

__global__ void spin(unsigned *smids, long long cycles)
{
    unsigned sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    long long t0 = clock64();
    while (clock64() - t0 < cycles) {
    }
    if (threadIdx.x == 0)
        smids[blockIdx.x] = sm;
}

__global__ void nop() {}

int main()
{
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    cudaStream_t s;
    cudaStreamCreate(&s);
    for (int i = 0; i < 64; i++)
        nop<<<1, 32, 0, s>>>();
    int blocks = 4 * sms;
    unsigned *d = nullptr;
    cudaMalloc(&d, blocks * sizeof(unsigned));
    cudaMemsetAsync(d, 0xff, blocks * sizeof(unsigned), s);
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    cudaEventRecord(a, s);
    spin<<<blocks, 1024, 0, s>>>(d, 2000000);
    cudaEventRecord(b, s);
    cudaStreamSynchronize(s);
    // Read before anything else touches the device: the stream's synchronisation alone
    // must have covered the kernel.
    std::vector<unsigned> h(blocks);
    cudaMemcpyAsync(h.data(), d, blocks * sizeof(unsigned), cudaMemcpyDeviceToHost, s);
    cudaStreamSynchronize(s);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    std::vector<int> seen(1024, 0);
    int distinct = 0, missing = 0;
    for (unsigned v : h) {
        if (v == 0xffffffffu) {
            missing++;
        } else if (v < 1024 && !seen[v]++) {
            distinct++;
        }
    }
    cudaError_t e = cudaGetLastError();
    printf("sms=%d distinct_sms=%d missing=%d kernel_ms=%.3f error=%s\n", sms, distinct, missing, ms,
           cudaGetErrorString(e));
    return e == cudaSuccess ? 0 : 1;
}
