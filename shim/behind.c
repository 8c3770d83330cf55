/*
 * The write-behind area (protocol.h): pinned shared memory where the bytes of
 * deferred launches wait for the controller's file writes. A synchronising
 * program then waits only for the copy into it, which a crash of the program
 * cannot undo, instead of for the files.
 *
 * Pinned memory is slow to make: the kernel allocates and clears its pages.
 * Measured on an H200 host, registering 512 MiB whose pages do not exist yet
 * takes about 290 ms; fallocate of the same bytes 104 ms, and registering them
 * then 26 ms; the copy it speeds up, 10 ms. So the controller allocates the
 * pages from the moment it makes the shared file (the first process's before
 * the program starts), a segment at a time, and a thread of the shim
 * registers each segment as soon as its pages are there and the program has a
 * context. A launch that comes before the bytes it needs are pinned waits for
 * them, bounded, and otherwise goes the old way, through staging.
 *
 * A copy may not span two registrations (the driver refuses it), so each
 * segment is registered on its own and a copy lies inside one segment; a copy
 * larger than a segment goes the old way. The drain thread alone places
 * launches: it uses the segments in turn, as a ring, a launch whole in one
 * segment where it fits; each segment remembers the number of the last launch
 * placed in it and is free again once the controller's behind_done has
 * reached it.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "behind.h"
#include "channel.h"
#include "gate.h"
#include "stream.h"
#include "util.h"

enum {
    MAX_SEGMENTS = 1024,     /* behind_mib is at most 1 TiB (channel.c) */
    WAIT_MS = 10000,         /* the longest a launch waits for room before it goes the old way */
    /* After this much of it, while a gated launch is held (its serving waits
     * for this drain, gate.h), the launch goes the old way at once: through
     * staging it waits for the controller to take its bytes, not for the files. */
    GRACE_MS = 500,
    POLL_US = 500,
};

#define NO_SEGMENT UINT32_MAX

/* One area per process (the shared file's), prepared by one grower thread. */
static struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool started;
    bool exiting;            /* the process exits: register nothing more */
    bool registering;        /* the grower is inside the driver */
    CUcontext ctx;           /* the context to register in, once one is known */
    _Atomic bool want_ctx;   /* the grower waits for a context */
    _Atomic unsigned ready;  /* segments registered, from the first */
    _Atomic bool finished;   /* the grower is done: `ready` grows no more */
    char *base;
    size_t size;
    unsigned nseg;
    /* the drain thread's own */
    unsigned cur;            /* the segment copies go into now; NO_SEGMENT before the first */
    size_t used;             /* bytes of it taken */
    uint64_t number;         /* of the last launch placed */
    uint64_t last[MAX_SEGMENTS]; /* the last launch placed in each segment */
} bh = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER, .cur = NO_SEGMENT};

static pthread_once_t exit_once = PTHREAD_ONCE_INIT;

/* Segment k of the area: PROTO_BEHIND_SEGMENT bytes (the last one may be
 * shorter), one registration, the largest copy written behind. */
static size_t seg_start(unsigned k)
{
    return (size_t)k * PROTO_BEHIND_SEGMENT;
}

static size_t seg_len(unsigned k)
{
    size_t start = seg_start(k);
    return bh.size - start < PROTO_BEHIND_SEGMENT ? bh.size - start : PROTO_BEHIND_SEGMENT;
}

static void finish(void)
{
    pthread_mutex_lock(&bh.lock);
    bh.registering = false;
    atomic_store(&bh.finished, true);
    pthread_cond_broadcast(&bh.cond);
    pthread_mutex_unlock(&bh.lock);
}

/* The context to register in, once the program has one; NULL once the
 * process exits. Marks the grower as inside the driver. */
static CUcontext take_context(void)
{
    pthread_mutex_lock(&bh.lock);
    while (!bh.ctx && !bh.exiting)
        pthread_cond_wait(&bh.cond, &bh.lock);
    CUcontext ctx = bh.exiting ? NULL : bh.ctx;
    bh.registering = ctx != NULL;
    pthread_mutex_unlock(&bh.lock);
    return ctx;
}

/* Registers segment k; false (and no more) if the driver refuses or the process exits. */
static bool register_segment(unsigned k)
{
    pthread_mutex_lock(&bh.lock);
    bool exiting = bh.exiting;
    pthread_mutex_unlock(&bh.lock);
    /* Nor once the connection is down: the controller gives the pages back then. */
    if (exiting || !channel_control())
        return false;
    if (real_cuMemHostRegister_v2(bh.base + seg_start(k), seg_len(k),
                                  CU_MEMHOSTREGISTER_PORTABLE) != CUDA_SUCCESS)
        return false;
    pthread_mutex_lock(&bh.lock);
    atomic_store(&bh.ready, k + 1);
    pthread_cond_broadcast(&bh.cond);
    bool go_on = !bh.exiting;
    pthread_mutex_unlock(&bh.lock);
    return go_on;
}

/* Waits until the controller has prepared the area up to `end` (behind_ready);
 * false if the process exits or the controller is gone first. */
static bool wait_ready(size_t end)
{
    for (;;) {
        const volatile struct proto_control *ctl = channel_control();
        if (ctl && __atomic_load_n(&ctl->behind_ready, __ATOMIC_ACQUIRE) >= end)
            return true;
        pthread_mutex_lock(&bh.lock);
        bool exiting = bh.exiting;
        pthread_mutex_unlock(&bh.lock);
        if (exiting || !ctl || !channel_controller_alive())
            return false;
        struct timespec nap = {0, POLL_US * 1000L};
        nanosleep(&nap, NULL);
    }
}

/* Segment by segment, as the controller has allocated its pages (registering
 * pages that do not exist yet faults them in, three times slower) and once the
 * program has a context, the registration of each: the first segments are
 * ready before the last ones' pages exist. */
static void *grow_main(void *arg)
{
    (void)arg;
    shim_busy++; /* this thread's driver calls are the shim's own */
    capture_relax();
    bool ok = real_cuCtxSetCurrent && real_cuMemHostRegister_v2;
    CUcontext ctx = ok && wait_ready(seg_len(0)) ? take_context() : NULL;
    ok = ctx && real_cuCtxSetCurrent(ctx) == CUDA_SUCCESS;
    for (unsigned k = 0; ok && k < bh.nseg; k++)
        ok = wait_ready(seg_start(k) + seg_len(k)) && register_segment(k);
    finish();
    return NULL;
}

/* At exit the grower may be inside the driver: the runtime's teardown waits
 * until it is out (its handler runs after this one, registered before it). */
static void behind_at_exit(void)
{
    /* A driver that never returns must not hang the exit. */
    struct timespec until = realtime_after_ms(EXIT_WAIT_S * 1000);
    pthread_mutex_lock(&bh.lock);
    bh.exiting = true;
    pthread_cond_broadcast(&bh.cond);
    while (bh.registering)
        if (pthread_cond_timedwait(&bh.cond, &bh.lock, &until) != 0)
            break;
    pthread_mutex_unlock(&bh.lock);
}

static void register_exit(void)
{
    atexit(behind_at_exit);
}

void behind_start(void)
{
    /* Only once the connection is up: its fields are then written (the control
     * page is published last), also when another thread made it. */
    if (!channel_control())
        return;
    size_t size = 0;
    char *base = channel_behind(&size);
    pthread_mutex_lock(&bh.lock);
    bool go = base && !bh.started;
    if (go) {
        bh.started = true;
        bh.base = base;
        bh.size = size;
        bh.nseg = (unsigned)((size + PROTO_BEHIND_SEGMENT - 1) / PROTO_BEHIND_SEGMENT);
        if (bh.nseg > MAX_SEGMENTS)
            bh.nseg = MAX_SEGMENTS;
    }
    pthread_mutex_unlock(&bh.lock);
    if (!go)
        return;
    /* Taken from the program's next call with a context, while the pages are made. */
    atomic_store(&bh.want_ctx, true);
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &attr, grow_main, NULL) != 0) {
        atomic_store(&bh.want_ctx, false);
        atomic_store(&bh.finished, true);
    }
    pthread_attr_destroy(&attr);
}

void behind_context(void)
{
    if (!atomic_load_explicit(&bh.want_ctx, memory_order_relaxed))
        return;
    CUcontext ctx = NULL;
    if (!real_cuCtxGetCurrent || real_cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || !ctx)
        return;
    /* Here, in a call of the program's made after the runtime set itself up:
     * the exit handler runs before the runtime's. */
    pthread_once(&exit_once, register_exit);
    pthread_mutex_lock(&bh.lock);
    if (!bh.ctx)
        bh.ctx = ctx;
    atomic_store(&bh.want_ctx, false);
    pthread_cond_broadcast(&bh.cond);
    pthread_mutex_unlock(&bh.lock);
}

char *behind_area(void)
{
    return bh.base;
}

static uint64_t behind_done(void)
{
    const volatile struct proto_control *ctl = channel_control();
    return ctl ? __atomic_load_n(&ctl->behind_done, __ATOMIC_ACQUIRE) : 0;
}

static bool past(const struct timespec *deadline)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return now.tv_sec > deadline->tv_sec ||
           (now.tv_sec == deadline->tv_sec && now.tv_nsec >= deadline->tv_nsec);
}

/* Waits until segment k is registered and holds no launch still to be written. */
static bool wait_whole(unsigned k, const struct timespec *deadline)
{
    uint64_t grace = monotonic_ns() + (uint64_t)GRACE_MS * 1000000u;
    for (;;) {
        unsigned ready = atomic_load(&bh.ready);
        if (k < ready && bh.last[k] <= behind_done())
            return true;
        if ((k >= ready && atomic_load(&bh.finished)) || past(deadline) ||
            !channel_control() || !channel_controller_alive())
            return false;
        bool held = false;
        if (monotonic_ns() >= grace && (gate_look(&held), held))
            return false;
        struct timespec nap = {0, POLL_US * 1000L};
        nanosleep(&nap, NULL);
    }
}

/* The segments in the ring: all of them while the grower works, else those it made. */
static unsigned ring_size(void)
{
    return atomic_load(&bh.finished) ? atomic_load(&bh.ready) : bh.nseg;
}

/* Moves on to the next segment of the ring, taken whole once the controller has
 * written what it holds: never one this launch already uses (touched). */
static bool move_on(unsigned *cur, size_t *used, const unsigned *touched, unsigned ntouched,
                    const struct timespec *deadline)
{
    unsigned ring = ring_size();
    if (!ring)
        return false;
    unsigned next = *cur == NO_SEGMENT || *cur + 1 >= ring ? 0 : *cur + 1;
    for (unsigned t = 0; t < ntouched; t++)
        if (touched[t] == next)
            return false;
    if (!wait_whole(next, deadline))
        return false;
    *cur = next;
    *used = 0;
    return true;
}

static bool fits(unsigned cur, size_t used, size_t need)
{
    return cur != NO_SEGMENT && cur < atomic_load(&bh.ready) && need <= seg_len(cur) - used;
}

bool behind_place(const size_t *sizes, unsigned n, uint64_t *offsets, uint64_t *number)
{
    if (!bh.base || !bh.nseg)
        return false;
    size_t aligned[PROTO_MAX_COPIES], total = 0;
    for (unsigned i = 0; i < n; i++) {
        aligned[i] = (sizes[i] + PROTO_STAGING_ALIGN - 1) / PROTO_STAGING_ALIGN * PROTO_STAGING_ALIGN;
        if (aligned[i] < sizes[i] || aligned[i] > SIZE_MAX - total)
            return false;
        total += aligned[i];
    }
    if (!total)
        return false;
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += WAIT_MS / 1000;
    unsigned cur = bh.cur, touched[MAX_SEGMENTS] = {0}, ntouched = 0;
    size_t used = bh.used;
    /* A launch that fits in one segment goes into one, whole: the ring then turns
     * over launch by launch (the first segment is never the shorter last one). */
    bool whole = total <= seg_len(0);
    while (whole && !fits(cur, used, total))
        if (!move_on(&cur, &used, touched, ntouched, &deadline))
            return false;
    for (unsigned i = 0; i < n; i++) {
        offsets[i] = 0;
        if (!aligned[i])
            continue;
        while (!fits(cur, used, aligned[i]))
            if (aligned[i] > seg_len(0) || !move_on(&cur, &used, touched, ntouched, &deadline))
                return false;
        if (!ntouched || touched[ntouched - 1] != cur)
            touched[ntouched++] = cur;
        offsets[i] = seg_start(cur) + used;
        used += aligned[i];
    }
    bh.cur = cur;
    bh.used = used;
    *number = ++bh.number;
    for (unsigned t = 0; t < ntouched; t++)
        bh.last[touched[t]] = *number;
    volatile struct proto_control *ctl = channel_control_rw();
    if (ctl)
        __atomic_store_n(&ctl->behind_sent, *number, __ATOMIC_RELEASE);
    return true;
}

void behind_reset_after_fork(void)
{
    /* The parent's grower and registrations are not this process's; the child
     * gets a shared file of its own when it connects. */
    pthread_mutex_init(&bh.lock, NULL);
    pthread_cond_init(&bh.cond, NULL);
    bh.started = bh.exiting = bh.registering = false;
    bh.ctx = NULL;
    atomic_store(&bh.want_ctx, false);
    atomic_store(&bh.ready, 0);
    atomic_store(&bh.finished, false);
    bh.base = NULL;
    bh.size = 0;
    bh.nseg = 0;
    bh.cur = NO_SEGMENT;
    bh.used = 0;
    bh.number = 0;
    memset(bh.last, 0, sizeof bh.last);
}
