/*
 * A program that ends its contexts and goes on in new ones. Each round loads the
 * module, runs vecAdd(a, b, c, n) over N floats (the last round with a[7] = +inf and
 * b[7] = -inf, so that it leaves NaN at c[7]), checks c and frees its buffers; then
 *   reset:  cuDevicePrimaryCtxReset_v2 ends the primary context, retained again next round;
 *   unseen: so does the stand-in's private reset, which no tool sees (as cudaDeviceReset's);
 *   create: the round's own context (cuCtxCreate_v4) is destroyed;
 *   two:    a context made at the start (cuCtxCreate_v4) lives on beside the primary one:
 *           each round runs in both (odd rounds the primary first, even rounds the other),
 *           then the primary context is reset by the private call, as in `unseen`.
 * Usage: ctxcycle reset|unseen|create|two ROUNDS
 * Prints `round R ok` for each round (in `two`, `round R ok` for each of its launches).
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
    const char *how = argc == 3 ? argv[1] : "";
    if (strcmp(how, "reset") && strcmp(how, "unseen") && strcmp(how, "create") &&
        strcmp(how, "two"))
        FAIL("usage: ctxcycle reset|unseen|create|two ROUNDS");
    int rounds = atoi(argv[2]);
    CHECK(cuInit(0));
    CUcontext other = NULL;
    if (strcmp(how, "two") == 0)
        CHECK(cuCtxCreate_v4(&other, NULL, 0, 0));
    for (int r = 1; r <= rounds; r++) {
        CUcontext ctx;
        bool last = r == rounds;
        if (strcmp(how, "create") == 0) {
            CHECK(cuCtxCreate_v4(&ctx, NULL, 0, 0));
            one_round(r, last);
            CHECK(cuCtxDestroy_v2(ctx));
            continue;
        }
        CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
        if (other) {
            CUcontext order[2] = {r % 2 ? ctx : other, r % 2 ? other : ctx};
            for (int k = 0; k < 2; k++) {
                CHECK(cuCtxSetCurrent(order[k]));
                one_round(r, last && k == 1);
            }
        } else {
            CHECK(cuCtxSetCurrent(ctx));
            one_round(r, last);
        }
        if (strcmp(how, "reset") == 0)
            CHECK(cuDevicePrimaryCtxReset_v2(0));
        else
            CHECK(fcPrivatePrimaryCtxReset(0));
    }
    if (other)
        CHECK(cuCtxDestroy_v2(other));
    return 0;
}
