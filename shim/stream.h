/* Streams, contexts and the capture mode of the shim's own driver calls
 * (stream.c): the bottom of the launch path, calling only the driver. */
#ifndef CUDUMP_STREAM_H
#define CUDUMP_STREAM_H

#include "launchinfo.h"

/* Whether the stream is being captured (the legacy stream during another
 * stream's global capture counts). */
bool stream_capturing(CUstream stream, int ptsz);

/* The context of the launch's stream: the thread's current one where the
 * driver cannot say. NULL if neither is known. */
CUcontext stream_ctx(const struct launch_info *li);

/* A context made current on this thread for a while (ctx_enter), and the
 * thread's own given back (ctx_leave). The shim's work for a launch goes in
 * its stream's context, which a thread of the program need not have current. */
struct ctx_scope {
    bool ok;                    /* the context is current */
    bool pushed;                /* by ctx_enter: ctx_leave pops it */
};
struct ctx_scope ctx_enter(CUcontext ctx);
void ctx_leave(struct ctx_scope scope);

/* The shim's own driver calls run in the RELAXED capture mode, so that they
 * can never invalidate a stream capture of the program's (global mode forbids
 * them process-wide): capture_relax sets it for this thread and returns the
 * mode it replaced, capture_restore puts that back. */
CUstreamCaptureMode capture_relax(void);
void capture_restore(CUstreamCaptureMode mode);

/* The calling thread's device (-1 if unknown), and its thread id (asked once
 * per thread; stream_forget_tid clears it in a forked child). */
int stream_device(void);
uint64_t stream_tid(void);
void stream_forget_tid(void);

/* The shim's one kind of copy: `height` rows of `width` bytes from device memory (rows
 * `src_pitch` apart) to host memory at dst_host, or else device memory at dst_dev, rows
 * packed. */
static inline CUDA_MEMCPY2D rows_copy(CUdeviceptr src, size_t src_pitch, void *dst_host,
                                      CUdeviceptr dst_dev, size_t width, size_t height)
{
    return (CUDA_MEMCPY2D){.srcMemoryType = CU_MEMORYTYPE_UNIFIED,
                           .srcDevice = src,
                           .srcPitch = src_pitch,
                           .dstMemoryType = dst_host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE,
                           .dstHost = dst_host,
                           .dstDevice = dst_host ? 0 : dst_dev,
                           .dstPitch = width,
                           .WidthInBytes = width,
                           .Height = height};
}

#endif
