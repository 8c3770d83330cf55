/*
 * Virtual memory management: reserve an address range, create physical
 * memory, map it (twice, so the two views alias), launch on the mapping,
 * then unmap and release.
 */
#include "progcommon.h"

#define CHUNK (2u << 20)

int main(void)
{
    struct tally t = {0};
    CUcontext ctx;
    CUmodule mod;
    CUfunction fill, scale;
    CHECK(cuInit(0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
    CHECK(cuCtxSetCurrent(ctx));
    CHECK(cuModuleLoadData(&mod, prog_image));
    CHECK(cuModuleGetFunction(&fill, mod, "_Z4fillIiEvPT_S0_i"));
    CHECK(cuModuleGetFunction(&scale, mod, "scale"));

    CUdeviceptr base;
    CHECK(cuMemAddressReserve(&base, 2 * CHUNK, CHUNK, 0, 0));
    struct fc_mem_allocation_prop prop = {.type = FC_MEM_ALLOCATION_TYPE_PINNED,
                                          .location = {FC_MEM_LOCATION_TYPE_DEVICE, 0}};
    CUmemGenericAllocationHandle handle;
    CHECK(cuMemCreate(&handle, CHUNK, (const CUmemAllocationProp *)&prop, 0));
    tally_alloc(&t, CHUNK);
    CHECK(cuMemMap(base, CHUNK, 0, handle, 0));
    CHECK(cuMemMap(base + CHUNK, CHUNK, 0, handle, 0));
    struct fc_mem_access_desc access = {{FC_MEM_LOCATION_TYPE_DEVICE, 0},
                                        FC_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CHECK(cuMemSetAccess(base, 2 * CHUNK, &access, 1));

    int n = CHUNK / sizeof(int), value = 0x3f800000; /* 1.0f as bits */
    void *fargs[] = {&base, &value, &n};
    CHECK(cuLaunchKernel(fill, (unsigned int)n / 256, 1, 1, 256, 1, 1, 0, NULL, fargs, NULL));
    tally_launch(&t, "fill", 1);
    /* Scale through the second view: the first must see it. */
    CUdeviceptr second = base + CHUNK;
    float s = 4.0f;
    void *sargs[] = {&second, &s, &n};
    CHECK(cuLaunchKernel(scale, (unsigned int)n / 256, 1, 1, 256, 1, 1, 0, NULL, sargs, NULL));
    tally_launch(&t, "scale", 1);

    static float back[CHUNK / sizeof(float)];
    CHECK(cuMemcpyDtoH_v2(back, base, CHUNK));
    for (int i = 0; i < n; i++)
        if (back[i] != 4.0f)
            FAIL("mapped[%d] = %g", i, back[i]);
    CUdeviceptr range_base;
    size_t range_size;
    CHECK(cuMemGetAddressRange_v2(&range_base, &range_size, second + 100));
    if (range_base != second || range_size != CHUNK)
        FAIL("address range of a mapped piece is wrong");
    printf("verified fill and scale on mapped memory\n");

    CHECK(cuMemUnmap(base, CHUNK));
    CHECK(cuMemUnmap(base + CHUNK, CHUNK));
    EXPECT(cuMemGetAddressRange_v2(&range_base, &range_size, base), CUDA_ERROR_NOT_FOUND);
    CHECK(cuMemRelease(handle));
    CHECK(cuMemAddressFree(base, 2 * CHUNK));
    tally_print(&t);
    return 0;
}
