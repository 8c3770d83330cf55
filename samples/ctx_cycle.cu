// A program that ends its CUDA contexts and goes on in new ones, as test
// harnesses and long-lived services do: a debugger must follow it into each
// new context, and nothing of the old one may outlive it.
//
// usage: ctx_cycle reset|create|two ROUNDS
//   Each round allocates 256 floats, runs fill<<<1,256>>>(g, r) (g[i] = r + i/4;
//   the last round also writes a NaN at index 7), copies the buffer back, checks
//   it and prints `round R ok`. Between rounds
//     reset:  cudaDeviceReset() ends the primary context; the runtime makes it
//             again at the next round's first call;
//     create: each round runs in a context of its own, made with cuCtxCreate and
//             ended with cuCtxDestroy (the runtime uses the context current on
//             its thread);
//     two:    a context made with cuCtxCreate at the start lives on beside the
//             primary one: each round runs in both (odd rounds the primary one
//             first, even rounds the other, each printing its line; the NaN is
//             the last launch's), then cudaDeviceReset() ends the primary one.
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
    const char* how = argc == 3 ? argv[1] : "";
    bool create = !std::strcmp(how, "create"), two = !std::strcmp(how, "two");
    FAIL_IF(!create && !two && std::strcmp(how, "reset"), "usage: ctx_cycle reset|create|two ROUNDS");
    int rounds = std::atoi(argv[2]);
    FAIL_IF(rounds < 1, "ROUNDS must be at least 1");
    CHECK_CU(cuInit(0));
    CUdevice dev;
    CHECK_CU(cuDeviceGet(&dev, 0));
    CUcontext other = nullptr;
    if (two)
        CHECK_CU(cuCtxCreate(&other, nullptr, 0, dev));
    for (int r = 1; r <= rounds; r++) {
        bool last = r == rounds;
        if (create) {
            CUcontext ctx = nullptr;
            CHECK_CU(cuCtxCreate(&ctx, nullptr, 0, dev));
            one_round(r, last);
            CHECK_CU(cuCtxDestroy(ctx));
            continue;
        }
        if (two) {
            CUcontext primary = nullptr;
            CHECK_CU(cuDevicePrimaryCtxRetain(&primary, dev));
            CUcontext order[2] = {r % 2 ? primary : other, r % 2 ? other : primary};
            for (int k = 0; k < 2; k++) {
                CHECK_CU(cuCtxSetCurrent(order[k]));
                one_round(r, last && k == 1);
            }
            CHECK_CU(cuCtxSetCurrent(primary));
            CHECK_RT(cudaDeviceReset());
            CHECK_CU(cuDevicePrimaryCtxRelease(dev));   // a reset does not release
            continue;
        }
        one_round(r, last);
        CHECK_RT(cudaDeviceReset());
    }
    if (other)
        CHECK_CU(cuCtxDestroy(other));
    return 0;
}
