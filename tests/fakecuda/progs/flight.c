/*
 * Good launches, then (depending on the mode) a kernel that writes through a bad pointer:
 * what the flight recorder must tell of a program that fails on the GPU.
 * Usage: flight MODE [GOOD]
 *   ok       GOOD vecAdd launches (default 3) on a stream, cuCtxSynchronize, exit 0
 *   fault    GOOD vecAdd launches, poke(0xdead0000, 7), vecAdd again, cuCtxSynchronize
 *            (CUDA_ERROR_ILLEGAL_ADDRESS), exit 1
 *   abort    GOOD vecAdd launches, poke(0xdead0000, 7), abort()
 *   capture  scale captured on a stream (the capture must succeed), the graph launched,
 *            vecAdd, cuCtxSynchronize, exit 0
 * Prints `sync N` with what cuCtxSynchronize returned.
 */
#include "progcommon.h"

#define N 256
#define BAD_POINTER 0xdead0000ull

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 3)
        FAIL("usage: %s ok|fault|abort|capture [GOOD]", argv[0]);
    const char *mode = argv[1];
    int good = argc == 3 ? atoi(argv[2]) : 3;
    CUfunction vec_add, poke, scale;
    CUstream stream;
    CUmodule mod = prog_start();
    CHECK(cuModuleGetFunction(&vec_add, mod, "_Z6vecAddPKfS0_Pfi"));
    CHECK(cuModuleGetFunction(&poke, mod, "_Z4pokePii"));
    CHECK(cuModuleGetFunction(&scale, mod, "scale"));
    CHECK(cuStreamCreate(&stream, 0));
    CUdeviceptr a, b, c;
    CHECK(cuMemAlloc_v2(&a, N * sizeof(float)));
    CHECK(cuMemAlloc_v2(&b, N * sizeof(float)));
    CHECK(cuMemAlloc_v2(&c, N * sizeof(float)));
    int n = N;
    void *vec_args[] = {&a, &b, &c, &n};
    for (int i = 0; i < good; i++)
        CHECK(cuLaunchKernel(vec_add, 1, 1, 1, N, 1, 1, 0, stream, vec_args, NULL));

    if (strcmp(mode, "capture") == 0) {
        float s = 2.0f;
        void *scale_args[] = {&c, &s, &n};
        CUgraph graph;
        CUgraphExec exec;
        CHECK(cuStreamBeginCapture_v2(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
        CHECK(cuLaunchKernel(scale, 1, 1, 1, N, 1, 1, 0, stream, scale_args, NULL));
        CHECK(cuStreamEndCapture(stream, &graph));
        CHECK(cuGraphInstantiateWithFlags(&exec, graph, 0));
        CHECK(cuGraphLaunch(exec, stream));
        CHECK(cuLaunchKernel(vec_add, 1, 1, 1, N, 1, 1, 0, stream, vec_args, NULL));
    } else if (strcmp(mode, "fault") == 0 || strcmp(mode, "abort") == 0) {
        CUdeviceptr bad = BAD_POINTER;
        int value = 7;
        void *poke_args[] = {&bad, &value};
        CHECK(cuLaunchKernel(poke, 1, 1, 1, 32, 1, 1, 0, stream, poke_args, NULL));
        if (strcmp(mode, "abort") == 0) {
            printf("aborting\n");
            fflush(stdout);
            abort();
        }
        /* The context is lost: this launch is refused, as on a GPU. */
        CUresult again = cuLaunchKernel(vec_add, 1, 1, 1, N, 1, 1, 0, stream, vec_args, NULL);
        printf("launch after the fault %d\n", (int)again);
    } else if (strcmp(mode, "ok") != 0) {
        FAIL("unknown mode %s", mode);
    }
    CUresult rc = cuCtxSynchronize();
    printf("sync %d\n", (int)rc);
    fflush(stdout);
    return rc == CUDA_SUCCESS ? 0 : 1;
}
