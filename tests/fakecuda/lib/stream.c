/*
 * Streams, events and stream capture (graphs themselves are in graph.c).
 *
 * All work runs synchronously on the calling thread, so streams and events
 * carry no queue. What they do carry is capture state, because capture is
 * where a tool inside the process can most easily break an application:
 * while a stream captures, work submitted to it is recorded into a graph
 * instead of running (each operation a node that depends on the one before,
 * as the real driver records a single stream), and the calls the real driver
 * forbids during a capture invalidate it here too.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "tooljob.h"

/* Streams held by cudump's kernel waiting on its gate (fc_hold_gate): the one
 * place the stand-in does not run work at once. Work submitted behind a hold,
 * and any wait for it, waits on the calling thread while the gate reads
 * GATE_HELD, GATE_SERVING or GATE_COPY, as the real stream would on the GPU; a
 * stream does not wait for a non-blocking one or vice versa, except the streams
 * themselves. An event recorded behind a hold completes with it (cuEventQuery
 * says CUDA_ERROR_NOT_READY until then). With FAKECUDA_SHARED_QUEUE=1, an event
 * recorded on any stream while one is held completes only with the hold, as
 * where streams share the GPU's hardware queue with the held one: copies made
 * on a side stream then cannot be waited for while the stream is held.
 *
 * While held, the kernel makes the copies its mailbox asks for (GATE_COPY): a
 * thread of the stand-in's, the "device", looks at the held gates and makes
 * them (serve_mail), as the kernel's holding block would; FAKECUDA_MAIL says
 * otherwise for a test (serve_mail). */
struct fc_hold {
    const struct fc_stream *stream;
    volatile uint32_t *gate;
    uint64_t give_up_ns;     /* when the kernel opens a gate nobody began to serve */
    uint32_t give_up_value;  /* and what it writes there */
    volatile uint64_t *mail; /* the slot's mailbox (shim/tooljob.h's TOOL_MAIL_*), or NULL */
    uint64_t last;           /* the number of the last copy it made */
};

struct fc_event {
    unsigned int magic;
    bool held;               /* recorded behind `hold` */
    struct fc_hold hold;
};

#define FC_MAX_HOLDS 64
#define FC_HOLD_LIMIT_S 60   /* a hold nobody opens is a bug in the tool: fail loudly */
static pthread_mutex_t hold_lock = PTHREAD_MUTEX_INITIALIZER;
static struct fc_hold holds[FC_MAX_HOLDS];
static atomic_int nholds;

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static bool gate_open(const struct fc_hold *h)
{
    uint32_t v = __atomic_load_n(h->gate, __ATOMIC_ACQUIRE);
    return v != 1 && v != 5 && v != 6; /* not GATE_HELD, GATE_SERVING or GATE_COPY */
}

/* The kernel gives up on a gate nobody began to serve (here: not on one being
 * served, which the tests never leave for long). */
static bool hold_met(const struct fc_hold *h)
{
    if (gate_open(h))
        return true;
    if (now_ns() < h->give_up_ns)
        return false;
    uint32_t held = 1; /* GATE_HELD */
    __atomic_compare_exchange_n(h->gate, &held, h->give_up_value, false, __ATOMIC_ACQ_REL,
                                __ATOMIC_ACQUIRE);
    return gate_open(h);
}

/* Whether work on s waits for a hold on h (NULL s: every hold). */
static bool holds_up(const struct fc_stream *h, const struct fc_stream *s)
{
    if (!s || h == s)
        return true;
    bool nb_h = h->flags & FC_STREAM_NON_BLOCKING, nb_s = s->flags & FC_STREAM_NON_BLOCKING;
    return (s->legacy && !nb_h) || (h->legacy && !nb_s);
}

/* The first hold that work on s waits for, removing those met; false if none. */
static bool pending_hold(const struct fc_stream *s, struct fc_hold *out)
{
    if (atomic_load(&nholds) == 0)
        return false;
    bool found = false;
    pthread_mutex_lock(&hold_lock);
    int n = atomic_load(&nholds);
    for (int i = 0; i < n && !found;) {
        if (hold_met(&holds[i])) {
            holds[i] = holds[--n];
            continue;
        }
        if (holds_up(holds[i].stream, s)) {
            *out = holds[i];
            found = true;
        }
        i++;
    }
    atomic_store(&nholds, n);
    pthread_mutex_unlock(&hold_lock);
    return found;
}

static void wait_for(const struct fc_hold *h)
{
    for (long waited_us = 0; !hold_met(h); waited_us += 50) {
        if (waited_us > FC_HOLD_LIMIT_S * 1000000L) {
            fprintf(stderr, "fakecuda: a stream held by cudump's kernel for %d s: "
                    "nobody opens it\n", FC_HOLD_LIMIT_S);
            abort();
        }
        struct timespec nap = {0, 50 * 1000};
        nanosleep(&nap, NULL);
    }
}

FC_HIDDEN void fc_wait_held(const struct fc_stream *s)
{
    struct fc_hold h;
    while (pending_hold(s, &h))
        wait_for(&h);
}

/* The copy a held gate's mailbox asks for, if it is new, made as the kernel's
 * block makes it; then its number in `done`. Lock held. */
static void serve_mail(struct fc_hold *h)
{
    volatile uint64_t *m = h->mail;
    if (!m || __atomic_load_n(h->gate, __ATOMIC_ACQUIRE) != 6) /* GATE_COPY */
        return;
    uint64_t seq = __atomic_load_n(&m[TOOL_MAIL_SEQ], __ATOMIC_ACQUIRE);
    if (seq == h->last)
        return;
    h->last = seq;
    /* FAKECUDA_MAIL=release: the kernel gives up instead (as at TOOL_SERVE_NS); =ignore:
     * it never answers (its context ended under it). */
    const char *how = getenv("FAKECUDA_MAIL");
    if (how && strcmp(how, "ignore") == 0)
        return;
    if (how && strcmp(how, "release") == 0) {
        __atomic_store_n(h->gate, 4, __ATOMIC_RELEASE); /* GATE_RELEASED */
        return;
    }
    uint64_t src = m[TOOL_MAIL_SRC], dst = m[TOOL_MAIL_DST], width = m[TOOL_MAIL_WIDTH],
             height = m[TOOL_MAIL_HEIGHT], pitch = m[TOOL_MAIL_PITCH];
    /* As on a GPU: bytes read outside device memory, or written where the
     * device maps nothing, fault the context (and the copy is never made). */
    size_t span = height ? (height - 1) * pitch + width : 0;
    if (fc_check_device(src, span) != CUDA_SUCCESS ||
        fc_check_mapped(dst, width * height) != CUDA_SUCCESS) {
        fc_set_fault(FC_ERROR_ILLEGAL_ADDRESS);
        return;
    }
    for (uint64_t r = 0; r < height; r++)
        memmove((void *)(uintptr_t)(dst + r * width), (const void *)(uintptr_t)(src + r * pitch),
                width);
    atomic_fetch_add(&fc_mail_copies, 1);
    __atomic_store_n(&m[TOOL_MAIL_DONE], seq, __ATOMIC_RELEASE);
}

_Atomic unsigned long fc_mail_copies;

static void *device(void *unused)
{
    (void)unused;
    for (;;) {
        bool any = atomic_load(&nholds) != 0;
        if (any) {
            pthread_mutex_lock(&hold_lock);
            int n = atomic_load(&nholds);
            for (int i = 0; i < n; i++)
                serve_mail(&holds[i]);
            pthread_mutex_unlock(&hold_lock);
        }
        struct timespec nap = {0, (any ? 20 : 1000) * 1000};
        nanosleep(&nap, NULL);
    }
    return NULL;
}

/* The device thread, in this process (a child of fork has none of its parent's). */
static void start_device(void)
{
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static pid_t started;
    pthread_mutex_lock(&lock);
    if (started != getpid()) {
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old); /* signals are the program's */
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&t, &attr, device, NULL) == 0)
            started = getpid();
        pthread_attr_destroy(&attr);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
    }
    pthread_mutex_unlock(&lock);
}

FC_HIDDEN void fc_hold_gate(struct fc_stream *s, volatile uint32_t *gate, volatile uint64_t *mail,
                            uint64_t give_up_after_ns, uint32_t give_up_value)
{
    if (s->status != CU_STREAM_CAPTURE_STATUS_NONE)
        return;
    fc_wait_held(s); /* one hold per stream at a time: the one before it first */
    struct fc_hold h = {s, gate, now_ns() + give_up_after_ns, give_up_value, mail, 0};
    if (hold_met(&h))
        return;
    pthread_mutex_lock(&hold_lock);
    int n = atomic_load(&nholds);
    if (n == FC_MAX_HOLDS) { /* more than any test holds at once */
        pthread_mutex_unlock(&hold_lock);
        return;
    }
    holds[n] = h;
    atomic_store(&nholds, n + 1);
    pthread_mutex_unlock(&hold_lock);
    if (mail)
        start_device();
}

static struct fc_stream legacy_stream = {.magic = FC_MAGIC_STREAM, .legacy = true};
static _Thread_local struct fc_stream per_thread_stream = {.magic = FC_MAGIC_STREAM};
static _Thread_local CUstreamCaptureMode thread_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

/* Streams that capture now, guarded by capture_lock. A counter read without
 * the lock keeps the common case (nothing captures) free of locking. */
#define FC_MAX_CAPTURES 64
static pthread_mutex_t capture_lock = PTHREAD_MUTEX_INITIALIZER;
static struct fc_stream *capturing[FC_MAX_CAPTURES];
FC_HIDDEN atomic_int fc_active_captures;
static atomic_ullong capture_ids; /* the last capture's id: ids start at 1 */

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

FC_HIDDEN CUresult fc_legacy_conflict(void)
{
    return legacy_conflict(true);
}

/* Makes deps the dependency set of the next captured node. Lock held. */
static CUresult set_deps_locked(struct fc_stream *s, struct fc_node *const *deps, size_t n)
{
    if (n > s->deps_cap) {
        size_t cap = n < 4 ? 4 : n;
        struct fc_node **d = realloc(s->deps, cap * sizeof *d);
        if (!d)
            return CUDA_ERROR_OUT_OF_MEMORY;
        s->deps = d;
        struct fc_graph_edge_data *e = realloc(s->dep_edges, cap * sizeof *e);
        if (!e)
            return CUDA_ERROR_OUT_OF_MEMORY;
        memset(e, 0, cap * sizeof *e);
        s->dep_edges = e;
        s->deps_cap = cap;
    }
    if (n)
        memmove(s->deps, deps, n * sizeof *deps);
    s->ndeps = n;
    return CUDA_SUCCESS;
}

static void clear_capture_locked(struct fc_stream *s)
{
    free(s->deps);
    free(s->dep_edges);
    s->deps = NULL;
    s->dep_edges = NULL;
    s->ndeps = s->deps_cap = 0;
    s->graph = NULL;
    s->own_graph = false;
}

/* A captured operation becomes a node that depends on the stream's last
 * one(s) and is the next one's dependency. Lock held. */
static CUresult record_locked(struct fc_stream *s, const struct fc_op *op)
{
    struct fc_node *node;
    CUresult r = fc_graph_record(s->graph, s->deps, s->ndeps, op, &node);
    if (r == CUDA_SUCCESS)
        r = set_deps_locked(s, &node, 1);
    return r;
}

_Thread_local CUcontext fc_executing_ctx;

FC_HIDDEN CUresult fc_op_execute(const struct fc_op *op)
{
    switch (op->kind) {
    case FC_OP_LAUNCH:
        fc_executing_ctx = op->launch.ctx;
        fc_builtin_run(op->launch.kernel, op->launch.args, op->launch.grid, op->launch.block);
        fc_executing_ctx = NULL;
        return CUDA_SUCCESS;
    case FC_OP_MEMCPY:
        return fc_copy3d(&op->copy);
    case FC_OP_MEMSET:
        return fc_memset(&op->set);
    }
    return CUDA_ERROR_INVALID_VALUE;
}

static void check_tools_waiting(int was);

FC_HIDDEN CUresult fc_submit(struct fc_stream *s, const struct fc_op *op)
{
    if (atomic_load(&fc_fault_pending))
        return atomic_load(&fc_fault); /* the context is lost: nothing runs any more */
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
            r = record_locked(s, op);
            recorded = true;
        } else if (s->status == CU_STREAM_CAPTURE_STATUS_INVALIDATED) {
            r = FC_ERROR_STREAM_CAPTURE_INVALIDATED;
            recorded = true;
        }
        pthread_mutex_unlock(&capture_lock);
        if (recorded)
            return r;
    }
    fc_wait_held(s);
    const int was = fc_stream_enqueued(s, op->kind != FC_OP_LAUNCH  ? FC_TAIL_OTHER
                                          : op->launch.programmatic ? FC_TAIL_PROGRAMMATIC_KERNEL
                                                                    : FC_TAIL_PLAIN_KERNEL);
    const bool waits = op->kind == FC_OP_LAUNCH && op->launch.programmatic &&
                       strcmp(op->launch.kernel->short_name, "cudump_tools") == 0;
    if (waits)
        check_tools_waiting(was);
    CUresult r = fc_op_execute(op);
    if (waits && r == CUDA_SUCCESS)
        atomic_fetch_add(&fc_tool_waiting, 1);
    return r;
}

_Atomic unsigned long fc_tool_waiting;

FC_HIDDEN int fc_stream_enqueued(struct fc_stream *s, int tail)
{
    return atomic_exchange(&s->tail, tail);
}

/* cudump's kernel launched with programmatic stream serialization: it is the
 * build that waits for the kernel before it, and it follows (`was`) a kernel
 * launched plainly, the one case the shim launches it so (shim/tools.h,
 * TOOLS_RIGHT_AFTER). Either broken is the shim's bug: the process ends at
 * once, loudly. Checked as it goes on the stream, after whatever delay its
 * launch had (FAKECUDA_TOOLS_DELAY_US), when all that came before it is known. */
static void check_tools_waiting(int was)
{
    if (fc_tools_ptx_waits() && was == FC_TAIL_PLAIN_KERNEL)
        return;
    fprintf(stderr, "fakecuda: cudump's kernel launched with programmatic stream serialization "
                    "%s\n",
            !fc_tools_ptx_waits()              ? "from a build that does not wait for the kernel before it"
            : was == FC_TAIL_PROGRAMMATIC_KERNEL ? "after a kernel launched so itself"
                                                 : "after work other than a kernel");
    abort();
}

FC_HIDDEN CUresult fc_uncapturable_work(struct fc_stream *s)
{
    if (atomic_load(&fc_active_captures) == 0)
        return CUDA_SUCCESS;
    if (s->legacy) {
        CUresult r = legacy_conflict(true);
        if (r != CUDA_SUCCESS)
            return r;
    }
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&capture_lock);
    if (s->status == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
        invalidate_locked(s);
        r = FC_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    } else if (s->status == CU_STREAM_CAPTURE_STATUS_INVALIDATED) {
        r = FC_ERROR_STREAM_CAPTURE_INVALIDATED;
    }
    pthread_mutex_unlock(&capture_lock);
    return r;
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
    fc_wait_held(s);
    if ((r = fc_fault_noticed()) != CUDA_SUCCESS)
        return r;
    return fc_capture_check_unsafe();
}

CUresult cuStreamSynchronize(CUstream hStream)
{
    fc_records_land();
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

/* Starts capturing into graph (a new one when NULL) after the given nodes. */
static CUresult begin_capture(CUstream hStream, struct fc_graph *graph,
                              const CUgraphNode *dependencies,
                              const struct fc_graph_edge_data *dependencyData, size_t numDependencies,
                              CUstreamCaptureMode mode, bool per_thread)
{
    struct fc_stream *s;
    if (mode > CU_STREAM_CAPTURE_MODE_RELAXED || (numDependencies && !dependencies))
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = fc_resolve_stream(hStream, per_thread, &s);
    if (r != CUDA_SUCCESS)
        return r;
    if (s->legacy)
        return FC_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    for (size_t i = 0; graph && i < numDependencies; i++) {
        if (!fc_graph_has_node(graph, (const struct fc_node *)dependencies[i]))
            return CUDA_ERROR_INVALID_VALUE;
        /* Only default edges (full completion) are modelled. */
        static const struct fc_graph_edge_data zero;
        if (dependencyData && memcmp(&dependencyData[i], &zero, sizeof zero) != 0)
            return CUDA_ERROR_NOT_SUPPORTED;
    }
    bool own = graph == NULL;
    struct fc_graph *g = own ? fc_graph_new() : graph;
    if (!g)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&capture_lock);
    size_t slot = FC_MAX_CAPTURES;
    for (size_t i = 0; i < FC_MAX_CAPTURES && slot == FC_MAX_CAPTURES; i++)
        if (!capturing[i])
            slot = i;
    if (s->status != CU_STREAM_CAPTURE_STATUS_NONE)
        r = FC_ERROR_ILLEGAL_STATE;
    else if (slot == FC_MAX_CAPTURES)
        r = CUDA_ERROR_OUT_OF_MEMORY;
    else
        r = set_deps_locked(s, (struct fc_node *const *)dependencies, graph ? numDependencies : 0);
    if (r == CUDA_SUCCESS) {
        s->status = CU_STREAM_CAPTURE_STATUS_ACTIVE;
        s->mode = mode;
        s->owner = pthread_self();
        s->graph = g;
        s->own_graph = own;
        s->capture_id = atomic_fetch_add(&capture_ids, 1) + 1;
        capturing[slot] = s;
        atomic_fetch_add(&fc_active_captures, 1);
    }
    pthread_mutex_unlock(&capture_lock);
    if (r != CUDA_SUCCESS && own)
        fc_graph_free(g);
    return r;
}

CUresult cuStreamBeginCapture(CUstream hStream)
{
    return begin_capture(hStream, NULL, NULL, NULL, 0, CU_STREAM_CAPTURE_MODE_GLOBAL, false);
}

CUresult cuStreamBeginCapture_ptsz(CUstream hStream)
{
    return begin_capture(hStream, NULL, NULL, NULL, 0, CU_STREAM_CAPTURE_MODE_GLOBAL, true);
}

CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode)
{
    return begin_capture(hStream, NULL, NULL, NULL, 0, mode, false);
}

CUresult cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode)
{
    return begin_capture(hStream, NULL, NULL, NULL, 0, mode, true);
}

static CUresult begin_capture_to_graph(CUstream hStream, CUgraph hGraph,
                                       const CUgraphNode *dependencies,
                                       const struct fc_graph_edge_data *dependencyData,
                                       size_t numDependencies, CUstreamCaptureMode mode,
                                       bool per_thread)
{
    struct fc_graph *g = fc_graph_from_handle(hGraph);
    if (!g)
        return CUDA_ERROR_INVALID_VALUE;
    return begin_capture(hStream, g, dependencies, dependencyData, numDependencies, mode,
                         per_thread);
}

CUresult cuStreamBeginCaptureToGraph(CUstream hStream, CUgraph hGraph,
                                     const CUgraphNode *dependencies,
                                     const struct fc_graph_edge_data *dependencyData,
                                     size_t numDependencies, CUstreamCaptureMode mode)
{
    return begin_capture_to_graph(hStream, hGraph, dependencies, dependencyData, numDependencies,
                                  mode, false);
}

CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream hStream, CUgraph hGraph,
                                          const CUgraphNode *dependencies,
                                          const struct fc_graph_edge_data *dependencyData,
                                          size_t numDependencies, CUstreamCaptureMode mode)
{
    return begin_capture_to_graph(hStream, hGraph, dependencies, dependencyData, numDependencies,
                                  mode, true);
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
    bool own = false;
    pthread_mutex_lock(&capture_lock);
    if (s->status == CU_STREAM_CAPTURE_STATUS_NONE) {
        r = FC_ERROR_ILLEGAL_STATE;
    } else if (s->mode != CU_STREAM_CAPTURE_MODE_RELAXED && !same_thread(s->owner)) {
        r = FC_ERROR_STREAM_CAPTURE_WRONG_THREAD;
    } else {
        g = s->graph;
        own = s->own_graph;
        if (s->status == CU_STREAM_CAPTURE_STATUS_INVALIDATED)
            r = FC_ERROR_STREAM_CAPTURE_INVALIDATED;
        s->status = CU_STREAM_CAPTURE_STATUS_NONE;
        clear_capture_locked(s);
        for (size_t i = 0; i < FC_MAX_CAPTURES; i++)
            if (capturing[i] == s)
                capturing[i] = NULL;
        atomic_fetch_sub(&fc_active_captures, 1);
    }
    pthread_mutex_unlock(&capture_lock);
    if (r == FC_ERROR_STREAM_CAPTURE_INVALIDATED) {
        /* A graph given to cuStreamBeginCaptureToGraph is lost too: a real
         * driver answers CUDA_ERROR_INVALID_VALUE for its handle afterwards. */
        if (own)
            fc_graph_free(g);
        else
            fc_graph_discard(g);
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

/* What cuStreamGetCaptureInfo reports. The dependency and edge arrays are
 * the stream's own, valid until its next captured operation. */
static CUresult capture_info(CUstream hStream, bool per_thread, CUstreamCaptureStatus *status_out,
                             cuuint64_t *id_out, CUgraph *graph_out,
                             const CUgraphNode **dependencies_out,
                             const struct fc_graph_edge_data **edgeData_out,
                             size_t *numDependencies_out)
{
    struct fc_stream *s;
    if (!status_out)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = fc_resolve_stream(hStream, per_thread, &s);
    if (r != CUDA_SUCCESS)
        return r;
    if (s->legacy && (r = legacy_conflict(false)) != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&capture_lock);
    *status_out = s->status;
    /* The rest is reported only while the capture is active: after an
     * invalidation, a real driver leaves even the id unwritten. */
    if (s->status == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
        if (id_out)
            *id_out = s->capture_id;
        if (graph_out)
            *graph_out = (CUgraph)s->graph;
        if (dependencies_out)
            *dependencies_out = s->ndeps ? (const CUgraphNode *)s->deps : NULL;
        if (edgeData_out)
            *edgeData_out = s->ndeps ? s->dep_edges : NULL;
        if (numDependencies_out)
            *numDependencies_out = s->ndeps;
    }
    pthread_mutex_unlock(&capture_lock);
    return r;
}

CUresult cuStreamGetCaptureInfo(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
                                cuuint64_t *id_out)
{
    return capture_info(hStream, false, captureStatus_out, id_out, NULL, NULL, NULL, NULL);
}

CUresult cuStreamGetCaptureInfo_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
                                     cuuint64_t *id_out)
{
    return capture_info(hStream, true, captureStatus_out, id_out, NULL, NULL, NULL, NULL);
}

CUresult cuStreamGetCaptureInfo_v2(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
                                   cuuint64_t *id_out, CUgraph *graph_out,
                                   const CUgraphNode **dependencies_out,
                                   size_t *numDependencies_out)
{
    return capture_info(hStream, false, captureStatus_out, id_out, graph_out, dependencies_out,
                        NULL, numDependencies_out);
}

CUresult cuStreamGetCaptureInfo_v2_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
                                        cuuint64_t *id_out, CUgraph *graph_out,
                                        const CUgraphNode **dependencies_out,
                                        size_t *numDependencies_out)
{
    return capture_info(hStream, true, captureStatus_out, id_out, graph_out, dependencies_out,
                        NULL, numDependencies_out);
}

CUresult cuStreamGetCaptureInfo_v3(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
                                   cuuint64_t *id_out, CUgraph *graph_out,
                                   const CUgraphNode **dependencies_out,
                                   const struct fc_graph_edge_data **edgeData_out,
                                   size_t *numDependencies_out)
{
    return capture_info(hStream, false, captureStatus_out, id_out, graph_out, dependencies_out,
                        edgeData_out, numDependencies_out);
}

CUresult cuStreamGetCaptureInfo_v3_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
                                        cuuint64_t *id_out, CUgraph *graph_out,
                                        const CUgraphNode **dependencies_out,
                                        const struct fc_graph_edge_data **edgeData_out,
                                        size_t *numDependencies_out)
{
    return capture_info(hStream, true, captureStatus_out, id_out, graph_out, dependencies_out,
                        edgeData_out, numDependencies_out);
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
    /* Work is already done when it is submitted: the event is complete, unless
     * the stream is held. */
    struct fc_event *e = (struct fc_event *)hEvent;
    static int shared_queue = -1;
    if (shared_queue < 0) {
        const char *v = getenv("FAKECUDA_SHARED_QUEUE");
        shared_queue = v && strcmp(v, "1") == 0;
    }
    e->held = pending_hold(shared_queue ? NULL : s, &e->hold);
    fc_stream_enqueued(s, FC_TAIL_OTHER);
    if (s->legacy)
        return legacy_conflict(true);
    return CUDA_SUCCESS;
}

CUresult cuEventQuery(CUevent hEvent)
{
    if (!is_event(hEvent))
        return CUDA_ERROR_INVALID_HANDLE;
    struct fc_event *e = (struct fc_event *)hEvent;
    if (e->held && !hold_met(&e->hold))
        return CUDA_ERROR_NOT_READY;
    e->held = false;
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
    struct fc_event *e = (struct fc_event *)hEvent;
    if (e->held)
        wait_for(&e->hold);
    e->held = false;
    CUresult fault = fc_fault_noticed();
    return fault != CUDA_SUCCESS ? fault : fc_capture_check_unsafe();
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
    CUresult r = fc_resolve_stream(hStream, per_thread, &s);
    if (r == CUDA_SUCCESS)
        fc_stream_enqueued(s, FC_TAIL_OTHER);
    return r;
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

/* cuStreamWriteValue32/64: `value` into device memory or registered host memory once the
 * stream gets there (here at once, unless cudump's kernel holds the stream). The stand-in
 * does not record memory operations into graphs: on a capturing stream the write breaks
 * the capture, which is what a tool inside the program must never do. With
 * FAKECUDA_NO_MEMOPS=1 the driver refuses them, as one without them would. */
static CUresult write_value(CUstream hStream, CUdeviceptr addr, uint64_t value, size_t size,
                            unsigned int flags, bool per_thread)
{
    CUresult r = fc_require_context();
    if (r != CUDA_SUCCESS)
        return r;
    const char *off = getenv("FAKECUDA_NO_MEMOPS");
    if (off && strcmp(off, "1") == 0)
        return CUDA_ERROR_NOT_SUPPORTED;
    if (flags > 1 || addr % size)
        return CUDA_ERROR_INVALID_VALUE;
    struct fc_stream *s;
    if ((r = fc_resolve_stream(hStream, per_thread, &s)) != CUDA_SUCCESS)
        return r;
    if ((r = fc_uncapturable_work(s)) != CUDA_SUCCESS)
        return r;
    if ((r = fc_check_mapped(addr, size)) != CUDA_SUCCESS)
        return r;
    if (atomic_load(&fc_fault_pending))
        return CUDA_SUCCESS; /* accepted, and never made: the context is lost */
    fc_wait_held(s);
    fc_stream_enqueued(s, FC_TAIL_OTHER);
    if (size == 8)
        __atomic_store_n((uint64_t *)(uintptr_t)addr, value, __ATOMIC_RELEASE);
    else
        __atomic_store_n((uint32_t *)(uintptr_t)addr, (uint32_t)value, __ATOMIC_RELEASE);
    return CUDA_SUCCESS;
}

CUresult cuStreamWriteValue32(CUstream stream, CUdeviceptr addr, unsigned int value,
                              unsigned int flags)
{
    return write_value(stream, addr, value, 4, flags, false);
}

CUresult cuStreamWriteValue64(CUstream stream, CUdeviceptr addr, cuuint64_t value,
                              unsigned int flags)
{
    return write_value(stream, addr, value, 8, flags, false);
}

CUresult cuStreamWriteValue32_v2(CUstream stream, CUdeviceptr addr, unsigned int value,
                                 unsigned int flags)
{
    return write_value(stream, addr, value, 4, flags, false);
}

CUresult cuStreamWriteValue32_v2_ptsz(CUstream stream, CUdeviceptr addr, unsigned int value,
                                      unsigned int flags)
{
    return write_value(stream, addr, value, 4, flags, true);
}

CUresult cuStreamWriteValue64_v2(CUstream stream, CUdeviceptr addr, cuuint64_t value,
                                 unsigned int flags)
{
    return write_value(stream, addr, value, 8, flags, false);
}

CUresult cuStreamWriteValue64_v2_ptsz(CUstream stream, CUdeviceptr addr, cuuint64_t value,
                                      unsigned int flags)
{
    return write_value(stream, addr, value, 8, flags, true);
}
