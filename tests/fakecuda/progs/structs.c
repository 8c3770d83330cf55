/*
 * add3(std::array<float*, 3ul>, int): the buffers a kernel touches passed inside a by-value
 * struct, all three pieces of one allocation (as a caching allocator hands them out).
 * Usage: structs
 * Prints the three pieces' offsets in floats and `launches add3=1`.
 */
#include "progcommon.h"

#define N 256

int main(void)
{
    struct tally t = {0};
    CUcontext ctx;
    CUmodule mod;
    CUfunction add3;
    CHECK(cuInit(0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
    CHECK(cuCtxSetCurrent(ctx));
    CHECK(cuModuleLoadData(&mod, prog_image));
    CHECK(cuModuleGetFunction(&add3, mod, "_Z4add3St5arrayIPfLm3EEi"));
    static float host[3 * N], out[N];
    for (int i = 0; i < N; i++) {
        host[N + i] = (float)i;          /* a */
        host[2 * N + i] = 0.5f * (float)i; /* b */
    }
    CUdeviceptr block;
    CHECK(cuMemAlloc_v2(&block, sizeof host));
    tally_alloc(&t, sizeof host);
    CHECK(cuMemcpyHtoD_v2(block, host, sizeof host));
    CUdeviceptr p[3] = {block, block + N * sizeof(float), block + 2 * N * sizeof(float)};
    int n = N;
    void *args[] = {p, &n};
    CHECK(cuLaunchKernel(add3, N / 64, 1, 1, 64, 1, 1, 0, NULL, args, NULL));
    tally_launch(&t, "add3", 1);
    CHECK(cuMemcpyDtoH_v2(out, block, sizeof out));
    for (int i = 0; i < N; i++)
        if (out[i] != 1.5f * (float)i)
            FAIL("out[%d] = %g", i, (double)out[i]);
    printf("pieces at 0 %d %d\n", N, 2 * N);
    tally_print(&t);
    return 0;
}
