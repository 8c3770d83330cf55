/*
 * A program that ends its contexts and goes on in new ones. Each round loads the
 * module, runs vecAdd(a, b, c, n) over N floats (the last round with a[7] = +inf and
 * b[7] = -inf, so that it leaves NaN at c[7]), checks c and frees its buffers; then
 *   reset:  cuDevicePrimaryCtxReset_v2 ends the primary context, retained again next round;
 *   unseen: so does the stand-in's private reset, which no tool sees (as cudaDeviceReset's);
 *   create: the round's own context (cuCtxCreate_v4) is destroyed.
 * Usage: ctxcycle reset|unseen|create ROUNDS
 * Prints `round R ok` for each round.
 */
#include "progcommon.h"

#include <math.h>

#define N 1024

static void one_round(int r, bool last)
{
    CUmodule mod;
    CUfunction add;
    CHECK(cuModuleLoadData(&mod, prog_image));
    CHECK(cuModuleGetFunction(&add, mod, "_Z6vecAddPKfS0_Pfi"));
    static float a[N], b[N], c[N];
    prog_floats(a, N, (float)r, 1.0f);
    prog_floats(b, N, 1.0f, 0.0f);
    if (last) {
        a[7] = INFINITY;
        b[7] = -INFINITY;
    }
    CUdeviceptr da, db, dc;
    CHECK(cuMemAlloc_v2(&da, sizeof a));
    CHECK(cuMemAlloc_v2(&db, sizeof b));
    CHECK(cuMemAlloc_v2(&dc, sizeof c));
    CHECK(cuMemcpyHtoD_v2(da, a, sizeof a));
    CHECK(cuMemcpyHtoD_v2(db, b, sizeof b));
    int n = N;
    void *args[] = {&da, &db, &dc, &n};
    CHECK(cuLaunchKernel(add, N / 128, 1, 1, 128, 1, 1, 0, NULL, args, NULL));
    CHECK(cuMemcpyDtoH_v2(c, dc, sizeof c));
    for (int i = 0; i < N; i++) {
        bool nan_here = last && i == 7;
        if (nan_here ? !isnan(c[i]) : c[i] != a[i] + b[i])
            FAIL("round %d: c[%d] = %g", r, i, (double)c[i]);
    }
    CHECK(cuMemFree_v2(da));
    CHECK(cuMemFree_v2(db));
    CHECK(cuMemFree_v2(dc));
    CHECK(cuModuleUnload(mod));
    printf("round %d ok\n", r);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    if (argc != 3 ||
        (strcmp(argv[1], "reset") && strcmp(argv[1], "unseen") && strcmp(argv[1], "create")))
        FAIL("usage: ctxcycle reset|unseen|create ROUNDS");
    bool create = strcmp(argv[1], "create") == 0, unseen = strcmp(argv[1], "unseen") == 0;
    int rounds = atoi(argv[2]);
    CHECK(cuInit(0));
    for (int r = 1; r <= rounds; r++) {
        CUcontext ctx;
        if (create) {
            CHECK(cuCtxCreate_v4(&ctx, NULL, 0, 0));
        } else {
            CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
            CHECK(cuCtxSetCurrent(ctx));
        }
        one_round(r, r == rounds);
        if (create)
            CHECK(cuCtxDestroy_v2(ctx));
        else if (unseen)
            CHECK(fcPrivatePrimaryCtxReset(0));
        else
            CHECK(cuDevicePrimaryCtxReset_v2(0));
    }
    return 0;
}
