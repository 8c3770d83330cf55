/*
 * vecAdd(a, b, c, n) launched LAUNCHES times; before each launch listed in POISON...,
 * a[INDEX] = +inf and b[INDEX] = -inf, so that launch leaves NaN at c[INDEX]; the launch
 * after it writes c whole again and clears it. Usage: nans LAUNCHES INDEX [POISON...]
 * Prints `launches vecAdd=LAUNCHES`.
 */
#include "progcommon.h"

#include <math.h>

#define N 1024

int main(int argc, char **argv)
{
    if (argc < 3)
        FAIL("usage: nans LAUNCHES INDEX [POISON...]");
    int launches = atoi(argv[1]), index = atoi(argv[2]);
    if (index < 0 || index >= N)
        FAIL("INDEX must be below %d", N);
    struct tally t = {0};
    CUfunction add;
    CUmodule mod = prog_start();
    CHECK(cuModuleGetFunction(&add, mod, "_Z6vecAddPKfS0_Pfi"));
    static float a[N], b[N];
    prog_floats(a, N, 0.0f, 1.0f);
    prog_floats(b, N, 1.0f, 0.0f);
    CUdeviceptr da, db, dc;
    CHECK(cuMemAlloc_v2(&da, sizeof a));
    CHECK(cuMemAlloc_v2(&db, sizeof b));
    CHECK(cuMemAlloc_v2(&dc, sizeof a));
    CHECK(cuMemsetD8_v2(dc, 0, sizeof a));
    tally_alloc(&t, 3 * sizeof a);
    int n = N;
    void *args[] = {&da, &db, &dc, &n};
    for (int k = 1; k <= launches; k++) {
        bool poison = false;
        for (int p = 3; p < argc; p++)
            poison = poison || atoi(argv[p]) == k;
        a[index] = poison ? INFINITY : (float)index;
        b[index] = poison ? -INFINITY : 1.0f;
        CHECK(cuMemcpyHtoD_v2(da, a, sizeof a));
        CHECK(cuMemcpyHtoD_v2(db, b, sizeof b));
        CHECK(cuLaunchKernel(add, N / 128, 1, 1, 128, 1, 1, 0, NULL, args, NULL));
    }
    tally_launch(&t, "vecAdd", (unsigned long)launches);
    tally_print(&t);
    return 0;
}
