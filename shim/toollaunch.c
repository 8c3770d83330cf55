/*
 * How cudump's kernel is launched (toollaunch.h).
 */
#include <stdatomic.h>
#include <string.h>

#include "calls.h"
#include "channel.h"
#include "toollaunch.h"

/* The driver refused the attribute once: it is not asked again (each refusal
 * costs a driver call on every launch). Process-wide: it is the driver's answer. */
static _Atomic bool refused;

/* Every launch of cudump's kernels the driver took, for summary.json's tool_launches:
 * the benchmark sets them against the program's launches (bench/stay_on.py). */
CUresult toollaunch_counted(CUresult rc)
{
    volatile struct proto_control *ctl = channel_control_rw();
    if (rc == CUDA_SUCCESS && ctl)
        __atomic_fetch_add(&ctl->tool_launches, 1, __ATOMIC_RELAXED);
    return rc;
}

CUresult toollaunch(const struct tool_launcher *l, CUfunction fn, unsigned grid, CUstream stream,
                    struct tool_jobs *jobs)
{
    void *params[] = {jobs};
    if (l->ex && !atomic_load_explicit(&refused, memory_order_relaxed) &&
        calls_fence(l->begun)) {
        CUlaunchAttribute attr;
        memset(&attr, 0, sizeof attr);
        attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        const int allowed = 1;
        memcpy(attr.value, &allowed, sizeof allowed);
        CUlaunchConfig config = {.gridDimX = grid, .gridDimY = 1, .gridDimZ = 1,
                                 .blockDimX = TOOL_THREADS, .blockDimY = 1, .blockDimZ = 1,
                                 .sharedMemBytes = 0, .hStream = stream, .attrs = &attr,
                                 .numAttrs = 1};
        CUresult rc = l->ex(&config, fn, params, NULL);
        calls_unfence();
        volatile struct proto_control *ctl = channel_control_rw();
        if (rc == CUDA_SUCCESS && ctl)
            __atomic_fetch_add(&ctl->tools_waiting, 1, __ATOMIC_RELAXED);
        /* Refused (a driver that does not take the attribute): nothing was queued, and
         * the kernel's wait returns at once when launched plainly. */
        if (rc != CUDA_ERROR_NOT_SUPPORTED && rc != CUDA_ERROR_INVALID_VALUE)
            return toollaunch_counted(rc);
        atomic_store_explicit(&refused, true, memory_order_relaxed);
    }
    if (!l->plain)
        return CUDA_ERROR_NOT_SUPPORTED;
    return toollaunch_counted(
        l->plain(fn, grid, 1, 1, TOOL_THREADS, 1, 1, 0, stream, params, NULL));
}
