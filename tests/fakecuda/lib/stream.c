/*
 * Streams, events, stream capture and graphs.
 *
 * All work runs synchronously on the calling thread, so streams and events
 * carry no queue. What they do carry is capture state, because capture is
 * where a tool inside the process can most easily break an application:
 * while a stream captures, work submitted to it is recorded into a graph
 * instead of running, and the calls the real driver forbids during a capture
 * invalidate it here too.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

struct fc_graph {
    unsigned int magic;
    size_t count, cap;
    struct fc_op *ops;
    bool invalid; /* an unsafe call broke the capture that builds it */
};

struct fc_event {
    unsigned int magic;
};

static struct fc_stream legacy_stream = {.magic = FC_MAGIC_STREAM, .legacy = true};
static _Thread_local struct fc_stream per_thread_stream = {.magic = FC_MAGIC_STREAM};
static _Thread_local CUstreamCaptureMode thread_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

/* Streams that capture now, guarded by capture_lock. A counter read without
 * the lock keeps the common case (nothing captures) free of locking. */
#define FC_MAX_CAPTURES 64
static pthread_mutex_t capture_lock = PTHREAD_MUTEX_INITIALIZER;
static struct fc_stream *capturing[FC_MAX_CAPTURES];
FC_HIDDEN atomic_int fc_active_captures;

FC_HIDDEN CUresult fc_resolve_stream(CUstream h, bool per_thread, struct fc_stream **out)
{
    if (h == NULL)
        *out = per_thread ? &per_thread_stream : &legacy_stream;
    else if (h == CU_STREAM_LEGACY)
        *out = &legacy_stream;
    else if (h == CU_STREAM_PER_THREAD)
        *out = &per_thread_stream;
    else if (((struct fc_stream *)h)->magic == FC_MAGIC_STREAM)
        *out = (struct fc_stream *)h;
    else
        return CUDA_ERROR_INVALID_HANDLE;
    return CUDA_SUCCESS;
}

/* Marks a capture invalid; its stream stays in capture mode until
 * cuStreamEndCapture, which then reports the invalidation. Lock held. */
static void invalidate_locked(struct fc_stream *s)
{
    s->status = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
    if (s->graph)
        s->graph->invalid = true;
}

static bool same_thread(pthread_t a)
{
    return pthread_equal(a, pthread_self()) != 0;
}

FC_HIDDEN CUresult fc_capture_check_unsafe(void)
{
    if (atomic_load(&fc_active_captures) == 0 || thread_mode == CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_SUCCESS;
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&capture_lock);
    for (size_t i = 0; i < FC_MAX_CAPTURES; i++) {
        struct fc_stream *s = capturing[i];
        if (!s || s->status != CU_STREAM_CAPTURE_STATUS_ACTIVE)
            continue;
        /* This thread's own non-relaxed captures forbid unsafe calls; so do
         * GLOBAL captures of other threads, unless this thread has asked for
         * THREAD_LOCAL interaction. */
        bool own = same_thread(s->owner) && s->mode != CU_STREAM_CAPTURE_MODE_RELAXED;
        bool global = thread_mode == CU_STREAM_CAPTURE_MODE_GLOBAL &&
                      s->mode == CU_STREAM_CAPTURE_MODE_GLOBAL;
        if (own || global) {
            invalidate_locked(s);
            r = FC_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        }
    }
    pthread_mutex_unlock(&capture_lock);
    return r;
}

/* Work on the legacy stream waits for every blocking stream; if one of them
 * captures, the real driver refuses and the capture is lost. */
static CUresult legacy_conflict(bool invalidate)
{
    if (atomic_load(&fc_active_captures) == 0)
        return CUDA_SUCCESS;
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&capture_lock);
    for (size_t i = 0; i < FC_MAX_CAPTURES; i++) {
        struct fc_stream *s = capturing[i];
        if (!s || (s->flags & FC_STREAM_NON_BLOCKING) || s->status == CU_STREAM_CAPTURE_STATUS_NONE)
            continue;
        if (invalidate)
            invalidate_locked(s);
        r = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    }
    pthread_mutex_unlock(&capture_lock);
    return r;
}

static CUresult record_locked(struct fc_graph *g, const struct fc_op *op)
{
    if (g->count == g->cap) {
        size_t cap = g->cap ? 2 * g->cap : 8;
        struct fc_op *ops = realloc(g->ops, cap * sizeof *ops);
        if (!ops)
            return CUDA_ERROR_OUT_OF_MEMORY;
        g->ops = ops;
        g->cap = cap;
    }
    struct fc_op copy = *op;
    if (op->kind == FC_OP_LAUNCH) {
        /* Parameters are captured by value, as the real driver does. */
        copy.args = malloc(op->kernel->args_size ? op->kernel->args_size : 1);
        if (!copy.args)
            return CUDA_ERROR_OUT_OF_MEMORY;
        memcpy(copy.args, op->args, op->kernel->args_size);
    }
    g->ops[g->count++] = copy;
    return CUDA_SUCCESS;
}

FC_HIDDEN void fc_op_execute(const struct fc_op *op)
{
    switch (op->kind) {
    case FC_OP_LAUNCH:
        fc_builtin_run(op->kernel, op->args, op->grid, op->block);
        break;
    case FC_OP_COPY:
        memmove(op->dst, op->src, op->bytes);
        break;
    case FC_OP_COPY2D:
        fc_copy2d(&op->copy2d, true);
        break;
    case FC_OP_MEMSET:
        memset(op->dst, op->value, op->bytes);
        break;
    }
}

FC_HIDDEN CUresult fc_submit(struct fc_stream *s, const struct fc_op *op)
{
    if (atomic_load(&fc_active_captures) != 0) {
        if (s->legacy) {
            CUresult r = legacy_conflict(true);
            if (r != CUDA_SUCCESS)
                return r;
        }
        pthread_mutex_lock(&capture_lock);
        CUresult r = CUDA_SUCCESS;
        bool recorded = false;
        if (s->status == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
            r = record_locked(s->graph, op);
            recorded = true;
        } else if (s->status == CU_STREAM_CAPTURE_STATUS_INVALIDATED) {
            r = FC_ERROR_STREAM_CAPTURE_INVALIDATED;
            recorded = true;
        }
        pthread_mutex_unlock(&capture_lock);
        if (recorded)
            return r;
    }
    fc_op_execute(op);
    return CUDA_SUCCESS;
}

CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
    CUresult r = fc_require_context();
    if (r != CUDA_SUCCESS)
        return r;
    if (!phStream || Flags > FC_STREAM_NON_BLOCKING)
        return CUDA_ERROR_INVALID_VALUE;
    struct fc_stream *s = calloc(1, sizeof *s);
    if (!s)
        return CUDA_ERROR_OUT_OF_MEMORY;
    s->magic = FC_MAGIC_STREAM;
    s->flags = Flags;
    *phStream = (CUstream)s;
    return CUDA_SUCCESS;
}

CUresult cuStreamDestroy_v2(CUstream hStream)
{
    struct fc_stream *s;
    if (!hStream || hStream == CU_STREAM_LEGACY || hStream == CU_STREAM_PER_THREAD ||
        fc_resolve_stream(hStream, false, &s) != CUDA_SUCCESS)
        return CUDA_ERROR_INVALID_HANDLE;
    if (s->status != CU_STREAM_CAPTURE_STATUS_NONE)
        return FC_ERROR_ILLEGAL_STATE;
    s->magic = 0;
    free(s);
    return CUDA_SUCCESS;
}

static CUresult stream_synchronize(CUstream hStream, bool per_thread)
{
    struct fc_stream *s;
    CUresult r = fc_resolve_stream(hStream, per_thread, &s);
    if (r != CUDA_SUCCESS)
        return r;
    if (s->status != CU_STREAM_CAPTURE_STATUS_NONE) {
        pthread_mutex_lock(&capture_lock);
        invalidate_locked(s);
        pthread_mutex_unlock(&capture_lock);
        return FC_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    if (s->legacy && (r = legacy_conflict(true)) != CUDA_SUCCESS)
        return r;
    return fc_capture_check_unsafe();
}

CUresult cuStreamSynchronize(CUstream hStream)
{
    return stream_synchronize(hStream, false);
}

CUresult cuStreamSynchronize_ptsz(CUstream hStream)
{
    return stream_synchronize(hStream, true);
}

static CUresult is_capturing(CUstream hStream, CUstreamCaptureStatus *status, bool per_thread)
{
    struct fc_stream *s;
    if (!status)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = fc_resolve_stream(hStream, per_thread, &s);
    if (r != CUDA_SUCCESS)
        return r;
    /* Asking the legacy stream is an implicit synchronisation with every
     * blocking stream: answered with an error, without breaking the capture. */
    if (s->legacy && (r = legacy_conflict(false)) != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&capture_lock);
    *status = s->status;
    pthread_mutex_unlock(&capture_lock);
    return CUDA_SUCCESS;
}

CUresult cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
    return is_capturing(hStream, captureStatus, false);
}

CUresult cuStreamIsCapturing_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
    return is_capturing(hStream, captureStatus, true);
}

static CUresult begin_capture(CUstream hStream, CUstreamCaptureMode mode, bool per_thread)
{
    struct fc_stream *s;
    if (mode > CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = fc_resolve_stream(hStream, per_thread, &s);
    if (r != CUDA_SUCCESS)
        return r;
    if (s->legacy)
        return FC_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    struct fc_graph *g = calloc(1, sizeof *g);
    if (!g)
        return CUDA_ERROR_OUT_OF_MEMORY;
    g->magic = FC_MAGIC_GRAPH;
    pthread_mutex_lock(&capture_lock);
    size_t slot = FC_MAX_CAPTURES;
    for (size_t i = 0; i < FC_MAX_CAPTURES && slot == FC_MAX_CAPTURES; i++)
        if (!capturing[i])
            slot = i;
    if (s->status != CU_STREAM_CAPTURE_STATUS_NONE)
        r = FC_ERROR_ILLEGAL_STATE;
    else if (slot == FC_MAX_CAPTURES)
        r = CUDA_ERROR_OUT_OF_MEMORY;
    if (r == CUDA_SUCCESS) {
        s->status = CU_STREAM_CAPTURE_STATUS_ACTIVE;
        s->mode = mode;
        s->owner = pthread_self();
        s->graph = g;
        capturing[slot] = s;
        atomic_fetch_add(&fc_active_captures, 1);
    }
    pthread_mutex_unlock(&capture_lock);
    if (r != CUDA_SUCCESS)
        free(g);
    return r;
}

CUresult cuStreamBeginCapture(CUstream hStream)
{
    return begin_capture(hStream, CU_STREAM_CAPTURE_MODE_GLOBAL, false);
}

CUresult cuStreamBeginCapture_ptsz(CUstream hStream)
{
    return begin_capture(hStream, CU_STREAM_CAPTURE_MODE_GLOBAL, true);
}

CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode)
{
    return begin_capture(hStream, mode, false);
}

CUresult cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode)
{
    return begin_capture(hStream, mode, true);
}

static void free_ops(struct fc_op *ops, size_t count)
{
    for (size_t i = 0; i < count; i++)
        if (ops[i].kind == FC_OP_LAUNCH)
            free(ops[i].args);
    free(ops);
}

static void free_graph(struct fc_graph *g)
{
    g->magic = 0;
    free_ops(g->ops, g->count);
    free(g);
}

static CUresult end_capture(CUstream hStream, CUgraph *phGraph, bool per_thread)
{
    struct fc_stream *s;
    if (!phGraph)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = fc_resolve_stream(hStream, per_thread, &s);
    if (r != CUDA_SUCCESS)
        return r;
    struct fc_graph *g = NULL;
    pthread_mutex_lock(&capture_lock);
    if (s->status == CU_STREAM_CAPTURE_STATUS_NONE) {
        r = FC_ERROR_ILLEGAL_STATE;
    } else if (s->mode != CU_STREAM_CAPTURE_MODE_RELAXED && !same_thread(s->owner)) {
        r = FC_ERROR_STREAM_CAPTURE_WRONG_THREAD;
    } else {
        g = s->graph;
        if (s->status == CU_STREAM_CAPTURE_STATUS_INVALIDATED)
            r = FC_ERROR_STREAM_CAPTURE_INVALIDATED;
        s->status = CU_STREAM_CAPTURE_STATUS_NONE;
        s->graph = NULL;
        for (size_t i = 0; i < FC_MAX_CAPTURES; i++)
            if (capturing[i] == s)
                capturing[i] = NULL;
        atomic_fetch_sub(&fc_active_captures, 1);
    }
    pthread_mutex_unlock(&capture_lock);
    if (r == FC_ERROR_STREAM_CAPTURE_INVALIDATED) {
        free_graph(g);
        g = NULL;
    }
    if (r == CUDA_SUCCESS || r == FC_ERROR_STREAM_CAPTURE_INVALIDATED)
        *phGraph = (CUgraph)g;
    return r;
}

CUresult cuStreamEndCapture(CUstream hStream, CUgraph *phGraph)
{
    return end_capture(hStream, phGraph, false);
}

CUresult cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph)
{
    return end_capture(hStream, phGraph, true);
}

CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
    if (!mode || *mode > CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    CUstreamCaptureMode old = thread_mode;
    thread_mode = *mode;
    *mode = old;
    return CUDA_SUCCESS;
}

CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph,
                                     unsigned long long flags)
{
    (void)flags;
    struct fc_graph *g = (struct fc_graph *)hGraph;
    if (!phGraphExec)
        return CUDA_ERROR_INVALID_VALUE;
    if (!g || g->magic != FC_MAGIC_GRAPH)
        return CUDA_ERROR_INVALID_HANDLE;
    /* An executable graph owns a copy, so destroying the graph leaves it
     * runnable, as with the real driver. */
    struct fc_graph *e = calloc(1, sizeof *e);
    if (!e)
        return CUDA_ERROR_OUT_OF_MEMORY;
    e->magic = FC_MAGIC_EXEC;
    for (size_t i = 0; i < g->count; i++) {
        if (record_locked(e, &g->ops[i]) != CUDA_SUCCESS) {
            free_graph(e);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    *phGraphExec = (CUgraphExec)e;
    return CUDA_SUCCESS;
}

static CUresult graph_launch(CUgraphExec hGraphExec, CUstream hStream, bool per_thread)
{
    struct fc_graph *e = (struct fc_graph *)hGraphExec;
    if (!e || e->magic != FC_MAGIC_EXEC)
        return CUDA_ERROR_INVALID_HANDLE;
    struct fc_stream *s;
    CUresult r = fc_resolve_stream(hStream, per_thread, &s);
    if (r != CUDA_SUCCESS)
        return r;
    /* Replayed work never passes the launch entry points, as on a GPU. */
    for (size_t i = 0; i < e->count && r == CUDA_SUCCESS; i++)
        r = fc_submit(s, &e->ops[i]);
    return r;
}

CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
{
    return graph_launch(hGraphExec, hStream, false);
}

CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream)
{
    return graph_launch(hGraphExec, hStream, true);
}

CUresult cuGraphExecDestroy(CUgraphExec hGraphExec)
{
    struct fc_graph *e = (struct fc_graph *)hGraphExec;
    if (!e || e->magic != FC_MAGIC_EXEC)
        return CUDA_ERROR_INVALID_HANDLE;
    free_graph(e);
    return CUDA_SUCCESS;
}

CUresult cuGraphDestroy(CUgraph hGraph)
{
    struct fc_graph *g = (struct fc_graph *)hGraph;
    if (!g || g->magic != FC_MAGIC_GRAPH)
        return CUDA_ERROR_INVALID_HANDLE;
    free_graph(g);
    return CUDA_SUCCESS;
}

CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
    (void)Flags;
    CUresult r = fc_require_context();
    if (r != CUDA_SUCCESS)
        return r;
    if (!phEvent)
        return CUDA_ERROR_INVALID_VALUE;
    struct fc_event *e = calloc(1, sizeof *e);
    if (!e)
        return CUDA_ERROR_OUT_OF_MEMORY;
    e->magic = FC_MAGIC_EVENT;
    *phEvent = (CUevent)e;
    return CUDA_SUCCESS;
}

static bool is_event(CUevent h)
{
    return h && ((struct fc_event *)h)->magic == FC_MAGIC_EVENT;
}

static CUresult event_record(CUevent hEvent, CUstream hStream, bool per_thread)
{
    struct fc_stream *s;
    if (!is_event(hEvent))
        return CUDA_ERROR_INVALID_HANDLE;
    CUresult r = fc_resolve_stream(hStream, per_thread, &s);
    if (r != CUDA_SUCCESS)
        return r;
    /* Work is already done when it is submitted: the event is complete. */
    if (s->legacy)
        return legacy_conflict(true);
    return CUDA_SUCCESS;
}

CUresult cuEventRecord(CUevent hEvent, CUstream hStream)
{
    return event_record(hEvent, hStream, false);
}

CUresult cuEventRecord_ptsz(CUevent hEvent, CUstream hStream)
{
    return event_record(hEvent, hStream, true);
}

CUresult cuEventSynchronize(CUevent hEvent)
{
    if (!is_event(hEvent))
        return CUDA_ERROR_INVALID_HANDLE;
    return fc_capture_check_unsafe();
}

CUresult cuEventDestroy_v2(CUevent hEvent)
{
    if (!is_event(hEvent))
        return CUDA_ERROR_INVALID_HANDLE;
    ((struct fc_event *)hEvent)->magic = 0;
    free(hEvent);
    return CUDA_SUCCESS;
}

static CUresult stream_wait_event(CUstream hStream, CUevent hEvent, bool per_thread)
{
    struct fc_stream *s;
    if (!is_event(hEvent))
        return CUDA_ERROR_INVALID_HANDLE;
    return fc_resolve_stream(hStream, per_thread, &s);
}

CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
    (void)Flags;
    return stream_wait_event(hStream, hEvent, false);
}

CUresult cuStreamWaitEvent_ptsz(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
    (void)Flags;
    return stream_wait_event(hStream, hEvent, true);
}
