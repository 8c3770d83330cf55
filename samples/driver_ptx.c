/* Driver-API sample linked with -lcuda: loads PTX with cuModuleLoadData,
 * allocates with cuMemAlloc and cuMemAllocPitch and launches with
 * cuLaunchKernel, as the ZED SDK in the seed talk does.
 *
 * usage: driver_ptx [PTX_FILE]   (default: driver_kernels.ptx beside the binary)
 * Prints `launches vecAdd=3 scale2d=2` and exits 0 when every result is right. */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#define N 4096
#define VECADD_LAUNCHES 3
#define IMG_W 300
#define IMG_H 77
#define SCALE_LAUNCHES 2

/* The kernels have C++ linkage, so the module knows them by mangled name. */
static const char VECADD_NAME[] = "_Z6vecAddPKfS0_Pfi";
static const char SCALE2D_NAME[] = "_Z7scale2dPfmiif";

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    FAIL_IF(!f, "cannot open %s", path);
    FAIL_IF(fseek(f, 0, SEEK_END) != 0, "cannot seek %s", path);
    long size = ftell(f);
    FAIL_IF(size <= 0, "%s is empty", path);
    rewind(f);
    /* cuModuleLoadData takes PTX as a NUL-terminated string. */
    char *text = malloc((size_t)size + 1);
    FAIL_IF(!text, "out of memory");
    FAIL_IF(fread(text, 1, (size_t)size, f) != (size_t)size, "cannot read %s", path);
    text[size] = '\0';
    fclose(f);
    return text;
}

static char *default_ptx_path(const char *argv0)
{
    const char *slash = strrchr(argv0, '/');
    size_t dir_len = slash ? (size_t)(slash - argv0) + 1 : 0;
    const char leaf[] = "driver_kernels.ptx";
    char *path = malloc(dir_len + sizeof leaf);
    FAIL_IF(!path, "out of memory");
    memcpy(path, argv0, dir_len);
    memcpy(path + dir_len, leaf, sizeof leaf);
    return path;
}

static void run_vecadd(CUfunction fn, int *launches)
{
    static float a[N], b[N], c[N];
    for (int i = 0; i < N; i++) {
        a[i] = (float)i;
        b[i] = (float)(2 * i + 1);
    }
    CUdeviceptr da, db, dc;
    CHECK_CU(cuMemAlloc(&da, sizeof a));
    CHECK_CU(cuMemAlloc(&db, sizeof b));
    CHECK_CU(cuMemAlloc(&dc, sizeof c));
    CHECK_CU(cuMemcpyHtoD(da, a, sizeof a));
    CHECK_CU(cuMemcpyHtoD(db, b, sizeof b));
    int n = N;
    /* c = a + b, then twice c = c + b: c ends as a + 3b. */
    for (int k = 0; k < VECADD_LAUNCHES; k++) {
        CUdeviceptr lhs = k == 0 ? da : dc;
        void *params[] = {&lhs, &db, &dc, &n};
        CHECK_CU(cuLaunchKernel(fn, (N + 255) / 256, 1, 1, 256, 1, 1, 0, NULL, params, NULL));
        (*launches)++;
    }
    CHECK_CU(cuCtxSynchronize());
    CHECK_CU(cuMemcpyDtoH(c, dc, sizeof c));
    for (int i = 0; i < N; i++)
        FAIL_IF(c[i] != a[i] + 3.0f * b[i], "vecAdd: c[%d] = %g, want %g", i, c[i],
                a[i] + 3.0f * b[i]);
    CHECK_CU(cuMemFree(da));
    CHECK_CU(cuMemFree(db));
    CHECK_CU(cuMemFree(dc));
}

static void run_scale2d(CUfunction fn, int *launches)
{
    static float img[IMG_H][IMG_W];
    for (int y = 0; y < IMG_H; y++)
        for (int x = 0; x < IMG_W; x++)
            img[y][x] = (float)(y * IMG_W + x);
    CUdeviceptr dimg;
    size_t pitch;
    CHECK_CU(cuMemAllocPitch(&dimg, &pitch, IMG_W * sizeof(float), IMG_H, sizeof(float)));
    CUDA_MEMCPY2D up;
    memset(&up, 0, sizeof up);
    up.srcMemoryType = CU_MEMORYTYPE_HOST;
    up.srcHost = img;
    up.srcPitch = IMG_W * sizeof(float);
    up.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    up.dstDevice = dimg;
    up.dstPitch = pitch;
    up.WidthInBytes = IMG_W * sizeof(float);
    up.Height = IMG_H;
    CHECK_CU(cuMemcpy2D(&up));

    unsigned long kpitch = pitch;
    int w = IMG_W, h = IMG_H;
    float s = 2.0f;
    void *params[] = {&dimg, &kpitch, &w, &h, &s};
    for (int k = 0; k < SCALE_LAUNCHES; k++) {
        CHECK_CU(cuLaunchKernel(fn, (IMG_W + 31) / 32, (IMG_H + 7) / 8, 1, 32, 8, 1, 0, NULL,
                                params, NULL));
        (*launches)++;
    }
    CHECK_CU(cuCtxSynchronize());

    static float back[IMG_H][IMG_W];
    CUDA_MEMCPY2D down;
    memset(&down, 0, sizeof down);
    down.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    down.srcDevice = dimg;
    down.srcPitch = pitch;
    down.dstMemoryType = CU_MEMORYTYPE_HOST;
    down.dstHost = back;
    down.dstPitch = IMG_W * sizeof(float);
    down.WidthInBytes = IMG_W * sizeof(float);
    down.Height = IMG_H;
    CHECK_CU(cuMemcpy2D(&down));
    for (int y = 0; y < IMG_H; y++)
        for (int x = 0; x < IMG_W; x++)
            FAIL_IF(back[y][x] != 4.0f * img[y][x], "scale2d: (%d,%d) = %g, want %g", x, y,
                    back[y][x], 4.0f * img[y][x]);
    CHECK_CU(cuMemFree(dimg));
}

int main(int argc, char **argv)
{
    char *ptx_path = argc > 1 ? argv[1] : default_ptx_path(argv[0]);
    char *ptx = read_file(ptx_path);

    CHECK_CU(cuInit(0));
    CUdevice dev;
    CHECK_CU(cuDeviceGet(&dev, 0));
    /* The primary context: cuCtxCreate's signature changed in CUDA 13. */
    CUcontext ctx;
    CHECK_CU(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK_CU(cuCtxSetCurrent(ctx));

    CUmodule mod;
    CHECK_CU(cuModuleLoadData(&mod, ptx));
    CUfunction vecadd, scale2d;
    CHECK_CU(cuModuleGetFunction(&vecadd, mod, VECADD_NAME));
    CHECK_CU(cuModuleGetFunction(&scale2d, mod, SCALE2D_NAME));

    int vecadd_launches = 0, scale_launches = 0;
    run_vecadd(vecadd, &vecadd_launches);
    run_scale2d(scale2d, &scale_launches);

    CHECK_CU(cuModuleUnload(mod));
    CHECK_CU(cuDevicePrimaryCtxRelease(dev));
    free(ptx);
    if (argc <= 1)
        free(ptx_path);
    printf("launches vecAdd=%d scale2d=%d\n", vecadd_launches, scale_launches);
    return 0;
}
