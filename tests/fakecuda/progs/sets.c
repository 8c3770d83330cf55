/*
 * One kernel over many sets of buffers, round after round, as a model runs one GEMM kernel
 * over each layer's weights in every forward: vecAdd(a[s], b[s], c[s], n) for each of SETS
 * sets, ROUNDS times. Usage: sets SETS ROUNDS. Prints `launches vecAdd=SETS*ROUNDS`.
 */
#include "progcommon.h"

#define N 256

int main(int argc, char **argv)
{
    if (argc != 3)
        FAIL("usage: sets SETS ROUNDS");
    int sets = atoi(argv[1]), rounds = atoi(argv[2]);
    if (sets <= 0 || sets > 4096 || rounds <= 0)
        FAIL("SETS must be 1-4096 and ROUNDS positive");
    struct tally t = {0};
    CUfunction add;
    CUmodule mod = prog_start();
    CHECK(cuModuleGetFunction(&add, mod, "_Z6vecAddPKfS0_Pfi"));
    static float ones[N];
    prog_floats(ones, N, 1.0f, 0.0f);
    CUdeviceptr *bufs = calloc((size_t)sets * 3, sizeof *bufs);
    if (!bufs)
        FAIL("out of memory");
    for (int i = 0; i < 3 * sets; i++) {
        CHECK(cuMemAlloc_v2(&bufs[i], sizeof ones));
        CHECK(cuMemcpyHtoD_v2(bufs[i], ones, sizeof ones));
    }
    tally_alloc(&t, (size_t)sets * 3 * sizeof ones);
    int n = N;
    for (int r = 0; r < rounds; r++)
        for (int s = 0; s < sets; s++) {
            void *args[] = {&bufs[3 * s], &bufs[3 * s + 1], &bufs[3 * s + 2], &n};
            CHECK(cuLaunchKernel(add, N / 128, 1, 1, 128, 1, 1, 0, NULL, args, NULL));
        }
    CHECK(cuCtxSynchronize());
    free(bufs);
    tally_launch(&t, "vecAdd", (unsigned long)sets * (unsigned long)rounds);
    tally_print(&t);
    return 0;
}
