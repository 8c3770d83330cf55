/*
 * Looks driver functions up with plain dlsym on a dlopen handle, as
 * PyTorch's JIT paths do for cuLaunchKernel, cuModuleLoadData and friends.
 */
#include "progcommon.h"

#include <dlfcn.h>

static void *lib;

static void *sym(const char *name)
{
    void *p = dlsym(lib, name);
    if (!p)
        FAIL("dlsym(%s): %s", name, dlerror());
    return p;
}

int main(void)
{
    struct tally t = {0};
    lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        FAIL("dlopen: %s", dlerror());
    CUresult (*init)(unsigned int) = sym("cuInit");
    CUresult (*retain)(CUcontext *, CUdevice) = sym("cuDevicePrimaryCtxRetain");
    CUresult (*set_current)(CUcontext) = sym("cuCtxSetCurrent");
    CUresult (*load)(CUmodule *, const void *) = sym("cuModuleLoadData");
    CUresult (*get_function)(CUfunction *, CUmodule, const char *) = sym("cuModuleGetFunction");
    CUresult (*func_name)(const char **, CUfunction) = sym("cuFuncGetName");
    CUresult (*mem_alloc)(CUdeviceptr *, size_t) = sym("cuMemAlloc_v2");
    CUresult (*htod)(CUdeviceptr, const void *, size_t) = sym("cuMemcpyHtoD_v2");
    CUresult (*dtoh)(void *, CUdeviceptr, size_t) = sym("cuMemcpyDtoH_v2");
    CUresult (*mem_free)(CUdeviceptr) = sym("cuMemFree_v2");
    CUresult (*launch)(CUfunction, unsigned int, unsigned int, unsigned int, unsigned int,
                       unsigned int, unsigned int, unsigned int, CUstream, void **, void **) =
        sym("cuLaunchKernel");
    CUresult (*launch_ex)(const CUlaunchConfig *, CUfunction, void **, void **) =
        sym("cuLaunchKernelEx");

    CUcontext ctx;
    CUmodule mod;
    CUfunction vec_add, scale;
    CHECK(init(0));
    CHECK(retain(&ctx, 0));
    CHECK(set_current(ctx));
    CHECK(load(&mod, prog_image));
    CHECK(get_function(&vec_add, mod, "_Z6vecAddPKfS0_Pfi"));
    CHECK(get_function(&scale, mod, "scale"));
    const char *name = NULL;
    CHECK(func_name(&name, vec_add));
    printf("function %s\n", name);

    enum { N = 300 };
    static float a[N], b[N], c[N];
    for (int i = 0; i < N; i++) {
        a[i] = (float)i;
        b[i] = (float)(N - i);
    }
    CUdeviceptr da, db, dc;
    CHECK(mem_alloc(&da, sizeof a));
    CHECK(mem_alloc(&db, sizeof b));
    CHECK(mem_alloc(&dc, sizeof c));
    for (int i = 0; i < 3; i++)
        tally_alloc(&t, sizeof a);
    CHECK(htod(da, a, sizeof a));
    CHECK(htod(db, b, sizeof b));
    int n = N;
    void *args[] = {&da, &db, &dc, &n};
    CHECK(launch(vec_add, (N + 63) / 64, 1, 1, 64, 1, 1, 0, NULL, args, NULL));
    tally_launch(&t, "vecAdd", 1);
    float s = 0.25f;
    void *sargs[] = {&dc, &s, &n};
    CUlaunchConfig cfg = {.gridDimX = (N + 31) / 32, .gridDimY = 1, .gridDimZ = 1,
                          .blockDimX = 32, .blockDimY = 1, .blockDimZ = 1};
    CHECK(launch_ex(&cfg, scale, sargs, NULL));
    tally_launch(&t, "scale", 1);
    CHECK(dtoh(c, dc, sizeof c));
    for (int i = 0; i < N; i++)
        if (c[i] != (float)N * 0.25f)
            FAIL("c[%d] = %g", i, c[i]);
    printf("verified vecAdd and scale\n");
    CHECK(mem_free(da));
    CHECK(mem_free(db));
    CHECK(mem_free(dc));
    tally_print(&t);
    return 0;
}
