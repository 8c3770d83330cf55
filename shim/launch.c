/*
 * Launches of functions the controller wants: numbering, the trace event,
 * holding while another launch is stopped, and (snapshot.c, stop.c) copies
 * and stops around the launch.
 */
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "launch.h"

bool launch_stream_capturing(CUstream stream, int ptsz)
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

CUcontext launch_stream_ctx(const struct launch_info *li)
{
    CUcontext ctx = NULL;
    cuStreamGetCtx_fn stream_ctx = li->ptsz ? real_cuStreamGetCtx_ptsz : real_cuStreamGetCtx;
    if ((!stream_ctx || stream_ctx(li->stream, &ctx) != CUDA_SUCCESS || !ctx) &&
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

/* While the controller holds another launch (all-stop), wait here. The
 * controller clears `hold` when the user goes on; if it dies meanwhile the
 * wait ends too, so the target never hangs because of cudump. */
static void hold_wait(void)
{
    const volatile struct proto_control *ctl;
    while ((ctl = channel_control()) != NULL && ctl->hold) {
        if (!channel_controller_alive())
            return;
        usleep(500);
    }
}

struct func_entry *launch_slow(struct func_entry *e, unsigned *wants, bool *interrupted)
{
    if (atomic_load_explicit(&e->state, memory_order_acquire) != FN_READY)
        functab_register(e);
    hold_wait();
    const volatile struct proto_control *ctl = channel_control();
    if (ctl && atomic_load_explicit(&e->gen, memory_order_relaxed) != ctl->generation)
        functab_refresh(e);
    *wants = atomic_load_explicit(&e->wants, memory_order_relaxed);
    /* Ctrl-C at the prompt: the first launch of any kernel to see it stops. */
    volatile struct proto_control *rw = channel_control_rw();
    if (rw && rw->interrupt && __atomic_exchange_n(&rw->interrupt, 0, __ATOMIC_ACQ_REL)) {
        *wants |= WANT_STOP;
        *interrupted = true;
    }
    return e;
}

/* gettid is a system call: asked once per thread. The child of a fork gets a
 * copy of the forking thread's value, so the fork handler clears it. */
static SHIM_TLS uint64_t tid;

void launch_forget_tid(void)
{
    tid = 0;
}

static uint64_t current_tid(void)
{
    if (!tid)
        tid = (uint64_t)syscall(SYS_gettid);
    return tid;
}

static int current_device(void)
{
    CUdevice dev = -1;
    if (!real_cuCtxGetDevice || real_cuCtxGetDevice(&dev) != CUDA_SUCCESS)
        return -1;
    return dev;
}

static bool selects(const struct proto_selector *s, uint64_t n)
{
    if (n <= s->skip)
        return false;
    uint64_t k = n - s->skip - 1;
    return k % s->every == 0 && (s->count == UINT64_MAX || k / s->every < s->count);
}

void launch_select(struct launch_info *li)
{
    struct func_entry *e = li->e;
    unsigned nsel = atomic_load_explicit(&e->nselectors, memory_order_acquire);
    volatile struct proto_control *ctl = channel_control_rw();
    li->ncounted = 0;
    if (!nsel || !ctl || li->captured)
        return;
    bool taken = false;
    for (unsigned i = 0; i < nsel && i < PROTO_MAX_SELECTORS; i++) {
        const struct proto_selector *s = &e->sel[i];
        uint64_t n = __atomic_add_fetch(&ctl->rule_counts[s->counter], 1, __ATOMIC_RELAXED);
        li->counted[li->ncounted++] = (struct proto_counted){.counter = s->counter, .n = n};
        taken |= selects(s, n);
    }
    if ((li->wants & WANT_COUNTED) && !taken)
        li->wants &= ~(unsigned)WANT_SNAPSHOT;
}

void launch_before(struct launch_info *li)
{
    shim_busy++;
    li->seq = atomic_fetch_add(&shim_stats.seq, 1) + 1;
    li->captured = launch_stream_capturing(li->stream, li->ptsz);
    if (li->captured) {
        atomic_fetch_add(&shim_stats.captured, 1);
        counts_add_process(false);
    } else {
        li->occurrence = atomic_fetch_add(&li->e->launches, 1) + 1;
    }
    li->device = current_device();
    li->tid = current_tid();
    li->armed = false;
    li->step = false;
    launch_select(li);
    /* Copies would invalidate a capture or land in the graph, and a captured
     * launch does not run: while a stream captures, launches are only recorded. */
    if ((li->wants & (WANT_SNAPSHOT | WANT_STOP)) && !li->captured)
        li->armed = launch_begin(li);
    shim_busy--;
}

bool ring_reserve(volatile uint64_t *head, volatile uint64_t *tail, uint32_t slots,
                  int patience, uint64_t *pos_out)
{
    uint64_t pos = __atomic_load_n(head, __ATOMIC_RELAXED);
    int waited = 0;
    for (;;) {
        uint64_t done = __atomic_load_n(tail, __ATOMIC_ACQUIRE);
        if (pos - done < slots) {
            if (__atomic_compare_exchange_n(head, &pos, pos + 1, true, __ATOMIC_ACQ_REL,
                                            __ATOMIC_RELAXED))
                break;
            continue; /* another thread took `pos`: pos now holds the current head */
        }
        /* Full: the controller is behind. Wait for it a while (bounded, and not at
         * all once it is gone). */
        if (waited >= patience || !channel_controller_alive())
            return false;
        if (waited++ < 64)
            sched_yield();
        else
            usleep(50);
        pos = __atomic_load_n(head, __ATOMIC_RELAXED);
    }
    *pos_out = pos;
    return true;
}

/* Puts a launch event into the trace ring: no system call, no lock. Returns
 * false only when there is no ring (the event then goes over the socket). */
static bool ring_push(const struct proto_launch *ev)
{
    uint32_t slots;
    struct proto_ring_slot *ring = channel_ring(&slots);
    volatile struct proto_control *ctl = channel_control_rw();
    if (!ring || !ctl)
        return false;
    uint64_t pos;
    if (!ring_reserve(&ctl->ring_head, &ctl->ring_tail, slots, 20000, &pos)) {
        __atomic_fetch_add(&ctl->ring_dropped, 1, __ATOMIC_RELAXED); /* about 1 s waited */
        return true;
    }
    struct proto_ring_slot *slot = &ring[pos & (slots - 1)];
    slot->event = *ev;
    __atomic_store_n(&slot->ready, pos + 1, __ATOMIC_RELEASE);
    return true;
}

static void send_event(struct proto_launch *ev, uint64_t seq)
{
    if (ring_push(ev))
        return;
    channel_send_event(MSG_LAUNCH, seq, ev, sizeof *ev);
}

void launch_graph_kernel(const struct launch_info *li, uint64_t graph, uint32_t replay,
                         uint32_t node)
{
    struct proto_launch ev = {
        .seq = li->seq, .occurrence = li->occurrence, .stream = (uint64_t)(uintptr_t)li->stream,
        .tid = li->tid, .id = li->e->id, .device = li->device,
        .grid = {li->grid[0], li->grid[1], li->grid[2]},
        .block = {li->block[0], li->block[1], li->block[2]}, .smem = li->smem, .api = li->api,
        .flags = LAUNCH_GRAPH, .rc = 0, .nparams = -1, .nptrs = 0, .graph = graph,
        .replay = replay, .node = node,
    };
    send_event(&ev, li->seq);
}

static void send_launch_event(const struct launch_info *li, CUresult rc)
{
    struct proto_launch ev = {
        .seq = li->seq, .occurrence = li->occurrence, .stream = (uint64_t)(uintptr_t)li->stream,
        .tid = li->tid, .id = li->e->id, .device = li->device,
        .grid = {li->grid[0], li->grid[1], li->grid[2]},
        .block = {li->block[0], li->block[1], li->block[2]}, .smem = li->smem, .api = li->api,
        .flags = (li->captured ? LAUNCH_CAPTURED : 0u), .rc = rc, .nparams = -1, .nptrs = 0,
    };
    send_event(&ev, li->seq);
}

void launch_after(struct launch_info *li, CUresult rc)
{
    shim_busy++;
    if (rc != CUDA_SUCCESS && !li->captured)
        atomic_fetch_sub(&li->e->launches, 1);
    else if (!li->captured)
        counts_add_func(li->e->id, false, 1); /* once it has run: not a launch killed held */
    if (li->wants & WANT_TRACE)
        send_launch_event(li, rc);
    if (li->armed)
        launch_finish(li, rc);
    shim_busy--;
}

void launch_graph_event(CUgraphExec exec, CUstream stream, int ptsz, unsigned long long seq)
{
    struct proto_graph ev = {.seq = seq, .exec = (uint64_t)(uintptr_t)exec,
                             .stream = (uint64_t)(uintptr_t)stream,
                             .api = ptsz ? API_cuGraphLaunch_ptsz : API_cuGraphLaunch,
                             .device = current_device()};
    channel_send_event(MSG_GRAPH, seq, &ev, sizeof ev);
}

CUresult launch_graph(cuGraphLaunch_fn real, CUgraphExec exec, CUstream stream, int ptsz)
{
    if (!channel_up()) {
        CUresult rc = real(exec, stream);
        if (rc == CUDA_SUCCESS) {
            atomic_fetch_add(&shim_stats.seq, 1);
            atomic_fetch_add(&shim_stats.graph_launches, 1);
        }
        return rc;
    }
    shim_busy++;
    CUresult rc = graph_run(real, exec, stream, ptsz);
    shim_busy--;
    return rc;
}
