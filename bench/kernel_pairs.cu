// A program's kernels with cudump's kernel after each, launched one by one on one
// stream as the shim launches them (not a graph): microseconds a pair, between two
// events. The program's kernel is an elementwise pass from one buffer to another
// (0.8 to 6.4 MiB, ResNet-18's activations at batch 8). In the first table the
// kernels are as they are, and the CPU's launches may be what bounds the loop; in
// the second each also waits until it has run 20 us, so that the GPU bounds it and
// the "+us" column is what the GPU spends on what comes after each kernel. After
// each kernel, one of:
//   nothing; an empty kernel (what a second kernel costs by being there);
//   cudump's kernel scanning both buffers (shim/gpu/tools.cu, as the shim does);
//   and each of the last two launched with programmatic stream serialization
//   (Hopper's programmatic dependent launch: its blocks may start as the kernel
//   before it ends; cudump's wait in `griddepcontrol.wait` for it to be done, as
//   shim/toollaunch.h launches it, and the empty kernel reads nothing).
//
// build: nvcc -O3 -arch=sm_90 -I shim -o kernel_pairs bench/kernel_pairs.cu
// usage: ./kernel_pairs   (docs/performance.md has its output on an H200)
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

#include <cuda_runtime.h>

#include "gpu/tools.cu"
#include "toolblocks.h"

#define CHECK(x)                                                             \
    do {                                                                     \
        cudaError_t rc_ = (x);                                               \
        if (rc_ != cudaSuccess) {                                            \
            std::fprintf(stderr, "%s failed: %s\n", #x, cudaGetErrorString(rc_)); \
            return 1;                                                        \
        }                                                                    \
    } while (0)

__global__ void model(const float4 *in, float4 *out, size_t n, unsigned long long spin_ns)
{
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float4 v = in[i];
        out[i] = make_float4(fmaxf(v.x, 0.f), fmaxf(v.y, 0.f), fmaxf(v.z, 0.f), fmaxf(v.w, 0.f));
    }
    do
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    while (t - t0 < spin_ns);
}

__global__ void empty_kernel(int) {}

enum After { NOTHING, EMPTY, EMPTY_PDL, TOOLS, TOOLS_PDL };
static const char *after_name[] = {"nothing", "an empty kernel", "an empty kernel, PDL",
                                   "cudump's kernel", "cudump's kernel, PDL"};

enum { PAIRS = 2000, RUNS = 5, BUFFERS = 8 };

int main()
{
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("device: %s\n", prop.name);
    const double mib[] = {0.8, 1.6, 3.2, 6.4};
    const size_t most = 7 << 20;
    std::vector<float *> buf(BUFFERS);
    for (auto &b : buf) {
        CHECK(cudaMalloc(&b, most));
        CHECK(cudaMemset(b, 0x11, most));   // finite floats: nothing found
    }
    unsigned long long *acc;
    CHECK(cudaMalloc(&acc, 1 << 16));
    CHECK(cudaMemset(acc, 0, 1 << 16));
    unsigned long long *host;
    CHECK(cudaHostAlloc(&host, 1 << 16, cudaHostAllocMapped));
    std::memset(host, 0, 1 << 16);
    unsigned long long *results;
    CHECK(cudaHostGetDevicePointer(&results, host, 0));
    cudaStream_t stream;
    CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cudaEvent_t start, stop;
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventCreate(&stop));
    cudaLaunchAttribute pdl;
    pdl.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    pdl.val.programmaticStreamSerializationAllowed = 1;

    for (unsigned long long spin_ns : {0ull, 20000ull}) {
    std::printf("the program's kernels %s\n", spin_ns ? "last 20 us or more (the GPU bounds)" : "as they are");
    std::printf("%-26s %10s %10s\n", "after each kernel", "us/pair", "+us");
    double alone = 0;
    for (int after = NOTHING; after <= TOOLS_PDL; after++) {
        std::vector<double> runs;
        for (int run = 0; run <= RUNS; run++) {   // run 0 warms up
            CHECK(cudaEventRecord(start, stream));
            for (int p = 0; p < PAIRS; p++) {
                const size_t bytes = ((size_t)(mib[p % 4] * 1048576) + 15) & ~(size_t)15;
                float *in = buf[p % BUFFERS], *out = buf[(p + 1) % BUFFERS];
                model<<<264, 256, 0, stream>>>((const float4 *)in, (float4 *)out, bytes / 16, spin_ns);
                cudaLaunchConfig_t cfg = {};
                cfg.blockDim = dim3(after >= TOOLS ? TOOL_THREADS : 32);
                cfg.stream = stream;
                if (after == EMPTY_PDL || after == TOOLS_PDL) {
                    cfg.attrs = &pdl;
                    cfg.numAttrs = 1;
                }
                if (after == EMPTY || after == EMPTY_PDL) {
                    cfg.gridDim = dim3(1);
                    CHECK(cudaLaunchKernelEx(&cfg, empty_kernel, 0));
                } else if (after >= TOOLS) {
                    struct tool_jobs jobs;
                    std::memset(&jobs, 0, sizeof jobs);
                    unsigned grid = 0;
                    float *scanned[2] = {in, out};
                    for (int i = 0; i < 2; i++) {
                        struct tool_job &j = jobs.job[i];
                        j.src = (unsigned long long)scanned[i];
                        j.width = j.pitch = bytes;
                        j.height = 1;
                        j.result = (unsigned long long)(results + 8 * i);
                        j.acc = (unsigned long long)(acc + 8 * i);
                        j.tag = 1;
                        j.mode = 1;   // scan float32
                        j.blocks = tool_job_blocks(bytes, false, 1056);
                        grid += j.blocks;
                    }
                    jobs.njobs = 2;
                    cfg.gridDim = dim3(grid);
                    CHECK(cudaLaunchKernelEx(&cfg, cudump_tools, jobs));
                }
            }
            CHECK(cudaEventRecord(stop, stream));
            CHECK(cudaEventSynchronize(stop));
            float ms;
            CHECK(cudaEventElapsedTime(&ms, start, stop));
            if (run)
                runs.push_back(ms * 1e3 / PAIRS);
        }
        std::sort(runs.begin(), runs.end());
        const double us = runs[runs.size() / 2];
        if (after == NOTHING)
            alone = us;
        std::printf("%-26s %10.2f %10.2f\n", after_name[after], us, us - alone);
    }
    }
    return 0;
}
