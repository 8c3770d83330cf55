/*
 * What the shim does around each wrapped driver call. Every entry calls the
 * real function once and returns its result unchanged: cudump's own work
 * never changes what the program sees. (An allocation that failed for want of
 * the memory cudump's scratch pools keep is made again once they have given
 * it back: the result it would have had bare.)
 *
 * Each family's entry is made from its row of api.h (at the end of this
 * file), which says what it counts, whether the driver waits inside and what
 * the shim does with it. The hooks written by hand here are the families
 * whose work is their own (api.h's HOOK and HOOK_PTSZ rows), each saying why;
 * the entry still does the counting and the settling the row asks for.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ahead.h"
#include "alloctab.h"
#include "behind.h"
#include "calls.h"
#include "channel.h"
#include "ctxlife.h"
#include "drain.h"
#include "flight.h"
#include "functab.h"
#include "gate.h"
#include "graph.h"
#include "handoff.h"
#include "hostwrite.h"
#include "interpose.h"
#include "launch.h"
#include "modules.h"
#include "repeat.h"
#include "scope.h"
#include "scratch.h"
#include "staging.h"
#include "stream.h"
#include "tensormap.h"
#include "tools.h"
#include "watch.h"
#include "window.h"

struct shim_stats shim_stats;

/* ---- lifecycle ---------------------------------------------------------- */

static void after_fork_child(void)
{
    channel_reset_after_fork();
    functab_reset_after_fork();
    alloctab_reset_after_fork();
    staging_reset_after_fork();
    stream_forget_tid();
    graph_reset_after_fork();
    ctxlife_reset_after_fork();
    tools_reset_after_fork();
    repeat_reset_after_fork();
    window_reset_after_fork();
    gate_reset_after_fork();
    watch_reset_after_fork();
    modules_reset_after_fork();
    drain_reset_after_fork();
    scratch_reset_after_fork();
    behind_reset_after_fork();
    tensormap_reset_after_fork();
    flight_reset_after_fork();
    scope_reset_after_fork();
    ahead_reset_after_fork();
    calls_reset_after_fork();
    handoff_reset_after_fork();
    atomic_store(&shim_stats.seq, 0);
    atomic_store(&shim_stats.captured, 0);
    atomic_store(&shim_stats.graph_launches, 0);
}

__attribute__((constructor)) static void shim_load(void)
{
    /* Only registration here: initialising happens after the real cuInit. */
    pthread_atfork(NULL, NULL, after_fork_child);
}

struct stats_ctx {
    struct msg *m;
    uint32_t n;
};

static void add_func_count(struct func_entry *e, void *ctx)
{
    struct stats_ctx *c = ctx;
    struct proto_count count = {.id = e->id,
                                .launches = (uint64_t)atomic_load(&e->launches),
                                .graph_launches = (uint64_t)atomic_load(&e->graph_launches)};
    msg_add(c->m, &count, sizeof count);
    c->n++;
}

__attribute__((destructor)) static void shim_unload(void)
{
    if (!channel_up())
        return;
    graph_fold_all();
    char stack[4096];
    struct msg m;
    msg_init(&m, stack, sizeof stack, MSG_STATS, 0);
    struct proto_stats st = {.seq = atomic_load(&shim_stats.seq),
                             .captured = atomic_load(&shim_stats.captured),
                             .graph_launches = atomic_load(&shim_stats.graph_launches)};
    msg_add(&m, &st, sizeof st);
    struct stats_ctx ctx = {&m, 0};
    functab_each(add_func_count, &ctx);
    /* The count goes into the fixed part now that it is known. */
    st.nfuncs = ctx.n;
    if (!m.sb.oom)
        memcpy(m.sb.data + sizeof(struct proto_header), &st, sizeof st);
    channel_send(&m);
    msg_free(&m);
}

/* Hand-written: the shim starts here, once the driver has. */
static CUresult hook_cuInit(cuInit_fn real, unsigned int flags)
{
    CUresult rc = real(flags);
    if (rc == CUDA_SUCCESS) {
        shim_resolve_real();
        channel_connect();
        behind_start();
    }
    return rc;
}

/* ---- kernel names --------------------------------------------------------------
 * Hand-written: each names its handle in its own way (functab.h). The driver may
 * wait for the context in cuModuleGetFunction (its row settles first);
 * cuKernelGetFunction settles itself, only the first time. */

static CUresult hook_cuModuleGetFunction(cuModuleGetFunction_fn real, CUfunction *hfunc,
                                         CUmodule hmod, const char *name)
{
    CUresult rc = real(hfunc, hmod, name);
    if (rc == CUDA_SUCCESS && hfunc) {
        functab_name((uintptr_t)*hfunc, name, false);
        functab_module((uintptr_t)*hfunc, (uintptr_t)hmod);
    }
    return rc;
}

static CUresult hook_cuLibraryGetKernel(cuLibraryGetKernel_fn real, CUkernel *pKernel,
                                        CUlibrary library, const char *name)
{
    CUresult rc = real(pKernel, library, name);
    if (rc == CUDA_SUCCESS && pKernel) {
        functab_name((uintptr_t)*pKernel, name, true);
        functab_module((uintptr_t)*pKernel, (uintptr_t)library);
    }
    return rc;
}

static CUresult hook_cuKernelGetFunction(cuKernelGetFunction_fn real, CUfunction *pFunc,
                                         CUkernel kernel)
{
    /* The first get loads the kernel into the context, which waits for it
     * (gate.h); libraries get it again at many launches, which must not wait. */
    struct func_entry *k = functab_find((uintptr_t)kernel);
    if (!k || !atomic_load_explicit(&k->got, memory_order_relaxed))
        gate_settle();
    CUresult rc = real(pFunc, kernel);
    if (rc == CUDA_SUCCESS && pFunc) {
        if (!k)
            k = functab_find((uintptr_t)kernel);
        if (k)
            atomic_store_explicit(&k->got, true, memory_order_relaxed);
        if (k && atomic_load_explicit(&k->state, memory_order_acquire) >= FN_NAMED && k->name)
            functab_name((uintptr_t)*pFunc, k->name, false);
        if (k)
            functab_module((uintptr_t)*pFunc, atomic_load(&k->module));
    }
    return rc;
}

/* ---- allocations ---------------------------------------------------------- */

/* Tells the controller about memory: MEM_ALLOC/MEM_FREE for memory that
 * counts (device allocations, VMM physical memory) and MEM_MAP/MEM_UNMAP for
 * VMM address ranges, which only matter for resolving pointers. */
static void send_memory_event(enum proto_memory_op op, enum alloc_kind kind,
                              unsigned long long base, size_t size, size_t pitch, size_t width,
                              size_t height, unsigned elem)
{
    if (!channel_up())
        return;
    struct proto_memory ev = {.op = op, .kind = (uint32_t)kind, .base = base, .size = size,
                              .pitch = pitch, .width = width, .height = height, .elem = elem,
                              .device = -1};
    channel_send_event(MSG_MEMORY, 0, &ev, sizeof ev);
}

static void track_alloc(enum alloc_kind kind, CUdeviceptr base, size_t size, size_t pitch,
                        size_t width, size_t height, unsigned elem)
{
    struct alloc_info a = {base, size, kind, pitch, width, height, elem};
    alloctab_add(&a);
    behind_context();
    send_memory_event(kind == AK_VMM ? MEM_MAP : MEM_ALLOC, kind, base, size, pitch, width, height,
                      elem);
}

/* Whether an allocation of the program's that failed for want of memory may
 * succeed once cudump's scratch pools have given theirs back (scratch.h):
 * then it is made again, once, as it would have succeeded bare. `trims` is
 * scratch_trims() from before the allocation was made. */
static bool retry(CUresult rc, unsigned long trims)
{
    return rc == CUDA_ERROR_OUT_OF_MEMORY && (scratch_trim() || scratch_trims() != trims);
}

/* rc = the program's allocation `call`, made again once where retry says so. */
#define ALLOCATE(rc, call)                              \
    do {                                                \
        unsigned long trims_ = scratch_trims();         \
        (rc) = (call);                                  \
        if (retry((rc), trims_))                        \
            (rc) = (call);                              \
    } while (0)

static void track_free(CUdeviceptr base)
{
    struct alloc_info a;
    if (alloctab_remove(base, &a))
        send_memory_event(a.kind == AK_VMM ? MEM_UNMAP : MEM_FREE, a.kind, base, a.size, 0, 0, 0, 0);
}

/* Hand-written: the one allocation with a geometry (pitch, width, rows, element size). */
static CUresult hook_cuMemAllocPitch(cuMemAllocPitch_fn real, CUdeviceptr *dptr, size_t *pPitch,
                                     size_t widthInBytes, size_t height,
                                     unsigned int elementSizeBytes)
{
    CUresult rc;
    ALLOCATE(rc, real(dptr, pPitch, widthInBytes, height, elementSizeBytes));
    if (rc == CUDA_SUCCESS && dptr && pPitch)
        track_alloc(AK_PITCHED, *dptr, *pPitch * height, *pPitch, widthInBytes, height,
                    elementSizeBytes);
    return rc;
}

/* Hand-written: the program sizes itself by what is free: it is told what it
 * would be told bare, once cudump's scratch pools have given back what they keep. */
static CUresult hook_cuMemGetInfo(cuMemGetInfo_fn real, size_t *free_bytes, size_t *total_bytes)
{
    scratch_trim();
    return real(free_bytes, total_bytes);
}

/* Hand-written: VMM physical memory is a handle, not an address: the controller
 * counts it, the table of allocations does not hold it. */
static CUresult hook_cuMemCreate(cuMemCreate_fn real, CUmemGenericAllocationHandle *handle,
                                 size_t size, const CUmemAllocationProp *prop,
                                 unsigned long long flags)
{
    CUresult rc;
    ALLOCATE(rc, real(handle, size, prop, flags));
    /* Physical memory: counted, but it has no address until it is mapped. */
    if (rc == CUDA_SUCCESS && handle)
        send_memory_event(MEM_ALLOC, AK_VMM, *handle, size, 0, 0, 0, 0);
    return rc;
}

static CUresult hook_cuMemRelease(cuMemRelease_fn real, CUmemGenericAllocationHandle handle)
{
    CUresult rc = real(handle);
    if (rc == CUDA_SUCCESS)
        send_memory_event(MEM_FREE, AK_VMM, handle, 0, 0, 0, 0, 0);
    return rc;
}

/* ---- stream capture --------------------------------------------------------------
 * Hand-written: the captures under way are counted (shim_stats.captures_active),
 * and no trim of cudump's scratch pools runs while one is. */

/* A capture is counted before it begins, once no trim of cudump's scratch pools
 * is under way: none starts while it is counted (scratch.h). */
static void capture_begins(void)
{
    atomic_fetch_add(&shim_stats.captures_active, 1);
    scratch_fence();
}

/* The count undone where the capture did not begin. */
static CUresult capture_began(CUresult rc)
{
    if (rc != CUDA_SUCCESS)
        atomic_fetch_sub(&shim_stats.captures_active, 1);
    return rc;
}

static CUresult hook_cuStreamBeginCapture(cuStreamBeginCapture_fn real, CUstream stream,
                                          CUstreamCaptureMode mode)
{
    capture_begins();
    return capture_began(real(stream, mode));
}

static CUresult hook_cuStreamBeginCaptureToGraph(cuStreamBeginCaptureToGraph_fn real,
                                                 CUstream stream, CUgraph graph,
                                                 const CUgraphNode *deps, const void *depData,
                                                 size_t numDeps, CUstreamCaptureMode mode)
{
    capture_begins();
    return capture_began(real(stream, graph, deps, depData, numDeps, mode));
}

static CUresult hook_cuStreamEndCapture(cuStreamEndCapture_fn real, CUstream stream, void **graph)
{
    CUresult rc = real(stream, graph);
    /* 901: the capture was invalidated, but it has ended all the same. */
    if (rc == CUDA_SUCCESS || rc == 901) {
        int active = atomic_load(&shim_stats.captures_active);
        while (active > 0 &&
               !atomic_compare_exchange_weak(&shim_stats.captures_active, &active, active - 1))
            ;
    }
    return rc;
}

/* ---- launches ------------------------------------------------------------------
 * Hand-written: the launch pipeline (launch.c) and graph launches (graph.c). The
 * three kernel launches are made part of their entries (always_inline), so that
 * the fast path costs no call but the wrapper's into the entry. */

/* The fast path of every launch: one table lookup, one compare with the
 * control page, one load (the flight recorder is off), the real call, three
 * relaxed counters (the third in shared memory, for the controller).
 * Everything else happens only for wanted functions, or for every launch
 * under --flight, in the launch pipeline (launch.c), which makes the call
 * through `run` with the arguments kept in `args` (built only on that path). */
#define LAUNCH_HOOK_BODY(f, stream, call, run, args, ...)                    \
    unsigned wants;                                                          \
    bool interrupted = false;                                                \
    struct func_entry *e = launch_lookup((f), &wants, &interrupted);         \
    if (__builtin_expect(!wants, 1) && __builtin_expect(!e || !flight_on(), 1)) { \
        ahead_void(); /* made for another launch: void now, not at the next */ \
        CUresult rc = call;                                                  \
        if (rc == CUDA_SUCCESS && e)                                         \
            launch_count(e, (stream), ptsz);                                 \
        return rc;                                                           \
    }                                                                        \
    struct launch_info li = {.e = e, .wants = wants, __VA_ARGS__,            \
                             .interrupted = interrupted};                    \
    return launch_run(&li, run, args);

/* The launch calls, kept for the pipeline to make. */
struct kernel_call {
    cuLaunchKernel_fn real;
    CUfunction f;
    unsigned g[3], b[3], smem;
    CUstream stream;
    void **params, **extra;
};

static CUresult call_kernel(void *arg)
{
    const struct kernel_call *c = arg;
    return c->real(c->f, c->g[0], c->g[1], c->g[2], c->b[0], c->b[1], c->b[2], c->smem,
                   c->stream, c->params, c->extra);
}

struct cooperative_call {
    cuLaunchCooperativeKernel_fn real;
    CUfunction f;
    unsigned g[3], b[3], smem;
    CUstream stream;
    void **params;
};

static CUresult call_cooperative(void *arg)
{
    const struct cooperative_call *c = arg;
    return c->real(c->f, c->g[0], c->g[1], c->g[2], c->b[0], c->b[1], c->b[2], c->smem,
                   c->stream, c->params);
}

struct kernel_ex_call {
    cuLaunchKernelEx_fn real;
    const CUlaunchConfig *config;
    CUfunction f;
    void **params, **extra;
};

static CUresult call_kernel_ex(void *arg)
{
    const struct kernel_ex_call *c = arg;
    return c->real(c->config, c->f, c->params, c->extra);
}

static inline __attribute__((always_inline)) CUresult
hook_cuLaunchKernel(cuLaunchKernel_fn real, int ptsz, CUfunction f, unsigned int gx, unsigned int gy,
                    unsigned int gz, unsigned int bx, unsigned int by, unsigned int bz,
                    unsigned int smem, CUstream stream, void **params, void **extra)
{
    LAUNCH_HOOK_BODY(f, stream, real(f, gx, gy, gz, bx, by, bz, smem, stream, params, extra),
                     call_kernel,
                     (&(struct kernel_call){real, f, {gx, gy, gz}, {bx, by, bz}, smem, stream,
                                           params, extra}), .grid = {gx, gy, gz}, .block = {bx, by, bz}, .smem = smem,
                     .stream = stream, .params = params, .extra = extra, .ptsz = ptsz,
                     .api = ptsz ? API_cuLaunchKernel_ptsz : API_cuLaunchKernel)
}

static inline __attribute__((always_inline)) CUresult
hook_cuLaunchCooperativeKernel(cuLaunchCooperativeKernel_fn real, int ptsz, CUfunction f,
                               unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                               unsigned int by, unsigned int bz, unsigned int smem,
                               CUstream stream, void **params)
{
    LAUNCH_HOOK_BODY(f, stream, real(f, gx, gy, gz, bx, by, bz, smem, stream, params),
                     call_cooperative,
                     (&(struct cooperative_call){real, f, {gx, gy, gz}, {bx, by, bz}, smem,
                                                stream, params}), .grid = {gx, gy, gz}, .block = {bx, by, bz},
                     .smem = smem, .stream = stream, .params = params, .extra = NULL,
                     .ptsz = ptsz,
                     .api = ptsz ? API_cuLaunchCooperativeKernel_ptsz : API_cuLaunchCooperativeKernel)
}

/* Whether a launch's attributes let it begin before the kernel ahead of it on
 * the stream has ended (Hopper's programmatic dependent launch). */
static bool programmatic(const CUlaunchConfig *config)
{
    for (unsigned i = 0; config->attrs && i < config->numAttrs; i++) {
        int value; /* the value's first member: an int, or an event's handle */
        memcpy(&value, config->attrs[i].value, sizeof value);
        if (config->attrs[i].id == CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT ||
            (config->attrs[i].id == CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION &&
             value))
            return true;
    }
    return false;
}

static inline __attribute__((always_inline)) CUresult
hook_cuLaunchKernelEx(cuLaunchKernelEx_fn real, int ptsz, const CUlaunchConfig *config,
                      CUfunction f, void **params, void **extra)
{
    if (!config)
        return real(config, f, params, extra);
    LAUNCH_HOOK_BODY(f, config->hStream, real(config, f, params, extra), call_kernel_ex,
                     (&(struct kernel_ex_call){real, config, f, params, extra}),
                     .grid = {config->gridDimX, config->gridDimY, config->gridDimZ},
                     .block = {config->blockDimX, config->blockDimY, config->blockDimZ},
                     .smem = config->sharedMemBytes, .stream = config->hStream, .params = params,
                     .extra = extra, .ptsz = ptsz, .programmatic = programmatic(config),
                     .api = ptsz ? API_cuLaunchKernelEx_ptsz : API_cuLaunchKernelEx)
}

static CUresult hook_cuGraphLaunch(cuGraphLaunch_fn real, int ptsz, CUgraphExec exec,
                                   CUstream stream)
{
    return graph_launch(real, exec, stream, ptsz);
}

/* ---- executable graphs: their kernels are learnt when they are made (graph.c) ----
 * Hand-written: each tells graph.c something of its own. */

static CUresult hook_cuGraphInstantiateWithFlags(cuGraphInstantiateWithFlags_fn real,
                                                 CUgraphExec *exec, CUgraph graph,
                                                 unsigned long long flags)
{
    CUresult rc = real(exec, graph, flags);
    if (rc == CUDA_SUCCESS && exec && channel_up())
        graph_remember(*exec, graph, flags);
    return rc;
}

static CUresult hook_cuGraphInstantiateWithParams(cuGraphInstantiateWithParams_fn real,
                                                  CUgraphExec *exec, CUgraph graph,
                                                  CUDA_GRAPH_INSTANTIATE_PARAMS *params)
{
    CUresult rc = real(exec, graph, params);
    if (rc == CUDA_SUCCESS && exec && channel_up())
        graph_remember(*exec, graph, params ? params->flags : 0);
    return rc;
}

static CUresult hook_cuGraphInstantiate(cuGraphInstantiate_fn real, CUgraphExec *exec,
                                        CUgraph graph, CUgraphNode *errorNode, char *log,
                                        size_t logSize)
{
    CUresult rc = real(exec, graph, errorNode, log, logSize);
    if (rc == CUDA_SUCCESS && exec && channel_up())
        graph_remember(*exec, graph, 0);
    return rc;
}

static CUresult hook_cuGraphExecDestroy(cuGraphExecDestroy_fn real, CUgraphExec exec)
{
    graph_forget(exec);
    return real(exec);
}

static CUresult hook_cuGraphExecUpdate(cuGraphExecUpdate_fn real, CUgraphExec exec, CUgraph graph,
                                       void *resultInfo)
{
    CUresult rc = real(exec, graph, resultInfo);
    if (rc == CUDA_SUCCESS && channel_up())
        graph_updated(exec, graph);
    return rc;
}

/* The setters of an executable graph's other nodes (api.h): once one took, cudump's copies
 * of the graph (made from the graph it was instantiated from) are stale. */
#define SET_HOOK(family, params, args)                                                            \
    static CUresult hook_##family(family##_fn real, CUgraphExec exec, CUgraphNode node EXPAND params) \
    {                                                                                             \
        CUresult rc = real(exec, node EXPAND args);                                               \
        if (rc == CUDA_SUCCESS && channel_up())                                                   \
            graph_exec_set(exec);                                                                 \
        return rc;                                                                                \
    }
#define EXPAND(...) , __VA_ARGS__
SET_HOOK(cuGraphExecNodeSetParams, (void *params), (params))
SET_HOOK(cuGraphExecMemcpyNodeSetParams, (const CUDA_MEMCPY3D *params, CUcontext ctx), (params, ctx))
SET_HOOK(cuGraphExecMemsetNodeSetParams, (const void *params, CUcontext ctx), (params, ctx))
SET_HOOK(cuGraphExecHostNodeSetParams, (const void *params), (params))
SET_HOOK(cuGraphExecChildGraphNodeSetParams, (CUgraph child), (child))
SET_HOOK(cuGraphExecEventRecordNodeSetEvent, (CUevent event), (event))
SET_HOOK(cuGraphExecEventWaitNodeSetEvent, (CUevent event), (event))
SET_HOOK(cuGraphExecExternalSemaphoresSignalNodeSetParams, (const void *params), (params))
SET_HOOK(cuGraphExecExternalSemaphoresWaitNodeSetParams, (const void *params), (params))
SET_HOOK(cuGraphExecBatchMemOpNodeSetParams, (const void *params), (params))
SET_HOOK(cuGraphNodeSetEnabled, (unsigned int enabled), (enabled))
#undef EXPAND
#undef SET_HOOK

static CUresult hook_cuGraphExecKernelNodeSetParams(cuGraphExecKernelNodeSetParams_fn real,
                                                    CUgraphExec exec, CUgraphNode node,
                                                    const CUDA_KERNEL_NODE_PARAMS *params)
{
    CUresult rc = real(exec, node, params);
    if (rc != CUDA_SUCCESS || !params)
        return rc;
    graph_node_params(exec, node, params);
    return rc;
}

/* ---- TMA tensor maps ----------------------------------------------------------
 * A kernel that reads through a tensor map gets no pointer word: the map's
 * 128 bytes say where its tensor is. What each encode was given is remembered
 * with the bytes it made (tensormap.c), so a launch's parameters can be matched
 * against them. Nothing is remembered of a call that failed. Hand-written: each
 * encoding is remembered with its own parameters. */

static void remember_map(const CUtensorMap *map, uint32_t encoding, CUtensorMapDataType dtype,
                         cuuint32_t rank, const void *address, const cuuint64_t *dims,
                         const cuuint64_t *strides, CUtensorMapInterleave interleave)
{
    /* The driver checked what it accepted; these bounds are for our table. */
    if (!map || !dims || rank < 1 || rank > PROTO_TMAP_RANK || (rank > 1 && !strides))
        return;
    struct tmap_info info = {.address = (CUdeviceptr)(uintptr_t)address, .encoding = encoding,
                             .dtype = (uint32_t)dtype, .rank = rank,
                             .interleave = (uint32_t)interleave};
    for (cuuint32_t i = 0; i < rank; i++)
        info.dims[i] = dims[i];
    for (cuuint32_t i = 0; i + 1 < rank; i++)
        info.strides[i] = strides[i];
    tensormap_remember(map, &info);
}

static CUresult hook_cuTensorMapEncodeTiled(cuTensorMapEncodeTiled_fn real, CUtensorMap *tensorMap,
                                            CUtensorMapDataType tensorDataType,
                                            cuuint32_t tensorRank, void *globalAddress,
                                            const cuuint64_t *globalDim,
                                            const cuuint64_t *globalStrides,
                                            const cuuint32_t *boxDim,
                                            const cuuint32_t *elementStrides,
                                            CUtensorMapInterleave interleave,
                                            CUtensorMapSwizzle swizzle,
                                            CUtensorMapL2promotion l2Promotion,
                                            CUtensorMapFloatOOBfill oobFill)
{
    CUresult rc = real(tensorMap, tensorDataType, tensorRank, globalAddress, globalDim,
                       globalStrides, boxDim, elementStrides, interleave, swizzle, l2Promotion,
                       oobFill);
    if (rc == CUDA_SUCCESS)
        remember_map(tensorMap, TMAP_TILED, tensorDataType, tensorRank, globalAddress, globalDim,
                     globalStrides, interleave);
    return rc;
}

static CUresult hook_cuTensorMapEncodeIm2col(cuTensorMapEncodeIm2col_fn real,
                                             CUtensorMap *tensorMap,
                                             CUtensorMapDataType tensorDataType,
                                             cuuint32_t tensorRank, void *globalAddress,
                                             const cuuint64_t *globalDim,
                                             const cuuint64_t *globalStrides,
                                             const int *pixelBoxLowerCorner,
                                             const int *pixelBoxUpperCorner,
                                             cuuint32_t channelsPerPixel,
                                             cuuint32_t pixelsPerColumn,
                                             const cuuint32_t *elementStrides,
                                             CUtensorMapInterleave interleave,
                                             CUtensorMapSwizzle swizzle,
                                             CUtensorMapL2promotion l2Promotion,
                                             CUtensorMapFloatOOBfill oobFill)
{
    CUresult rc = real(tensorMap, tensorDataType, tensorRank, globalAddress, globalDim,
                       globalStrides, pixelBoxLowerCorner, pixelBoxUpperCorner, channelsPerPixel,
                       pixelsPerColumn, elementStrides, interleave, swizzle, l2Promotion,
                       oobFill);
    if (rc == CUDA_SUCCESS)
        remember_map(tensorMap, TMAP_IM2COL, tensorDataType, tensorRank, globalAddress,
                     globalDim, globalStrides, interleave);
    return rc;
}

static CUresult hook_cuTensorMapEncodeIm2colWide(cuTensorMapEncodeIm2colWide_fn real,
                                                 CUtensorMap *tensorMap,
                                                 CUtensorMapDataType tensorDataType,
                                                 cuuint32_t tensorRank, void *globalAddress,
                                                 const cuuint64_t *globalDim,
                                                 const cuuint64_t *globalStrides,
                                                 int pixelBoxLowerCornerWidth,
                                                 int pixelBoxUpperCornerWidth,
                                                 cuuint32_t channelsPerPixel,
                                                 cuuint32_t pixelsPerColumn,
                                                 const cuuint32_t *elementStrides,
                                                 CUtensorMapInterleave interleave,
                                                 CUtensorMapIm2ColWideMode mode,
                                                 CUtensorMapSwizzle swizzle,
                                                 CUtensorMapL2promotion l2Promotion,
                                                 CUtensorMapFloatOOBfill oobFill)
{
    CUresult rc = real(tensorMap, tensorDataType, tensorRank, globalAddress, globalDim,
                       globalStrides, pixelBoxLowerCornerWidth, pixelBoxUpperCornerWidth,
                       channelsPerPixel, pixelsPerColumn, elementStrides, interleave, mode,
                       swizzle, l2Promotion, oobFill);
    if (rc == CUDA_SUCCESS)
        remember_map(tensorMap, TMAP_IM2COL_WIDE, tensorDataType, tensorRank, globalAddress,
                     globalDim, globalStrides, interleave);
    return rc;
}

/* The map changes in place: what its old bytes said, with the new address,
 * is what its new bytes say. A map cudump did not see made stays unknown. */
static CUresult hook_cuTensorMapReplaceAddress(cuTensorMapReplaceAddress_fn real,
                                               CUtensorMap *tensorMap, void *globalAddress)
{
    struct tmap_info info;
    bool known = tensorMap && tensormap_find((const unsigned char *)tensorMap, &info);
    CUresult rc = real(tensorMap, globalAddress);
    if (rc == CUDA_SUCCESS && known) {
        info.address = (CUdeviceptr)(uintptr_t)globalAddress;
        tensormap_remember(tensorMap, &info);
    }
    return rc;
}

/* ---- contexts that end ------------------------------------------------------------
 * Hand-written: before the end the drain's thread must be idle too, and whether a
 * release is the last one is asked of the driver. */

/* What the shim made in a context that ended went with it (ctxlife.h): its
 * kernel and scratch (tools.c), its side stream (watch.c), the instrumented
 * copies of its graphs (graph.c), and the mapping of the host memory cudump's
 * kernel writes into (staging.c, flight.c), made again where needed next. */
static CUresult context_ended(CUresult rc)
{
    if (rc == CUDA_SUCCESS)
        ctxlife_ended();
    return rc;
}

/* Before a context goes, nothing of the shim's may be at work in it: held
 * launches are served or let go, and the drain's thread (which works in the
 * launch's context) finishes, as before the program's own waits. */
static void settle_before_end(void)
{
    gate_settle();
    drain_wait_idle();
}

static CUresult hook_cuCtxDestroy(cuCtxDestroy_fn real, CUcontext ctx)
{
    settle_before_end();
    /* Its key while the handle is good; the tables let go of it by handle and
     * id, since another thread may make a context under the same handle as soon
     * as this one is gone. */
    struct ctx_key gone = {0};
    if (ctx)
        ctx_key_set(&gone, ctx);
    staging_context_ends(&gone);
    CUresult rc = real(ctx);
    if (rc == CUDA_SUCCESS && ctx) {
        window_context_ends(ctx, -1);
        tools_forget(&gone);
        watch_forget(&gone);
        graph_forget_context(&gone);
    }
    return context_ended(rc);
}

static CUresult hook_cuDevicePrimaryCtxReset(cuDevicePrimaryCtxReset_fn real, CUdevice dev)
{
    settle_before_end();
    CUresult rc = real(dev);
    if (rc == CUDA_SUCCESS)
        window_context_ends(NULL, (int)dev);
    return context_ended(rc);
}

/* A window of launches on the stream is scanned while the handle is good (window.h):
 * the program may destroy a stream with its work not waited for. */
static CUresult hook_cuStreamDestroy(cuStreamDestroy_fn real, CUstream stream)
{
    window_stream_ends(stream);
    return real(stream);
}

/* Released for the last time, the primary context is destroyed. */
static CUresult hook_cuDevicePrimaryCtxRelease(cuDevicePrimaryCtxRelease_fn real, CUdevice dev)
{
    unsigned flags = 0;
    int active = 0;
    if (real_cuDevicePrimaryCtxGetState &&
        real_cuDevicePrimaryCtxGetState(dev, &flags, &active) == CUDA_SUCCESS && active)
        settle_before_end(); /* it may be the last retain */
    CUresult rc = real(dev);
    if (rc == CUDA_SUCCESS && real_cuDevicePrimaryCtxGetState &&
        real_cuDevicePrimaryCtxGetState(dev, &flags, &active) == CUDA_SUCCESS && active)
        return rc;
    if (rc == CUDA_SUCCESS)
        window_context_ends(NULL, (int)dev);
    return context_ended(rc);
}

/* ---- made from api.h's rows ------------------------------------------------
 * Each family's entry, which interpose.c's wrappers call through the table
 * below: the counting of `counts`, the settling before and the keeping of the
 * result after of `waits`, and the work around the call of `does` (api.h says
 * what each means). */

/* Once the program has waited for the GPU, what cudump took of the launches
 * before the wait must survive whatever comes next (an abort() right after
 * cudaDeviceSynchronize): copies still on their way through scratch (drain.c)
 * are handed over before the wait returns. The call itself and its result
 * are the program's, untouched. */
static CUresult waited(CUresult rc)
{
    if (rc == CUDA_SUCCESS)
        drain_settle();
    return flight_seen(rc);
}

/* After a wait for the GPU: the windows of launches whose scans it covered are read
 * (--watch-nan, window.h). */
static CUresult window_read(CUresult rc)
{
    if (channel_options() & OPTION_WATCH_NAN) {
        window_sync_after();
        graph_watch_check();
    }
    return rc;
}

/* A write of the host's into device memory: into the host-write ring, and told to the
 * windows of --watch-nan (window.h). */
static void recorded(const struct host_write *w, uint64_t launches)
{
    hostwrite_record(w, launches);
    window_host_wrote(w->dst, (w->depth - 1) * w->slice + (w->height - 1) * w->pitch + w->width);
}

/* A copy's result, recorded first where it wrote device memory from the host. */
static CUresult copied_1d(CUresult rc, enum proto_host_api api, int ptsz, CUstream stream,
                          CUdeviceptr dst, size_t bytes, uint64_t launches)
{
    if (rc == CUDA_SUCCESS)
        recorded(&(struct host_write){.api = api, .ptsz = ptsz, .stream = stream, .dst = dst,
                                      .width = bytes, .height = 1, .pitch = bytes, .depth = 1,
                                      .slice = bytes},
                 launches);
    return rc;
}

static CUresult copied_2d(CUresult rc, enum proto_host_api api, int ptsz, CUstream stream,
                          const CUDA_MEMCPY2D *copy, uint64_t launches)
{
    struct host_write w = {.api = api, .ptsz = ptsz, .stream = stream};
    if (rc == CUDA_SUCCESS && hostwrite_of_2d(copy, &w))
        recorded(&w, launches);
    return rc;
}

static CUresult copied_3d(CUresult rc, enum proto_host_api api, int ptsz, CUstream stream,
                          const CUDA_MEMCPY3D *copy, uint64_t launches)
{
    struct host_write w = {.api = api, .ptsz = ptsz, .stream = stream};
    if (rc == CUDA_SUCCESS && hostwrite_of_3d(copy, &w))
        recorded(&w, launches);
    return rc;
}

/* A memset's result, recorded first: `height` rows `pitch` bytes apart of `width`
 * elements of `elem` bytes, each the pattern `value`. */
static CUresult memset_done(CUresult rc, enum proto_host_api api, int ptsz, CUstream stream,
                            CUdeviceptr dst, size_t pitch, uint32_t value, uint32_t elem,
                            size_t width, size_t height, uint64_t launches)
{
    if (rc == CUDA_SUCCESS)
        recorded(&(struct host_write){.api = api, .ptsz = ptsz, .stream = stream, .dst = dst,
                                      .width = width * elem, .height = height, .pitch = pitch,
                                      .depth = 1, .slice = pitch * height, .value = value,
                                      .elem = elem},
                 launches);
    return rc;
}

/* counts: before the call, and after it. */
#define ENTER_HOST
#define LEAVE_HOST
#define ENTER_WORK handoff_fence(); calls_enter(false); ahead_void();
#define LEAVE_WORK calls_leave(false);
#define ENTER_ASKS handoff_fence(); calls_enter(true); ahead_void();
#define LEAVE_ASKS calls_leave(true);
#define ENTER_LAUNCH handoff_fence(); calls_enter(false);
#define LEAVE_LAUNCH calls_leave(false);

/* waits: before the call, and what becomes of its result. */
#define BEFORE_NO_WAIT
#define BEFORE_WAITS gate_settle();
#define BEFORE_WAITS_COPY gate_settle(); window_sync_before();
#define BEFORE_WAITS_GPU gate_settle(); window_sync_before();
#define AFTER_NO_WAIT(rc) (rc)
#define AFTER_WAITS(rc) (rc)
#define AFTER_WAITS_COPY(rc) window_read(flight_seen(rc))
#define AFTER_WAITS_GPU(rc) window_read(waited(rc))

/* does: DOES_<does> names the body that makes the call `real args` and sets rc,
 * and the row's arguments for it; DOES hands the body the family and the call's
 * arguments in front of them. (Macro parameters end in _ where a struct member
 * has the same name.) */
#define DOES(does, family, args) DOES_(DOES_##does, family, args)
#define DOES_(...) DOES__(__VA_ARGS__)
#define DOES__(body, bargs, family, args) DOES_CALL_(body, (family, args CUDUMP_TAIL bargs))
#define DOES_CALL_(body, all) body all

#define DOES_PASSES PASSES_, ()
#define PASSES_(family, args) rc = real args;

#define DOES_HOOK HOOK_, ()
#define HOOK_(family, args) rc = hook_##family(real CUDUMP_TAIL args);
#define DOES_HOOK_PTSZ HOOK_PTSZ_, ()
#define HOOK_PTSZ_(family, args) rc = hook_##family(real, ptsz CUDUMP_TAIL args);

/* Device memory is made again once where it failed for want of what cudump's
 * scratch pools keep (ALLOCATE); host memory is not theirs to give back. */
#define DOES_ALLOCATES(kind, out, size) ALLOCATES_, (kind, out, size)
#define ALLOCATES_(family, args, kind, out, size)                                      \
    if ((kind) == AK_HOST)                                                          \
        rc = real args;                                                             \
    else                                                                            \
        ALLOCATE(rc, real args);                                                    \
    if (rc == CUDA_SUCCESS && (out))                                                \
        track_alloc((kind), (CUdeviceptr)(uintptr_t) * (out), (size), 0, 0, 0, 0);

#define DOES_MAPS(ptr, size) MAPS_, (ptr, size)
#define MAPS_(family, args, ptr, size)                                              \
    rc = real args;                                                                 \
    if (rc == CUDA_SUCCESS)                                                         \
        track_alloc(AK_VMM, (ptr), (size), 0, 0, 0, 0);

#define DOES_FREES(ptr) FREES_, (ptr)
#define FREES_(family, args, ptr)                                                   \
    window_memory_frees((CUdeviceptr)(uintptr_t)(ptr));                             \
    rc = real args;                                                                 \
    if (rc == CUDA_SUCCESS)                                                         \
        track_free((CUdeviceptr)(uintptr_t)(ptr));

#define DOES_LOADS(out, image) LOADS_, (out, image)
#define LOADS_(family, args, out, image)                                            \
    rc = real args;                                                                 \
    if (rc == CUDA_SUCCESS && (out))                                                \
        modules_add((uintptr_t) * (out), (image), NULL);
#define DOES_LOADS_FILE(out, path) LOADS_FILE_, (out, path)
#define LOADS_FILE_(family, args, out, path)                                        \
    rc = real args;                                                                 \
    if (rc == CUDA_SUCCESS && (out) && (path))                                      \
        modules_add((uintptr_t) * (out), NULL, (path));

/* The writes from the host: passed straight on unless NaN/Inf scans asked for
 * them (one load); then recorded once the driver has taken them, with the
 * launch count from before the call (hostwrite.c). */
#define HOST_WRITE_(args, record)                                                   \
    if (__builtin_expect(!channel_host_on(), 1)) {                                  \
        rc = real args;                                                             \
    } else {                                                                        \
        uint64_t launches = hostwrite_launches();                                   \
        rc = record;                                                                \
    }
#define DOES_COPIES_TO_DEVICE(dst, bytes, stream) COPIES_TO_DEVICE_, (dst, bytes, stream)
#define COPIES_TO_DEVICE_(family, args, dst_, bytes_, stream_)                      \
    HOST_WRITE_(args, copied_1d(real args, HOST_API_##family, ptsz, (stream_), (dst_), \
                                (bytes_), launches))
#define DOES_COPIES_2D(copy, stream) COPIES_2D_, (copy, stream)
#define COPIES_2D_(family, args, copy_, stream_)                                    \
    HOST_WRITE_(args, copied_2d(real args, HOST_API_##family, ptsz, (stream_), (copy_), launches))
#define DOES_COPIES_3D(copy, stream) COPIES_3D_, (copy, stream)
#define COPIES_3D_(family, args, copy_, stream_)                                    \
    HOST_WRITE_(args, copied_3d(real args, HOST_API_##family, ptsz, (stream_), (copy_), launches))
#define DOES_SETS(elem, dst, value, n, stream) SETS_, (elem, dst, value, n, stream)
#define SETS_(family, args, elem_, dst_, value_, n_, stream_)                       \
    HOST_WRITE_(args, memset_done(real args, HOST_API_##family, ptsz, (stream_), (dst_), \
                                  (elem_) * (n_), (value_), (elem_), (n_), 1, launches))
#define DOES_SETS_2D(elem, dst, pitch, value, width, height, stream)                \
    SETS_2D_, (elem, dst, pitch, value, width, height, stream)
#define SETS_2D_(family, args, elem_, dst_, pitch_, value_, width_, height_, stream_) \
    HOST_WRITE_(args, memset_done(real args, HOST_API_##family, ptsz, (stream_), (dst_), \
                                  (pitch_), (value_), (elem_), (width_), (height_), launches))

#define ENTRY(c, family, counts, waits, does, params, args, ...)                   \
    static CUresult entry_##family(family##_fn real,                                \
                                   __attribute__((unused)) int ptsz CUDUMP_TAIL params) \
    {                                                                               \
        ENTER_##counts                                                              \
        BEFORE_##waits                                                              \
        CUresult rc;                                                                \
        DOES(does, family, args)                                                    \
        rc = AFTER_##waits(rc);                                                     \
        LEAVE_##counts                                                              \
        return rc;                                                                  \
    }
CUDUMP_API(ENTRY, ~)
#undef ENTRY

/* The table interpose.c's wrappers call through (interpose.h): a constant, so
 * it is whole before any code of the process runs (a library's constructor may
 * call the driver before this one's). */
#define ENTRY_OF(c, family, ...) .family = entry_##family,
const struct shim_entries shim_entries = {CUDUMP_API(ENTRY_OF, ~)};
#undef ENTRY_OF
