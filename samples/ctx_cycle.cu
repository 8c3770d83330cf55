// A program that ends its CUDA contexts and goes on in new ones, as test
// harnesses and long-lived services do: a debugger must follow it into each
// new context, and nothing of the old one may outlive it.
//
// usage: ctx_cycle reset|create ROUNDS
//   Each round allocates 256 floats, runs fill<<<1,256>>>(g, r) (g[i] = r + i/4;
//   the last round also writes a NaN at index 7), copies the buffer back, checks
//   it and prints `round R ok`. Between rounds
//     reset:  cudaDeviceReset() ends the primary context; the runtime makes it
//             again at the next round's first call;
//     create: each round runs in a context of its own, made with cuCtxCreate and
//             ended with cuCtxDestroy (the runtime uses the context current on
//             its thread).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#define SAMPLES_DRIVER_API
#include "check.h"

enum { N = 256 };

__global__ void fill(float* g, int round, int poison)
{
    int i = threadIdx.x;
    g[i] = round + i * 0.25f;
    if (poison && i == 7)
        g[i] = nanf("");
}

static void one_round(int r, int last)
{
    float* g = nullptr;
    CHECK_RT(cudaMalloc(&g, N * sizeof(float)));
    fill<<<1, N>>>(g, r, last);
    CHECK_LAUNCH();
    float host[N];
    CHECK_RT(cudaMemcpy(host, g, sizeof host, cudaMemcpyDeviceToHost));
    for (int i = 0; i < N; i++) {
        float want = r + i * 0.25f;
        FAIL_IF(last && i == 7 ? !std::isnan(host[i]) : host[i] != want,
                "round %d: g[%d] = %g", r, i, host[i]);
    }
    CHECK_RT(cudaFree(g));
    std::printf("round %d ok\n", r);
    std::fflush(stdout);
}

int main(int argc, char** argv)
{
    FAIL_IF(argc != 3 || (std::strcmp(argv[1], "reset") && std::strcmp(argv[1], "create")),
            "usage: ctx_cycle reset|create ROUNDS");
    bool create = !std::strcmp(argv[1], "create");
    int rounds = std::atoi(argv[2]);
    FAIL_IF(rounds < 1, "ROUNDS must be at least 1");
    CHECK_CU(cuInit(0));
    CUdevice dev;
    CHECK_CU(cuDeviceGet(&dev, 0));
    for (int r = 1; r <= rounds; r++) {
        CUcontext ctx = nullptr;
        if (create)
            CHECK_CU(cuCtxCreate(&ctx, nullptr, 0, dev));
        one_round(r, r == rounds);
        if (create)
            CHECK_CU(cuCtxDestroy(ctx));
        else
            CHECK_RT(cudaDeviceReset());
    }
    return 0;
}
