/*
 * cuGetProcAddress: the versioned lookup that cudart and cuda.bindings use
 * instead of dlsym. Each row says from which CUDA version an exported variant
 * is what the API name means, and whether it is the per-thread-stream one.
 * The addresses are the library's own (it is linked with -Bsymbolic), so they
 * equal what dlsym(handle, variant) returns.
 */
#include <string.h>

#include "internal.h"

struct fc_proc {
    const char *api;
    const char *variant;
    int version;
    bool per_thread;
    void *fn;
};

#define P(api, fn, version) {api, #fn, version, false, (void *)fn}
#define T(api, fn, version) {api, #fn, version, true, (void *)fn}

static const struct fc_proc procs[] = {
    P("cuInit", cuInit, 2000),
    P("cuDriverGetVersion", cuDriverGetVersion, 2020),
    P("cuDeviceGet", cuDeviceGet, 2000),
    P("cuDeviceGetCount", cuDeviceGetCount, 2000),
    P("cuDeviceGetName", cuDeviceGetName, 2000),
    P("cuDeviceGetAttribute", cuDeviceGetAttribute, 2000),
    P("cuDevicePrimaryCtxRetain", cuDevicePrimaryCtxRetain, 7000),
    P("cuDevicePrimaryCtxRelease", cuDevicePrimaryCtxRelease, 7000),
    P("cuDevicePrimaryCtxRelease", cuDevicePrimaryCtxRelease_v2, 11000),
    P("cuDevicePrimaryCtxReset", cuDevicePrimaryCtxReset, 7000),
    P("cuDevicePrimaryCtxReset", cuDevicePrimaryCtxReset_v2, 11000),
    P("cuDevicePrimaryCtxGetState", cuDevicePrimaryCtxGetState, 7000),
    P("cuCtxGetId", cuCtxGetId, 12000),
    P("cuCtxCreate", cuCtxCreate_v2, 3020),
    P("cuCtxCreate", cuCtxCreate_v3, 11040),
    P("cuCtxCreate", cuCtxCreate_v4, 12050),
    P("cuCtxDestroy", cuCtxDestroy_v2, 4000),
    P("cuCtxSetCurrent", cuCtxSetCurrent, 4000),
    P("cuCtxGetCurrent", cuCtxGetCurrent, 4000),
    P("cuCtxPushCurrent", cuCtxPushCurrent_v2, 4000),
    P("cuCtxPopCurrent", cuCtxPopCurrent_v2, 4000),
    P("cuCtxGetDevice", cuCtxGetDevice, 2000),
    P("cuCtxSynchronize", cuCtxSynchronize, 2000),
    P("cuCtxSynchronize", cuCtxSynchronize_v2, 13000),
    P("cuGetErrorName", cuGetErrorName, 6000),
    P("cuGetErrorString", cuGetErrorString, 6000),
    P("cuGetProcAddress", cuGetProcAddress, 11030),
    P("cuGetProcAddress", cuGetProcAddress_v2, 12000),

    P("cuMemAlloc", cuMemAlloc_v2, 3020),
    P("cuMemAllocPitch", cuMemAllocPitch_v2, 3020),
    P("cuMemAllocManaged", cuMemAllocManaged, 6000),
    P("cuMemGetInfo", cuMemGetInfo_v2, 3020),
    P("cuMemPoolCreate", cuMemPoolCreate, 11020),
    P("cuMemPoolDestroy", cuMemPoolDestroy, 11020),
    P("cuMemPoolSetAttribute", cuMemPoolSetAttribute, 11020),
    P("cuMemPoolGetAttribute", cuMemPoolGetAttribute, 11020),
    P("cuMemPoolTrimTo", cuMemPoolTrimTo, 11020),
    P("cuMemAllocAsync", cuMemAllocAsync, 11020),
    T("cuMemAllocAsync", cuMemAllocAsync_ptsz, 11020),
    P("cuMemAllocFromPoolAsync", cuMemAllocFromPoolAsync, 11020),
    T("cuMemAllocFromPoolAsync", cuMemAllocFromPoolAsync_ptsz, 11020),
    P("cuMemFree", cuMemFree_v2, 3020),
    P("cuMemFreeAsync", cuMemFreeAsync, 11020),
    T("cuMemFreeAsync", cuMemFreeAsync_ptsz, 11020),
    P("cuMemGetAddressRange", cuMemGetAddressRange_v2, 3020),
    P("cuTensorMapEncodeTiled", cuTensorMapEncodeTiled, 12000),
    P("cuTensorMapEncodeIm2col", cuTensorMapEncodeIm2col, 12000),
    P("cuTensorMapEncodeIm2colWide", cuTensorMapEncodeIm2colWide, 12080),
    P("cuTensorMapReplaceAddress", cuTensorMapReplaceAddress, 12000),
    P("cuMemcpyHtoD", cuMemcpyHtoD_v2, 3020),
    T("cuMemcpyHtoD", cuMemcpyHtoD_v2_ptds, 7000),
    P("cuMemcpyDtoH", cuMemcpyDtoH_v2, 3020),
    T("cuMemcpyDtoH", cuMemcpyDtoH_v2_ptds, 7000),
    P("cuMemcpyDtoD", cuMemcpyDtoD_v2, 3020),
    T("cuMemcpyDtoD", cuMemcpyDtoD_v2_ptds, 7000),
    P("cuMemcpy2D", cuMemcpy2D_v2, 3020),
    T("cuMemcpy2D", cuMemcpy2D_v2_ptds, 7000),
    P("cuMemcpy2DUnaligned", cuMemcpy2DUnaligned_v2, 3020),
    T("cuMemcpy2DUnaligned", cuMemcpy2DUnaligned_v2_ptds, 7000),
    P("cuMemcpy2DAsync", cuMemcpy2DAsync_v2, 3020),
    T("cuMemcpy2DAsync", cuMemcpy2DAsync_v2_ptsz, 7000),
    P("cuMemcpyDtoHAsync", cuMemcpyDtoHAsync_v2, 3020),
    T("cuMemcpyDtoHAsync", cuMemcpyDtoHAsync_v2_ptsz, 7000),
    P("cuMemcpyHtoDAsync", cuMemcpyHtoDAsync_v2, 3020),
    T("cuMemcpyHtoDAsync", cuMemcpyHtoDAsync_v2_ptsz, 7000),
    P("cuMemsetD8", cuMemsetD8_v2, 3020),
    T("cuMemsetD8", cuMemsetD8_v2_ptds, 7000),
    P("cuMemsetD8Async", cuMemsetD8Async, 3020),
    T("cuMemsetD8Async", cuMemsetD8Async_ptsz, 7000),
    P("cuMemsetD32Async", cuMemsetD32Async, 3020),
    T("cuMemsetD32Async", cuMemsetD32Async_ptsz, 7000),
    P("cuMemsetD16Async", cuMemsetD16Async, 3020),
    T("cuMemsetD16Async", cuMemsetD16Async_ptsz, 7000),
    P("cuMemsetD16", cuMemsetD16_v2, 3020),
    T("cuMemsetD16", cuMemsetD16_v2_ptds, 7000),
    P("cuMemsetD32", cuMemsetD32_v2, 3020),
    T("cuMemsetD32", cuMemsetD32_v2_ptds, 7000),
    P("cuMemsetD2D8", cuMemsetD2D8_v2, 3020),
    T("cuMemsetD2D8", cuMemsetD2D8_v2_ptds, 7000),
    P("cuMemsetD2D16", cuMemsetD2D16_v2, 3020),
    T("cuMemsetD2D16", cuMemsetD2D16_v2_ptds, 7000),
    P("cuMemsetD2D32", cuMemsetD2D32_v2, 3020),
    T("cuMemsetD2D32", cuMemsetD2D32_v2_ptds, 7000),
    P("cuMemsetD2D8Async", cuMemsetD2D8Async, 3020),
    T("cuMemsetD2D8Async", cuMemsetD2D8Async_ptsz, 7000),
    P("cuMemsetD2D16Async", cuMemsetD2D16Async, 3020),
    T("cuMemsetD2D16Async", cuMemsetD2D16Async_ptsz, 7000),
    P("cuMemsetD2D32Async", cuMemsetD2D32Async, 3020),
    T("cuMemsetD2D32Async", cuMemsetD2D32Async_ptsz, 7000),
    P("cuMemcpy3DAsync", cuMemcpy3DAsync_v2, 3020),
    T("cuMemcpy3DAsync", cuMemcpy3DAsync_v2_ptsz, 7000),
    P("cuMemAllocHost", cuMemAllocHost_v2, 3020),
    P("cuMemHostAlloc", cuMemHostAlloc, 2020),
    P("cuMemFreeHost", cuMemFreeHost, 2000),
    P("cuMemHostRegister", cuMemHostRegister, 4000),
    P("cuMemHostRegister", cuMemHostRegister_v2, 6050),
    P("cuMemHostGetDevicePointer", cuMemHostGetDevicePointer_v2, 3020),
    P("cuMemHostUnregister", cuMemHostUnregister, 4000),
    P("cuPointerGetAttribute", cuPointerGetAttribute, 4000),
    P("cuMemAddressReserve", cuMemAddressReserve, 10020),
    P("cuMemAddressFree", cuMemAddressFree, 10020),
    P("cuMemCreate", cuMemCreate, 10020),
    P("cuMemRelease", cuMemRelease, 10020),
    P("cuMemMap", cuMemMap, 10020),
    P("cuMemUnmap", cuMemUnmap, 10020),
    P("cuMemSetAccess", cuMemSetAccess, 10020),

    P("cuModuleLoadData", cuModuleLoadData, 2000),
    P("cuModuleLoadDataEx", cuModuleLoadDataEx, 2010),
    P("cuModuleLoadFatBinary", cuModuleLoadFatBinary, 2000),
    P("cuModuleLoad", cuModuleLoad, 2000),
    P("cuFuncGetModule", cuFuncGetModule, 11000),
    P("cuModuleUnload", cuModuleUnload, 2000),
    P("cuModuleGetFunction", cuModuleGetFunction, 2000),
    P("cuLibraryLoadData", cuLibraryLoadData, 12000),
    P("cuLibraryUnload", cuLibraryUnload, 12000),
    P("cuLibraryGetKernel", cuLibraryGetKernel, 12000),
    P("cuKernelGetFunction", cuKernelGetFunction, 12000),
    P("cuFuncGetName", cuFuncGetName, 12030),
    P("cuKernelGetName", cuKernelGetName, 12030),
    P("cuFuncGetParamInfo", cuFuncGetParamInfo, 12040),
    P("cuKernelGetParamInfo", cuKernelGetParamInfo, 12040),

    P("cuLaunchKernel", cuLaunchKernel, 4000),
    T("cuLaunchKernel", cuLaunchKernel_ptsz, 7000),
    P("cuLaunchKernelEx", cuLaunchKernelEx, 11060),
    T("cuLaunchKernelEx", cuLaunchKernelEx_ptsz, 11060),
    P("cuLaunchCooperativeKernel", cuLaunchCooperativeKernel, 9000),
    T("cuLaunchCooperativeKernel", cuLaunchCooperativeKernel_ptsz, 9000),
    P("cuFuncGetAttribute", cuFuncGetAttribute, 2020),
    P("cuFuncSetAttribute", cuFuncSetAttribute, 9000),

    P("cuStreamCreate", cuStreamCreate, 2000),
    P("cuStreamDestroy", cuStreamDestroy_v2, 4000),
    P("cuStreamSynchronize", cuStreamSynchronize, 2000),
    T("cuStreamSynchronize", cuStreamSynchronize_ptsz, 7000),
    P("cuStreamIsCapturing", cuStreamIsCapturing, 10000),
    T("cuStreamIsCapturing", cuStreamIsCapturing_ptsz, 10000),
    P("cuStreamBeginCapture", cuStreamBeginCapture, 10000),
    T("cuStreamBeginCapture", cuStreamBeginCapture_ptsz, 10000),
    P("cuStreamBeginCapture", cuStreamBeginCapture_v2, 10010),
    T("cuStreamBeginCapture", cuStreamBeginCapture_v2_ptsz, 10010),
    P("cuStreamEndCapture", cuStreamEndCapture, 10000),
    T("cuStreamEndCapture", cuStreamEndCapture_ptsz, 10000),
    P("cuStreamBeginCaptureToGraph", cuStreamBeginCaptureToGraph, 12030),
    T("cuStreamBeginCaptureToGraph", cuStreamBeginCaptureToGraph_ptsz, 12030),
    P("cuStreamGetCaptureInfo", cuStreamGetCaptureInfo, 10010),
    T("cuStreamGetCaptureInfo", cuStreamGetCaptureInfo_ptsz, 10010),
    P("cuStreamGetCaptureInfo", cuStreamGetCaptureInfo_v2, 11030),
    T("cuStreamGetCaptureInfo", cuStreamGetCaptureInfo_v2_ptsz, 11030),
    P("cuStreamGetCaptureInfo", cuStreamGetCaptureInfo_v3, 12030),
    T("cuStreamGetCaptureInfo", cuStreamGetCaptureInfo_v3_ptsz, 12030),
    P("cuThreadExchangeStreamCaptureMode", cuThreadExchangeStreamCaptureMode, 10010),

    /* Graphs. Versions as a CUDA 13.0 driver answers them; "cuGraphInstantiate"
     * gives the pre-12.0 form (error node and log) at every version, not
     * cuGraphInstantiateWithFlags, which is asked for by its own name. */
    P("cuGraphCreate", cuGraphCreate, 10000),
    P("cuGraphDestroy", cuGraphDestroy, 10000),
    P("cuGraphClone", cuGraphClone, 10000),
    P("cuGraphNodeFindInClone", cuGraphNodeFindInClone, 10000),
    P("cuGraphAddKernelNode", cuGraphAddKernelNode, 10000),
    P("cuGraphAddKernelNode", cuGraphAddKernelNode_v2, 12000),
    P("cuGraphKernelNodeGetParams", cuGraphKernelNodeGetParams, 10000),
    P("cuGraphKernelNodeGetParams", cuGraphKernelNodeGetParams_v2, 12000),
    P("cuGraphKernelNodeSetParams", cuGraphKernelNodeSetParams, 10000),
    P("cuGraphKernelNodeSetParams", cuGraphKernelNodeSetParams_v2, 12000),
    P("cuGraphAddMemcpyNode", cuGraphAddMemcpyNode, 10000),
    P("cuGraphMemcpyNodeGetParams", cuGraphMemcpyNodeGetParams, 10000),
    P("cuGraphMemcpyNodeSetParams", cuGraphMemcpyNodeSetParams, 10000),
    P("cuGraphAddMemsetNode", cuGraphAddMemsetNode, 10000),
    P("cuGraphMemsetNodeGetParams", cuGraphMemsetNodeGetParams, 10000),
    P("cuGraphMemsetNodeSetParams", cuGraphMemsetNodeSetParams, 10000),
    P("cuGraphAddEmptyNode", cuGraphAddEmptyNode, 10000),
    P("cuGraphAddChildGraphNode", cuGraphAddChildGraphNode, 10000),
    P("cuGraphChildGraphNodeGetGraph", cuGraphChildGraphNodeGetGraph, 10000),
    P("cuGraphDestroyNode", cuGraphDestroyNode, 10000),
    P("cuGraphNodeGetType", cuGraphNodeGetType, 10000),
    P("cuGraphGetNodes", cuGraphGetNodes, 10000),
    P("cuGraphGetRootNodes", cuGraphGetRootNodes, 10000),
    P("cuGraphGetEdges", cuGraphGetEdges, 10000),
    P("cuGraphGetEdges", cuGraphGetEdges_v2, 12030),
    P("cuGraphNodeGetDependencies", cuGraphNodeGetDependencies, 10000),
    P("cuGraphNodeGetDependencies", cuGraphNodeGetDependencies_v2, 12030),
    P("cuGraphNodeGetDependentNodes", cuGraphNodeGetDependentNodes, 10000),
    P("cuGraphNodeGetDependentNodes", cuGraphNodeGetDependentNodes_v2, 12030),
    P("cuGraphAddDependencies", cuGraphAddDependencies, 10000),
    P("cuGraphAddDependencies", cuGraphAddDependencies_v2, 12030),
    P("cuGraphRemoveDependencies", cuGraphRemoveDependencies, 10000),
    P("cuGraphRemoveDependencies", cuGraphRemoveDependencies_v2, 12030),
    P("cuGraphInstantiate", cuGraphInstantiate, 10000),
    P("cuGraphInstantiate", cuGraphInstantiate_v2, 11000),
    P("cuGraphInstantiateWithFlags", cuGraphInstantiateWithFlags, 11040),
    P("cuGraphInstantiateWithParams", cuGraphInstantiateWithParams, 12000),
    T("cuGraphInstantiateWithParams", cuGraphInstantiateWithParams_ptsz, 12000),
    P("cuGraphExecKernelNodeSetParams", cuGraphExecKernelNodeSetParams, 10010),
    P("cuGraphExecKernelNodeSetParams", cuGraphExecKernelNodeSetParams_v2, 12000),
    P("cuGraphExecUpdate", cuGraphExecUpdate, 10020),
    P("cuGraphExecUpdate", cuGraphExecUpdate_v2, 12000),
    P("cuGraphLaunch", cuGraphLaunch, 10000),
    T("cuGraphLaunch", cuGraphLaunch_ptsz, 10000),
    P("cuGraphExecDestroy", cuGraphExecDestroy, 10000),

    P("cuEventCreate", cuEventCreate, 2000),
    P("cuEventRecord", cuEventRecord, 2000),
    T("cuEventRecord", cuEventRecord_ptsz, 7000),
    P("cuEventSynchronize", cuEventSynchronize, 2000),
    P("cuEventQuery", cuEventQuery, 2000),
    P("cuEventDestroy", cuEventDestroy_v2, 4000),
    P("cuStreamWaitEvent", cuStreamWaitEvent, 3020),
    T("cuStreamWaitEvent", cuStreamWaitEvent_ptsz, 7000),
    P("cuStreamWriteValue32", cuStreamWriteValue32, 8000),
    P("cuStreamWriteValue32", cuStreamWriteValue32_v2, 11070),
    T("cuStreamWriteValue32", cuStreamWriteValue32_v2_ptsz, 11070),
    P("cuStreamWriteValue64", cuStreamWriteValue64, 9000),
    P("cuStreamWriteValue64", cuStreamWriteValue64_v2, 11070),
    T("cuStreamWriteValue64", cuStreamWriteValue64_v2_ptsz, 11070),
};

/* The newest row for api at or before version, among per-thread rows or
 * among the others. */
static const struct fc_proc *newest(const char *api, int version, bool per_thread)
{
    const struct fc_proc *best = NULL;
    for (size_t i = 0; i < sizeof procs / sizeof procs[0]; i++) {
        const struct fc_proc *p = &procs[i];
        if (p->per_thread != per_thread || p->version > version || strcmp(p->api, api) != 0)
            continue;
        if (!best || p->version > best->version)
            best = p;
    }
    return best;
}

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *symbolStatus)
{
    if (!symbol || !pfn || flags > CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)
        return CUDA_ERROR_INVALID_VALUE;
    *pfn = NULL;
    bool known = false;
    for (size_t i = 0; i < sizeof procs / sizeof procs[0] && !known; i++)
        known = strcmp(procs[i].api, symbol) == 0;
    if (!known) {
        if (symbolStatus)
            *symbolStatus = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        return CUDA_ERROR_NOT_FOUND;
    }
    const struct fc_proc *p = NULL;
    if (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)
        p = newest(symbol, cudaVersion, true);
    if (!p)
        p = newest(symbol, cudaVersion, false);
    if (!p) {
        if (symbolStatus)
            *symbolStatus = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
        return CUDA_ERROR_NOT_FOUND;
    }
    *pfn = p->fn;
    if (symbolStatus)
        *symbolStatus = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
}

CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    return cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, NULL);
}
