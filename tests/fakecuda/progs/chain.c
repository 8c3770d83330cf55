/*
 * Two kernels, one after the other, STEPS times: square(x, y) then vecAdd(y, b, z). Before
 * each step listed in OVERFLOW..., x[INDEX] = 1e20, whose square overflows to +inf: square
 * makes the Inf from finite inputs (it produces it), and vecAdd carries it on into z (it
 * propagates it, from its arg 0). The step after puts x[INDEX] back, and both buffers are
 * finite again. A step given as hK instead has the host copy +inf into y[INDEX] between
 * the two launches of step K: vecAdd then carries on what no launch made.
 * Usage: chain STEPS INDEX [OVERFLOW | hSTEP...]
 * Prints `launches square=STEPS vecAdd=STEPS`.
 */
#include "progcommon.h"

#include <math.h>

#define N 1024

int main(int argc, char **argv)
{
    if (argc < 3)
        FAIL("usage: chain STEPS INDEX [OVERFLOW | hSTEP...]");
    int steps = atoi(argv[1]), index = atoi(argv[2]);
    if (index < 0 || index >= N)
        FAIL("INDEX must be below %d", N);
    struct tally t = {0};
    CUcontext ctx;
    CUmodule mod;
    CUfunction square, add;
    CHECK(cuInit(0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
    CHECK(cuCtxSetCurrent(ctx));
    CHECK(cuModuleLoadData(&mod, prog_image));
    CHECK(cuModuleGetFunction(&square, mod, "_Z6squarePKfPfi"));
    CHECK(cuModuleGetFunction(&add, mod, "_Z6vecAddPKfS0_Pfi"));
    static float x[N], b[N];
    for (int i = 0; i < N; i++) {
        x[i] = 2.0f;
        b[i] = 1.0f;
    }
    CUdeviceptr dx, db, dy, dz;
    CHECK(cuMemAlloc_v2(&dx, sizeof x));
    CHECK(cuMemAlloc_v2(&db, sizeof b));
    CHECK(cuMemAlloc_v2(&dy, sizeof x));
    CHECK(cuMemAlloc_v2(&dz, sizeof x));
    CHECK(cuMemsetD8_v2(dy, 0, sizeof x));
    CHECK(cuMemsetD8_v2(dz, 0, sizeof x));
    CHECK(cuMemcpyHtoD_v2(db, b, sizeof b));
    tally_alloc(&t, 4 * sizeof x);
    int n = N;
    void *square_args[] = {&dx, &dy, &n};
    void *add_args[] = {&dy, &db, &dz, &n};
    for (int k = 1; k <= steps; k++) {
        bool overflow = false, host = false;
        for (int p = 3; p < argc; p++) {
            if (argv[p][0] == 'h')
                host = host || atoi(argv[p] + 1) == k;
            else
                overflow = overflow || atoi(argv[p]) == k;
        }
        x[index] = overflow ? 1e20f : 2.0f;
        CHECK(cuMemcpyHtoD_v2(dx, x, sizeof x));
        CHECK(cuLaunchKernel(square, N / 128, 1, 1, 128, 1, 1, 0, NULL, square_args, NULL));
        if (host) {
            float inf = INFINITY;
            CHECK(cuMemcpyHtoD_v2(dy + (CUdeviceptr)index * sizeof inf, &inf, sizeof inf));
        }
        CHECK(cuLaunchKernel(add, N / 128, 1, 1, 128, 1, 1, 0, NULL, add_args, NULL));
    }
    tally_launch(&t, "square", (unsigned long)steps);
    tally_launch(&t, "vecAdd", (unsigned long)steps);
    tally_print(&t);
    return 0;
}
