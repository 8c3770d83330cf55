/*
 * cudump's own kernel (shim/gpu/tools.cu): a content digest or a NaN/Inf scan
 * of a buffer, run on the launch's stream in place of a copy (COPY_TOOL), so
 * that only PROTO_TOOL_RESULT bytes cross the bus.
 *
 * The module is loaded from PTX once per context, with the driver's own JIT:
 * no toolkit is needed where the shim is built or run. Each context also gets
 * a small device scratch area, one PROTO_TOOL_RESULT slot per copy of a plan,
 * which the kernel accumulates into (zeroed first) and which is then copied
 * into the staging area behind it on the same stream.
 *
 * A copy that reads outside an allocation fails with an error code; a kernel
 * that does faults the whole context. So a tool only runs over a byte range
 * that lies inside one allocation the shim knows (or the driver reports), and
 * a scan only over elements aligned to their size; anything else is refused
 * with CUDA_ERROR_INVALID_VALUE and the controller reports it.
 */
#include <pthread.h>
#include <string.h>

#include "launch.h"
#include "tools_ptx.h"

enum {
    MAX_TOOL_CONTEXTS = 32,
    TOOL_THREADS = 256,
    CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
};

struct tool_ctx {
    CUcontext ctx;
    CUresult rc;            /* why the module or scratch could not be had */
    CUfunction fn;
    CUdeviceptr scratch;    /* PROTO_MAX_COPIES x PROTO_TOOL_RESULT bytes */
    unsigned max_blocks;
};

/* Contexts the kernel is loaded in: a handful per process at most. */
static pthread_mutex_t tools_lock = PTHREAD_MUTEX_INITIALIZER;
static struct tool_ctx tools[MAX_TOOL_CONTEXTS];
static unsigned ntools;

void tools_reset_after_fork(void)
{
    /* The child has no GPU state of the parent's: forget every context. */
    pthread_mutex_init(&tools_lock, NULL);
    ntools = 0;
}

static unsigned element_size(unsigned mode)
{
    return mode == TOOL_SCAN_F64 ? 8 : mode == TOOL_SCAN_F16 || mode == TOOL_SCAN_BF16 ? 2 : 4;
}

/* Loads the module into ctx (current on this thread) on first use. */
static const struct tool_ctx *tool_context(CUcontext ctx)
{
    pthread_mutex_lock(&tools_lock);
    struct tool_ctx *t = NULL;
    for (unsigned i = 0; i < ntools && !t; i++)
        if (tools[i].ctx == ctx)
            t = &tools[i];
    if (!t && ntools < MAX_TOOL_CONTEXTS) {
        t = &tools[ntools++];
        *t = (struct tool_ctx){.ctx = ctx, .max_blocks = 256};
        CUmodule module = NULL;
        cuModuleGetFunction_fn get = shim_real_cuModuleGetFunction();
        cuMemAlloc_fn alloc = shim_real_cuMemAlloc_v2();
        t->rc = real_cuModuleLoadData && get && alloc ? CUDA_SUCCESS : CUDA_ERROR_NOT_SUPPORTED;
        if (t->rc == CUDA_SUCCESS)
            t->rc = real_cuModuleLoadData(&module, tools_ptx);
        if (t->rc == CUDA_SUCCESS)
            t->rc = get(&t->fn, module, "cudump_tool");
        if (t->rc == CUDA_SUCCESS)
            t->rc = alloc(&t->scratch, (size_t)PROTO_MAX_COPIES * PROTO_TOOL_RESULT);
        CUdevice dev;
        int sms = 0;
        if (t->rc == CUDA_SUCCESS && real_cuCtxGetDevice && real_cuDeviceGetAttribute &&
            real_cuCtxGetDevice(&dev) == CUDA_SUCCESS &&
            real_cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev) ==
                CUDA_SUCCESS &&
            sms > 0)
            t->max_blocks = (unsigned)sms * 8; /* enough blocks in flight to fill the GPU */
    }
    pthread_mutex_unlock(&tools_lock);
    return t;
}

/* Whether the bytes a copy reads lie inside one allocation. */
static bool inside_allocation(const struct proto_copy *c)
{
    struct alloc_info a;
    uint64_t span, end, limit;
    if (__builtin_mul_overflow(c->height - 1, c->pitch, &span) ||
        __builtin_add_overflow(span, c->width, &span) ||
        __builtin_add_overflow(c->src, span, &end) || !alloc_resolve(c->src, true, &a) ||
        __builtin_add_overflow(a.base, a.size, &limit))
        return false;
    return c->src >= a.base && end <= limit;
}

static CUresult tool_check(const struct proto_copy *c, unsigned mode)
{
    if (mode >= TOOL_MODES)
        return CUDA_ERROR_INVALID_VALUE;
    unsigned esize = element_size(mode);
    if (mode != TOOL_DIGEST &&
        (c->src % esize || c->width % esize || (c->height > 1 && c->pitch % esize)))
        return CUDA_ERROR_INVALID_VALUE;
    return inside_allocation(c) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult tool_enqueue(const struct launch_info *li, unsigned slot, const struct proto_copy *c,
                      void *dst)
{
    unsigned mode = (c->flags >> PROTO_TOOL_MODE_SHIFT) & 0xff;
    CUresult rc = slot < PROTO_MAX_COPIES ? tool_check(c, mode) : CUDA_ERROR_INVALID_VALUE;
    if (rc != CUDA_SUCCESS)
        return rc;
    /* The stream's context, made current for the calls below if it is not. */
    CUcontext ctx = NULL, current = NULL;
    cuStreamGetCtx_fn stream_ctx = li->ptsz ? real_cuStreamGetCtx_ptsz : real_cuStreamGetCtx;
    if (real_cuCtxGetCurrent)
        real_cuCtxGetCurrent(&current);
    if (!stream_ctx || stream_ctx(li->stream, &ctx) != CUDA_SUCCESS || !ctx)
        ctx = current;
    if (!ctx)
        return CUDA_ERROR_INVALID_CONTEXT;
    bool pushed = ctx != current && real_cuCtxPushCurrent_v2 && real_cuCtxPopCurrent_v2 &&
                  real_cuCtxPushCurrent_v2(ctx) == CUDA_SUCCESS;
    if (ctx != current && !pushed)
        return CUDA_ERROR_INVALID_CONTEXT;
    const struct tool_ctx *t = tool_context(ctx);
    rc = t ? t->rc : CUDA_ERROR_OUT_OF_MEMORY;
    cuMemsetD8Async_fn zero = li->ptsz ? real_cuMemsetD8Async_ptsz : real_cuMemsetD8Async;
    cuMemcpyDtoHAsync_v2_fn back =
        li->ptsz ? real_cuMemcpyDtoHAsync_v2_ptsz : real_cuMemcpyDtoHAsync_v2;
    cuLaunchKernel_fn launch =
        li->ptsz ? shim_real_cuLaunchKernel_ptsz() : shim_real_cuLaunchKernel();
    if (rc == CUDA_SUCCESS && (!zero || !back || !launch))
        rc = CUDA_ERROR_NOT_SUPPORTED;
    if (rc == CUDA_SUCCESS) {
        CUdeviceptr out = t->scratch + (CUdeviceptr)slot * PROTO_TOOL_RESULT;
        uint64_t units = mode == TOOL_DIGEST ? (c->width + 3) / 4 * c->height / 4 + 1
                                             : c->width / element_size(mode) * c->height;
        uint64_t blocks = (units + TOOL_THREADS - 1) / TOOL_THREADS;
        unsigned grid = blocks < 1 ? 1 : blocks > t->max_blocks ? t->max_blocks : (unsigned)blocks;
        CUdeviceptr src = c->src;
        unsigned long long width = c->width, height = c->height, pitch = c->pitch;
        void *params[] = {&src, &width, &height, &pitch, &out, &mode};
        rc = zero(out, 0, PROTO_TOOL_RESULT, li->stream);
        if (rc == CUDA_SUCCESS)
            rc = launch(t->fn, grid, 1, 1, TOOL_THREADS, 1, 1, 0, li->stream, params, NULL);
        if (rc == CUDA_SUCCESS)
            rc = back(dst, out, PROTO_TOOL_RESULT, li->stream);
    }
    if (pushed) {
        CUcontext popped;
        real_cuCtxPopCurrent_v2(&popped);
    }
    return rc;
}
