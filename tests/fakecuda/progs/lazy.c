/*
 * A NaN made by one kernel, then the first get of another kernel, which the real driver's
 * lazy loading makes wait for the context (the stand-in does with FAKECUDA_LAZY_LOAD=1):
 * vecAdd leaves NaN at c[INDEX], then square is got through cuModuleGetFunction (or
 * through cuKernelGetFunction from a library loaded before vecAdd: `kernel`) and launched
 * over c.
 * Usage: lazy INDEX [module|kernel]. Prints `launches vecAdd=1 square=1`.
 */
#include "progcommon.h"

#include <math.h>

#define N 1024

int main(int argc, char **argv)
{
    if (argc < 2)
        FAIL("usage: lazy INDEX [module|kernel]");
    int index = atoi(argv[1]);
    bool by_kernel = argc > 2 && strcmp(argv[2], "kernel") == 0;
    if (index < 0 || index >= N)
        FAIL("INDEX must be below %d", N);
    struct tally t = {0};
    CUfunction add, square;
    CUmodule mod = prog_start();
    CHECK(cuModuleGetFunction(&add, mod, "_Z6vecAddPKfS0_Pfi"));
    static float a[N], b[N];
    prog_floats(a, N, 0.0f, 1.0f);
    prog_floats(b, N, 1.0f, 0.0f);
    a[index] = INFINITY;
    b[index] = -INFINITY;
    CUdeviceptr da, db, dc, dd;
    CHECK(cuMemAlloc_v2(&da, sizeof a));
    CHECK(cuMemAlloc_v2(&db, sizeof b));
    CHECK(cuMemAlloc_v2(&dc, sizeof a));
    CHECK(cuMemAlloc_v2(&dd, sizeof a));
    tally_alloc(&t, 4 * sizeof a);
    CHECK(cuMemcpyHtoD_v2(da, a, sizeof a));
    CHECK(cuMemcpyHtoD_v2(db, b, sizeof b));
    CUlibrary lib;
    CUkernel k;
    if (by_kernel) { /* loaded before: only the get comes after the NaN */
        CHECK(cuLibraryLoadData(&lib, prog_image, NULL, NULL, 0, NULL, NULL, 0));
        CHECK(cuLibraryGetKernel(&k, lib, "_Z6squarePKfPfi"));
    }
    int n = N;
    void *add_args[] = {&da, &db, &dc, &n};
    CHECK(cuLaunchKernel(add, N / 128, 1, 1, 128, 1, 1, 0, NULL, add_args, NULL));
    tally_launch(&t, "vecAdd", 1);
    if (by_kernel) {
        CHECK(cuKernelGetFunction(&square, k));
    } else {
        CHECK(cuModuleGetFunction(&square, mod, "_Z6squarePKfPfi"));
    }
    void *square_args[] = {&dc, &dd, &n};
    CHECK(cuLaunchKernel(square, N / 128, 1, 1, 128, 1, 1, 0, NULL, square_args, NULL));
    tally_launch(&t, "square", 1);
    CHECK(cuCtxSynchronize());
    tally_print(&t);
    return 0;
}
