// GPU time of one launch of cudump's kernel (shim/gpu/tools.cu, as shipped in
// shim/tools_ptx.h) over job lists shaped like a small model's launches: how
// many blocks each job gets decides how long the kernel's closing atomics and
// fences keep the program's next kernel waiting behind it.
//
// Each case is launched 200 times into a CUDA graph, and the graph replayed
// five times between two events: microseconds of GPU per launch, without the
// CPU's launch cost. Blocks per job: 4, 8 or 16 units (16 bytes) a thread for
// every job, and the shim's own choice (shim/toolblocks.h, the same code).
//
// build: nvcc -O2 -arch=sm_90 -I shim -o tools_kernel bench/tools_kernel.cu -lcuda
// usage: ./tools_kernel       (docs/performance.md has its output on an H200)
#include <cstdio>
#include <cstring>
#include <vector>

#include <cuda.h>

#include "toolblocks.h"
#include "tooljob.h"
#include "tools_ptx.h"

#define CHECK(x)                                                          \
    do {                                                                  \
        CUresult rc_ = (x);                                               \
        if (rc_ != CUDA_SUCCESS) {                                        \
            std::fprintf(stderr, "%s failed: %d\n", #x, (int)rc_);       \
            return 1;                                                     \
        }                                                                 \
    } while (0)

enum { SCAN_F32 = 1, DIGEST_F32 = 0 | (1 << 8), MAX_BLOCKS = 1056, LAUNCHES = 200, REPLAYS = 5 };

// units_per_thread 0: the shim's choice (shim/toolblocks.h); else that many units a thread.
static unsigned blocks_for(unsigned long long bytes, unsigned mode, unsigned units_per_thread)
{
    if (!units_per_thread)
        return tool_job_blocks(bytes, (mode & 0xff) == 0, MAX_BLOCKS);
    const unsigned long long units = (bytes + 15) / 16, per = 256ull * units_per_thread;
    const unsigned long long blocks = (units + per - 1) / per;
    return blocks < 1 ? 1 : blocks > MAX_BLOCKS ? MAX_BLOCKS : (unsigned)blocks;
}

struct Case {
    const char *name;
    std::vector<double> mib;
};

int main()
{
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction fn;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));
    CHECK(cuModuleLoadData(&mod, tools_ptx));
    CHECK(cuModuleGetFunction(&fn, mod, "cudump_tools"));
    char name[256];
    CHECK(cuDeviceGetName(name, sizeof name, dev));
    std::printf("device: %s\n", name);

    const size_t bytes = 256ull << 20;
    CUdeviceptr buf, acc;
    CHECK(cuMemAlloc(&buf, bytes));
    CHECK(cuMemsetD8(buf, 0x11, bytes));          // finite floats: nothing found
    CHECK(cuMemAlloc(&acc, 1 << 20));
    CHECK(cuMemsetD8(acc, 0, 1 << 20));           // accumulators start zeroed
    void *host;
    CUdeviceptr results;
    CHECK(cuMemHostAlloc(&host, 1 << 20, CU_MEMHOSTALLOC_DEVICEMAP));
    std::memset(host, 0, 1 << 20);
    CHECK(cuMemHostGetDevicePointer(&results, host, 0));
    CUstream stream;
    CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));

    const Case cases[] = {{"3 jobs: 0.8, 0.8, 0.002 MiB", {0.8, 0.8, 0.002}},
                          {"3 jobs: 6.4, 6.4, 0.15 MiB", {6.4, 6.4, 0.15}},
                          {"8 jobs: 3.2 MiB x4 and small", {3.2, 3.2, 0.6, 3.2, 0.001, 0.001, 0.001, 3.2}},
                          {"4 jobs: 25.7 MiB x3, 0.04", {25.7, 0.04, 25.7, 25.7}}};
    std::printf("%-7s %-30s %-7s %6s %10s %8s\n", "mode", "jobs", "blocks", "grid", "us/launch", "GB/s");
    for (unsigned mode : {(unsigned)SCAN_F32, (unsigned)DIGEST_F32}) {
        for (const Case &c : cases) {
            for (unsigned upt : {4u, 8u, 16u, 0u}) {
                struct tool_jobs jobs;
                std::memset(&jobs, 0, sizeof jobs);
                unsigned grid = 0;
                size_t at = 0;
                double total = 0;
                for (size_t i = 0; i < c.mib.size(); i++) {
                    const unsigned long long n = ((unsigned long long)(c.mib[i] * 1048576) + 15) & ~15ull;
                    jobs.job[i] = {};
                    jobs.job[i].src = buf + at;
                    jobs.job[i].width = jobs.job[i].pitch = n;
                    jobs.job[i].height = 1;
                    jobs.job[i].result = results + i * 64;
                    jobs.job[i].acc = acc + i * 64;
                    jobs.job[i].tag = 1;
                    jobs.job[i].mode = mode;
                    jobs.job[i].blocks = blocks_for(n, mode, upt);
                    grid += jobs.job[i].blocks;
                    at += (n + 4095) & ~4095ull;
                    total += (double)n;
                }
                jobs.njobs = (unsigned)c.mib.size();
                void *params[] = {&jobs};
                CUgraph graph;
                CUgraphExec exec;
                CHECK(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
                for (int i = 0; i < LAUNCHES; i++)
                    CHECK(cuLaunchKernel(fn, grid, 1, 1, TOOL_THREADS, 1, 1, 0, stream, params, nullptr));
                CHECK(cuStreamEndCapture(stream, &graph));
                CHECK(cuGraphInstantiate(&exec, graph, 0));
                CHECK(cuGraphLaunch(exec, stream));   // warm-up
                CHECK(cuStreamSynchronize(stream));
                CUevent start, end;
                CHECK(cuEventCreate(&start, 0));
                CHECK(cuEventCreate(&end, 0));
                CHECK(cuEventRecord(start, stream));
                for (int r = 0; r < REPLAYS; r++)
                    CHECK(cuGraphLaunch(exec, stream));
                CHECK(cuEventRecord(end, stream));
                CHECK(cuEventSynchronize(end));
                float ms;
                CHECK(cuEventElapsedTime(&ms, start, end));
                const double us = ms * 1e3 / (LAUNCHES * REPLAYS);
                char blocks[16];
                std::snprintf(blocks, sizeof blocks, upt ? "%u/thr" : "shim", upt);
                std::printf("%-7s %-30s %-7s %6u %10.2f %8.0f\n", mode == SCAN_F32 ? "scan" : "digest",
                            c.name, blocks, grid, us, total / us / 1e3);
                CHECK(cuEventDestroy(start));
                CHECK(cuEventDestroy(end));
                CHECK(cuGraphExecDestroy(exec));
                CHECK(cuGraphDestroy(graph));
            }
        }
    }
    return 0;
}
