/*
 * A program that sizes itself by the device's memory, as frameworks do, while
 * its launches' buffers are taken: y = x * x (square) over N floats, LAUNCHES
 * times, each followed by a synchronize; then, by MODE:
 *   alloc   allocates all the memory that was free before the first launch
 *           (cuMemGetInfo then) and prints `allocated B`;
 *   info    prints `kept B`, what memory pools keep unused (the stand-in's
 *           fc_pools_kept), then `free unchanged` if cuMemGetInfo reports what
 *           it did before the first launch, else `free B less`;
 *   capture captures a launch on a stream of its own (global mode), asking
 *           cuMemGetInfo meanwhile, and prints `capture ok` (or `capture
 *           invalidated`), then `free unchanged` or `free B less` as info does;
 *   idle    waits until no memory pool keeps memory unused (the stand-in's
 *           fc_pools_kept) and prints `pools kept 0`; fails after 60 s.
 * With `low` after LAUNCHES, the program first takes all the device's memory
 * but 4 MiB (a device nearly full, as a framework's cache leaves it).
 * Usage: roomy MODE LAUNCHES [low]
 * Prints, last, `launches square=LAUNCHES`.
 */
#include "progcommon.h"

#include <time.h>

#define N (64 * 1024)

/* `free unchanged` if cuMemGetInfo reports `before` free, else `free B less`. */
static void print_free_change(size_t before)
{
    size_t now, total;
    CHECK(cuMemGetInfo_v2(&now, &total));
    if (now == before)
        printf("free unchanged\n");
    else
        printf("free %lld less\n", (long long)before - (long long)now);
}

int main(int argc, char **argv)
{
    if (argc != 3 && !(argc == 4 && strcmp(argv[3], "low") == 0))
        FAIL("usage: roomy alloc|info|capture|idle LAUNCHES [low]");
    const char *mode = argv[1];
    int launches = atoi(argv[2]);
    if (launches < 1)
        FAIL("LAUNCHES at least 1");
    CUfunction square;
    CUmodule mod = prog_start();
    CHECK(cuModuleGetFunction(&square, mod, "_Z6squarePKfPfi"));
    static float host[N];
    prog_floats(host, N, 0.5f, 1.0f / N);
    CUdeviceptr x, y;
    CHECK(cuMemAlloc_v2(&x, sizeof host));
    CHECK(cuMemAlloc_v2(&y, sizeof host));
    CHECK(cuMemcpyHtoD_v2(x, host, sizeof host));
    size_t free_before, free_after, total;
    CHECK(cuMemGetInfo_v2(&free_before, &total));
    if (argc == 4 && free_before > ((size_t)4 << 20)) {
        CUdeviceptr ballast;
        CHECK(cuMemAlloc_v2(&ballast, free_before - ((size_t)4 << 20)));
        CHECK(cuMemGetInfo_v2(&free_before, &total));
    }
    int n = N;
    void *params[] = {&x, &y, &n};
    for (int k = 0; k < launches; k++) {
        CHECK(cuLaunchKernel(square, N / 128, 1, 1, 128, 1, 1, 0, NULL, params, NULL));
        CHECK(cuCtxSynchronize());
    }
    if (strcmp(mode, "alloc") == 0) {
        CUdeviceptr all;
        CHECK(cuMemAlloc_v2(&all, free_before));
        printf("allocated %zu\n", free_before);
        CHECK(cuMemFree_v2(all));
    } else if (strcmp(mode, "info") == 0) {
        printf("kept %zu\n", fc_pools_kept());
        print_free_change(free_before);
    } else if (strcmp(mode, "capture") == 0) {
        CUstream s;
        CUgraph graph = NULL;
        CHECK(cuStreamCreate(&s, 0));
        CHECK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
        CHECK(cuLaunchKernel(square, N / 128, 1, 1, 128, 1, 1, 0, s, params, NULL));
        CUresult asked = cuMemGetInfo_v2(&free_after, &total);
        CUresult end = cuStreamEndCapture(s, &graph);
        printf("capture %s\n", asked == CUDA_SUCCESS && end == CUDA_SUCCESS ? "ok" : "invalidated");
        print_free_change(free_before);
    } else if (strcmp(mode, "idle") == 0) {
        const struct timespec tick = {0, 10 * 1000 * 1000};
        for (int i = 0; fc_pools_kept() != 0; i++) {
            if (i == 6000)
                FAIL("pools still keep %zu bytes after 60 s", fc_pools_kept());
            nanosleep(&tick, NULL);
        }
        printf("pools kept 0\n");
    } else {
        FAIL("unknown mode %s", mode);
    }
    printf("launches square=%d\n", launches);
    return 0;
}
