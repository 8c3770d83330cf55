/*
 * Deferred snapshot copies (PLAN_DEFER).
 *
 * Handing a large buffer to the controller holds the program for the copy to
 * the host and for the controller's file writes (a 256 MiB buffer: ~5 ms of
 * copy, ~35 ms of writing). For a plan of plain copies the controller may
 * allow the shim to defer: the buffers are then copied device-to-device into
 * scratch memory on the launch stream (before the kernel, and after it),
 * which takes a fraction of a millisecond, and the launch goes on. A thread
 * of the shim waits for those copies, moves the bytes through the staging
 * area exactly as the launching thread would have (whole copies first, then
 * the pieces, each handed over with MSG_PIECE), and sends MSG_END.
 *
 * Where the process has a write-behind area (behind.c), the thread copies the
 * bytes there instead and sends MSG_END with where they lie: the controller
 * answers nothing and writes the files behind the program. Through staging
 * the drain ends once the controller has taken the bytes.
 *
 * One deferred launch at a time per process, because there is one staging
 * area: the next launch that needs the controller's plan waits until the
 * drain is done. The scratch memory is stream-ordered (taken on the launch
 * stream, given back on the drain's own stream), so it costs the program no
 * synchronisation; it comes from a pool that keeps it between launches
 * (scratch.c), given back to the device once the drain has been idle for
 * SCRATCH_IDLE_MS. It is bounded by the controller's scratch limit and by a
 * quarter of the device's free memory, and a launch that does not fit is
 * copied the ordinary way.
 *
 * At exit the drain finishes before the CUDA runtime tears its contexts
 * down: its atexit handler is registered after the runtime's (at the first
 * deferred launch), so it runs first.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "behind.h"
#include "channel.h"
#include "drain.h"
#include "gate.h"
#include "interpose.h"
#include "plan.h"
#include "scratch.h"
#include "staging.h"
#include "stream.h"
#include "util.h"

/* How long the drain waits behind a held gate before it opens it without
 * copies: long enough for the watcher to serve one whose stream is not the
 * drain's, short against the kernel's own TOOL_HOLD_NS. */
enum { DRAIN_GRACE_MS = 500 };

/* How long the scratch pool keeps its memory once the drain is idle: a program
 * that snapshots in a loop finds it there from one iteration to the next. */
enum { SCRATCH_IDLE_MS = 250 };

struct drain_copy {
    struct proto_copy c;
    size_t at;          /* offset in scratch */
    CUresult rc;
};

/* The one deferred launch of this process (see above: one staging area). */
static struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool busy;          /* from drain_start until its MSG_END is answered (or, written
                         * behind, sent) */
    bool unsafe;        /* from drain_start until the bytes are where the controller
                         * keeps them: the program's waits for the GPU wait for this */
    bool queued;        /* the launch has run: the thread may take it */
    bool thread_up;
    bool trimming;      /* the drain's thread trims the scratch pool (idle_wait) */
    bool exiting;       /* the process exits: no more trims */
    uint64_t seq;
    CUcontext ctx;
    CUevent done;       /* on the launch stream, after the last scratch copy */
    CUevent before;     /* there after the "before" scratch copies (NULL: none) */
    CUdeviceptr scratch;
    CUresult launch_rc;
    unsigned n;
    struct drain_copy copies[PROTO_MAX_COPIES];
} dr = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};

static pthread_once_t exit_once = PTHREAD_ONCE_INIT;

void drain_wait_idle(void)
{
    pthread_mutex_lock(&dr.lock);
    while (dr.busy)
        pthread_cond_wait(&dr.cond, &dr.lock);
    pthread_mutex_unlock(&dr.lock);
}

/* A drain that does not end in time is left to itself: the program comes first.
 * The wait is taken in slices, each ending with a look at the controller: one
 * that dies meanwhile (nothing then wakes this wait) ends it within a slice. */
enum { SETTLE_WAIT_S = 10, SETTLE_SLICE_MS = 20 };

void drain_settle(void)
{
    /* Unlocked first look: the common case (nothing deferred) is one load. */
    if (!__atomic_load_n(&dr.unsafe, __ATOMIC_ACQUIRE))
        return;
    unsigned slices = SETTLE_WAIT_S * 1000 / SETTLE_SLICE_MS;
    pthread_mutex_lock(&dr.lock);
    while (dr.unsafe && slices && channel_controller_alive()) {
        struct timespec until = realtime_after_ms(SETTLE_SLICE_MS);
        if (pthread_cond_timedwait(&dr.cond, &dr.lock, &until) != 0)
            slices--;
    }
    pthread_mutex_unlock(&dr.lock);
}

/* The drain ends, and no trim runs or starts, before the runtime's own exit
 * handler tears the contexts down. */
static void drain_at_exit(void)
{
    pthread_mutex_lock(&dr.lock);
    dr.exiting = true;
    while (dr.busy || dr.trimming)
        pthread_cond_wait(&dr.cond, &dr.lock);
    pthread_mutex_unlock(&dr.lock);
}

static void register_exit(void)
{
    atexit(drain_at_exit);
}

static void set_idle(void)
{
    pthread_mutex_lock(&dr.lock);
    dr.busy = dr.queued = dr.unsafe = false;
    pthread_cond_broadcast(&dr.cond);
    pthread_mutex_unlock(&dr.lock);
}

/* Device-to-device into scratch, on the launch stream. */
static CUresult to_scratch(const struct launch_info *li, struct drain_copy *d)
{
    cuMemcpy2DAsync_fn copy2d =
        li->ptsz ? shim_real_cuMemcpy2DAsync_v2_ptsz() : shim_real_cuMemcpy2DAsync_v2();
    if (!copy2d)
        return CUDA_ERROR_NOT_FOUND;
    CUDA_MEMCPY2D m = rows_copy(d->c.src, d->c.pitch, NULL, dr.scratch + d->at, d->c.width,
                                d->c.height);
    return copy2d(&m, li->stream);
}

static void copy_phase(const struct launch_info *li, enum proto_phase phase)
{
    for (unsigned i = 0; i < dr.n; i++)
        if (dr.copies[i].c.phase == phase)
            dr.copies[i].rc = to_scratch(li, &dr.copies[i]);
}

bool drain_start(const struct launch_info *li, const struct proto_copy *const *copies, unsigned n)
{
    const volatile struct proto_control *ctl = channel_control();
    cuMemGetInfo_fn info = shim_real_cuMemGetInfo_v2();
    if (!ctl || !ctl->scratch_mib || !n || n > PROTO_MAX_COPIES ||
        !shim_real_cuMemFreeAsync() || !info || !real_cuCtxSetCurrent ||
        !shim_real_cuStreamCreate() || !real_cuEventCreate || li->captured)
        return false;
    /* While any stream of the process captures, the launch is copied while it is
     * held (relaxed, on its own stream) rather than left to a drain that would
     * still be at work when the program goes on. */
    if (atomic_load(&shim_stats.captures_active) > 0)
        return false;
    size_t total = 0;
    for (unsigned i = 0; i < n; i++) {
        if (copies[i]->flags & COPY_TOOL)
            return false;
        size_t bytes = copies[i]->width * copies[i]->height;
        if (copies[i]->height && bytes / copies[i]->height != copies[i]->width)
            return false;
        dr.copies[i] = (struct drain_copy){*copies[i], total, CUDA_SUCCESS};
        total += (bytes + PROTO_STAGING_ALIGN - 1) / PROTO_STAGING_ALIGN * PROTO_STAGING_ALIGN;
    }
    size_t free_bytes = 0, total_bytes = 0;
    if (total == 0 || total > (size_t)ctl->scratch_mib << 20 ||
        info(&free_bytes, &total_bytes) != CUDA_SUCCESS || total > free_bytes / 4)
        return false;
    /* The drain thread works in the stream's context. */
    CUcontext ctx = stream_ctx(li);
    if (!ctx)
        return false;
    CUdeviceptr scratch = 0;
    if (!scratch_take(li, ctx, total, &scratch))
        return false;
    pthread_once(&exit_once, register_exit);
    behind_context();
    pthread_mutex_lock(&dr.lock);
    dr.busy = dr.unsafe = true;
    dr.queued = false;
    dr.seq = li->seq;
    dr.ctx = ctx;
    dr.scratch = scratch;
    dr.n = n;
    dr.done = dr.before = NULL;
    pthread_mutex_unlock(&dr.lock);
    copy_phase(li, PHASE_BEFORE);
    /* Their copies to the host may start while the kernel runs. */
    cuEventRecord_fn record = li->ptsz ? shim_real_cuEventRecord_ptsz() : shim_real_cuEventRecord();
    CUevent before = NULL;
    if (record && real_cuEventCreate(&before, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS &&
        record(before, li->stream) != CUDA_SUCCESS) {
        real_cuEventDestroy_v2(before);
        before = NULL;
    }
    dr.before = before;
    return true;
}

/* Copies scratch -> staging on the drain's stream and waits. */
static CUresult to_staging(CUstream side, const struct drain_copy *d, char *area)
{
    CUDA_MEMCPY2D m = rows_copy(dr.scratch + d->at, d->c.width, area + d->c.offset, 0,
                                d->c.width, d->c.height);
    CUresult rc = shim_real_cuMemcpy2DAsync_v2()(&m, side);
    cuStreamSynchronize_fn sync = shim_real_cuStreamSynchronize();
    return rc != CUDA_SUCCESS ? rc : sync ? sync(side) : CUDA_ERROR_NOT_FOUND;
}

/* The copies and their results, as MSG_END reports them. */
static void results_of(const struct proto_copy **cs, int32_t *rcs)
{
    for (unsigned i = 0; i < dr.n; i++) {
        cs[i] = &dr.copies[i].c;
        rcs[i] = dr.copies[i].rc;
    }
}

static void send_end(CUresult sync_rc)
{
    const struct proto_copy *cs[PROTO_MAX_COPIES];
    int32_t rcs[PROTO_MAX_COPIES];
    results_of(cs, rcs);
    plan_send_end(dr.seq, dr.launch_rc, sync_rc, cs, rcs, dr.n);
}

/* Whether copy d was attempted: an "after" copy of a failed launch is not. */
static bool attempted(const struct drain_copy *d)
{
    return !(d->c.phase == PHASE_AFTER && dr.launch_rc != CUDA_SUCCESS);
}

/* Moves copy d from scratch to its place in staging, if it reached scratch. */
static void move(struct drain_copy *d, CUresult sync_rc, CUstream side, char *area)
{
    if (d->rc != CUDA_SUCCESS || !attempted(d))
        return;
    d->rc = sync_rc != CUDA_SUCCESS ? sync_rc
            : side && area           ? to_staging(side, d, area)
                                     : CUDA_ERROR_NOT_FOUND;
}

/* The bytes are where the controller keeps them: the program's waits go on. */
static void set_safe(void)
{
    pthread_mutex_lock(&dr.lock);
    dr.unsafe = false;
    pthread_cond_broadcast(&dr.cond);
    pthread_mutex_unlock(&dr.lock);
}

/* Where a launch's copies go in the write-behind area (behind.c), placed
 * before the launch has run. */
struct behind_plan {
    size_t sizes[PROTO_MAX_COPIES];    /* 0: a copy not made */
    uint64_t offsets[PROTO_MAX_COPIES];
    uint64_t number;
};

/* Places the copies in the write-behind area and queues their copies there on
 * the drain's stream, each after the scratch copies of its phase: the bytes
 * found before the launch go while the kernel runs. False (nothing taken)
 * where the area has no room: the bytes then go through staging. */
static bool behind_queue(CUstream side, struct behind_plan *bp)
{
    cuStreamWaitEvent_fn wait = shim_real_cuStreamWaitEvent();
    if (!side || !wait)
        return false;
    for (unsigned i = 0; i < dr.n; i++) {
        const struct drain_copy *d = &dr.copies[i];
        bp->sizes[i] = d->rc == CUDA_SUCCESS && attempted(d) ? d->c.width * d->c.height : 0;
    }
    if (!behind_place(bp->sizes, dr.n, bp->offsets, &bp->number))
        return false;
    char *area = behind_area();
    const enum proto_phase phases[2] = {PHASE_BEFORE, PHASE_AFTER};
    for (unsigned k = 0; k < 2; k++) {
        CUevent after = phases[k] == PHASE_BEFORE && dr.before ? dr.before : dr.done;
        CUresult waits = wait(side, after, 0);
        for (unsigned i = 0; i < dr.n; i++) {
            struct drain_copy *d = &dr.copies[i];
            if (!bp->sizes[i] || d->c.phase != phases[k])
                continue;
            CUDA_MEMCPY2D m = rows_copy(dr.scratch + d->at, d->c.width, area + bp->offsets[i],
                                        0, d->c.width, d->c.height);
            d->rc = waits != CUDA_SUCCESS ? waits : shim_real_cuMemcpy2DAsync_v2()(&m, side);
        }
    }
    return true;
}

/* Waits for the copies into the write-behind area and hands them over with
 * MSG_END: the program's waits for the GPU may go on from here. */
static void behind_send(CUresult sync_rc, CUstream side, const struct behind_plan *bp)
{
    /* Waited for as the launch was: held gates are opened if the wait goes on. */
    CUresult waited = gate_wait_on(side, 0, DRAIN_GRACE_MS);
    /* Never hand the bytes over while copies into them may still run: the
     * controller frees them for the next launch once it has them. */
    cuStreamSynchronize_fn sync = shim_real_cuStreamSynchronize();
    CUresult settled = sync ? sync(side) : CUDA_ERROR_NOT_FOUND;
    if (waited == CUDA_SUCCESS)
        waited = settled;
    if (waited == CUDA_SUCCESS)
        waited = sync_rc;
    for (unsigned i = 0; i < dr.n; i++)
        if (bp->sizes[i] && dr.copies[i].rc == CUDA_SUCCESS)
            dr.copies[i].rc = waited;
    const struct proto_copy *cs[PROTO_MAX_COPIES];
    int32_t rcs[PROTO_MAX_COPIES];
    results_of(cs, rcs);
    plan_send_behind(dr.seq, dr.launch_rc, sync_rc, cs, rcs, dr.n, bp->number, bp->offsets);
}

/* Gives the scratch memory back on the drain's stream and waits until its pool
 * has it again, then lets the pool keep it only where the device has room: an
 * allocation the program makes once it goes on finds the memory (scratch.h).
 * Without a stream of its own the legacy stream frees it, not waited for:
 * rare, and never leaked. */
static void give_scratch(CUstream side)
{
    scratch_give(dr.scratch, side);
    cuStreamSynchronize_fn sync = shim_real_cuStreamSynchronize();
    if (side && sync)
        sync(side);
    scratch_spare();
}

static void drain_one(void)
{
    CUcontext was = NULL;
    if (real_cuCtxGetCurrent)
        real_cuCtxGetCurrent(&was);
    real_cuCtxSetCurrent(dr.ctx);
    CUstream side = NULL;
    if (shim_real_cuStreamCreate()(&side, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS)
        side = NULL;
    struct behind_plan bp;
    bool behind = behind_queue(side, &bp);
    /* The launch's stream may be held behind a gated launch whose serving
     * waits for this drain: held gates are opened (without copies) if the
     * wait goes on for long. */
    CUresult sync_rc = gate_wait_event(dr.done, DRAIN_GRACE_MS);
    real_cuEventDestroy_v2(dr.done);
    if (dr.before)
        real_cuEventDestroy_v2(dr.before);
    if (behind) {
        behind_send(sync_rc, side, &bp);
        give_scratch(side);
        set_safe();
        shim_real_cuStreamDestroy_v2()(side);
        real_cuCtxSetCurrent(was);
        return;
    }
    size_t size = 0;
    char *area = staging_area(&size);
    for (unsigned i = 0; i < dr.n; i++)
        if (!(dr.copies[i].c.flags & COPY_PIECE))
            move(&dr.copies[i], sync_rc, side, area);
    /* Pieces after the whole copies, in the plan's order, each taken before the next. */
    bool up = true;
    for (unsigned i = 0; up && i < dr.n; i++) {
        struct drain_copy *d = &dr.copies[i];
        if (!(d->c.flags & COPY_PIECE) || !attempted(d))
            continue;
        move(d, sync_rc, side, area);
        up = plan_send_piece(dr.seq, i, d->rc);
    }
    give_scratch(side);
    if (side)
        shim_real_cuStreamDestroy_v2()(side);
    if (up)
        send_end(sync_rc);
    real_cuCtxSetCurrent(was);
}

/* Under dr.lock, with nothing queued: waits for the next launch, and gives
 * the scratch pool's memory back once none has come for SCRATCH_IDLE_MS. */
static void idle_wait(void)
{
    if (!scratch_kept() || dr.exiting) {
        pthread_cond_wait(&dr.cond, &dr.lock);
        return;
    }
    struct timespec until = realtime_after_ms(SCRATCH_IDLE_MS);
    if (pthread_cond_timedwait(&dr.cond, &dr.lock, &until) == ETIMEDOUT && !dr.queued &&
        !dr.exiting) {
        dr.trimming = true;
        pthread_mutex_unlock(&dr.lock);
        scratch_trim();
        pthread_mutex_lock(&dr.lock);
        dr.trimming = false;
        pthread_cond_broadcast(&dr.cond);
    }
}

static void *drain_main(void *arg)
{
    (void)arg;
    shim_busy++; /* this thread's driver calls are the shim's own */
    /* Its waits and its stream must never touch a capture the program makes
     * meanwhile on another thread (global mode forbids them process-wide). */
    capture_relax();
    for (;;) {
        pthread_mutex_lock(&dr.lock);
        while (!dr.queued)
            idle_wait();
        pthread_mutex_unlock(&dr.lock);
        drain_one();
        set_idle();
    }
    return NULL;
}

void drain_finish(const struct launch_info *li, CUresult launch_rc)
{
    cuEventRecord_fn record = li->ptsz ? shim_real_cuEventRecord_ptsz() : shim_real_cuEventRecord();
    if (launch_rc == CUDA_SUCCESS)
        copy_phase(li, PHASE_AFTER);
    CUevent ev = NULL;
    bool ok = real_cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS;
    if (ok && (!record || record(ev, li->stream) != CUDA_SUCCESS)) {
        real_cuEventDestroy_v2(ev);
        ok = false;
    }
    pthread_mutex_lock(&dr.lock);
    dr.launch_rc = launch_rc;
    dr.done = ev;
    if (ok && !dr.thread_up) {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        dr.thread_up = pthread_create(&t, &attr, drain_main, NULL) == 0;
        pthread_attr_destroy(&attr);
    }
    if (ok && dr.thread_up) {
        dr.queued = true;
        pthread_cond_broadcast(&dr.cond);
        pthread_mutex_unlock(&dr.lock);
        return;
    }
    pthread_mutex_unlock(&dr.lock);
    /* No thread to hand it to: drain it here, as the launch would have waited anyway. */
    if (ev)
        drain_one();
    else {
        gate_wait_stream(li);
        if (dr.before)
            real_cuEventDestroy_v2(dr.before);
        for (unsigned i = 0; i < dr.n; i++)
            dr.copies[i].rc = CUDA_ERROR_NOT_FOUND;
        scratch_give(dr.scratch, li->stream);
        scratch_spare();
        send_end(CUDA_SUCCESS);
    }
    set_idle();
}

void drain_reset_after_fork(void)
{
    /* The parent's drain thread does not exist here, and its launch is not this process's. */
    pthread_mutex_init(&dr.lock, NULL);
    pthread_cond_init(&dr.cond, NULL);
    dr.busy = dr.queued = dr.thread_up = dr.unsafe = dr.trimming = dr.exiting = false;
}
