/*
 * The one table of driver entry points cudump wraps.
 *
 * A family is one API whose variants share an ABI. CUDUMP_P_<family> is its
 * parameter list and CUDUMP_A_<family> the matching argument list; each
 * family has one hook, `hook_<family>`, in hooks.c (or interpose.c), which
 * receives the real pointer of the exact variant called and whether that
 * variant is a per-thread-default-stream (`_ptsz`) one.
 *
 * VARIANT(symbol, family, ptsz) is one symbol the real driver exports. For
 * each, interpose.c generates a wrapper that calls `hook_<family>` with the
 * real `symbol`, exports it under the same name (for programs linked with
 * -lcuda), and hands it out from dlsym and cuGetProcAddress when the real
 * lookup returned the real `symbol`'s address. Variants with another ABI
 * (cuMemAlloc v1 with 32-bit pointers, cuStreamBeginCapture v1) are
 * deliberately absent: their pointers pass through untouched.
 */

#define CUDUMP_APPLY(macro, args) macro args
#define CUDUMP_UNPAREN(...) __VA_ARGS__
/* ", a, b" after a hook's own leading parameters; nothing for an empty list. */
#define CUDUMP_TAIL(...) __VA_OPT__(, ) __VA_ARGS__

#define CUDUMP_P_cuInit (unsigned int flags)
#define CUDUMP_A_cuInit (flags)
#define CUDUMP_P_cuGetProcAddress (const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
#define CUDUMP_A_cuGetProcAddress (symbol, pfn, cudaVersion, flags)
#define CUDUMP_P_cuGetProcAddress_v2                                            \
    (const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,         \
     CUdriverProcAddressQueryResult *status)
#define CUDUMP_A_cuGetProcAddress_v2 (symbol, pfn, cudaVersion, flags, status)
#define CUDUMP_P_cuModuleGetFunction (CUfunction *hfunc, CUmodule hmod, const char *name)
#define CUDUMP_A_cuModuleGetFunction (hfunc, hmod, name)
#define CUDUMP_P_cuLibraryGetKernel (CUkernel *pKernel, CUlibrary library, const char *name)
#define CUDUMP_A_cuLibraryGetKernel (pKernel, library, name)
#define CUDUMP_P_cuModuleLoadData (CUmodule *module, const void *image)
#define CUDUMP_A_cuModuleLoadData (module, image)
#define CUDUMP_P_cuModuleLoadDataEx                                             \
    (CUmodule *module, const void *image, unsigned int numOptions, int *options, \
     void **optionValues)
#define CUDUMP_A_cuModuleLoadDataEx (module, image, numOptions, options, optionValues)
#define CUDUMP_P_cuModuleLoadFatBinary (CUmodule *module, const void *fatCubin)
#define CUDUMP_A_cuModuleLoadFatBinary (module, fatCubin)
#define CUDUMP_P_cuModuleLoad (CUmodule *module, const char *fname)
#define CUDUMP_A_cuModuleLoad (module, fname)
#define CUDUMP_P_cuLibraryLoadData                                              \
    (CUlibrary *library, const void *code, int *jitOptions, void **jitOptionsValues, \
     unsigned int numJitOptions, int *libraryOptions, void **libraryOptionValues,   \
     unsigned int numLibraryOptions)
#define CUDUMP_A_cuLibraryLoadData                                              \
    (library, code, jitOptions, jitOptionsValues, numJitOptions, libraryOptions,   \
     libraryOptionValues, numLibraryOptions)
#define CUDUMP_P_cuLibraryLoadFromFile                                          \
    (CUlibrary *library, const char *fileName, int *jitOptions, void **jitOptionsValues, \
     unsigned int numJitOptions, int *libraryOptions, void **libraryOptionValues,   \
     unsigned int numLibraryOptions)
#define CUDUMP_A_cuLibraryLoadFromFile                                          \
    (library, fileName, jitOptions, jitOptionsValues, numJitOptions, libraryOptions, \
     libraryOptionValues, numLibraryOptions)
#define CUDUMP_P_cuKernelGetFunction (CUfunction *pFunc, CUkernel kernel)
#define CUDUMP_A_cuKernelGetFunction (pFunc, kernel)
#define CUDUMP_P_cuMemAlloc (CUdeviceptr *dptr, size_t bytesize)
#define CUDUMP_A_cuMemAlloc (dptr, bytesize)
#define CUDUMP_P_cuMemAllocPitch                                                \
    (CUdeviceptr *dptr, size_t *pPitch, size_t widthInBytes, size_t height,     \
     unsigned int elementSizeBytes)
#define CUDUMP_A_cuMemAllocPitch (dptr, pPitch, widthInBytes, height, elementSizeBytes)
#define CUDUMP_P_cuMemAllocManaged (CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
#define CUDUMP_A_cuMemAllocManaged (dptr, bytesize, flags)
#define CUDUMP_P_cuMemGetInfo (size_t *free, size_t *total)
#define CUDUMP_A_cuMemGetInfo (free, total)
#define CUDUMP_P_cuMemAllocAsync (CUdeviceptr *dptr, size_t bytesize, CUstream stream)
#define CUDUMP_A_cuMemAllocAsync (dptr, bytesize, stream)
#define CUDUMP_P_cuMemAllocFromPoolAsync                                        \
    (CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream stream)
#define CUDUMP_A_cuMemAllocFromPoolAsync (dptr, bytesize, pool, stream)
#define CUDUMP_P_cuMemFree (CUdeviceptr dptr)
#define CUDUMP_A_cuMemFree (dptr)
#define CUDUMP_P_cuMemFreeAsync (CUdeviceptr dptr, CUstream stream)
#define CUDUMP_A_cuMemFreeAsync (dptr, stream)
#define CUDUMP_P_cuMemMap                                                       \
    (CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle, \
     unsigned long long flags)
#define CUDUMP_A_cuMemMap (ptr, size, offset, handle, flags)
#define CUDUMP_P_cuMemCreate                                                    \
    (CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop, \
     unsigned long long flags)
#define CUDUMP_A_cuMemCreate (handle, size, prop, flags)
#define CUDUMP_P_cuMemRelease (CUmemGenericAllocationHandle handle)
#define CUDUMP_A_cuMemRelease (handle)
#define CUDUMP_P_cuMemUnmap (CUdeviceptr ptr, size_t size)
#define CUDUMP_A_cuMemUnmap (ptr, size)
#define CUDUMP_P_cuMemAllocHost (void **pp, size_t bytesize)
#define CUDUMP_A_cuMemAllocHost (pp, bytesize)
#define CUDUMP_P_cuMemHostAlloc (void **pp, size_t bytesize, unsigned int flags)
#define CUDUMP_A_cuMemHostAlloc (pp, bytesize, flags)
#define CUDUMP_P_cuMemFreeHost (void *p)
#define CUDUMP_A_cuMemFreeHost (p)
#define CUDUMP_P_cuLaunchKernel                                                 \
    (CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,           \
     unsigned int bx, unsigned int by, unsigned int bz, unsigned int smem,      \
     CUstream stream, void **params, void **extra)
#define CUDUMP_A_cuLaunchKernel (f, gx, gy, gz, bx, by, bz, smem, stream, params, extra)
#define CUDUMP_P_cuLaunchCooperativeKernel                                      \
    (CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,           \
     unsigned int bx, unsigned int by, unsigned int bz, unsigned int smem,      \
     CUstream stream, void **params)
#define CUDUMP_A_cuLaunchCooperativeKernel (f, gx, gy, gz, bx, by, bz, smem, stream, params)
#define CUDUMP_P_cuLaunchKernelEx                                               \
    (const CUlaunchConfig *config, CUfunction f, void **params, void **extra)
#define CUDUMP_A_cuLaunchKernelEx (config, f, params, extra)
/* The program's waits for the GPU. cuCtxSynchronize takes nothing: its lists
 * are empty, and the hook's tail (CUDUMP_TAIL in shim.h) leaves the comma out. */
#define CUDUMP_P_cuCtxSynchronize ()
#define CUDUMP_A_cuCtxSynchronize ()
#define CUDUMP_P_cuCtxSynchronize_v2 (CUcontext ctx)
#define CUDUMP_A_cuCtxSynchronize_v2 (ctx)
/* A context destroyed or reset (a primary context released for the last time is
 * destroyed): it must not be under the launcher thread's launch (handoff.h), and
 * what the shim made in it is gone with it (ctxlife.h). */
#define CUDUMP_P_cuCtxDestroy (CUcontext ctx)
#define CUDUMP_A_cuCtxDestroy (ctx)
#define CUDUMP_P_cuDevicePrimaryCtxRelease (CUdevice dev)
#define CUDUMP_A_cuDevicePrimaryCtxRelease (dev)
#define CUDUMP_P_cuDevicePrimaryCtxReset (CUdevice dev)
#define CUDUMP_A_cuDevicePrimaryCtxReset (dev)
#define CUDUMP_P_cuStreamSynchronize (CUstream stream)
#define CUDUMP_A_cuStreamSynchronize (stream)
#define CUDUMP_P_cuEventSynchronize (CUevent event)
#define CUDUMP_A_cuEventSynchronize (event)
#define CUDUMP_P_cuMemcpyDtoH (void *dst, CUdeviceptr src, size_t bytes)
#define CUDUMP_A_cuMemcpyDtoH (dst, src, bytes)
/* The program's synchronous copies, which wait for the GPU inside the driver. */
#define CUDUMP_P_cuMemcpyHtoD (CUdeviceptr dst, const void *src, size_t bytes)
#define CUDUMP_A_cuMemcpyHtoD (dst, src, bytes)
#define CUDUMP_P_cuMemcpyDtoD (CUdeviceptr dst, CUdeviceptr src, size_t bytes)
#define CUDUMP_A_cuMemcpyDtoD (dst, src, bytes)
#define CUDUMP_P_cuMemcpy (CUdeviceptr dst, CUdeviceptr src, size_t bytes)
#define CUDUMP_A_cuMemcpy (dst, src, bytes)
#define CUDUMP_P_cuMemcpy2D (const CUDA_MEMCPY2D *copy)
#define CUDUMP_A_cuMemcpy2D (copy)
#define CUDUMP_P_cuMemcpy2DUnaligned (const CUDA_MEMCPY2D *copy)
#define CUDUMP_A_cuMemcpy2DUnaligned (copy)
#define CUDUMP_P_cuMemcpy3D (const CUDA_MEMCPY3D *copy)
#define CUDUMP_A_cuMemcpy3D (copy)
/* The program's writes from the host that do not wait (and its memsets): recorded
 * for NaN/Inf scans (hostwrite.c), passed straight on otherwise. Each family is
 * named as cuda.h names the API (tests/test_cudecl.py checks the lists against it). */
#define CUDUMP_P_cuMemcpyHtoDAsync                                              \
    (CUdeviceptr dst, const void *src, size_t bytes, CUstream stream)
#define CUDUMP_A_cuMemcpyHtoDAsync (dst, src, bytes, stream)
#define CUDUMP_P_cuMemcpy2DAsync (const CUDA_MEMCPY2D *copy, CUstream stream)
#define CUDUMP_A_cuMemcpy2DAsync (copy, stream)
#define CUDUMP_P_cuMemcpy3DAsync (const CUDA_MEMCPY3D *copy, CUstream stream)
#define CUDUMP_A_cuMemcpy3DAsync (copy, stream)
#define CUDUMP_P_cuMemsetD8 (CUdeviceptr dst, unsigned char value, size_t n)
#define CUDUMP_A_cuMemsetD8 (dst, value, n)
#define CUDUMP_P_cuMemsetD16 (CUdeviceptr dst, unsigned short value, size_t n)
#define CUDUMP_A_cuMemsetD16 (dst, value, n)
#define CUDUMP_P_cuMemsetD32 (CUdeviceptr dst, unsigned int value, size_t n)
#define CUDUMP_A_cuMemsetD32 (dst, value, n)
#define CUDUMP_P_cuMemsetD8Async (CUdeviceptr dst, unsigned char value, size_t n, CUstream stream)
#define CUDUMP_A_cuMemsetD8Async (dst, value, n, stream)
#define CUDUMP_P_cuMemsetD16Async                                               \
    (CUdeviceptr dst, unsigned short value, size_t n, CUstream stream)
#define CUDUMP_A_cuMemsetD16Async (dst, value, n, stream)
#define CUDUMP_P_cuMemsetD32Async (CUdeviceptr dst, unsigned int value, size_t n, CUstream stream)
#define CUDUMP_A_cuMemsetD32Async (dst, value, n, stream)
#define CUDUMP_P_cuMemsetD2D8                                                   \
    (CUdeviceptr dst, size_t pitch, unsigned char value, size_t width, size_t height)
#define CUDUMP_A_cuMemsetD2D8 (dst, pitch, value, width, height)
#define CUDUMP_P_cuMemsetD2D16                                                  \
    (CUdeviceptr dst, size_t pitch, unsigned short value, size_t width, size_t height)
#define CUDUMP_A_cuMemsetD2D16 (dst, pitch, value, width, height)
#define CUDUMP_P_cuMemsetD2D32                                                  \
    (CUdeviceptr dst, size_t pitch, unsigned int value, size_t width, size_t height)
#define CUDUMP_A_cuMemsetD2D32 (dst, pitch, value, width, height)
#define CUDUMP_P_cuMemsetD2D8Async                                              \
    (CUdeviceptr dst, size_t pitch, unsigned char value, size_t width, size_t height,  \
     CUstream stream)
#define CUDUMP_A_cuMemsetD2D8Async (dst, pitch, value, width, height, stream)
#define CUDUMP_P_cuMemsetD2D16Async                                             \
    (CUdeviceptr dst, size_t pitch, unsigned short value, size_t width, size_t height, \
     CUstream stream)
#define CUDUMP_A_cuMemsetD2D16Async (dst, pitch, value, width, height, stream)
#define CUDUMP_P_cuMemsetD2D32Async                                             \
    (CUdeviceptr dst, size_t pitch, unsigned int value, size_t width, size_t height,   \
     CUstream stream)
#define CUDUMP_A_cuMemsetD2D32Async (dst, pitch, value, width, height, stream)
#define CUDUMP_P_cuGraphLaunch (CUgraphExec exec, CUstream stream)
#define CUDUMP_A_cuGraphLaunch (exec, stream)
#define CUDUMP_P_cuStreamBeginCapture (CUstream stream, CUstreamCaptureMode mode)
#define CUDUMP_A_cuStreamBeginCapture (stream, mode)
#define CUDUMP_P_cuStreamBeginCaptureToGraph                                   \
    (CUstream stream, CUgraph graph, const CUgraphNode *deps, const void *depData,     \
     size_t numDeps, CUstreamCaptureMode mode)
#define CUDUMP_A_cuStreamBeginCaptureToGraph (stream, graph, deps, depData, numDeps, mode)
#define CUDUMP_P_cuStreamEndCapture (CUstream stream, void **graph)
#define CUDUMP_A_cuStreamEndCapture (stream, graph)
#define CUDUMP_P_cuGraphInstantiateWithFlags                                    \
    (CUgraphExec *exec, CUgraph graph, unsigned long long flags)
#define CUDUMP_A_cuGraphInstantiateWithFlags (exec, graph, flags)
/* The pre-12.0 form that cuGetProcAddress still gives for "cuGraphInstantiate". */
#define CUDUMP_P_cuGraphInstantiate                                             \
    (CUgraphExec *exec, CUgraph graph, CUgraphNode *errorNode, char *log, size_t logSize)
#define CUDUMP_A_cuGraphInstantiate (exec, graph, errorNode, log, logSize)
#define CUDUMP_P_cuGraphInstantiateWithParams                                   \
    (CUgraphExec *exec, CUgraph graph, CUDA_GRAPH_INSTANTIATE_PARAMS *params)
#define CUDUMP_A_cuGraphInstantiateWithParams (exec, graph, params)
#define CUDUMP_P_cuGraphExecDestroy (CUgraphExec exec)
#define CUDUMP_A_cuGraphExecDestroy (exec)
#define CUDUMP_P_cuGraphExecKernelNodeSetParams                                 \
    (CUgraphExec exec, CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS *params)
#define CUDUMP_A_cuGraphExecKernelNodeSetParams (exec, node, params)
#define CUDUMP_P_cuGraphExecUpdate (CUgraphExec exec, CUgraph graph, void *resultInfo)
#define CUDUMP_A_cuGraphExecUpdate (exec, graph, resultInfo)

/* TMA tensor maps: encoded into the caller's memory, remembered by their bytes (tensormap.c). */
#define CUDUMP_P_cuTensorMapEncodeTiled                                         \
    (CUtensorMap *tensorMap, CUtensorMapDataType tensorDataType, cuuint32_t tensorRank, \
     void *globalAddress, const cuuint64_t *globalDim, const cuuint64_t *globalStrides, \
     const cuuint32_t *boxDim, const cuuint32_t *elementStrides,                \
     CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,              \
     CUtensorMapL2promotion l2Promotion, CUtensorMapFloatOOBfill oobFill)
#define CUDUMP_A_cuTensorMapEncodeTiled                                         \
    (tensorMap, tensorDataType, tensorRank, globalAddress, globalDim, globalStrides, boxDim, \
     elementStrides, interleave, swizzle, l2Promotion, oobFill)
#define CUDUMP_P_cuTensorMapEncodeIm2col                                        \
    (CUtensorMap *tensorMap, CUtensorMapDataType tensorDataType, cuuint32_t tensorRank, \
     void *globalAddress, const cuuint64_t *globalDim, const cuuint64_t *globalStrides, \
     const int *pixelBoxLowerCorner, const int *pixelBoxUpperCorner,            \
     cuuint32_t channelsPerPixel, cuuint32_t pixelsPerColumn,                   \
     const cuuint32_t *elementStrides, CUtensorMapInterleave interleave,        \
     CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2Promotion,            \
     CUtensorMapFloatOOBfill oobFill)
#define CUDUMP_A_cuTensorMapEncodeIm2col                                        \
    (tensorMap, tensorDataType, tensorRank, globalAddress, globalDim, globalStrides, \
     pixelBoxLowerCorner, pixelBoxUpperCorner, channelsPerPixel, pixelsPerColumn,  \
     elementStrides, interleave, swizzle, l2Promotion, oobFill)
#define CUDUMP_P_cuTensorMapEncodeIm2colWide                                    \
    (CUtensorMap *tensorMap, CUtensorMapDataType tensorDataType, cuuint32_t tensorRank, \
     void *globalAddress, const cuuint64_t *globalDim, const cuuint64_t *globalStrides, \
     int pixelBoxLowerCornerWidth, int pixelBoxUpperCornerWidth,                \
     cuuint32_t channelsPerPixel, cuuint32_t pixelsPerColumn,                   \
     const cuuint32_t *elementStrides, CUtensorMapInterleave interleave,        \
     CUtensorMapIm2ColWideMode mode, CUtensorMapSwizzle swizzle,                \
     CUtensorMapL2promotion l2Promotion, CUtensorMapFloatOOBfill oobFill)
#define CUDUMP_A_cuTensorMapEncodeIm2colWide                                    \
    (tensorMap, tensorDataType, tensorRank, globalAddress, globalDim, globalStrides, \
     pixelBoxLowerCornerWidth, pixelBoxUpperCornerWidth, channelsPerPixel,         \
     pixelsPerColumn, elementStrides, interleave, mode, swizzle, l2Promotion, oobFill)
#define CUDUMP_P_cuTensorMapReplaceAddress (CUtensorMap *tensorMap, void *globalAddress)
#define CUDUMP_A_cuTensorMapReplaceAddress (tensorMap, globalAddress)

/* The program's other calls that put work on a stream or move bytes, and its
 * queries: nothing is done around them but counting them (calls.h), so that
 * scans ahead (ahead.h) know that something came between two launches. Their
 * hooks are generated (hooks.c: CUDUMP_PASSED). */
#define CUDUMP_P_cuMemcpyAsync (CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream)
#define CUDUMP_A_cuMemcpyAsync (dst, src, bytes, stream)
#define CUDUMP_P_cuMemcpyDtoDAsync                                              \
    (CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream)
#define CUDUMP_A_cuMemcpyDtoDAsync (dst, src, bytes, stream)
#define CUDUMP_P_cuMemcpyDtoHAsync (void *dst, CUdeviceptr src, size_t bytes, CUstream stream)
#define CUDUMP_A_cuMemcpyDtoHAsync (dst, src, bytes, stream)
#define CUDUMP_P_cuMemcpyPeer                                                   \
    (CUdeviceptr dst, CUcontext dstCtx, CUdeviceptr src, CUcontext srcCtx, size_t bytes)
#define CUDUMP_A_cuMemcpyPeer (dst, dstCtx, src, srcCtx, bytes)
#define CUDUMP_P_cuMemcpyPeerAsync                                              \
    (CUdeviceptr dst, CUcontext dstCtx, CUdeviceptr src, CUcontext srcCtx, size_t bytes, \
     CUstream stream)
#define CUDUMP_A_cuMemcpyPeerAsync (dst, dstCtx, src, srcCtx, bytes, stream)
#define CUDUMP_P_cuMemcpy3DPeer (const CUDA_MEMCPY3D_PEER *copy)
#define CUDUMP_A_cuMemcpy3DPeer (copy)
#define CUDUMP_P_cuMemcpy3DPeerAsync (const CUDA_MEMCPY3D_PEER *copy, CUstream stream)
#define CUDUMP_A_cuMemcpy3DPeerAsync (copy, stream)
#define CUDUMP_P_cuMemcpyAtoD                                                   \
    (CUdeviceptr dst, CUarray src, size_t srcOffset, size_t bytes)
#define CUDUMP_A_cuMemcpyAtoD (dst, src, srcOffset, bytes)
#define CUDUMP_P_cuMemcpyBatchAsync                                             \
    (CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,         \
     CUmemcpyAttributes *attrs, size_t *attrsIdxs, size_t numAttrs, CUstream stream)
#define CUDUMP_A_cuMemcpyBatchAsync                                             \
    (dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, stream)
#define CUDUMP_P_cuMemcpy3DBatchAsync                                           \
    (size_t numOps, CUDA_MEMCPY3D_BATCH_OP *opList, unsigned long long flags, CUstream stream)
#define CUDUMP_A_cuMemcpy3DBatchAsync (numOps, opList, flags, stream)
/* The CUDA 12.8 forms of the two (cuda.h's own names for them now end in _v2). */
#define CUDUMP_P_cuMemcpyBatchAsync_v1                                          \
    (CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,         \
     CUmemcpyAttributes *attrs, size_t *attrsIdxs, size_t numAttrs, size_t *failIdx, \
     CUstream stream)
#define CUDUMP_A_cuMemcpyBatchAsync_v1                                          \
    (dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, failIdx, stream)
#define CUDUMP_P_cuMemcpy3DBatchAsync_v1                                        \
    (size_t numOps, CUDA_MEMCPY3D_BATCH_OP *opList, size_t *failIdx, unsigned long long flags, \
     CUstream stream)
#define CUDUMP_A_cuMemcpy3DBatchAsync_v1 (numOps, opList, failIdx, flags, stream)
#define CUDUMP_P_cuEventRecord (CUevent event, CUstream stream)
#define CUDUMP_A_cuEventRecord (event, stream)
#define CUDUMP_P_cuEventRecordWithFlags (CUevent event, CUstream stream, unsigned int flags)
#define CUDUMP_A_cuEventRecordWithFlags (event, stream, flags)
#define CUDUMP_P_cuStreamWaitEvent (CUstream stream, CUevent event, unsigned int flags)
#define CUDUMP_A_cuStreamWaitEvent (stream, event, flags)
#define CUDUMP_P_cuLaunchHostFunc (CUstream stream, CUhostFn fn, void *userData)
#define CUDUMP_A_cuLaunchHostFunc (stream, fn, userData)
#define CUDUMP_P_cuStreamWriteValue32                                           \
    (CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags)
#define CUDUMP_A_cuStreamWriteValue32 (stream, addr, value, flags)
#define CUDUMP_P_cuStreamWriteValue64                                           \
    (CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags)
#define CUDUMP_A_cuStreamWriteValue64 (stream, addr, value, flags)
#define CUDUMP_P_cuStreamWaitValue32                                            \
    (CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags)
#define CUDUMP_A_cuStreamWaitValue32 (stream, addr, value, flags)
#define CUDUMP_P_cuStreamWaitValue64                                            \
    (CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags)
#define CUDUMP_A_cuStreamWaitValue64 (stream, addr, value, flags)
#define CUDUMP_P_cuStreamBatchMemOp                                             \
    (CUstream stream, unsigned int count, CUstreamBatchMemOpParams *paramArray,   \
     unsigned int flags)
#define CUDUMP_A_cuStreamBatchMemOp (stream, count, paramArray, flags)
#define CUDUMP_P_cuWaitExternalSemaphoresAsync                                  \
    (const CUexternalSemaphore *extSemArray,                                      \
     const CUDA_EXTERNAL_SEMAPHORE_WAIT_PARAMS *paramsArray, unsigned int numExtSems, \
     CUstream stream)
#define CUDUMP_A_cuWaitExternalSemaphoresAsync (extSemArray, paramsArray, numExtSems, stream)
#define CUDUMP_P_cuStreamAddCallback                                            \
    (CUstream stream, CUstreamCallback callback, void *userData, unsigned int flags)
#define CUDUMP_A_cuStreamAddCallback (stream, callback, userData, flags)
#define CUDUMP_P_cuGraphicsMapResources                                         \
    (unsigned int count, CUgraphicsResource *resources, CUstream stream)
#define CUDUMP_A_cuGraphicsMapResources (count, resources, stream)
#define CUDUMP_P_cuGraphicsUnmapResources                                       \
    (unsigned int count, CUgraphicsResource *resources, CUstream stream)
#define CUDUMP_A_cuGraphicsUnmapResources (count, resources, stream)
/* A stream destroyed and another made: the new one may have the old one's handle. */
#define CUDUMP_P_cuStreamCreate (CUstream *stream, unsigned int flags)
#define CUDUMP_A_cuStreamCreate (stream, flags)
#define CUDUMP_P_cuStreamCreateWithPriority (CUstream *stream, unsigned int flags, int priority)
#define CUDUMP_A_cuStreamCreateWithPriority (stream, flags, priority)
#define CUDUMP_P_cuStreamDestroy (CUstream stream)
#define CUDUMP_A_cuStreamDestroy (stream)
#define CUDUMP_P_cuStreamQuery (CUstream stream)
#define CUDUMP_A_cuStreamQuery (stream)
#define CUDUMP_P_cuEventQuery (CUevent event)
#define CUDUMP_A_cuEventQuery (event)
/* A semaphore signalled after a launch tells another API the launch is done:
 * it waits for a launch handed over (handoff.h) first, as every counted call does. */
#define CUDUMP_P_cuSignalExternalSemaphoresAsync                                \
    (const CUexternalSemaphore *extSemArray,                                      \
     const CUDA_EXTERNAL_SEMAPHORE_SIGNAL_PARAMS *paramsArray, unsigned int numExtSems, \
     CUstream stream)
#define CUDUMP_A_cuSignalExternalSemaphoresAsync (extSemArray, paramsArray, numExtSems, stream)

/* The families whose hooks only pass the call on (and are counted around it). */
#define CUDUMP_PASSED(F)                                                                \
    F(cuMemcpyAsync) F(cuMemcpyDtoDAsync) F(cuMemcpyDtoHAsync) F(cuMemcpyPeer)            \
    F(cuMemcpyPeerAsync) F(cuMemcpy3DPeer) F(cuMemcpy3DPeerAsync) F(cuMemcpyAtoD)          \
    F(cuMemcpyBatchAsync) F(cuMemcpy3DBatchAsync) F(cuMemcpyBatchAsync_v1)               \
    F(cuMemcpy3DBatchAsync_v1) F(cuEventRecord) F(cuEventRecordWithFlags) \
    F(cuStreamWaitEvent) F(cuLaunchHostFunc) F(cuStreamWriteValue32) F(cuStreamWriteValue64) \
    F(cuStreamWaitValue32) F(cuStreamWaitValue64) F(cuStreamBatchMemOp)                   \
    F(cuWaitExternalSemaphoresAsync) F(cuStreamAddCallback) F(cuGraphicsMapResources)         \
    F(cuGraphicsUnmapResources) F(cuStreamCreate) F(cuStreamCreateWithPriority)            \
    F(cuStreamDestroy) F(cuStreamQuery) F(cuEventQuery) F(cuSignalExternalSemaphoresAsync)

/* What a family is, for the counting (calls.h), by the probe idiom:
 * CUDUMP_IS(CUDUMP_WAITS_, f) is 1 where CUDUMP_WAITS_f is defined as `~, 1`,
 * else 0. A wait or a query puts nothing on a stream; a kernel launch does not
 * void the scans ahead (the launch pipeline decides whether it uses them). A
 * host-only call is not counted at all: it works on the host's own memory and
 * the driver's tables, neither touches device memory nor puts work on a stream,
 * and libraries make some between two launches (cuDNN and cuBLASLt encode a
 * Hopper kernel's tensor maps right before its launch, each time). */
#define CUDUMP_SECOND_(a, b, ...) b
#define CUDUMP_SECOND(...) CUDUMP_SECOND_(__VA_ARGS__)
#define CUDUMP_IS(attribute, family) CUDUMP_SECOND(attribute##family, 0, ~)
#define CUDUMP_WAITS_cuCtxSynchronize ~, 1
#define CUDUMP_WAITS_cuCtxSynchronize_v2 ~, 1
#define CUDUMP_WAITS_cuStreamSynchronize ~, 1
#define CUDUMP_WAITS_cuEventSynchronize ~, 1
#define CUDUMP_WAITS_cuStreamQuery ~, 1
#define CUDUMP_WAITS_cuEventQuery ~, 1
#define CUDUMP_LAUNCHES_cuLaunchKernel ~, 1
#define CUDUMP_LAUNCHES_cuLaunchCooperativeKernel ~, 1
#define CUDUMP_LAUNCHES_cuLaunchKernelEx ~, 1
#define CUDUMP_HOST_ONLY_cuGetProcAddress ~, 1
#define CUDUMP_HOST_ONLY_cuGetProcAddress_v2 ~, 1
#define CUDUMP_HOST_ONLY_cuModuleGetFunction ~, 1
#define CUDUMP_HOST_ONLY_cuLibraryGetKernel ~, 1
#define CUDUMP_HOST_ONLY_cuKernelGetFunction ~, 1
#define CUDUMP_HOST_ONLY_cuTensorMapEncodeTiled ~, 1
#define CUDUMP_HOST_ONLY_cuTensorMapEncodeIm2col ~, 1
#define CUDUMP_HOST_ONLY_cuTensorMapEncodeIm2colWide ~, 1
#define CUDUMP_HOST_ONLY_cuTensorMapReplaceAddress ~, 1
#define CUDUMP_HOST_ONLY_cuMemGetInfo ~, 1

#define CUDUMP_FAMILIES(F)                                                           \
    F(cuInit) F(cuGetProcAddress) F(cuGetProcAddress_v2) F(cuModuleGetFunction)       \
    F(cuModuleLoadData) F(cuModuleLoadDataEx) F(cuModuleLoadFatBinary) F(cuModuleLoad)  \
    F(cuLibraryLoadData) F(cuLibraryLoadFromFile)                                      \
    F(cuLibraryGetKernel) F(cuKernelGetFunction) F(cuMemAlloc) F(cuMemAllocPitch)     \
    F(cuMemAllocManaged) F(cuMemAllocAsync) F(cuMemAllocFromPoolAsync) F(cuMemFree)   \
    F(cuMemGetInfo)                                                                   \
    F(cuMemFreeAsync) F(cuMemCreate) F(cuMemRelease) F(cuMemMap) F(cuMemUnmap) F(cuMemAllocHost) F(cuMemHostAlloc)   \
    F(cuMemFreeHost) F(cuLaunchKernel) F(cuLaunchCooperativeKernel)                   \
    F(cuLaunchKernelEx) F(cuGraphLaunch) F(cuStreamBeginCapture) F(cuStreamEndCapture)   \
    F(cuStreamBeginCaptureToGraph)                                                       \
    F(cuGraphInstantiateWithFlags) F(cuGraphInstantiate) F(cuGraphInstantiateWithParams)  \
    F(cuGraphExecDestroy)                                                                \
    F(cuGraphExecKernelNodeSetParams) F(cuGraphExecUpdate)                              \
    F(cuCtxSynchronize) F(cuCtxSynchronize_v2) F(cuStreamSynchronize) F(cuEventSynchronize) \
    F(cuCtxDestroy) F(cuDevicePrimaryCtxRelease) F(cuDevicePrimaryCtxReset)                 \
    F(cuMemcpyDtoH) F(cuMemcpyHtoD) F(cuMemcpyDtoD) F(cuMemcpy) F(cuMemcpy2D)             \
    F(cuMemcpy2DUnaligned) F(cuMemcpy3D)                                                   \
    F(cuMemcpyHtoDAsync) F(cuMemcpy2DAsync) F(cuMemcpy3DAsync) F(cuMemsetD8) F(cuMemsetD16)  \
    F(cuMemsetD32) F(cuMemsetD8Async) F(cuMemsetD16Async) F(cuMemsetD32Async)               \
    F(cuMemsetD2D8) F(cuMemsetD2D16) F(cuMemsetD2D32) F(cuMemsetD2D8Async)                  \
    F(cuMemsetD2D16Async) F(cuMemsetD2D32Async)                                             \
    F(cuTensorMapEncodeTiled) F(cuTensorMapEncodeIm2col) F(cuTensorMapEncodeIm2colWide)    \
    F(cuTensorMapReplaceAddress) CUDUMP_PASSED(F)

#define CUDUMP_VARIANTS(VARIANT)                                           \
    VARIANT(cuInit, cuInit, 0)                                             \
    VARIANT(cuGetProcAddress, cuGetProcAddress, 0)                         \
    VARIANT(cuGetProcAddress_v2, cuGetProcAddress_v2, 0)                   \
    VARIANT(cuModuleGetFunction, cuModuleGetFunction, 0)                   \
    VARIANT(cuLibraryGetKernel, cuLibraryGetKernel, 0)                     \
    VARIANT(cuModuleLoadData, cuModuleLoadData, 0)                         \
    VARIANT(cuModuleLoadDataEx, cuModuleLoadDataEx, 0)                     \
    VARIANT(cuModuleLoadFatBinary, cuModuleLoadFatBinary, 0)               \
    VARIANT(cuModuleLoad, cuModuleLoad, 0)                                 \
    VARIANT(cuLibraryLoadData, cuLibraryLoadData, 0)                       \
    VARIANT(cuLibraryLoadFromFile, cuLibraryLoadFromFile, 0)               \
    VARIANT(cuKernelGetFunction, cuKernelGetFunction, 0)                   \
    VARIANT(cuMemAlloc_v2, cuMemAlloc, 0)                                  \
    VARIANT(cuMemAllocPitch_v2, cuMemAllocPitch, 0)                        \
    VARIANT(cuMemAllocManaged, cuMemAllocManaged, 0)                       \
    VARIANT(cuMemGetInfo_v2, cuMemGetInfo, 0)                              \
    VARIANT(cuMemAllocAsync, cuMemAllocAsync, 0)                           \
    VARIANT(cuMemAllocAsync_ptsz, cuMemAllocAsync, 1)                      \
    VARIANT(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync, 0)           \
    VARIANT(cuMemAllocFromPoolAsync_ptsz, cuMemAllocFromPoolAsync, 1)      \
    VARIANT(cuMemFree_v2, cuMemFree, 0)                                    \
    VARIANT(cuMemFreeAsync, cuMemFreeAsync, 0)                             \
    VARIANT(cuMemFreeAsync_ptsz, cuMemFreeAsync, 1)                        \
    VARIANT(cuMemCreate, cuMemCreate, 0)                                   \
    VARIANT(cuMemRelease, cuMemRelease, 0)                                 \
    VARIANT(cuMemMap, cuMemMap, 0)                                         \
    VARIANT(cuMemUnmap, cuMemUnmap, 0)                                     \
    VARIANT(cuMemAllocHost_v2, cuMemAllocHost, 0)                          \
    VARIANT(cuMemHostAlloc, cuMemHostAlloc, 0)                             \
    VARIANT(cuMemFreeHost, cuMemFreeHost, 0)                               \
    VARIANT(cuLaunchKernel, cuLaunchKernel, 0)                             \
    VARIANT(cuLaunchKernel_ptsz, cuLaunchKernel, 1)                        \
    VARIANT(cuLaunchCooperativeKernel, cuLaunchCooperativeKernel, 0)       \
    VARIANT(cuLaunchCooperativeKernel_ptsz, cuLaunchCooperativeKernel, 1)  \
    VARIANT(cuLaunchKernelEx, cuLaunchKernelEx, 0)                         \
    VARIANT(cuLaunchKernelEx_ptsz, cuLaunchKernelEx, 1)                    \
    VARIANT(cuGraphLaunch, cuGraphLaunch, 0)                               \
    VARIANT(cuGraphLaunch_ptsz, cuGraphLaunch, 1)                          \
    VARIANT(cuStreamBeginCapture_v2, cuStreamBeginCapture, 0)              \
    VARIANT(cuStreamBeginCapture_v2_ptsz, cuStreamBeginCapture, 1)         \
    VARIANT(cuStreamBeginCaptureToGraph, cuStreamBeginCaptureToGraph, 0)   \
    VARIANT(cuStreamBeginCaptureToGraph_ptsz, cuStreamBeginCaptureToGraph, 1) \
    VARIANT(cuStreamEndCapture, cuStreamEndCapture, 0)                     \
    VARIANT(cuStreamEndCapture_ptsz, cuStreamEndCapture, 1)                \
    VARIANT(cuGraphInstantiateWithFlags, cuGraphInstantiateWithFlags, 0)   \
    VARIANT(cuGraphInstantiate_v2, cuGraphInstantiate, 0)                  \
    VARIANT(cuGraphInstantiateWithParams, cuGraphInstantiateWithParams, 0) \
    VARIANT(cuGraphInstantiateWithParams_ptsz, cuGraphInstantiateWithParams, 1) \
    VARIANT(cuGraphExecDestroy, cuGraphExecDestroy, 0)                     \
    VARIANT(cuGraphExecKernelNodeSetParams_v2, cuGraphExecKernelNodeSetParams, 0) \
    VARIANT(cuGraphExecUpdate_v2, cuGraphExecUpdate, 0)                    \
    VARIANT(cuCtxSynchronize, cuCtxSynchronize, 0)                         \
    VARIANT(cuCtxSynchronize_v2, cuCtxSynchronize_v2, 0)                   \
    VARIANT(cuStreamSynchronize, cuStreamSynchronize, 0)                   \
    VARIANT(cuStreamSynchronize_ptsz, cuStreamSynchronize, 1)              \
    VARIANT(cuEventSynchronize, cuEventSynchronize, 0)                     \
    VARIANT(cuMemcpyDtoH_v2, cuMemcpyDtoH, 0)                              \
    VARIANT(cuMemcpyDtoH_v2_ptds, cuMemcpyDtoH, 1)                         \
    VARIANT(cuMemcpyHtoD_v2, cuMemcpyHtoD, 0)                              \
    VARIANT(cuMemcpyHtoD_v2_ptds, cuMemcpyHtoD, 1)                         \
    VARIANT(cuMemcpyDtoD_v2, cuMemcpyDtoD, 0)                              \
    VARIANT(cuMemcpyDtoD_v2_ptds, cuMemcpyDtoD, 1)                         \
    VARIANT(cuMemcpy, cuMemcpy, 0)                                         \
    VARIANT(cuMemcpy_ptds, cuMemcpy, 1)                                    \
    VARIANT(cuMemcpy2D_v2, cuMemcpy2D, 0)                                  \
    VARIANT(cuMemcpy2D_v2_ptds, cuMemcpy2D, 1)                             \
    VARIANT(cuMemcpy2DUnaligned_v2, cuMemcpy2DUnaligned, 0)                \
    VARIANT(cuMemcpy2DUnaligned_v2_ptds, cuMemcpy2DUnaligned, 1)           \
    VARIANT(cuMemcpy3D_v2, cuMemcpy3D, 0)                                  \
    VARIANT(cuMemcpy3D_v2_ptds, cuMemcpy3D, 1)                             \
    VARIANT(cuMemcpyHtoDAsync_v2, cuMemcpyHtoDAsync, 0)                    \
    VARIANT(cuMemcpyHtoDAsync_v2_ptsz, cuMemcpyHtoDAsync, 1)               \
    VARIANT(cuMemcpy2DAsync_v2, cuMemcpy2DAsync, 0)                        \
    VARIANT(cuMemcpy2DAsync_v2_ptsz, cuMemcpy2DAsync, 1)                   \
    VARIANT(cuMemcpy3DAsync_v2, cuMemcpy3DAsync, 0)                        \
    VARIANT(cuMemcpy3DAsync_v2_ptsz, cuMemcpy3DAsync, 1)                   \
    VARIANT(cuMemsetD8_v2, cuMemsetD8, 0)                                  \
    VARIANT(cuMemsetD8_v2_ptds, cuMemsetD8, 1)                             \
    VARIANT(cuMemsetD16_v2, cuMemsetD16, 0)                                \
    VARIANT(cuMemsetD16_v2_ptds, cuMemsetD16, 1)                           \
    VARIANT(cuMemsetD32_v2, cuMemsetD32, 0)                                \
    VARIANT(cuMemsetD32_v2_ptds, cuMemsetD32, 1)                           \
    VARIANT(cuMemsetD8Async, cuMemsetD8Async, 0)                           \
    VARIANT(cuMemsetD8Async_ptsz, cuMemsetD8Async, 1)                      \
    VARIANT(cuMemsetD16Async, cuMemsetD16Async, 0)                         \
    VARIANT(cuMemsetD16Async_ptsz, cuMemsetD16Async, 1)                    \
    VARIANT(cuMemsetD32Async, cuMemsetD32Async, 0)                         \
    VARIANT(cuMemsetD32Async_ptsz, cuMemsetD32Async, 1)                    \
    VARIANT(cuMemsetD2D8_v2, cuMemsetD2D8, 0)                              \
    VARIANT(cuMemsetD2D8_v2_ptds, cuMemsetD2D8, 1)                         \
    VARIANT(cuMemsetD2D16_v2, cuMemsetD2D16, 0)                            \
    VARIANT(cuMemsetD2D16_v2_ptds, cuMemsetD2D16, 1)                       \
    VARIANT(cuMemsetD2D32_v2, cuMemsetD2D32, 0)                            \
    VARIANT(cuMemsetD2D32_v2_ptds, cuMemsetD2D32, 1)                       \
    VARIANT(cuMemsetD2D8Async, cuMemsetD2D8Async, 0)                       \
    VARIANT(cuMemsetD2D8Async_ptsz, cuMemsetD2D8Async, 1)                  \
    VARIANT(cuMemsetD2D16Async, cuMemsetD2D16Async, 0)                     \
    VARIANT(cuMemsetD2D16Async_ptsz, cuMemsetD2D16Async, 1)                \
    VARIANT(cuMemsetD2D32Async, cuMemsetD2D32Async, 0)                     \
    VARIANT(cuMemsetD2D32Async_ptsz, cuMemsetD2D32Async, 1)                \
    VARIANT(cuTensorMapEncodeTiled, cuTensorMapEncodeTiled, 0)             \
    VARIANT(cuTensorMapEncodeIm2col, cuTensorMapEncodeIm2col, 0)           \
    VARIANT(cuTensorMapEncodeIm2colWide, cuTensorMapEncodeIm2colWide, 0)   \
    VARIANT(cuTensorMapReplaceAddress, cuTensorMapReplaceAddress, 0)   \
    VARIANT(cuMemcpyAsync, cuMemcpyAsync, 0)                               \
    VARIANT(cuMemcpyAsync_ptsz, cuMemcpyAsync, 1)                          \
    VARIANT(cuMemcpyDtoDAsync_v2, cuMemcpyDtoDAsync, 0)                    \
    VARIANT(cuMemcpyDtoDAsync_v2_ptsz, cuMemcpyDtoDAsync, 1)               \
    VARIANT(cuMemcpyDtoHAsync_v2, cuMemcpyDtoHAsync, 0)                    \
    VARIANT(cuMemcpyDtoHAsync_v2_ptsz, cuMemcpyDtoHAsync, 1)               \
    VARIANT(cuMemcpyPeer, cuMemcpyPeer, 0)                                 \
    VARIANT(cuMemcpyPeer_ptds, cuMemcpyPeer, 1)                            \
    VARIANT(cuMemcpyPeerAsync, cuMemcpyPeerAsync, 0)                       \
    VARIANT(cuMemcpyPeerAsync_ptsz, cuMemcpyPeerAsync, 1)                  \
    VARIANT(cuMemcpy3DPeer, cuMemcpy3DPeer, 0)                             \
    VARIANT(cuMemcpy3DPeer_ptds, cuMemcpy3DPeer, 1)                        \
    VARIANT(cuMemcpy3DPeerAsync, cuMemcpy3DPeerAsync, 0)                   \
    VARIANT(cuMemcpy3DPeerAsync_ptsz, cuMemcpy3DPeerAsync, 1)              \
    VARIANT(cuMemcpyAtoD_v2, cuMemcpyAtoD, 0)                              \
    VARIANT(cuMemcpyAtoD_v2_ptds, cuMemcpyAtoD, 1)                         \
    VARIANT(cuMemcpyBatchAsync_v2, cuMemcpyBatchAsync, 0)                  \
    VARIANT(cuMemcpyBatchAsync_v2_ptsz, cuMemcpyBatchAsync, 1)             \
    VARIANT(cuMemcpy3DBatchAsync_v2, cuMemcpy3DBatchAsync, 0)              \
    VARIANT(cuMemcpy3DBatchAsync_v2_ptsz, cuMemcpy3DBatchAsync, 1)         \
    VARIANT(cuMemcpyBatchAsync, cuMemcpyBatchAsync_v1, 0)                  \
    VARIANT(cuMemcpyBatchAsync_ptsz, cuMemcpyBatchAsync_v1, 1)             \
    VARIANT(cuMemcpy3DBatchAsync, cuMemcpy3DBatchAsync_v1, 0)              \
    VARIANT(cuMemcpy3DBatchAsync_ptsz, cuMemcpy3DBatchAsync_v1, 1)         \
    VARIANT(cuEventRecord, cuEventRecord, 0)                               \
    VARIANT(cuEventRecord_ptsz, cuEventRecord, 1)                          \
    VARIANT(cuEventRecordWithFlags, cuEventRecordWithFlags, 0)             \
    VARIANT(cuEventRecordWithFlags_ptsz, cuEventRecordWithFlags, 1)        \
    VARIANT(cuStreamWaitEvent, cuStreamWaitEvent, 0)                       \
    VARIANT(cuStreamWaitEvent_ptsz, cuStreamWaitEvent, 1)                  \
    VARIANT(cuLaunchHostFunc, cuLaunchHostFunc, 0)                         \
    VARIANT(cuLaunchHostFunc_ptsz, cuLaunchHostFunc, 1)                    \
    VARIANT(cuStreamWriteValue32, cuStreamWriteValue32, 0)                 \
    VARIANT(cuStreamWriteValue32_ptsz, cuStreamWriteValue32, 1)            \
    VARIANT(cuStreamWriteValue32_v2, cuStreamWriteValue32, 0)              \
    VARIANT(cuStreamWriteValue32_v2_ptsz, cuStreamWriteValue32, 1)         \
    VARIANT(cuStreamWriteValue64, cuStreamWriteValue64, 0)                 \
    VARIANT(cuStreamWriteValue64_ptsz, cuStreamWriteValue64, 1)            \
    VARIANT(cuStreamWriteValue64_v2, cuStreamWriteValue64, 0)              \
    VARIANT(cuStreamWriteValue64_v2_ptsz, cuStreamWriteValue64, 1)         \
    VARIANT(cuStreamWaitValue32, cuStreamWaitValue32, 0)                   \
    VARIANT(cuStreamWaitValue32_ptsz, cuStreamWaitValue32, 1)              \
    VARIANT(cuStreamWaitValue32_v2, cuStreamWaitValue32, 0)                \
    VARIANT(cuStreamWaitValue32_v2_ptsz, cuStreamWaitValue32, 1)           \
    VARIANT(cuStreamWaitValue64, cuStreamWaitValue64, 0)                   \
    VARIANT(cuStreamWaitValue64_ptsz, cuStreamWaitValue64, 1)              \
    VARIANT(cuStreamWaitValue64_v2, cuStreamWaitValue64, 0)                \
    VARIANT(cuStreamWaitValue64_v2_ptsz, cuStreamWaitValue64, 1)           \
    VARIANT(cuStreamBatchMemOp, cuStreamBatchMemOp, 0)                     \
    VARIANT(cuStreamBatchMemOp_ptsz, cuStreamBatchMemOp, 1)                \
    VARIANT(cuStreamBatchMemOp_v2, cuStreamBatchMemOp, 0)                  \
    VARIANT(cuStreamBatchMemOp_v2_ptsz, cuStreamBatchMemOp, 1)             \
    VARIANT(cuWaitExternalSemaphoresAsync, cuWaitExternalSemaphoresAsync, 0) \
    VARIANT(cuWaitExternalSemaphoresAsync_ptsz, cuWaitExternalSemaphoresAsync, 1) \
    VARIANT(cuStreamAddCallback, cuStreamAddCallback, 0)                   \
    VARIANT(cuStreamAddCallback_ptsz, cuStreamAddCallback, 1)              \
    VARIANT(cuGraphicsMapResources, cuGraphicsMapResources, 0)             \
    VARIANT(cuGraphicsMapResources_ptsz, cuGraphicsMapResources, 1)        \
    VARIANT(cuGraphicsUnmapResources, cuGraphicsUnmapResources, 0)         \
    VARIANT(cuGraphicsUnmapResources_ptsz, cuGraphicsUnmapResources, 1)    \
    VARIANT(cuStreamCreate, cuStreamCreate, 0)                             \
    VARIANT(cuStreamCreateWithPriority, cuStreamCreateWithPriority, 0)     \
    VARIANT(cuStreamDestroy_v2, cuStreamDestroy, 0)                        \
    VARIANT(cuStreamQuery, cuStreamQuery, 0)                               \
    VARIANT(cuStreamQuery_ptsz, cuStreamQuery, 1)                          \
    VARIANT(cuEventQuery, cuEventQuery, 0)                                 \
    VARIANT(cuCtxDestroy_v2, cuCtxDestroy, 0)                              \
    VARIANT(cuCtxDestroy, cuCtxDestroy, 0)                                 \
    VARIANT(cuDevicePrimaryCtxRelease_v2, cuDevicePrimaryCtxRelease, 0)    \
    VARIANT(cuDevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease, 0)       \
    VARIANT(cuDevicePrimaryCtxReset_v2, cuDevicePrimaryCtxReset, 0)        \
    VARIANT(cuDevicePrimaryCtxReset, cuDevicePrimaryCtxReset, 0)           \
    VARIANT(cuSignalExternalSemaphoresAsync, cuSignalExternalSemaphoresAsync, 0) \
    VARIANT(cuSignalExternalSemaphoresAsync_ptsz, cuSignalExternalSemaphoresAsync, 1)

/*
 * Driver functions the shim calls for its own work but does not wrap (those
 * it wraps, such as cuMemcpy2DAsync_v2 and cuMemsetD8Async, it calls through
 * shim_real_<variant>(), interpose.h).
 * SERVICE(symbol, params)
 */
#define CUDUMP_SERVICES(SERVICE)                                                          \
    SERVICE(cuFuncGetName, (const char **name, CUfunction f))                             \
    SERVICE(cuKernelGetName, (const char **name, CUkernel k))                             \
    SERVICE(cuFuncGetParamInfo, (CUfunction f, size_t index, size_t *offset, size_t *size)) \
    SERVICE(cuKernelGetParamInfo, (CUkernel k, size_t index, size_t *offset, size_t *size)) \
    SERVICE(cuMemGetAddressRange_v2, (CUdeviceptr *base, size_t *size, CUdeviceptr ptr))  \
    SERVICE(cuStreamIsCapturing, (CUstream s, CUstreamCaptureStatus *status))             \
    SERVICE(cuStreamIsCapturing_ptsz, (CUstream s, CUstreamCaptureStatus *status))        \
    SERVICE(cuThreadExchangeStreamCaptureMode, (CUstreamCaptureMode *mode))               \
    SERVICE(cuMemHostRegister_v2, (void *p, size_t size, unsigned int flags))             \
    SERVICE(cuMemHostUnregister, (void *p))                                               \
    SERVICE(cuEventCreate, (CUevent *e, unsigned int flags))                              \
    SERVICE(cuEventDestroy_v2, (CUevent e))                                               \
    SERVICE(cuCtxGetDevice, (CUdevice *device))                                           \
    SERVICE(cuGraphGetNodes, (CUgraph g, CUgraphNode *nodes, size_t *count))              \
    SERVICE(cuGraphGetEdges, (CUgraph g, CUgraphNode *from, CUgraphNode *to, size_t *count)) \
    SERVICE(cuGraphNodeGetType, (CUgraphNode node, int *type))                            \
    SERVICE(cuGraphKernelNodeGetParams_v2, (CUgraphNode node, CUDA_KERNEL_NODE_PARAMS *p)) \
    SERVICE(cuGraphChildGraphNodeGetGraph, (CUgraphNode node, CUgraph *child))            \
    SERVICE(cuGraphClone, (CUgraph *clone, CUgraph original))                             \
    SERVICE(cuGraphNodeFindInClone, (CUgraphNode *node, CUgraphNode original, CUgraph clone)) \
    SERVICE(cuGraphKernelNodeSetParams_v2, (CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS *p)) \
    SERVICE(cuGraphAddMemcpyNode,                                                          \
            (CUgraphNode *node, CUgraph g, const CUgraphNode *deps, size_t ndeps,          \
             const CUDA_MEMCPY3D *copy, CUcontext ctx))                                    \
    SERVICE(cuGraphAddKernelNode_v2,                                                       \
            (CUgraphNode *node, CUgraph g, const CUgraphNode *deps, size_t ndeps,          \
             const CUDA_KERNEL_NODE_PARAMS *p))                                            \
    SERVICE(cuGraphNodeGetDependencies, (CUgraphNode node, CUgraphNode *deps, size_t *count)) \
    SERVICE(cuGraphNodeGetDependentNodes, (CUgraphNode node, CUgraphNode *deps, size_t *count)) \
    SERVICE(cuGraphAddDependencies,                                                        \
            (CUgraph g, const CUgraphNode *from, const CUgraphNode *to, size_t count))     \
    SERVICE(cuGraphDestroy, (CUgraph g))                                                   \
    SERVICE(cuCtxGetCurrent, (CUcontext *ctx))                                            \
    SERVICE(cuCtxGetId, (CUcontext ctx, unsigned long long *id))                           \
    SERVICE(cuDevicePrimaryCtxGetState, (CUdevice dev, unsigned int *flags, int *active))  \
    SERVICE(cuCtxPushCurrent_v2, (CUcontext ctx))                                          \
    SERVICE(cuCtxPopCurrent_v2, (CUcontext *ctx))                                          \
    SERVICE(cuStreamGetCtx, (CUstream s, CUcontext *ctx))                                  \
    SERVICE(cuStreamGetCtx_ptsz, (CUstream s, CUcontext *ctx))                             \
    SERVICE(cuDeviceGetAttribute, (int *value, int attribute, CUdevice device))            \
    SERVICE(cuFuncGetModule, (CUmodule *module, CUfunction f))                             \
    SERVICE(cuKernelGetLibrary, (CUlibrary *library, CUkernel k))                          \
    SERVICE(cuMemHostGetDevicePointer_v2, (CUdeviceptr *dptr, void *p, unsigned int flags)) \
    SERVICE(cuCtxSetCurrent, (CUcontext ctx))                                              \
    SERVICE(cuMemPoolCreate, (CUmemoryPool *pool, const CUmemPoolProps *props))            \
    SERVICE(cuMemPoolDestroy, (CUmemoryPool pool))                                         \
    SERVICE(cuMemPoolSetAttribute, (CUmemoryPool pool, int attr, void *value))             \
    SERVICE(cuMemPoolGetAttribute, (CUmemoryPool pool, int attr, void *value))             \
    SERVICE(cuMemPoolTrimTo, (CUmemoryPool pool, size_t keep))
