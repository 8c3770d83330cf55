/*
 * The one table of the driver entry points cudump wraps, and what the shim
 * does around each.
 *
 * A family is one API whose variants share an ABI. Its row says everything
 * the shim does with it:
 *
 *     F(c, family, counts, waits, does, (parameters), (arguments), (symbol, ptsz)...)
 *
 * (c is what CUDUMP_API(F, c) was given beside F, handed on to each row.) The
 * code is made from the rows: interpose.c makes one wrapper per variant
 * (exported under the symbol's name, and handed out by dlsym and
 * cuGetProcAddress for the real symbol's address), and hooks.c makes the
 * family's entry, which the wrapper calls through the table of entries
 * (interpose.h). Adding a driver API is one row; where it writes device
 * memory from the host, its name goes into cudump/wire/protocol.py's
 * HOST_APIS too (tests/test_protocol.py fails until it does).
 *
 * counts: how the call counts for scans ahead (calls.h, ahead.h)
 *   HOST    works on the host and the driver's tables alone: not counted,
 *           nothing done around it (libraries encode a Hopper kernel's
 *           tensor maps right before its launch, each time)
 *   WORK    may put work on a stream: counted, in progress until it
 *           returns; voids the scan ahead; waits for a launch handed over
 *           (handoff.h) first
 *   ASKS    a wait or a query: puts nothing on a stream; counted again when
 *           it returns (the host may act on what it learnt); voids the scan
 *           ahead; waits for a launch handed over first
 *   LAUNCH  a kernel launch: counted as WORK, but leaves the scan ahead to
 *           the launch pipeline, which decides whether it uses it
 * waits: whether the driver waits inside the call (gate.h)
 *   NO_WAIT     it does not
 *   WAITS       it may wait for the context: held launches are settled first
 *               (gate_settle)
 *   WAITS_COPY  a synchronous copy: settled first, and the call's error,
 *               which may be an earlier launch's, is kept (flight.h)
 *   WAITS_GPU   the program waits for the GPU: settled first, its error kept,
 *               and once it returned success what cudump took of the launches
 *               before it is handed over (drain.h)
 * does: what the shim does with the call (hooks.c makes each of these)
 *   PASSES      nothing: the call is passed on
 *   ALLOCATES(kind, out, size)  *out is a new allocation of `size` bytes,
 *               tracked (alloctab.h's kind: AK_LINEAR, AK_MANAGED, AK_ASYNC
 *               for device memory, made again once where it failed for want of
 *               the memory cudump's scratch pools keep; AK_HOST)
 *   MAPS(ptr, size)    a VMM range mapped: tracked (AK_VMM)
 *   FREES(ptr)         the allocation at ptr, of whatever kind, is gone
 *   LOADS(out, image), LOADS_FILE(out, path)   *out is a module or library
 *               loaded from memory or from a file (modules.h)
 *   COPIES_TO_DEVICE(dst, bytes, stream), COPIES_2D(copy, stream),
 *   COPIES_3D(copy, stream), SETS(elem, dst, value, n, stream),
 *   SETS_2D(elem, dst, pitch, value, width, height, stream)
 *               writes device memory from the host (a 1D, 2D or 3D copy, or a
 *               memset of elem-byte elements): recorded for NaN/Inf scans
 *               (hostwrite.h) once the driver took it; stream is NULL for the
 *               synchronous form. Each such family is a proto_host_write.api
 *               code (protocol.h's PROTO_HOST_APIS: in the order of the rows)
 *   HOOK        hand-written: hooks.c's hook_<family>(real, parameters)
 *               (cuGetProcAddress's are interpose.c's own)
 *   HOOK_PTSZ   hand-written, and told whether the variant called is a
 *               per-thread-default-stream one: hook_<family>(real, ptsz, ...)
 * (parameters) and (arguments): the family's parameter list, as cuda.h
 * declares it, and the matching argument list (tests/test_cudecl.py checks
 * each against cuda.h's prototype where it has one).
 * (symbol, ptsz): each symbol the real driver exports for the family, and
 * whether it is a _ptsz/_ptds one. Variants with another ABI (cuMemAlloc v1
 * with 32-bit pointers, cuStreamBeginCapture v1) are deliberately absent:
 * their pointers pass through untouched.
 */
#ifndef CUDUMP_API_H
#define CUDUMP_API_H

#define CUDUMP_UNPAREN(...) __VA_ARGS__
/* ", a, b" after a list's own leading items; nothing for an empty list. */
#define CUDUMP_TAIL(...) __VA_OPT__(, ) __VA_ARGS__

#define CUDUMP_API(F, c)                                                                          \
    /* ---- start and lookups: cuGetProcAddress hands out wrappers (interpose.c) ---- */          \
    F(c, cuInit, WORK, NO_WAIT, HOOK,                                                             \
      (unsigned int flags), (flags), (cuInit, 0))                                                 \
    F(c, cuGetProcAddress, HOST, NO_WAIT, HOOK,                                                   \
      (const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags),                        \
      (symbol, pfn, cudaVersion, flags), (cuGetProcAddress, 0))                                   \
    F(c, cuGetProcAddress_v2, HOST, NO_WAIT, HOOK,                                                \
      (const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,                         \
       CUdriverProcAddressQueryResult *status),                                                   \
      (symbol, pfn, cudaVersion, flags, status), (cuGetProcAddress_v2, 0))                        \
    /* ---- code loaded, and kernels named (modules.c, functab.c) ---- */                         \
    F(c, cuModuleLoadData, WORK, WAITS, LOADS(module, image),                                     \
      (CUmodule *module, const void *image), (module, image), (cuModuleLoadData, 0))              \
    F(c, cuModuleLoadDataEx, WORK, WAITS, LOADS(module, image),                                   \
      (CUmodule *module, const void *image, unsigned int numOptions, int *options,                \
       void **optionValues),                                                                      \
      (module, image, numOptions, options, optionValues), (cuModuleLoadDataEx, 0))                \
    F(c, cuModuleLoadFatBinary, WORK, WAITS, LOADS(module, fatCubin),                             \
      (CUmodule *module, const void *fatCubin), (module, fatCubin), (cuModuleLoadFatBinary, 0))   \
    F(c, cuModuleLoad, WORK, WAITS, LOADS_FILE(module, fname),                                    \
      (CUmodule *module, const char *fname), (module, fname), (cuModuleLoad, 0))                  \
    F(c, cuLibraryLoadData, WORK, WAITS, LOADS(library, code),                                    \
      (CUlibrary *library, const void *code, int *jitOptions, void **jitOptionsValues,            \
       unsigned int numJitOptions, int *libraryOptions, void **libraryOptionValues,               \
       unsigned int numLibraryOptions),                                                           \
      (library, code, jitOptions, jitOptionsValues, numJitOptions, libraryOptions,                \
       libraryOptionValues, numLibraryOptions),                                                   \
      (cuLibraryLoadData, 0))                                                                     \
    F(c, cuLibraryLoadFromFile, WORK, WAITS, LOADS_FILE(library, fileName),                       \
      (CUlibrary *library, const char *fileName, int *jitOptions, void **jitOptionsValues,        \
       unsigned int numJitOptions, int *libraryOptions, void **libraryOptionValues,               \
       unsigned int numLibraryOptions),                                                           \
      (library, fileName, jitOptions, jitOptionsValues, numJitOptions, libraryOptions,            \
       libraryOptionValues, numLibraryOptions),                                                   \
      (cuLibraryLoadFromFile, 0))                                                                 \
    F(c, cuModuleGetFunction, HOST, WAITS, HOOK,                                                  \
      (CUfunction *hfunc, CUmodule hmod, const char *name), (hfunc, hmod, name),                  \
      (cuModuleGetFunction, 0))                                                                   \
    F(c, cuLibraryGetKernel, HOST, NO_WAIT, HOOK,                                                 \
      (CUkernel *pKernel, CUlibrary library, const char *name), (pKernel, library, name),         \
      (cuLibraryGetKernel, 0))                                                                    \
    F(c, cuKernelGetFunction, HOST, NO_WAIT, HOOK,                                                \
      (CUfunction *pFunc, CUkernel kernel), (pFunc, kernel), (cuKernelGetFunction, 0))            \
    /* ---- memory: allocations and frees (alloctab.c) ---- */                                    \
    F(c, cuMemAlloc, WORK, NO_WAIT, ALLOCATES(AK_LINEAR, dptr, bytesize),                         \
      (CUdeviceptr *dptr, size_t bytesize), (dptr, bytesize), (cuMemAlloc_v2, 0))                 \
    F(c, cuMemAllocPitch, WORK, NO_WAIT, HOOK,                                                    \
      (CUdeviceptr *dptr, size_t *pPitch, size_t widthInBytes, size_t height,                     \
       unsigned int elementSizeBytes),                                                            \
      (dptr, pPitch, widthInBytes, height, elementSizeBytes), (cuMemAllocPitch_v2, 0))            \
    F(c, cuMemAllocManaged, WORK, NO_WAIT, ALLOCATES(AK_MANAGED, dptr, bytesize),                 \
      (CUdeviceptr *dptr, size_t bytesize, unsigned int flags), (dptr, bytesize, flags),          \
      (cuMemAllocManaged, 0))                                                                     \
    F(c, cuMemGetInfo, HOST, NO_WAIT, HOOK,                                                       \
      (size_t *free, size_t *total), (free, total), (cuMemGetInfo_v2, 0))                         \
    F(c, cuMemAllocAsync, WORK, NO_WAIT, ALLOCATES(AK_ASYNC, dptr, bytesize),                     \
      (CUdeviceptr *dptr, size_t bytesize, CUstream stream), (dptr, bytesize, stream),            \
      (cuMemAllocAsync, 0), (cuMemAllocAsync_ptsz, 1))                                            \
    F(c, cuMemAllocFromPoolAsync, WORK, NO_WAIT, ALLOCATES(AK_ASYNC, dptr, bytesize),             \
      (CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream stream),                   \
      (dptr, bytesize, pool, stream), (cuMemAllocFromPoolAsync, 0),                               \
      (cuMemAllocFromPoolAsync_ptsz, 1))                                                          \
    F(c, cuMemFree, WORK, WAITS, FREES(dptr),                                                     \
      (CUdeviceptr dptr), (dptr), (cuMemFree_v2, 0))                                              \
    F(c, cuMemFreeAsync, WORK, NO_WAIT, FREES(dptr),                                              \
      (CUdeviceptr dptr, CUstream stream), (dptr, stream), (cuMemFreeAsync, 0),                   \
      (cuMemFreeAsync_ptsz, 1))                                                                   \
    F(c, cuMemCreate, WORK, NO_WAIT, HOOK,                                                        \
      (CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,        \
       unsigned long long flags),                                                                 \
      (handle, size, prop, flags), (cuMemCreate, 0))                                              \
    F(c, cuMemRelease, WORK, NO_WAIT, HOOK,                                                       \
      (CUmemGenericAllocationHandle handle), (handle), (cuMemRelease, 0))                         \
    F(c, cuMemMap, WORK, NO_WAIT, MAPS(ptr, size),                                                \
      (CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,          \
       unsigned long long flags),                                                                 \
      (ptr, size, offset, handle, flags), (cuMemMap, 0))                                          \
    F(c, cuMemUnmap, WORK, NO_WAIT, FREES(ptr),                                                   \
      (CUdeviceptr ptr, size_t size), (ptr, size), (cuMemUnmap, 0))                               \
    F(c, cuMemAllocHost, WORK, NO_WAIT, ALLOCATES(AK_HOST, pp, bytesize),                         \
      (void **pp, size_t bytesize), (pp, bytesize), (cuMemAllocHost_v2, 0))                       \
    F(c, cuMemHostAlloc, WORK, NO_WAIT, ALLOCATES(AK_HOST, pp, bytesize),                         \
      (void **pp, size_t bytesize, unsigned int flags), (pp, bytesize, flags),                    \
      (cuMemHostAlloc, 0))                                                                        \
    F(c, cuMemFreeHost, WORK, WAITS, FREES(p),                                                    \
      (void *p), (p), (cuMemFreeHost, 0))                                                         \
    /* ---- launches (launch.c, graph.c) ---- */                                                  \
    F(c, cuLaunchKernel, LAUNCH, NO_WAIT, HOOK_PTSZ,                                              \
      (CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,          \
       unsigned int by, unsigned int bz, unsigned int smem, CUstream stream, void **params,       \
       void **extra),                                                                             \
      (f, gx, gy, gz, bx, by, bz, smem, stream, params, extra), (cuLaunchKernel, 0),              \
      (cuLaunchKernel_ptsz, 1))                                                                   \
    F(c, cuLaunchCooperativeKernel, LAUNCH, NO_WAIT, HOOK_PTSZ,                                   \
      (CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,          \
       unsigned int by, unsigned int bz, unsigned int smem, CUstream stream, void **params),      \
      (f, gx, gy, gz, bx, by, bz, smem, stream, params), (cuLaunchCooperativeKernel, 0),          \
      (cuLaunchCooperativeKernel_ptsz, 1))                                                        \
    F(c, cuLaunchKernelEx, LAUNCH, NO_WAIT, HOOK_PTSZ,                                            \
      (const CUlaunchConfig *config, CUfunction f, void **params, void **extra),                  \
      (config, f, params, extra), (cuLaunchKernelEx, 0), (cuLaunchKernelEx_ptsz, 1))              \
    F(c, cuGraphLaunch, WORK, NO_WAIT, HOOK_PTSZ,                                                 \
      (CUgraphExec exec, CUstream stream), (exec, stream), (cuGraphLaunch, 0),                    \
      (cuGraphLaunch_ptsz, 1))                                                                    \
    /* ---- stream capture, and executable graphs learnt when they are made (graph.c) ---- */     \
    F(c, cuStreamBeginCapture, WORK, NO_WAIT, HOOK,                                               \
      (CUstream stream, CUstreamCaptureMode mode), (stream, mode), (cuStreamBeginCapture_v2, 0),  \
      (cuStreamBeginCapture_v2_ptsz, 1))                                                          \
    F(c, cuStreamBeginCaptureToGraph, WORK, NO_WAIT, HOOK,                                        \
      (CUstream stream, CUgraph graph, const CUgraphNode *deps, const void *depData,              \
       size_t numDeps, CUstreamCaptureMode mode),                                                 \
      (stream, graph, deps, depData, numDeps, mode), (cuStreamBeginCaptureToGraph, 0),            \
      (cuStreamBeginCaptureToGraph_ptsz, 1))                                                      \
    F(c, cuStreamEndCapture, WORK, NO_WAIT, HOOK,                                                 \
      (CUstream stream, void **graph), (stream, graph), (cuStreamEndCapture, 0),                  \
      (cuStreamEndCapture_ptsz, 1))                                                               \
    F(c, cuGraphInstantiateWithFlags, WORK, NO_WAIT, HOOK,                                        \
      (CUgraphExec *exec, CUgraph graph, unsigned long long flags), (exec, graph, flags),         \
      (cuGraphInstantiateWithFlags, 0))                                                           \
    F(c, cuGraphInstantiate, WORK, NO_WAIT, HOOK,                                                 \
      (CUgraphExec *exec, CUgraph graph, CUgraphNode *errorNode, char *log, size_t logSize),      \
      (exec, graph, errorNode, log, logSize), (cuGraphInstantiate_v2, 0))                         \
    F(c, cuGraphInstantiateWithParams, WORK, NO_WAIT, HOOK,                                       \
      (CUgraphExec *exec, CUgraph graph, CUDA_GRAPH_INSTANTIATE_PARAMS *params),                  \
      (exec, graph, params), (cuGraphInstantiateWithParams, 0),                                   \
      (cuGraphInstantiateWithParams_ptsz, 1))                                                     \
    F(c, cuGraphExecDestroy, WORK, NO_WAIT, HOOK,                                                 \
      (CUgraphExec exec), (exec), (cuGraphExecDestroy, 0))                                        \
    F(c, cuGraphExecKernelNodeSetParams, WORK, NO_WAIT, HOOK,                                     \
      (CUgraphExec exec, CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS *params),                \
      (exec, node, params), (cuGraphExecKernelNodeSetParams_v2, 0))                               \
    F(c, cuGraphExecUpdate, WORK, NO_WAIT, HOOK,                                                  \
      (CUgraphExec exec, CUgraph graph, void *resultInfo), (exec, graph, resultInfo),             \
      (cuGraphExecUpdate_v2, 0))                                                                  \
    /* The other setters of an executable graph's nodes: cudump's copies of the graph would     \
     * run what was set before, so the graph is run unchanged from then on (graph_exec_set). */ \
    F(c, cuGraphExecNodeSetParams, WORK, NO_WAIT, HOOK,                                           \
      (CUgraphExec exec, CUgraphNode node, void *params), (exec, node, params),                   \
      (cuGraphExecNodeSetParams, 0))                                                              \
    F(c, cuGraphExecMemcpyNodeSetParams, WORK, NO_WAIT, HOOK,                                     \
      (CUgraphExec exec, CUgraphNode node, const CUDA_MEMCPY3D *params, CUcontext ctx),           \
      (exec, node, params, ctx), (cuGraphExecMemcpyNodeSetParams, 0))                             \
    F(c, cuGraphExecMemsetNodeSetParams, WORK, NO_WAIT, HOOK,                                     \
      (CUgraphExec exec, CUgraphNode node, const void *params, CUcontext ctx),                    \
      (exec, node, params, ctx), (cuGraphExecMemsetNodeSetParams, 0))                             \
    F(c, cuGraphExecHostNodeSetParams, WORK, NO_WAIT, HOOK,                                       \
      (CUgraphExec exec, CUgraphNode node, const void *params), (exec, node, params),             \
      (cuGraphExecHostNodeSetParams, 0))                                                          \
    F(c, cuGraphExecChildGraphNodeSetParams, WORK, NO_WAIT, HOOK,                                 \
      (CUgraphExec exec, CUgraphNode node, CUgraph child), (exec, node, child),                   \
      (cuGraphExecChildGraphNodeSetParams, 0))                                                    \
    F(c, cuGraphExecEventRecordNodeSetEvent, WORK, NO_WAIT, HOOK,                                 \
      (CUgraphExec exec, CUgraphNode node, CUevent event), (exec, node, event),                   \
      (cuGraphExecEventRecordNodeSetEvent, 0))                                                    \
    F(c, cuGraphExecEventWaitNodeSetEvent, WORK, NO_WAIT, HOOK,                                   \
      (CUgraphExec exec, CUgraphNode node, CUevent event), (exec, node, event),                   \
      (cuGraphExecEventWaitNodeSetEvent, 0))                                                      \
    F(c, cuGraphExecExternalSemaphoresSignalNodeSetParams, WORK, NO_WAIT, HOOK,                   \
      (CUgraphExec exec, CUgraphNode node, const void *params), (exec, node, params),             \
      (cuGraphExecExternalSemaphoresSignalNodeSetParams, 0))                                      \
    F(c, cuGraphExecExternalSemaphoresWaitNodeSetParams, WORK, NO_WAIT, HOOK,                     \
      (CUgraphExec exec, CUgraphNode node, const void *params), (exec, node, params),             \
      (cuGraphExecExternalSemaphoresWaitNodeSetParams, 0))                                        \
    F(c, cuGraphExecBatchMemOpNodeSetParams, WORK, NO_WAIT, HOOK,                                 \
      (CUgraphExec exec, CUgraphNode node, const void *params), (exec, node, params),             \
      (cuGraphExecBatchMemOpNodeSetParams, 0))                                                    \
    F(c, cuGraphNodeSetEnabled, WORK, NO_WAIT, HOOK,                                              \
      (CUgraphExec exec, CUgraphNode node, unsigned int enabled), (exec, node, enabled),          \
      (cuGraphNodeSetEnabled, 0))                                                                 \
    /* ---- the program's waits, and its synchronous copies that do not write from the host ---- */\
    F(c, cuCtxSynchronize, ASKS, WAITS_GPU, PASSES,                                               \
      (), (), (cuCtxSynchronize, 0))                                                              \
    F(c, cuCtxSynchronize_v2, ASKS, WAITS_GPU, PASSES,                                            \
      (CUcontext ctx), (ctx), (cuCtxSynchronize_v2, 0))                                           \
    F(c, cuStreamSynchronize, ASKS, WAITS_GPU, PASSES,                                            \
      (CUstream stream), (stream), (cuStreamSynchronize, 0), (cuStreamSynchronize_ptsz, 1))       \
    F(c, cuEventSynchronize, ASKS, WAITS_GPU, PASSES,                                             \
      (CUevent event), (event), (cuEventSynchronize, 0))                                          \
    F(c, cuMemcpyDtoH, WORK, WAITS_GPU, PASSES,                                                   \
      (void *dst, CUdeviceptr src, size_t bytes), (dst, src, bytes), (cuMemcpyDtoH_v2, 0),        \
      (cuMemcpyDtoH_v2_ptds, 1))                                                                  \
    F(c, cuMemcpyDtoD, WORK, WAITS_COPY, PASSES,                                                  \
      (CUdeviceptr dst, CUdeviceptr src, size_t bytes), (dst, src, bytes), (cuMemcpyDtoD_v2, 0),  \
      (cuMemcpyDtoD_v2_ptds, 1))                                                                  \
    F(c, cuMemcpy, WORK, WAITS_COPY, PASSES,                                                      \
      (CUdeviceptr dst, CUdeviceptr src, size_t bytes), (dst, src, bytes), (cuMemcpy, 0),         \
      (cuMemcpy_ptds, 1))                                                                         \
    /* ---- the program's writes into device memory from the host (hostwrite.c), in the order of  \
     * their wire codes (proto_host_write.api): a new one goes last ---- */                       \
    F(c, cuMemcpyHtoD, WORK, WAITS_COPY, COPIES_TO_DEVICE(dst, bytes, NULL),                      \
      (CUdeviceptr dst, const void *src, size_t bytes), (dst, src, bytes), (cuMemcpyHtoD_v2, 0),  \
      (cuMemcpyHtoD_v2_ptds, 1))                                                                  \
    F(c, cuMemcpyHtoDAsync, WORK, NO_WAIT, COPIES_TO_DEVICE(dst, bytes, stream),                  \
      (CUdeviceptr dst, const void *src, size_t bytes, CUstream stream),                          \
      (dst, src, bytes, stream), (cuMemcpyHtoDAsync_v2, 0), (cuMemcpyHtoDAsync_v2_ptsz, 1))       \
    F(c, cuMemcpy2D, WORK, WAITS_COPY, COPIES_2D(copy, NULL),                                     \
      (const CUDA_MEMCPY2D *copy), (copy), (cuMemcpy2D_v2, 0), (cuMemcpy2D_v2_ptds, 1))           \
    F(c, cuMemcpy2DUnaligned, WORK, WAITS_COPY, COPIES_2D(copy, NULL),                            \
      (const CUDA_MEMCPY2D *copy), (copy), (cuMemcpy2DUnaligned_v2, 0),                           \
      (cuMemcpy2DUnaligned_v2_ptds, 1))                                                           \
    F(c, cuMemcpy2DAsync, WORK, NO_WAIT, COPIES_2D(copy, stream),                                 \
      (const CUDA_MEMCPY2D *copy, CUstream stream), (copy, stream), (cuMemcpy2DAsync_v2, 0),      \
      (cuMemcpy2DAsync_v2_ptsz, 1))                                                               \
    F(c, cuMemcpy3D, WORK, WAITS_COPY, COPIES_3D(copy, NULL),                                     \
      (const CUDA_MEMCPY3D *copy), (copy), (cuMemcpy3D_v2, 0), (cuMemcpy3D_v2_ptds, 1))           \
    F(c, cuMemcpy3DAsync, WORK, NO_WAIT, COPIES_3D(copy, stream),                                 \
      (const CUDA_MEMCPY3D *copy, CUstream stream), (copy, stream), (cuMemcpy3DAsync_v2, 0),      \
      (cuMemcpy3DAsync_v2_ptsz, 1))                                                               \
    F(c, cuMemsetD8, WORK, NO_WAIT, SETS(1, dst, value, n, NULL),                                 \
      (CUdeviceptr dst, unsigned char value, size_t n), (dst, value, n), (cuMemsetD8_v2, 0),      \
      (cuMemsetD8_v2_ptds, 1))                                                                    \
    F(c, cuMemsetD16, WORK, NO_WAIT, SETS(2, dst, value, n, NULL),                                \
      (CUdeviceptr dst, unsigned short value, size_t n), (dst, value, n), (cuMemsetD16_v2, 0),    \
      (cuMemsetD16_v2_ptds, 1))                                                                   \
    F(c, cuMemsetD32, WORK, NO_WAIT, SETS(4, dst, value, n, NULL),                                \
      (CUdeviceptr dst, unsigned int value, size_t n), (dst, value, n), (cuMemsetD32_v2, 0),      \
      (cuMemsetD32_v2_ptds, 1))                                                                   \
    F(c, cuMemsetD8Async, WORK, NO_WAIT, SETS(1, dst, value, n, stream),                          \
      (CUdeviceptr dst, unsigned char value, size_t n, CUstream stream),                          \
      (dst, value, n, stream), (cuMemsetD8Async, 0), (cuMemsetD8Async_ptsz, 1))                   \
    F(c, cuMemsetD16Async, WORK, NO_WAIT, SETS(2, dst, value, n, stream),                         \
      (CUdeviceptr dst, unsigned short value, size_t n, CUstream stream),                         \
      (dst, value, n, stream), (cuMemsetD16Async, 0), (cuMemsetD16Async_ptsz, 1))                 \
    F(c, cuMemsetD32Async, WORK, NO_WAIT, SETS(4, dst, value, n, stream),                         \
      (CUdeviceptr dst, unsigned int value, size_t n, CUstream stream), (dst, value, n, stream),  \
      (cuMemsetD32Async, 0), (cuMemsetD32Async_ptsz, 1))                                          \
    F(c, cuMemsetD2D8, WORK, NO_WAIT, SETS_2D(1, dst, pitch, value, width, height, NULL),         \
      (CUdeviceptr dst, size_t pitch, unsigned char value, size_t width, size_t height),          \
      (dst, pitch, value, width, height), (cuMemsetD2D8_v2, 0), (cuMemsetD2D8_v2_ptds, 1))        \
    F(c, cuMemsetD2D16, WORK, NO_WAIT, SETS_2D(2, dst, pitch, value, width, height, NULL),        \
      (CUdeviceptr dst, size_t pitch, unsigned short value, size_t width, size_t height),         \
      (dst, pitch, value, width, height), (cuMemsetD2D16_v2, 0), (cuMemsetD2D16_v2_ptds, 1))      \
    F(c, cuMemsetD2D32, WORK, NO_WAIT, SETS_2D(4, dst, pitch, value, width, height, NULL),        \
      (CUdeviceptr dst, size_t pitch, unsigned int value, size_t width, size_t height),           \
      (dst, pitch, value, width, height), (cuMemsetD2D32_v2, 0), (cuMemsetD2D32_v2_ptds, 1))      \
    F(c, cuMemsetD2D8Async, WORK, NO_WAIT, SETS_2D(1, dst, pitch, value, width, height, stream),  \
      (CUdeviceptr dst, size_t pitch, unsigned char value, size_t width, size_t height,           \
       CUstream stream),                                                                          \
      (dst, pitch, value, width, height, stream), (cuMemsetD2D8Async, 0),                         \
      (cuMemsetD2D8Async_ptsz, 1))                                                                \
    F(c, cuMemsetD2D16Async, WORK, NO_WAIT, SETS_2D(2, dst, pitch, value, width, height, stream), \
      (CUdeviceptr dst, size_t pitch, unsigned short value, size_t width, size_t height,          \
       CUstream stream),                                                                          \
      (dst, pitch, value, width, height, stream), (cuMemsetD2D16Async, 0),                        \
      (cuMemsetD2D16Async_ptsz, 1))                                                               \
    F(c, cuMemsetD2D32Async, WORK, NO_WAIT, SETS_2D(4, dst, pitch, value, width, height, stream), \
      (CUdeviceptr dst, size_t pitch, unsigned int value, size_t width, size_t height,            \
       CUstream stream),                                                                          \
      (dst, pitch, value, width, height, stream), (cuMemsetD2D32Async, 0),                        \
      (cuMemsetD2D32Async_ptsz, 1))                                                               \
    /* ---- TMA tensor maps: encoded into the caller's memory (tensormap.c) ---- */               \
    F(c, cuTensorMapEncodeTiled, HOST, NO_WAIT, HOOK,                                             \
      (CUtensorMap *tensorMap, CUtensorMapDataType tensorDataType, cuuint32_t tensorRank,         \
       void *globalAddress, const cuuint64_t *globalDim, const cuuint64_t *globalStrides,         \
       const cuuint32_t *boxDim, const cuuint32_t *elementStrides,                                \
       CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,                              \
       CUtensorMapL2promotion l2Promotion, CUtensorMapFloatOOBfill oobFill),                      \
      (tensorMap, tensorDataType, tensorRank, globalAddress, globalDim, globalStrides, boxDim,    \
       elementStrides, interleave, swizzle, l2Promotion, oobFill),                                \
      (cuTensorMapEncodeTiled, 0))                                                                \
    F(c, cuTensorMapEncodeIm2col, HOST, NO_WAIT, HOOK,                                            \
      (CUtensorMap *tensorMap, CUtensorMapDataType tensorDataType, cuuint32_t tensorRank,         \
       void *globalAddress, const cuuint64_t *globalDim, const cuuint64_t *globalStrides,         \
       const int *pixelBoxLowerCorner, const int *pixelBoxUpperCorner,                            \
       cuuint32_t channelsPerPixel, cuuint32_t pixelsPerColumn,                                   \
       const cuuint32_t *elementStrides, CUtensorMapInterleave interleave,                        \
       CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2Promotion,                            \
       CUtensorMapFloatOOBfill oobFill),                                                          \
      (tensorMap, tensorDataType, tensorRank, globalAddress, globalDim, globalStrides,            \
       pixelBoxLowerCorner, pixelBoxUpperCorner, channelsPerPixel, pixelsPerColumn,               \
       elementStrides, interleave, swizzle, l2Promotion, oobFill),                                \
      (cuTensorMapEncodeIm2col, 0))                                                               \
    F(c, cuTensorMapEncodeIm2colWide, HOST, NO_WAIT, HOOK,                                        \
      (CUtensorMap *tensorMap, CUtensorMapDataType tensorDataType, cuuint32_t tensorRank,         \
       void *globalAddress, const cuuint64_t *globalDim, const cuuint64_t *globalStrides,         \
       int pixelBoxLowerCornerWidth, int pixelBoxUpperCornerWidth, cuuint32_t channelsPerPixel,   \
       cuuint32_t pixelsPerColumn, const cuuint32_t *elementStrides,                              \
       CUtensorMapInterleave interleave, CUtensorMapIm2ColWideMode mode,                          \
       CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2Promotion,                            \
       CUtensorMapFloatOOBfill oobFill),                                                          \
      (tensorMap, tensorDataType, tensorRank, globalAddress, globalDim, globalStrides,            \
       pixelBoxLowerCornerWidth, pixelBoxUpperCornerWidth, channelsPerPixel, pixelsPerColumn,     \
       elementStrides, interleave, mode, swizzle, l2Promotion, oobFill),                          \
      (cuTensorMapEncodeIm2colWide, 0))                                                           \
    F(c, cuTensorMapReplaceAddress, HOST, NO_WAIT, HOOK,                                          \
      (CUtensorMap *tensorMap, void *globalAddress), (tensorMap, globalAddress),                  \
      (cuTensorMapReplaceAddress, 0))                                                             \
    /* ---- contexts that end: what the shim made in them goes with them (ctxlife.h) ---- */      \
    F(c, cuCtxDestroy, WORK, NO_WAIT, HOOK,                                                       \
      (CUcontext ctx), (ctx), (cuCtxDestroy_v2, 0), (cuCtxDestroy, 0))                            \
    F(c, cuDevicePrimaryCtxRelease, WORK, NO_WAIT, HOOK,                                          \
      (CUdevice dev), (dev), (cuDevicePrimaryCtxRelease_v2, 0), (cuDevicePrimaryCtxRelease, 0))   \
    F(c, cuDevicePrimaryCtxReset, WORK, NO_WAIT, HOOK,                                            \
      (CUdevice dev), (dev), (cuDevicePrimaryCtxReset_v2, 0), (cuDevicePrimaryCtxReset, 0))       \
    /* ---- the program's other calls that put work on a stream or move bytes, and its queries:   \
     * counted only (calls.h), so that scans ahead know something came between two launches.      \
     * A stream made may have the handle of one destroyed; a semaphore signalled tells another    \
     * API that a launch is done (it waits for a launch handed over first, as every counted       \
     * call does). The CUDA 12.8 batch copies (_v1) are cuda.h's _v2 forms of today. ---- */      \
    F(c, cuMemcpyAsync, WORK, NO_WAIT, PASSES,                                                    \
      (CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream),                          \
      (dst, src, bytes, stream), (cuMemcpyAsync, 0), (cuMemcpyAsync_ptsz, 1))                     \
    F(c, cuMemcpyDtoDAsync, WORK, NO_WAIT, PASSES,                                                \
      (CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream),                          \
      (dst, src, bytes, stream), (cuMemcpyDtoDAsync_v2, 0), (cuMemcpyDtoDAsync_v2_ptsz, 1))       \
    F(c, cuMemcpyDtoHAsync, WORK, NO_WAIT, PASSES,                                                \
      (void *dst, CUdeviceptr src, size_t bytes, CUstream stream), (dst, src, bytes, stream),     \
      (cuMemcpyDtoHAsync_v2, 0), (cuMemcpyDtoHAsync_v2_ptsz, 1))                                  \
    F(c, cuMemcpyPeer, WORK, NO_WAIT, PASSES,                                                     \
      (CUdeviceptr dst, CUcontext dstCtx, CUdeviceptr src, CUcontext srcCtx, size_t bytes),       \
      (dst, dstCtx, src, srcCtx, bytes), (cuMemcpyPeer, 0), (cuMemcpyPeer_ptds, 1))               \
    F(c, cuMemcpyPeerAsync, WORK, NO_WAIT, PASSES,                                                \
      (CUdeviceptr dst, CUcontext dstCtx, CUdeviceptr src, CUcontext srcCtx, size_t bytes,        \
       CUstream stream),                                                                          \
      (dst, dstCtx, src, srcCtx, bytes, stream), (cuMemcpyPeerAsync, 0),                          \
      (cuMemcpyPeerAsync_ptsz, 1))                                                                \
    F(c, cuMemcpy3DPeer, WORK, NO_WAIT, PASSES,                                                   \
      (const CUDA_MEMCPY3D_PEER *copy), (copy), (cuMemcpy3DPeer, 0), (cuMemcpy3DPeer_ptds, 1))    \
    F(c, cuMemcpy3DPeerAsync, WORK, NO_WAIT, PASSES,                                              \
      (const CUDA_MEMCPY3D_PEER *copy, CUstream stream), (copy, stream),                          \
      (cuMemcpy3DPeerAsync, 0), (cuMemcpy3DPeerAsync_ptsz, 1))                                    \
    F(c, cuMemcpyAtoD, WORK, NO_WAIT, PASSES,                                                     \
      (CUdeviceptr dst, CUarray src, size_t srcOffset, size_t bytes),                             \
      (dst, src, srcOffset, bytes), (cuMemcpyAtoD_v2, 0), (cuMemcpyAtoD_v2_ptds, 1))              \
    F(c, cuMemcpyBatchAsync, WORK, NO_WAIT, PASSES,                                               \
      (CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,                         \
       CUmemcpyAttributes *attrs, size_t *attrsIdxs, size_t numAttrs, CUstream stream),           \
      (dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, stream),                             \
      (cuMemcpyBatchAsync_v2, 0), (cuMemcpyBatchAsync_v2_ptsz, 1))                                \
    F(c, cuMemcpy3DBatchAsync, WORK, NO_WAIT, PASSES,                                             \
      (size_t numOps, CUDA_MEMCPY3D_BATCH_OP *opList, unsigned long long flags, CUstream stream), \
      (numOps, opList, flags, stream), (cuMemcpy3DBatchAsync_v2, 0),                              \
      (cuMemcpy3DBatchAsync_v2_ptsz, 1))                                                          \
    F(c, cuMemcpyBatchAsync_v1, WORK, NO_WAIT, PASSES,                                            \
      (CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,                         \
       CUmemcpyAttributes *attrs, size_t *attrsIdxs, size_t numAttrs, size_t *failIdx,            \
       CUstream stream),                                                                          \
      (dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, failIdx, stream),                    \
      (cuMemcpyBatchAsync, 0), (cuMemcpyBatchAsync_ptsz, 1))                                      \
    F(c, cuMemcpy3DBatchAsync_v1, WORK, NO_WAIT, PASSES,                                          \
      (size_t numOps, CUDA_MEMCPY3D_BATCH_OP *opList, size_t *failIdx,                            \
       unsigned long long flags, CUstream stream),                                                \
      (numOps, opList, failIdx, flags, stream), (cuMemcpy3DBatchAsync, 0),                        \
      (cuMemcpy3DBatchAsync_ptsz, 1))                                                             \
    F(c, cuEventRecord, WORK, NO_WAIT, PASSES,                                                    \
      (CUevent event, CUstream stream), (event, stream), (cuEventRecord, 0),                      \
      (cuEventRecord_ptsz, 1))                                                                    \
    F(c, cuEventRecordWithFlags, WORK, NO_WAIT, PASSES,                                           \
      (CUevent event, CUstream stream, unsigned int flags), (event, stream, flags),               \
      (cuEventRecordWithFlags, 0), (cuEventRecordWithFlags_ptsz, 1))                              \
    F(c, cuStreamWaitEvent, WORK, NO_WAIT, PASSES,                                                \
      (CUstream stream, CUevent event, unsigned int flags), (stream, event, flags),               \
      (cuStreamWaitEvent, 0), (cuStreamWaitEvent_ptsz, 1))                                        \
    F(c, cuLaunchHostFunc, WORK, NO_WAIT, PASSES,                                                 \
      (CUstream stream, CUhostFn fn, void *userData), (stream, fn, userData),                     \
      (cuLaunchHostFunc, 0), (cuLaunchHostFunc_ptsz, 1))                                          \
    F(c, cuStreamWriteValue32, WORK, NO_WAIT, PASSES,                                             \
      (CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags),                  \
      (stream, addr, value, flags), (cuStreamWriteValue32, 0), (cuStreamWriteValue32_ptsz, 1),    \
      (cuStreamWriteValue32_v2, 0), (cuStreamWriteValue32_v2_ptsz, 1))                            \
    F(c, cuStreamWriteValue64, WORK, NO_WAIT, PASSES,                                             \
      (CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags),                  \
      (stream, addr, value, flags), (cuStreamWriteValue64, 0), (cuStreamWriteValue64_ptsz, 1),    \
      (cuStreamWriteValue64_v2, 0), (cuStreamWriteValue64_v2_ptsz, 1))                            \
    F(c, cuStreamWaitValue32, WORK, NO_WAIT, PASSES,                                              \
      (CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags),                  \
      (stream, addr, value, flags), (cuStreamWaitValue32, 0), (cuStreamWaitValue32_ptsz, 1),      \
      (cuStreamWaitValue32_v2, 0), (cuStreamWaitValue32_v2_ptsz, 1))                              \
    F(c, cuStreamWaitValue64, WORK, NO_WAIT, PASSES,                                              \
      (CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags),                  \
      (stream, addr, value, flags), (cuStreamWaitValue64, 0), (cuStreamWaitValue64_ptsz, 1),      \
      (cuStreamWaitValue64_v2, 0), (cuStreamWaitValue64_v2_ptsz, 1))                              \
    F(c, cuStreamBatchMemOp, WORK, NO_WAIT, PASSES,                                               \
      (CUstream stream, unsigned int count, CUstreamBatchMemOpParams *paramArray,                 \
       unsigned int flags),                                                                       \
      (stream, count, paramArray, flags), (cuStreamBatchMemOp, 0), (cuStreamBatchMemOp_ptsz, 1),  \
      (cuStreamBatchMemOp_v2, 0), (cuStreamBatchMemOp_v2_ptsz, 1))                                \
    F(c, cuWaitExternalSemaphoresAsync, WORK, NO_WAIT, PASSES,                                    \
      (const CUexternalSemaphore *extSemArray,                                                    \
       const CUDA_EXTERNAL_SEMAPHORE_WAIT_PARAMS *paramsArray, unsigned int numExtSems,           \
       CUstream stream),                                                                          \
      (extSemArray, paramsArray, numExtSems, stream), (cuWaitExternalSemaphoresAsync, 0),         \
      (cuWaitExternalSemaphoresAsync_ptsz, 1))                                                    \
    F(c, cuStreamAddCallback, WORK, NO_WAIT, PASSES,                                              \
      (CUstream stream, CUstreamCallback callback, void *userData, unsigned int flags),           \
      (stream, callback, userData, flags), (cuStreamAddCallback, 0),                              \
      (cuStreamAddCallback_ptsz, 1))                                                              \
    F(c, cuGraphicsMapResources, WORK, NO_WAIT, PASSES,                                           \
      (unsigned int count, CUgraphicsResource *resources, CUstream stream),                       \
      (count, resources, stream), (cuGraphicsMapResources, 0), (cuGraphicsMapResources_ptsz, 1))  \
    F(c, cuGraphicsUnmapResources, WORK, NO_WAIT, PASSES,                                         \
      (unsigned int count, CUgraphicsResource *resources, CUstream stream),                       \
      (count, resources, stream), (cuGraphicsUnmapResources, 0),                                  \
      (cuGraphicsUnmapResources_ptsz, 1))                                                         \
    F(c, cuStreamCreate, WORK, NO_WAIT, PASSES,                                                   \
      (CUstream *stream, unsigned int flags), (stream, flags), (cuStreamCreate, 0))               \
    F(c, cuStreamCreateWithPriority, WORK, NO_WAIT, PASSES,                                       \
      (CUstream *stream, unsigned int flags, int priority), (stream, flags, priority),            \
      (cuStreamCreateWithPriority, 0))                                                            \
    F(c, cuStreamDestroy, WORK, NO_WAIT, HOOK,                                                    \
      (CUstream stream), (stream), (cuStreamDestroy_v2, 0))                                       \
    F(c, cuStreamQuery, ASKS, NO_WAIT, PASSES,                                                    \
      (CUstream stream), (stream), (cuStreamQuery, 0), (cuStreamQuery_ptsz, 1))                   \
    F(c, cuEventQuery, ASKS, NO_WAIT, PASSES,                                                     \
      (CUevent event), (event), (cuEventQuery, 0))                                                \
    F(c, cuSignalExternalSemaphoresAsync, WORK, NO_WAIT, PASSES,                                  \
      (const CUexternalSemaphore *extSemArray,                                                    \
       const CUDA_EXTERNAL_SEMAPHORE_SIGNAL_PARAMS *paramsArray, unsigned int numExtSems,         \
       CUstream stream),                                                                          \
      (extSemArray, paramsArray, numExtSems, stream), (cuSignalExternalSemaphoresAsync, 0),       \
      (cuSignalExternalSemaphoresAsync_ptsz, 1))

/* ---- lists made from the rows ------------------------------------------- */

/* M(c, x) for each x of a row's variants (at most 6). */
#define CUDUMP_EACH(M, c, ...) __VA_OPT__(CUDUMP_EACH1_(M, c, __VA_ARGS__))
#define CUDUMP_EACH1_(M, c, x, ...) M(c, x) __VA_OPT__(CUDUMP_EACH2_(M, c, __VA_ARGS__))
#define CUDUMP_EACH2_(M, c, x, ...) M(c, x) __VA_OPT__(CUDUMP_EACH3_(M, c, __VA_ARGS__))
#define CUDUMP_EACH3_(M, c, x, ...) M(c, x) __VA_OPT__(CUDUMP_EACH4_(M, c, __VA_ARGS__))
#define CUDUMP_EACH4_(M, c, x, ...) M(c, x) __VA_OPT__(CUDUMP_EACH5_(M, c, __VA_ARGS__))
#define CUDUMP_EACH5_(M, c, x, ...) M(c, x) __VA_OPT__(CUDUMP_EACH6_(M, c, __VA_ARGS__))
#define CUDUMP_EACH6_(M, c, x, ...) M(c, x) __VA_OPT__(CUDUMP_EACH_TOO_MANY_VARIANTS)

/* VARIANT(symbol, family, ptsz, (parameters), (arguments)) for every variant of every row. */
#define CUDUMP_VARIANTS(VARIANT) CUDUMP_API(CUDUMP_VARIANTS_OF_, VARIANT)
#define CUDUMP_VARIANTS_OF_(VARIANT, family, counts, waits, does, params, args, ...) \
    CUDUMP_EACH(CUDUMP_VARIANT_, (VARIANT, family, params, args), __VA_ARGS__)
#define CUDUMP_VARIANT_(c, x) CUDUMP_VARIANT__(CUDUMP_UNPAREN c, CUDUMP_UNPAREN x)
#define CUDUMP_VARIANT__(...) CUDUMP_VARIANT___(__VA_ARGS__)
#define CUDUMP_VARIANT___(VARIANT, family, params, args, symbol, ptsz) \
    VARIANT(symbol, family, ptsz, params, args)

/* Whether a row's `does` is one of the writes from the host, by the probe
 * idiom: CUDUMP_WRITES_<does> is defined as `~, 1` for those, and the second
 * item of "<that>, 0, ~" is then 1, else 0. */
#define CUDUMP_SECOND_(a, b, ...) b
#define CUDUMP_SECOND(...) CUDUMP_SECOND_(__VA_ARGS__)
#define CUDUMP_WRITES(does) CUDUMP_SECOND(CUDUMP_WRITES_##does, 0, ~)
#define CUDUMP_WRITES_COPIES_TO_DEVICE(...) ~, 1
#define CUDUMP_WRITES_COPIES_2D(...) ~, 1
#define CUDUMP_WRITES_COPIES_3D(...) ~, 1
#define CUDUMP_WRITES_SETS(...) ~, 1
#define CUDUMP_WRITES_SETS_2D(...) ~, 1
/* CUDUMP_WHEN(1, x) is x, CUDUMP_WHEN(0, x) nothing. */
#define CUDUMP_WHEN(cond, ...) CUDUMP_WHEN_(cond, __VA_ARGS__)
#define CUDUMP_WHEN_(cond, ...) CUDUMP_WHEN_##cond(__VA_ARGS__)
#define CUDUMP_WHEN_0(...)
#define CUDUMP_WHEN_1(...) __VA_ARGS__

/* X(family) for every family that writes device memory from the host, in the
 * order of the rows (protocol.h's PROTO_HOST_APIS). */
#define CUDUMP_HOST_WRITES(X) CUDUMP_API(CUDUMP_HOST_WRITE_OF_, X)
#define CUDUMP_HOST_WRITE_OF_(X, family, counts, waits, does, ...) \
    CUDUMP_WHEN(CUDUMP_WRITES(does), X(family))

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
    SERVICE(cuStreamGetCaptureInfo_v3,                                                     \
            (CUstream s, CUstreamCaptureStatus *status, cuuint64_t *id, CUgraph *graph,    \
             const CUgraphNode **deps, const void **edges, size_t *ndeps))                 \
    SERVICE(cuStreamGetCaptureInfo_v3_ptsz,                                                \
            (CUstream s, CUstreamCaptureStatus *status, cuuint64_t *id, CUgraph *graph,    \
             const CUgraphNode **deps, const void **edges, size_t *ndeps))                 \
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

#endif
