/*
 * Streams, contexts and capture mode: small services of the launch path that
 * call only the driver.
 */
#include <sys/syscall.h>
#include <unistd.h>

#include "stream.h"

bool stream_capturing(CUstream stream, int ptsz)
{
    cuStreamIsCapturing_fn is_capturing =
        ptsz ? real_cuStreamIsCapturing_ptsz : real_cuStreamIsCapturing;
    if (!is_capturing)
        return false;
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    CUresult rc = is_capturing(stream, &status);
    /* The legacy stream during another stream's global capture. */
    if (rc == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT)
        return true;
    return rc == CUDA_SUCCESS && status != CU_STREAM_CAPTURE_STATUS_NONE;
}

CUcontext stream_ctx(const struct launch_info *li)
{
    CUcontext ctx = NULL;
    cuStreamGetCtx_fn get_ctx = li->ptsz ? real_cuStreamGetCtx_ptsz : real_cuStreamGetCtx;
    if ((!get_ctx || get_ctx(li->stream, &ctx) != CUDA_SUCCESS || !ctx) &&
        (!real_cuCtxGetCurrent || real_cuCtxGetCurrent(&ctx) != CUDA_SUCCESS))
        return NULL;
    return ctx;
}

struct ctx_scope ctx_enter(CUcontext ctx)
{
    CUcontext current = NULL;
    if (!ctx)
        return (struct ctx_scope){false, false};
    if (real_cuCtxGetCurrent && real_cuCtxGetCurrent(&current) == CUDA_SUCCESS && current == ctx)
        return (struct ctx_scope){true, false};
    /* Pushed only where it can be popped again: a context left current on a
     * thread of the program would take its next call elsewhere. */
    bool pushed = real_cuCtxPushCurrent_v2 && real_cuCtxPopCurrent_v2 &&
                  real_cuCtxPushCurrent_v2(ctx) == CUDA_SUCCESS;
    return (struct ctx_scope){pushed, pushed};
}

void ctx_leave(struct ctx_scope scope)
{
    CUcontext popped;
    if (scope.pushed)
        real_cuCtxPopCurrent_v2(&popped);
}

CUstreamCaptureMode capture_relax(void)
{
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    if (real_cuThreadExchangeStreamCaptureMode)
        real_cuThreadExchangeStreamCaptureMode(&mode);
    return mode;
}

void capture_restore(CUstreamCaptureMode mode)
{
    if (real_cuThreadExchangeStreamCaptureMode)
        real_cuThreadExchangeStreamCaptureMode(&mode);
}

int stream_device(void)
{
    CUdevice dev = -1;
    if (!real_cuCtxGetDevice || real_cuCtxGetDevice(&dev) != CUDA_SUCCESS)
        return -1;
    return dev;
}

/* gettid is a system call: asked once per thread. The child of a fork gets a
 * copy of the forking thread's value, so the fork handler clears it. */
static SHIM_TLS uint64_t tid;

void stream_forget_tid(void)
{
    tid = 0;
}

uint64_t stream_tid(void)
{
    if (!tid)
        tid = (uint64_t)syscall(SYS_gettid);
    return tid;
}
