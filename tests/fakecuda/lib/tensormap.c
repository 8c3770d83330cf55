/*
 * TMA tensor maps. The real descriptor is opaque; the stand-in's holds, in
 * plain 64-bit words, what its kernels need to reach the tensor (fakecuda.h's
 * FC_TMAP_*), and zeros elsewhere, so that equal arguments make equal bytes,
 * as the real driver's do. The checks are the real driver's that matter to a
 * caller: the map aligned at 64 bytes, the rank, the address at 16.
 */
#include <string.h>

#include "internal.h"

static CUresult encode(CUtensorMap *map, CUtensorMapDataType dtype, cuuint32_t rank,
                       void *address, const cuuint64_t *dims, const cuuint64_t *strides,
                       unsigned encoding, cuuint32_t min_rank)
{
    if (!atomic_load(&fc_initialized))
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!map || (uintptr_t)map % 64 || rank < min_rank || rank > 5 || !dims ||
        (rank > 1 && !strides) || (uintptr_t)address % 16 || dtype < 0 || dtype > 15)
        return CUDA_ERROR_INVALID_VALUE;
    cuuint64_t words[CU_TENSOR_MAP_NUM_QWORDS] = {0};
    words[FC_TMAP_ADDRESS] = (cuuint64_t)(uintptr_t)address;
    words[FC_TMAP_TAG] = FC_TMAP_MAGIC | (cuuint64_t)dtype << 32 | (cuuint64_t)rank << 40 |
                         (cuuint64_t)encoding << 48;
    for (cuuint32_t i = 0; i < rank; i++)
        words[FC_TMAP_DIMS + i] = dims[i];
    for (cuuint32_t i = 0; i + 1 < rank; i++)
        words[FC_TMAP_STRIDES + i] = strides[i];
    memcpy(map->opaque, words, sizeof words);
    return CUDA_SUCCESS;
}

CUresult cuTensorMapEncodeTiled(CUtensorMap *tensorMap, CUtensorMapDataType tensorDataType,
                                cuuint32_t tensorRank, void *globalAddress,
                                const cuuint64_t *globalDim, const cuuint64_t *globalStrides,
                                const cuuint32_t *boxDim, const cuuint32_t *elementStrides,
                                CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
                                CUtensorMapL2promotion l2Promotion,
                                CUtensorMapFloatOOBfill oobFill)
{
    (void)boxDim, (void)elementStrides, (void)interleave, (void)swizzle, (void)l2Promotion,
        (void)oobFill;
    return encode(tensorMap, tensorDataType, tensorRank, globalAddress, globalDim,
                  globalStrides, 0, 1);
}

CUresult cuTensorMapEncodeIm2col(CUtensorMap *tensorMap, CUtensorMapDataType tensorDataType,
                                 cuuint32_t tensorRank, void *globalAddress,
                                 const cuuint64_t *globalDim, const cuuint64_t *globalStrides,
                                 const int *pixelBoxLowerCorner, const int *pixelBoxUpperCorner,
                                 cuuint32_t channelsPerPixel, cuuint32_t pixelsPerColumn,
                                 const cuuint32_t *elementStrides, CUtensorMapInterleave interleave,
                                 CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2Promotion,
                                 CUtensorMapFloatOOBfill oobFill)
{
    (void)pixelBoxLowerCorner, (void)pixelBoxUpperCorner, (void)channelsPerPixel,
        (void)pixelsPerColumn, (void)elementStrides, (void)interleave, (void)swizzle,
        (void)l2Promotion, (void)oobFill;
    return encode(tensorMap, tensorDataType, tensorRank, globalAddress, globalDim,
                  globalStrides, 1, 3);
}

CUresult cuTensorMapEncodeIm2colWide(CUtensorMap *tensorMap, CUtensorMapDataType tensorDataType,
                                     cuuint32_t tensorRank, void *globalAddress,
                                     const cuuint64_t *globalDim, const cuuint64_t *globalStrides,
                                     int pixelBoxLowerCornerWidth, int pixelBoxUpperCornerWidth,
                                     cuuint32_t channelsPerPixel, cuuint32_t pixelsPerColumn,
                                     const cuuint32_t *elementStrides,
                                     CUtensorMapInterleave interleave,
                                     CUtensorMapIm2ColWideMode mode, CUtensorMapSwizzle swizzle,
                                     CUtensorMapL2promotion l2Promotion,
                                     CUtensorMapFloatOOBfill oobFill)
{
    (void)pixelBoxLowerCornerWidth, (void)pixelBoxUpperCornerWidth, (void)channelsPerPixel,
        (void)pixelsPerColumn, (void)elementStrides, (void)interleave, (void)mode,
        (void)swizzle, (void)l2Promotion, (void)oobFill;
    return encode(tensorMap, tensorDataType, tensorRank, globalAddress, globalDim,
                  globalStrides, 2, 3);
}

CUresult cuTensorMapReplaceAddress(CUtensorMap *tensorMap, void *globalAddress)
{
    if (!atomic_load(&fc_initialized))
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!tensorMap || (uintptr_t)tensorMap % 64 || (uintptr_t)globalAddress % 16 ||
        (uint32_t)tensorMap->opaque[FC_TMAP_TAG] != FC_TMAP_MAGIC)
        return CUDA_ERROR_INVALID_VALUE;
    tensorMap->opaque[FC_TMAP_ADDRESS] = (cuuint64_t)(uintptr_t)globalAddress;
    return CUDA_SUCCESS;
}
