/*
 * A program linked with -lcuda that uses the classic module API: the case an
 * LD_PRELOAD library sees by exporting the driver's names.
 */
#include "progcommon.h"

#define N 1000
#define ROWS 4

int main(void)
{
    struct tally t = {0};
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction vec_add, scale;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuCtxCreate_v4(&ctx, NULL, 0, dev));
    CHECK(cuModuleLoadData(&mod, prog_image));
    CHECK(cuModuleGetFunction(&vec_add, mod, "_Z6vecAddPKfS0_Pfi"));
    CHECK(cuModuleGetFunction(&scale, mod, "scale"));

    static float a[N], b[N], c[N], grid2d[ROWS][N], back2d[ROWS][N];
    for (int i = 0; i < N; i++) {
        a[i] = (float)i;
        b[i] = (float)(2 * i + 1);
        for (int r = 0; r < ROWS; r++)
            grid2d[r][i] = (float)(r * N + i);
    }
    CUdeviceptr da, db, dc, dp;
    size_t pitch;
    CHECK(cuMemAlloc_v2(&da, sizeof a));
    CHECK(cuMemAlloc_v2(&db, sizeof b));
    CHECK(cuMemAlloc_v2(&dc, sizeof c));
    CHECK(cuMemAllocPitch_v2(&dp, &pitch, sizeof grid2d[0], ROWS, 4));
    tally_alloc(&t, sizeof a);
    tally_alloc(&t, sizeof b);
    tally_alloc(&t, sizeof c);
    tally_alloc(&t, pitch * ROWS);
    printf("pitched %zu x %d pitch %zu\n", sizeof grid2d[0], ROWS, pitch);

    CHECK(cuMemcpyHtoD_v2(da, a, sizeof a));
    CHECK(cuMemcpyHtoD_v2(db, b, sizeof b));
    CUDA_MEMCPY2D up = {.srcMemoryType = CU_MEMORYTYPE_HOST, .srcHost = grid2d,
                        .srcPitch = sizeof grid2d[0], .dstMemoryType = CU_MEMORYTYPE_DEVICE,
                        .dstDevice = dp, .dstPitch = pitch, .WidthInBytes = sizeof grid2d[0],
                        .Height = ROWS};
    CHECK(cuMemcpy2D_v2(&up));

    int n = N;
    unsigned int blocks = (N + 255) / 256;
    /* c = a + b; c = c + b; c = c + a  ->  2a + 2b */
    void *p1[] = {&da, &db, &dc, &n};
    void *p2[] = {&dc, &db, &dc, &n};
    void *p3[] = {&dc, &da, &dc, &n};
    CHECK(cuLaunchKernel(vec_add, blocks, 1, 1, 256, 1, 1, 0, NULL, p1, NULL));
    CHECK(cuLaunchKernel(vec_add, blocks, 1, 1, 256, 1, 1, 0, NULL, p2, NULL));
    CHECK(cuLaunchKernel(vec_add, blocks, 1, 1, 256, 1, 1, 0, NULL, p3, NULL));
    tally_launch(&t, "vecAdd", 3);
    /* c *= 0.5; row 1 of the pitched buffer (an interior pointer) *= 3 */
    float half = 0.5f, three = 3.0f;
    CUdeviceptr row1 = dp + pitch;
    void *s1[] = {&dc, &half, &n};
    void *s2[] = {&row1, &three, &n};
    CHECK(cuLaunchKernel(scale, blocks, 1, 1, 256, 1, 1, 0, NULL, s1, NULL));
    CHECK(cuLaunchKernel(scale, blocks, 1, 1, 256, 1, 1, 0, NULL, s2, NULL));
    tally_launch(&t, "scale", 2);
    CHECK(cuCtxSynchronize());

    CHECK(cuMemcpyDtoH_v2(c, dc, sizeof c));
    CUDA_MEMCPY2D down = {.srcMemoryType = CU_MEMORYTYPE_DEVICE, .srcDevice = dp,
                          .srcPitch = pitch, .dstMemoryType = CU_MEMORYTYPE_HOST,
                          .dstHost = back2d, .dstPitch = sizeof back2d[0],
                          .WidthInBytes = sizeof back2d[0], .Height = ROWS};
    CHECK(cuMemcpy2D_v2(&down));
    for (int i = 0; i < N; i++) {
        if (c[i] != a[i] + b[i])
            FAIL("c[%d] = %g, expected %g", i, c[i], a[i] + b[i]);
        for (int r = 0; r < ROWS; r++) {
            float want = grid2d[r][i] * (r == 1 ? 3.0f : 1.0f);
            if (back2d[r][i] != want)
                FAIL("pitched[%d][%d] = %g, expected %g", r, i, back2d[r][i], want);
        }
    }
    CUdeviceptr base;
    size_t size;
    CHECK(cuMemGetAddressRange_v2(&base, &size, row1 + 12));
    if (base != dp || size != pitch * ROWS)
        FAIL("address range of an interior pointer is wrong");
    printf("verified vecAdd and scale on %d elements\n", N);

    CHECK(cuMemFree_v2(da));
    CHECK(cuMemFree_v2(db));
    CHECK(cuMemFree_v2(dc));
    CHECK(cuMemFree_v2(dp));
    CHECK(cuModuleUnload(mod));
    tally_print(&t);
    return 0;
}
