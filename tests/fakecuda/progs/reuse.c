/*
 * One block of device memory used as two element types within a step, as a caching
 * allocator hands a freed fp16 tensor's block to an fp32 one (or a graph's pool reuses
 * it within a replay): each step fills w with 2048 fp16 ones (fillHalf), then writes it
 * as 1024 floats, w = x + x (vecAdd). x[INDEX] is 2e36, so w[INDEX] is 4e36: finite as a
 * float, but its upper half, read as an fp16 element, is an fp16 Inf/NaN pattern. No
 * launch ever leaves a NaN or Inf. At the start of each step x is written from the host
 * (a synchronous copy). With GRAPH 1 the two launches are captured once into a graph on
 * a stream of their own, replayed each step after x's copy on that stream is waited for.
 * Usage: reuse STEPS GRAPH INDEX
 * Prints `nonfinite K` (w's non-finite floats at the end: 0) and the launch tally.
 */
#include "progcommon.h"

#include <math.h>

#define N 1024

int main(int argc, char **argv)
{
    if (argc < 4)
        FAIL("usage: reuse STEPS GRAPH INDEX");
    int steps = atoi(argv[1]), graph = atoi(argv[2]), index = atoi(argv[3]);
    if (index < 0 || index >= N)
        FAIL("INDEX must be below %d", N);
    struct tally t = {0};
    CUfunction add, fill;
    CUmodule mod = prog_start();
    CHECK(cuModuleGetFunction(&add, mod, "_Z6vecAddPKfS0_Pfi"));
    CHECK(cuModuleGetFunction(&fill, mod, "_Z8fillHalfP6__halfti"));
    static float x[N], w[N];
    prog_floats(x, N, 0.5f, 0.25f);
    x[index] = 2e36f;
    CUdeviceptr dx, dw;
    CHECK(cuMemAlloc_v2(&dx, sizeof x));
    CHECK(cuMemAlloc_v2(&dw, sizeof w));
    tally_alloc(&t, 2 * sizeof x);
    int n = N, halves = 2 * N;
    unsigned short one = 0x3C00; /* 1.0 in fp16 */
    void *first[] = {&dw, &one, &halves};
    void *second[] = {&dx, &dx, &dw, &n};
    CUstream stream = NULL;
    CUgraphExec exec = NULL;
    if (graph) {
        CUgraph g;
        CHECK(cuStreamCreate(&stream, 0));
        CHECK(cuStreamBeginCapture_v2(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
        CHECK(cuLaunchKernel(fill, 2 * N / 128, 1, 1, 128, 1, 1, 0, stream, first, NULL));
        CHECK(cuLaunchKernel(add, N / 128, 1, 1, 128, 1, 1, 0, stream, second, NULL));
        CHECK(cuStreamEndCapture(stream, &g));
        CHECK(cuGraphInstantiateWithFlags(&exec, g, 0));
    }
    for (int k = 1; k <= steps; k++) {
        if (graph) {
            CHECK(cuMemcpyHtoDAsync_v2(dx, x, sizeof x, stream));
            CHECK(cuStreamSynchronize(stream));
            CHECK(cuGraphLaunch(exec, stream));
            continue;
        }
        CHECK(cuMemcpyHtoD_v2(dx, x, sizeof x));
        CHECK(cuLaunchKernel(fill, 2 * N / 128, 1, 1, 128, 1, 1, 0, NULL, first, NULL));
        CHECK(cuLaunchKernel(add, N / 128, 1, 1, 128, 1, 1, 0, NULL, second, NULL));
    }
    if (stream)
        CHECK(cuStreamSynchronize(stream));
    CHECK(cuMemcpyDtoH_v2(w, dw, sizeof w));
    int bad = 0;
    for (int j = 0; j < N; j++)
        bad += !isfinite(w[j]);
    printf("nonfinite %d\n", bad);
    tally_launch(&t, "fillHalf", (unsigned long)steps);
    tally_launch(&t, "vecAdd", (unsigned long)steps);
    tally_print(&t);
    return 0;
}
