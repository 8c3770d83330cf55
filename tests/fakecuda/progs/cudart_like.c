/*
 * Reaches the driver the way static cudart does: dlopen("libcuda.so.1"),
 * dlsym only "cuGetProcAddress_v2", ask it for "", "cuInit" and
 * "cuGetProcAddress" itself, then resolve everything else through the
 * pointer it returned. Each resolution is checked against dlsym of the
 * variant the real driver would give.
 *
 * --per-thread resolves every entry point with the per-thread default stream
 * flag, as a program built with --default-stream per-thread does.
 */
#include "progcommon.h"

#include <dlfcn.h>

typedef CUresult (*gpa_v2_fn)(const char *, void **, int, cuuint64_t,
                              CUdriverProcAddressQueryResult *);
typedef CUresult (*gpa_fn)(const char *, void **, int, cuuint64_t);

static void *lib;
static gpa_v2_fn gpa;
static cuuint64_t stream_flag;

/* Resolves api at version and checks that the pointer is variant's. */
static void *resolve_with(const char *api, int version, cuuint64_t flags, const char *variant)
{
    void *fn = NULL;
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
    CHECK(gpa(api, &fn, version, flags, &status));
    if (status != CU_GET_PROC_ADDRESS_SUCCESS || !fn)
        FAIL("%s at %d: status %d", api, version, (int)status);
    void *want = dlsym(lib, variant);
    if (fn != want)
        FAIL("%s at %d flags %llu is not %s", api, version, (unsigned long long)flags, variant);
    printf("resolve %s %d %llu -> %s\n", api, version, (unsigned long long)flags, variant);
    return fn;
}

/* The variant name the real driver gives for a per-thread lookup. */
static const char *pt(const char *plain, const char *per_thread)
{
    return stream_flag ? per_thread : plain;
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--per-thread") == 0)
            stream_flag = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
        else
            FAIL("usage: %s [--per-thread]", argv[0]);
    }
    struct tally t = {0};
    lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        FAIL("dlopen: %s", dlerror());
    gpa_v2_fn first = (gpa_v2_fn)dlsym(lib, "cuGetProcAddress_v2");
    if (!first)
        FAIL("no cuGetProcAddress_v2");

    void *fn = (void *)1;
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
    EXPECT(first("", &fn, 12000, 0, &status), CUDA_ERROR_NOT_FOUND);
    if (fn != NULL || status != CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND)
        FAIL("lookup of \"\" gave %p status %d", fn, (int)status);
    printf("resolve \"\" -> not found\n");

    CUresult (*init)(unsigned int) = NULL;
    CHECK(first("cuInit", (void **)&init, 12000, 0, &status));
    gpa_fn old_gpa = NULL;
    CHECK(first("cuGetProcAddress", (void **)&old_gpa, 11030, 0, &status));
    if ((void *)old_gpa != dlsym(lib, "cuGetProcAddress"))
        FAIL("cuGetProcAddress at 11030 is not the 4-argument one");
    printf("resolve cuGetProcAddress 11030 0 -> cuGetProcAddress\n");
    CHECK(first("cuGetProcAddress", (void **)&gpa, 12000, 0, &status));
    if ((void *)gpa != dlsym(lib, "cuGetProcAddress_v2"))
        FAIL("cuGetProcAddress at 12000 is not cuGetProcAddress_v2");
    printf("resolve cuGetProcAddress 12000 0 -> cuGetProcAddress_v2\n");
    /* The old ABI works too: use it once. */
    void *init_again = NULL;
    CHECK(old_gpa("cuInit", &init_again, 2000, 0));
    if (init_again != (void *)init)
        FAIL("cuInit through the 4-argument cuGetProcAddress differs");
    CHECK(init(0));

    /* Everything else through the pointer returned for cuGetProcAddress. */
    cuuint64_t f = stream_flag;
    CUresult (*device_get)(CUdevice *, int) = resolve_with("cuDeviceGet", 2000, f, "cuDeviceGet");
    CUresult (*retain)(CUcontext *, CUdevice) =
        resolve_with("cuDevicePrimaryCtxRetain", 7000, f, "cuDevicePrimaryCtxRetain");
    CUresult (*set_current)(CUcontext) =
        resolve_with("cuCtxSetCurrent", 4000, f, "cuCtxSetCurrent");
    CUresult (*library_load)(CUlibrary *, const void *, int *, void **, unsigned int, int *,
                             void **, unsigned int) =
        resolve_with("cuLibraryLoadData", 12000, f, "cuLibraryLoadData");
    CUresult (*get_kernel)(CUkernel *, CUlibrary, const char *) =
        resolve_with("cuLibraryGetKernel", 12000, f, "cuLibraryGetKernel");
    CUresult (*kernel_function)(CUfunction *, CUkernel) =
        resolve_with("cuKernelGetFunction", 12000, f, "cuKernelGetFunction");
    typedef CUresult (*launch_fn)(CUfunction, unsigned int, unsigned int, unsigned int,
                                  unsigned int, unsigned int, unsigned int, unsigned int, CUstream,
                                  void **, void **);
    launch_fn launch_old = resolve_with("cuLaunchKernel", 4000, f, "cuLaunchKernel");
    launch_fn launch_pt = resolve_with("cuLaunchKernel", 7000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
                                       "cuLaunchKernel_ptsz");
    CUresult (*launch_ex)(const CUlaunchConfig *, CUfunction, void **, void **) =
        resolve_with("cuLaunchKernelEx", 11060, f, pt("cuLaunchKernelEx", "cuLaunchKernelEx_ptsz"));
    CUresult (*launch_coop)(CUfunction, unsigned int, unsigned int, unsigned int, unsigned int,
                            unsigned int, unsigned int, unsigned int, CUstream, void **) =
        resolve_with("cuLaunchCooperativeKernel", 9000, f,
                     pt("cuLaunchCooperativeKernel", "cuLaunchCooperativeKernel_ptsz"));
    CUresult (*mem_alloc)(CUdeviceptr *, size_t) =
        resolve_with("cuMemAlloc", 3020, f, "cuMemAlloc_v2");
    CUresult (*alloc_async)(CUdeviceptr *, size_t, CUstream) =
        resolve_with("cuMemAllocAsync", 11020, f, pt("cuMemAllocAsync", "cuMemAllocAsync_ptsz"));
    CUresult (*free_async)(CUdeviceptr, CUstream) =
        resolve_with("cuMemFreeAsync", 11020, f, pt("cuMemFreeAsync", "cuMemFreeAsync_ptsz"));
    CUresult (*alloc_pitch)(CUdeviceptr *, size_t *, size_t, size_t, unsigned int) =
        resolve_with("cuMemAllocPitch", 3020, f, "cuMemAllocPitch_v2");
    CUresult (*htod)(CUdeviceptr, const void *, size_t) =
        resolve_with("cuMemcpyHtoD", stream_flag ? 7000 : 3020, f, pt("cuMemcpyHtoD_v2", "cuMemcpyHtoD_v2_ptds"));
    CUresult (*dtoh)(void *, CUdeviceptr, size_t) =
        resolve_with("cuMemcpyDtoH", stream_flag ? 7000 : 3020, f, pt("cuMemcpyDtoH_v2", "cuMemcpyDtoH_v2_ptds"));
    CUresult (*stream_sync)(CUstream) = resolve_with(
        "cuStreamSynchronize", stream_flag ? 7000 : 2000, f,
        pt("cuStreamSynchronize", "cuStreamSynchronize_ptsz"));
    CUresult (*mem_free)(CUdeviceptr) = resolve_with("cuMemFree", 3020, f, "cuMemFree_v2");

    CUdevice dev;
    CUcontext ctx;
    CUlibrary library;
    CUkernel k_vec_add, k_scale, k_fill;
    CUfunction f_vec_add, f_fill;
    CHECK(device_get(&dev, 0));
    CHECK(retain(&ctx, dev));
    CHECK(set_current(ctx));
    CHECK(library_load(&library, prog_image, NULL, NULL, 0, NULL, NULL, 0));
    CHECK(get_kernel(&k_vec_add, library, "_Z6vecAddPKfS0_Pfi"));
    CHECK(get_kernel(&k_scale, library, "scale"));
    CHECK(get_kernel(&k_fill, library, "_Z4fillIiEvPT_S0_i"));
    CHECK(kernel_function(&f_vec_add, k_vec_add));
    CHECK(kernel_function(&f_fill, k_fill));
    if ((void *)f_vec_add == (void *)k_vec_add)
        FAIL("cuKernelGetFunction returned the CUkernel itself");

    enum { N = 512, W = 64, H = 8 };
    static float a[N], b[N], c[N];
    static int filled[H * 128];
    for (int i = 0; i < N; i++) {
        a[i] = (float)(3 * i);
        b[i] = (float)(i % 11);
    }
    CUdeviceptr da, db, dc, dpitch;
    size_t pitch;
    CHECK(mem_alloc(&da, sizeof a));
    CHECK(mem_alloc(&db, sizeof b));
    CHECK(alloc_async(&dc, sizeof c, NULL));
    CHECK(alloc_pitch(&dpitch, &pitch, W * sizeof(int), H, sizeof(int)));
    tally_alloc(&t, sizeof a);
    tally_alloc(&t, sizeof b);
    tally_alloc(&t, sizeof c);
    tally_alloc(&t, pitch * H);
    CHECK(htod(da, a, sizeof a));
    CHECK(htod(db, b, sizeof b));

    int n = N;
    void *args[] = {&da, &db, &dc, &n};
    /* Once through the CUfunction, once through the CUkernel cast to one. */
    CHECK(launch_old(f_vec_add, N / 128, 1, 1, 128, 1, 1, 0, NULL, args, NULL));
    void *args2[] = {&dc, &db, &dc, &n};
    CHECK(launch_pt((CUfunction)k_vec_add, N / 128, 1, 1, 128, 1, 1, 0, NULL, args2, NULL));
    tally_launch(&t, "vecAdd", 2);
    float two = 2.0f;
    void *sargs[] = {&dc, &two, &n};
    CUlaunchConfig cfg = {.gridDimX = N / 64, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 64,
                          .blockDimY = 1, .blockDimZ = 1, .hStream = NULL};
    CHECK(launch_ex(&cfg, (CUfunction)k_scale, sargs, NULL));
    tally_launch(&t, "scale", 1);
    int value = 77, count = (int)(pitch / sizeof(int)) * H;
    void *fargs[] = {&dpitch, &value, &count};
    CHECK(launch_coop(f_fill, (unsigned int)(count + 127) / 128, 1, 1, 128, 1, 1, 0, NULL, fargs));
    tally_launch(&t, "fill", 1);
    CHECK(stream_sync(NULL));

    CHECK(dtoh(c, dc, sizeof c));
    CHECK(dtoh(filled, dpitch, (size_t)count * sizeof(int)));
    for (int i = 0; i < N; i++)
        if (c[i] != 2.0f * (a[i] + 2.0f * b[i]))
            FAIL("c[%d] = %g, expected %g", i, c[i], 2.0f * (a[i] + 2.0f * b[i]));
    for (int i = 0; i < count; i++)
        if (filled[i] != value)
            FAIL("fill[%d] = %d", i, filled[i]);
    printf("verified vecAdd, scale and fill%s\n", stream_flag ? " (per-thread)" : "");

    CHECK(mem_free(da));
    CHECK(mem_free(db));
    CHECK(free_async(dc, NULL));
    CHECK(mem_free(dpitch));
    tally_print(&t);
    return 0;
}
