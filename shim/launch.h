/* The launch path shared by every launch hook. */
#ifndef CUDUMP_LAUNCH_H
#define CUDUMP_LAUNCH_H

#include "shim.h"

struct launch_info {
    struct func_entry *e;
    unsigned wants;
    unsigned grid[3];
    unsigned block[3];
    unsigned smem;
    CUstream stream;
    void **params;
    void **extra;
    int ptsz;
    enum proto_api api;
    /* filled in by launch_before */
    bool interrupted;           /* this launch took the controller's interrupt */
    unsigned long long seq;
    unsigned long long occurrence;
    int device;
    uint64_t tid;
    bool captured;
    bool armed;                 /* MSG_BEGIN answered: copies and/or a stop after */
    bool step;                  /* hold again once the kernel has run */
    /* a kernel node of a graph launch */
    uint64_t graph;
    uint32_t replay, node;
    bool stop_only;             /* MSG_BEGIN asks only whether to hold */
    bool unsafe_graph;          /* its graph is run unchanged (see LAUNCH_UNSAFE_GRAPH) */
    /* a launch made with a repeated plan (repeat.c) */
    struct repeat_plan *repeat;
    struct proto_result_slot *slot;
    uint64_t slot_pos;
    bool deferred;              /* its copies go through scratch and the drain (drain.c) */
    /* the n-th launch of each counted rule it counts for (launch_select) */
    unsigned ncounted;
    struct proto_counted counted[PROTO_MAX_SELECTORS];
    bool gated;                 /* a repeated plan's scans not waited for (gate.c) */
};

/* Counts the launch for its function's counted rules (not a captured one: its
 * graph's launches count instead); with WANT_COUNTED, drops WANT_SNAPSHOT from
 * li->wants unless one of them takes this launch. */
void launch_select(struct launch_info *li);

bool launch_stream_capturing(CUstream stream, int ptsz);

/* The context of the launch's stream: the thread's current one where the
 * driver cannot say. NULL if neither is known. */
CUcontext launch_stream_ctx(const struct launch_info *li);

/* A context made current on this thread for a while (ctx_enter), and the
 * thread's own given back (ctx_leave). The shim's work for a launch goes in
 * its stream's context, which a thread of the program need not have current. */
struct ctx_scope {
    bool ok;                    /* the context is current */
    bool pushed;                /* by ctx_enter: ctx_leave pops it */
};
struct ctx_scope ctx_enter(CUcontext ctx);
void ctx_leave(struct ctx_scope scope);

/* Registers a function, waits while another launch is held, asks again what
 * is wanted when the control generation moved on, and takes an interrupt. */
struct func_entry *launch_slow(struct func_entry *e, unsigned *wants, bool *interrupted);

/* Finds the function's entry and what the controller wants of it. With no
 * controller connected, returns NULL and wants 0: a pure pass-through. The
 * common case is a table lookup and one compare with the control page. */
static inline struct func_entry *launch_lookup(CUfunction f, unsigned *wants, bool *interrupted)
{
    *wants = 0;
    const volatile struct proto_control *ctl = channel_control();
    if (!ctl)
        return NULL;
    struct func_entry *e = functab_get((uintptr_t)f);
    if (!e)
        return NULL;
    if (__builtin_expect(atomic_load_explicit(&e->state, memory_order_acquire) != FN_READY ||
                             atomic_load_explicit(&e->gen, memory_order_relaxed) != ctl->generation,
                         0))
        return launch_slow(e, wants, interrupted);
    *wants = atomic_load_explicit(&e->wants, memory_order_relaxed);
    return e;
}

/* Counts a launch nobody wants to see. */
static inline void launch_count(struct func_entry *e, CUstream stream, int ptsz)
{
    atomic_fetch_add_explicit(&shim_stats.seq, 1, memory_order_relaxed);
    if (__builtin_expect(atomic_load_explicit(&shim_stats.captures_active, memory_order_relaxed) > 0, 0) &&
        launch_stream_capturing(stream, ptsz)) {
        atomic_fetch_add_explicit(&shim_stats.captured, 1, memory_order_relaxed);
        counts_add_process(false);
        return;
    }
    atomic_fetch_add_explicit(&e->launches, 1, memory_order_relaxed);
    counts_add_func(e->id, false, 1);
}

void launch_before(struct launch_info *li);
/* Reserves the next position of a shared-memory ring (trace or result ring):
 * many producers, by compare-and-swap on `head`, never more than `slots` past
 * the controller's `tail`. Waits up to `patience` rounds (about 50 us each)
 * while the ring is full and the controller alive; false if it stays full. */
bool ring_reserve(volatile uint64_t *head, volatile uint64_t *tail, uint32_t slots,
                  int patience, uint64_t *pos);
void launch_after(struct launch_info *li, CUresult rc);
/* cuGraphLaunch: counted, traced, and run instrumented where kernels inside want snapshots. */
CUresult launch_graph(cuGraphLaunch_fn real, CUgraphExec exec, CUstream stream, int ptsz);
void launch_graph_event(CUgraphExec exec, CUstream stream, int ptsz, unsigned long long seq);
/* Reports one kernel node of a graph launch (trace). */
void launch_graph_kernel(const struct launch_info *li, uint64_t graph, uint32_t replay,
                         uint32_t node);

/* ---- graph.c: executable graphs and their kernels --------------------------- */

/* Launches a graph: counted, its kernel nodes reported when tracing, and, when a
 * kernel inside wants snapshots, an instrumented copy launched instead. */
CUresult graph_run(cuGraphLaunch_fn real, CUgraphExec exec, CUstream stream, int ptsz);
/* Adds every graph's launches so far to its kernels' counts (at exit). */
void graph_fold_all(void);
void graph_reset_after_fork(void);
/* The kernel nodes of the graph whose launch this thread holds; 0 if none. */
size_t graph_held_nodes(struct proto_graph_node *out, size_t cap);
void launch_reset_after_fork(void);
void launch_forget_tid(void);

/* ---- snapshot.c: MSG_BEGIN, copies, MSG_END -------------------------------- */

/* Tells the controller about the launch and does what it answers: copies
 * before the launch, a stop. Returns true if anything remains for after it
 * (launch_finish must then be called). */
bool launch_begin(struct launch_info *li);
/* Copies after the launch, hands the bytes over, holds again for a step. */
void launch_finish(struct launch_info *li, CUresult rc);
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

/* Waits for everything queued on the launch's stream so far. */
CUresult launch_wait_stream(const struct launch_info *li);

/* What a COPY_TOOL copy asks cudump's kernel to compute (enum proto_tool_mode). */
static inline unsigned tool_mode(const struct proto_copy *c)
{
    return (c->flags >> PROTO_TOOL_MODE_SHIFT) & 0xff;
}

/* One COPY_TOOL copy for cudump's kernel (tools.c). */
struct tool_request {
    const struct proto_copy *copy;
    struct proto_tool_result *result;   /* in staging or the result ring */
    unsigned acc;                       /* its accumulator in the context's scratch: the
                                         * copy's index in a plan, or PROTO_MAX_COPIES +
                                         * a ring slot's index * PROTO_MAX_REPEAT + its own */
    uint64_t tag;                       /* written to result->done after the result */
    bool marks;                         /* a scan after a gated launch: a new non-finite
                                         * value it finds holds the stream (tooljob.h) */
    const struct proto_tool_result *before; /* and the scan before it, or NULL */
    bool checked;                       /* in: found inside an allocation before, under the
                                         * same alloctab_removals(), so not looked up again;
                                         * out: inside a tracked allocation */
};
/* Where the stream is held after a gated launch: the slot's gate, and the
 * slot's index (its word of hold scratch). */
struct tool_hold {
    uint32_t *gate;
    unsigned acc;
};
/* Runs cudump's kernel over the buffers of n tool copies on the launch's stream
 * (as few launches as it takes); sets each result's rc. The kernel writes the
 * words and `done` once the stream gets there. With `hold`, the last of those
 * launches holds the stream at the gate if a scan that `marks` finds a new
 * non-finite value (tooljob.h); returns whether it was made (false without
 * `hold`). */
bool tools_run(const struct launch_info *li, struct tool_request *reqs, unsigned n,
               const struct tool_hold *hold);
void tools_reset_after_fork(void);

/* The copies of a graph launch's kernel nodes: planned node by node (one
 * MSG_BEGIN each, copies appended), made by copy nodes of an instrumented
 * graph, reported with one MSG_END. */
void snap_begin(void);
/* Appends the copies the controller plans for this kernel node; returns how many. */
unsigned snap_plan_node(const struct launch_info *li);
unsigned snap_count(void);
const struct proto_copy *snap_copy(unsigned i);
void snap_set_rc(unsigned i, CUresult rc);
void snap_end(uint64_t seq, CUresult launch_rc, CUresult sync_rc);
/* A graph's kernel node with a breakpoint: asks whether to hold, and holds.
 * Returns the resume mode (RESUME_CONTINUE when not held). */
enum proto_resume_mode graph_node_stop(struct launch_info *li);
/* After the graph ran: holds that node again (the answer to `step`). */
void graph_node_stop_after(struct launch_info *li, CUresult launch_rc);

/* Hands one piece of a streamed copy over (MSG_PIECE) and waits until it is taken;
 * false if the controller is gone. */
bool snap_send_piece(uint64_t seq, unsigned index, CUresult rc);
/* Reports a launch's copies (MSG_END) and waits for the answer, which is not used. */
void snap_send_end(uint64_t seq, CUresult launch_rc, CUresult sync_rc,
                   const struct proto_copy *const *cs, const int32_t *rcs, unsigned n);

/* ---- drain.c: deferred copies (PLAN_DEFER) ------------------------------------ */

/* Waits until no deferred launch is being drained: the staging area is free. */
void drain_wait_idle(void);
/* The program has waited for the GPU: the deferred launch's bytes reach the
 * controller before it goes on, so that a crash right after loses nothing.
 * Bounded (and no wait once the controller is gone); one load when idle. */
void drain_settle(void);
/* Takes scratch memory for a PLAN_DEFER plan's n plain copies and copies the "before"
 * buffers into it on the launch stream; false (nothing done) if it cannot. */
bool drain_start(struct launch_info *li, const struct proto_copy *const *copies, unsigned n);
/* Copies the "after" buffers into scratch and hands the launch to the drain thread. */
void drain_finish(struct launch_info *li, CUresult launch_rc);
void drain_reset_after_fork(void);

/* ---- repeat.c: plans the shim repeats on its own, and the result ring ------ */

struct repeat_plan;
/* Launches with more parameter bytes are always asked about: CUDA's limit is
 * 32,764 (a multi-tensor kernel's metadata takes most of it). */
enum { REPEAT_MAX_BYTES = 32768 };
/* The plan kept for a launch of e with these parameter bytes, if it still holds. */
struct repeat_plan *repeat_find(const struct func_entry *e, const unsigned char *bytes,
                                      size_t n, uint32_t gen);
/* Keeps a plan the controller marked PLAN_REPEAT (its copies, by pointer, and keys);
 * returns it, or NULL if it could not be kept. */
struct repeat_plan *repeat_store(struct func_entry *e, const unsigned char *bytes, size_t n,
                                 uint32_t gen, unsigned long long epoch,
                                 unsigned long long removals, uint32_t id, bool gate,
                                 const struct proto_copy *const *copies, unsigned ncopies,
                                 const struct proto_key *keys, unsigned nkeys);
unsigned repeat_copies(const struct repeat_plan *p);
/* Whether every result of the slot (whose `ready` is tag) is in, or will never
 * come (its tool was not launched). */
bool repeat_results_in(const struct proto_result_slot *s, uint64_t tag);
/* Takes a result ring slot for the launch and runs the plan's "before" tools;
 * false if the ring has no room (ask the controller instead), after waiting a
 * while for the controller to make some if `wait`. */
bool repeat_start(struct launch_info *li, struct repeat_plan *p, bool wait);
/* Runs the "after" tools and hands the slot to the ring's reader. Returns true
 * if a scan found new non-finite values: the slot is then appended to
 * `report` (a MSG_REPEAT) for the caller to send. A gated launch returns
 * false at once: gate.c takes it from there. */
bool repeat_end(struct launch_info *li, CUresult launch_rc, struct msg *report);
void repeat_reset_after_fork(void);

/* ---- gate.c: launches whose scans nobody waits for (PLAN_GATE) ------------- */

/* Whether a launch on the device may be gated now (under snap_lock): the
 * watcher runs, and the device has no watchdog that would end a hold. */
bool gate_room(int device);
/* Keeps track of a gated launch until its gate is settled (under snap_lock). */
void gate_add(const struct launch_info *li);
/* Opens every held gate without copies: for a thread about to wait on the
 * GPU, which may be waiting behind one. Cheap when nothing is gated. */
void gate_release_held(void);
/* Under snap_lock, before a launch: serves the held gates if the newest gated
 * launch is held (the GPU has caught up with it: its stream would make the
 * launch wait). One look, so that a launch pays next to nothing. */
void gate_serve_newest(void);
/* Waits for an event recorded on a stream the caller waits for: as
 * cuEventSynchronize, opening held gates meanwhile while any launch is gated;
 * after grace_ms of waiting only (0: at once), for a caller the watcher may
 * still serve them around. */
CUresult gate_wait_event(CUevent ev, unsigned grace_ms);
void gate_reset_after_fork(void);
/* snapshot.c: reports a held launch (MSG_REPEAT with its slot), makes the
 * copies the answer asks for on `stream`, a stream of the launch's context
 * that does not wait for the held one. Returns whether the controller took
 * the report. Under snap_lock. */
bool snap_serve_gate(struct proto_result_slot *slot, uint64_t seq, CUstream stream);
/* snapshot.c: runs f(arg) under snap_lock if it can be had within `ms`. */
bool snap_locked(unsigned ms, void (*f)(void *), void *arg);

/* ---- stop.c: a held launch --------------------------------------------------- */

/* Makes the device quiescent for the launch, reports the stop and serves the
 * controller's requests until it says how to go on. Returns the resume mode
 * (RESUME_KILL never returns). */
enum proto_resume_mode stop_serve(struct launch_info *li, enum proto_phase phase,
                                  CUresult launch_rc);
/* Copies rows of device memory into staging on the launch's stream and waits. */
CUresult stop_copy_wait(const struct launch_info *li, CUdeviceptr src, size_t width, size_t height,
                        size_t pitch, size_t offset);
/* Copies `size` staging bytes from `offset` to device memory at `dst` on the launch's
 * stream and waits. */
CUresult stop_write_wait(const struct launch_info *li, CUdeviceptr dst, size_t size, size_t offset);
/* The staging area (mapped and pinned on first use); NULL if unavailable. */
char *staging_area(size_t *size);
/* The result ring (pinned on first use); NULL and 0 slots without one. */
struct proto_result_slot *results_ring(uint32_t *slots);

#endif
