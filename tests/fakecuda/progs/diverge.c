/*
 * Many launches of three kernels, all the same from run to run unless the
 * environment says otherwise: the test program of `cudump bisect`.
 *
 *   diverge [ROUNDS]                 (default 8)
 *
 * Each round r (from 1) launches, on N floats:
 *   fill<int>(tag, r, N)             a per-round tag
 *   vecAdd(a, b, c, n)               c = a + b
 *   scale(c, r, N)                   c *= r
 *   vecAdd(acc, c, acc, N)           acc += c
 * and prints the sum of acc at the end.
 *
 * DIVERGE_AT=K makes round K's first vecAdd cover n = N - DIVERGE_SHORT elements
 * (default 3): the last ones keep the previous round's value, and every
 * launch after that which reads them differs; the first divergent launch is
 * round K's first vecAdd (launch 4K - 2, occurrence 2K - 1), arg 2 after.
 * DIVERGE_ONCE=FILE makes DIVERGE_AT apply only while FILE does not exist,
 * and creates it: the next run does not diverge (a program that is not
 * deterministic, deterministically).
 * DIVERGE_NOISE=1 makes each fill write a value that changes from run to run
 * (the process id): fill's buffer differs between identical runs, and no other
 * launch reads it (nondeterminism that changes nothing else).
 * DIVERGE_EXTRA=E launches fill E more times before round 1: every launch
 * after them has a number E higher (a program that does not run the same
 * launches each time).
 * DIVERGE_SIZE=S makes N S instead of 1000: the same launches, on buffers of
 * another size.
 * DIVERGE_JITTER=K makes round K's scale multiply by r * (1 + 1e-6): from there on
 * c and acc differ from an undisturbed run by about a millionth of their values (a
 * difference in rounding, as a reduction in another order makes), at every launch.
 */
#include "progcommon.h"

#include <unistd.h>


static int env_int(const char *name, int fallback)
{
    const char *text = getenv(name);
    return text && *text ? atoi(text) : fallback;
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 8;
    int at = env_int("DIVERGE_AT", 0);
    int shorter = env_int("DIVERGE_SHORT", 3);
    int noise = env_int("DIVERGE_NOISE", 0) ? (int)getpid() : 0;
    int extra = env_int("DIVERGE_EXTRA", 0);
    int jitter = env_int("DIVERGE_JITTER", 0);
    int N = env_int("DIVERGE_SIZE", 1000);
    if (N < 8 || N > (1 << 24)) {
        fprintf(stderr, "DIVERGE_SIZE=%d: expected 8 to %d\n", N, 1 << 24);
        return 2;
    }
    const char *once = getenv("DIVERGE_ONCE");
    if (once && *once) {
        FILE *mark = fopen(once, "r");
        if (mark) {
            fclose(mark);
            at = 0;
        } else if ((mark = fopen(once, "w")) != NULL) {
            fclose(mark);
        }
    }
    struct tally t = {0};
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction vec_add, scale, fill;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuCtxCreate_v4(&ctx, NULL, 0, dev));
    CHECK(cuModuleLoadData(&mod, prog_image));
    CHECK(cuModuleGetFunction(&vec_add, mod, "_Z6vecAddPKfS0_Pfi"));
    CHECK(cuModuleGetFunction(&scale, mod, "scale"));
    CHECK(cuModuleGetFunction(&fill, mod, "_Z4fillIiEvPT_S0_i"));

    size_t bytes = (size_t)N * sizeof(float);
    float *a = malloc(bytes), *b = malloc(bytes), *acc = malloc(bytes);
    if (!a || !b || !acc)
        return 2;
    for (int i = 0; i < N; i++) {
        a[i] = (float)i;
        b[i] = (float)(2 * i + 1);
    }
    CUdeviceptr da, db, dc, dacc, dtag;
    CHECK(cuMemAlloc_v2(&da, bytes));
    CHECK(cuMemAlloc_v2(&db, bytes));
    CHECK(cuMemAlloc_v2(&dc, bytes));
    CHECK(cuMemAlloc_v2(&dacc, bytes));
    CHECK(cuMemAlloc_v2(&dtag, N * sizeof(int)));
    for (int i = 0; i < 5; i++)
        tally_alloc(&t, bytes);
    CHECK(cuMemcpyHtoD_v2(da, a, bytes));
    CHECK(cuMemcpyHtoD_v2(db, b, bytes));
    CHECK(cuMemsetD8_v2(dc, 0, bytes));
    CHECK(cuMemsetD8_v2(dacc, 0, bytes));

    int n_all = N;
    unsigned int blocks = (N + 255) / 256;
    for (int e = 0; e < extra; e++) {
        int tag = -1;
        void *pf[] = {&dtag, &tag, &n_all};
        CHECK(cuLaunchKernel(fill, blocks, 1, 1, 256, 1, 1, 0, NULL, pf, NULL));
    }
    for (int r = 1; r <= rounds; r++) {
        int n = r == at ? N - shorter : N;
        float s = r == jitter ? (float)r * 1.000001f : (float)r;
        int tag = r + noise;
        void *pf[] = {&dtag, &tag, &n_all};
        void *p1[] = {&da, &db, &dc, &n};
        void *ps[] = {&dc, &s, &n_all};
        void *p2[] = {&dacc, &dc, &dacc, &n_all};
        CHECK(cuLaunchKernel(fill, blocks, 1, 1, 256, 1, 1, 0, NULL, pf, NULL));
        CHECK(cuLaunchKernel(vec_add, blocks, 1, 1, 256, 1, 1, 0, NULL, p1, NULL));
        CHECK(cuLaunchKernel(scale, blocks, 1, 1, 256, 1, 1, 0, NULL, ps, NULL));
        CHECK(cuLaunchKernel(vec_add, blocks, 1, 1, 256, 1, 1, 0, NULL, p2, NULL));
    }
    tally_launch(&t, "fill", (unsigned long)(rounds + extra));
    tally_launch(&t, "vecAdd", 2 * (unsigned long)rounds);
    tally_launch(&t, "scale", (unsigned long)rounds);
    CHECK(cuCtxSynchronize());
    CHECK(cuMemcpyDtoH_v2(acc, dacc, bytes));
    double sum = 0;
    for (int i = 0; i < N; i++)
        sum += acc[i];
    printf("sum %.1f\n", sum);
    CHECK(cuMemFree_v2(da));
    CHECK(cuMemFree_v2(db));
    CHECK(cuMemFree_v2(dc));
    CHECK(cuMemFree_v2(dacc));
    CHECK(cuMemFree_v2(dtag));
    CHECK(cuModuleUnload(mod));
    free(a);
    free(b);
    free(acc);
    tally_print(&t);
    return 0;
}
