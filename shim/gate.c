/*
 * Launches whose NaN scans nobody waits for (PLAN_GATE).
 *
 * --check-nan scans a launch's buffers before and after it. Waiting for the
 * results at every launch would make the program wait for the GPU at every
 * launch, which is what makes a scan costly: the CPU can no longer run ahead.
 * So the launching thread does not wait. The scan kernel after the launch
 * writes GATE_HELD into the launch's result slot when it finds non-finite
 * values in a buffer that had none before, and then waits on the GPU until
 * the gate is open (tooljob.h), which holds the stream. The buffers stay as
 * the launch left them on that stream until someone opens the gate (or the
 * kernel gives up after TOOL_HOLD_NS and opens it itself).
 *
 * That someone is a thread of the shim's own (watch): it looks at the gates
 * of launches still in flight, and for a held one it takes the snapshot lock,
 * marks the gate GATE_SERVING (the kernel then waits longer), reports the
 * launch (MSG_REPEAT) and makes the copies the controller asks for on a stream
 * of its own that does not wait for the held one, then opens the gate. The
 * program never waits on the shim for long:
 *   - a thread of the shim that waits on the GPU itself, holding the lock,
 *     may be waiting behind a held gate: it opens every held gate first, and
 *     again while it waits (gate_wait_event), without copies;
 *   - if the lock cannot be had within a second, the gate is opened without
 *     copies.
 * A gate opened without copies is GATE_RELEASED: the controller's ring reader
 * then reports the launch from its results, with no snapshot of its buffers.
 * At exit, gated launches still in flight are seen through (gate_at_exit).
 */
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <time.h>

#include "launch.h"
#include "tooljob.h"

enum {
    GATE_MAX = 1024,            /* launches in flight kept track of (the ring has fewer slots) */
    POLL_US = 200,              /* how often the watcher looks while any are in flight */
    LOCK_MS = 1000,             /* how long it waits for the snapshot lock */
    MAX_SIDE_STREAMS = 32,      /* contexts served: a handful per process at most */
};
#define SERVE_MARGIN_NS 2000000000ull /* no serve begins later than TOOL_HOLD_NS less this */

struct gate_entry {
    struct proto_result_slot *slot;
    uint64_t tag;               /* the slot's position + 1: its `ready` and its results' `done` */
    uint64_t seq;
    CUcontext ctx;
    uint64_t added_ns;          /* when the launch was made: its hold began later */
};

/* One process's gated launches, in the order they were made. */
static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cond = PTHREAD_COND_INITIALIZER;
static struct gate_entry entries[GATE_MAX];
static unsigned head, count;
static atomic_uint in_flight;   /* count, read without the lock */
static atomic_bool watching;    /* set once, under the lock; read without it */
static bool cannot_watch;

/* The streams copies of held launches go on, one per context (under snap_lock). */
static struct {
    CUcontext ctx;
    CUstream stream;
} side[MAX_SIDE_STREAMS];
static unsigned nside;

/* Set while this thread serves a held gate: its own waits are on a side
 * stream, which no gate holds. */
static _Thread_local bool serving;
/* The gate it serves, and whether it had to open it before its copies were
 * done (serve_wait): every copy of that serve is then reported failed. */
static _Thread_local struct proto_result_slot *serving_slot;
static _Thread_local bool serve_stalled;
static _Thread_local bool watcher;   /* this thread is the watcher */

static uint32_t gate_of(const struct gate_entry *g)
{
    return __atomic_load_n(&g->slot->gate, __ATOMIC_ACQUIRE);
}

/* Whether nothing more will happen to the launch's slot: its gate is not held
 * and every result is in (or will never come). A slot reused by a later launch
 * is settled for this one. */
static bool settled(const struct gate_entry *g)
{
    const struct proto_result_slot *s = g->slot;
    if (__atomic_load_n(&s->ready, __ATOMIC_ACQUIRE) != g->tag)
        return true;
    uint32_t gate = gate_of(g);
    return gate != GATE_HELD && gate != GATE_SERVING && repeat_results_in(s, g->tag);
}

static void retire_locked(void)
{
    while (count && settled(&entries[head])) {
        head = (head + 1) % GATE_MAX;
        count--;
    }
    atomic_store_explicit(&in_flight, count, memory_order_release);
}

/* Copies out the held launches (at most cap). */
static unsigned held_locked(struct gate_entry *out, unsigned cap)
{
    unsigned n = 0;
    for (unsigned i = 0; i < count && n < cap; i++) {
        const struct gate_entry *g = &entries[(head + i) % GATE_MAX];
        if (gate_of(g) == GATE_HELD && __atomic_load_n(&g->slot->ready, __ATOMIC_ACQUIRE) == g->tag)
            out[n++] = *g;
    }
    return n;
}

/* Opens the gate if it is held, or being served. */
static void open_gate(const struct gate_entry *g, uint32_t how)
{
    uint32_t from[] = {GATE_HELD, GATE_SERVING};
    for (int i = 0; i < 2; i++) {
        uint32_t was = from[i];
        if (__atomic_compare_exchange_n(&g->slot->gate, &was, how, false, __ATOMIC_RELEASE,
                                        __ATOMIC_RELAXED))
            return;
    }
}

/* Opens the gate if it is held and nobody serves it. */
static void release_gate(const struct gate_entry *g)
{
    uint32_t held = GATE_HELD;
    __atomic_compare_exchange_n(&g->slot->gate, &held, GATE_RELEASED, false, __ATOMIC_RELEASE,
                                __ATOMIC_RELAXED);
}

void gate_release_held(void)
{
    if (serving || !atomic_load_explicit(&in_flight, memory_order_acquire))
        return;
    pthread_mutex_lock(&gate_lock);
    for (unsigned i = 0; i < count; i++) {
        const struct gate_entry *g = &entries[(head + i) % GATE_MAX];
        if (__atomic_load_n(&g->slot->ready, __ATOMIC_ACQUIRE) == g->tag)
            release_gate(g);
    }
    pthread_mutex_unlock(&gate_lock);
}

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* A serving thread's wait for its copies on the side stream. The GPU does not
 * promise that they run while the held stream waits: streams share a few
 * hardware queues, and a side stream's copies seen queued behind the held
 * kernel would wait for it for good (seen with cuDNN's kernels on an H200).
 * So a wait that has not ended after SERVE_STALL_MS opens the gate; the copies
 * then complete, but after whatever the program queued behind the launch, so
 * they and the rest of the serve are reported failed (CUDA_ERROR_TIMEOUT). */
enum { SERVE_STALL_MS = 2000 };

static CUresult serve_wait(CUevent ev)
{
    uint64_t stall = now_ns() + (uint64_t)SERVE_STALL_MS * 1000000u;
    for (unsigned spin = 0;; spin++) {
        CUresult rc = real_cuEventQuery(ev);
        if (rc != CUDA_ERROR_NOT_READY)
            return serve_stalled && rc == CUDA_SUCCESS ? CUDA_ERROR_TIMEOUT : rc;
        if (!serve_stalled && serving_slot && now_ns() >= stall) {
            uint32_t was = GATE_SERVING;
            __atomic_compare_exchange_n(&serving_slot->gate, &was, GATE_RELEASED, false,
                                        __ATOMIC_RELEASE, __ATOMIC_RELAXED);
            serve_stalled = true;
        }
        if (spin < 64) {
            sched_yield();
        } else {
            struct timespec nap = {0, 20 * 1000};
            nanosleep(&nap, NULL);
        }
    }
}

CUresult gate_wait_event(CUevent ev, unsigned grace_ms)
{
    cuEventSynchronize_fn sync = shim_real_cuEventSynchronize();
    if (serving && real_cuEventQuery)
        return serve_wait(ev);
    if (serving || !atomic_load_explicit(&in_flight, memory_order_acquire) || !real_cuEventQuery)
        return sync ? sync(ev) : CUDA_ERROR_NOT_FOUND;
    /* The stream waited on may be held, or come to be while we wait. */
    uint64_t opening = now_ns() + (uint64_t)grace_ms * 1000000u;
    for (unsigned spin = 0;; spin++) {
        if (!grace_ms || now_ns() >= opening)
            gate_release_held();
        CUresult rc = real_cuEventQuery(ev);
        if (rc != CUDA_ERROR_NOT_READY)
            return rc;
        if (spin < 64) {
            sched_yield();
        } else {
            struct timespec nap = {0, 20 * 1000};
            nanosleep(&nap, NULL);
        }
    }
}

/* A stream of the context that does not wait for the held one (ctx current). */
static CUstream side_stream(CUcontext ctx)
{
    for (unsigned i = 0; i < nside; i++)
        if (side[i].ctx == ctx)
            return side[i].stream;
    CUstream s = NULL;
    if (nside == MAX_SIDE_STREAMS || !real_cuStreamCreate ||
        real_cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS)
        return NULL;
    side[nside].ctx = ctx;
    side[nside++].stream = s;
    return s;
}

static void serve_held(void *unused)
{
    (void)unused;
    static struct gate_entry held[GATE_MAX]; /* under snap_lock */
    pthread_mutex_lock(&gate_lock);
    unsigned n = held_locked(held, GATE_MAX);
    pthread_mutex_unlock(&gate_lock);
    serving = true;
    for (unsigned i = 0; i < n; i++) {
        const struct gate_entry *g = &held[i];
        /* The watcher's own thread simply makes the context current; a
         * launching thread gets its own back. */
        if (g->ctx && watcher && real_cuCtxSetCurrent)
            real_cuCtxSetCurrent(g->ctx);
        struct ctx_scope scope = ctx_enter(g->ctx);
        CUstream s = scope.ok ? side_stream(g->ctx) : NULL;
        /* Not begun this close to the time cudump's kernel gives up by itself
         * (it could let the stream go while the copies are made). */
        bool late = now_ns() - g->added_ns > TOOL_HOLD_NS - SERVE_MARGIN_NS;
        serving_slot = g->slot;
        serve_stalled = false;
        bool served = s && !late && snap_serve_gate(g->slot, g->seq, s);
        served = served && !serve_stalled;
        serving_slot = NULL;
        open_gate(g, served ? GATE_SERVED : GATE_RELEASED);
        ctx_leave(scope);
    }
    serving = false;
}

void gate_serve_newest(void)
{
    if (!atomic_load_explicit(&in_flight, memory_order_acquire))
        return;
    pthread_mutex_lock(&gate_lock);
    bool held = count && gate_of(&entries[(head + count - 1) % GATE_MAX]) == GATE_HELD;
    pthread_mutex_unlock(&gate_lock);
    if (held)
        serve_held(NULL);
}

/* One look at the launches in flight: settled ones are forgotten, held ones
 * served, or opened without copies if the snapshot lock stays taken (the
 * program must go on). Returns how many were in flight. */
static unsigned look(void)
{
    pthread_mutex_lock(&gate_lock);
    retire_locked();
    struct gate_entry any;
    unsigned left = count, held = held_locked(&any, 1);
    pthread_mutex_unlock(&gate_lock);
    if (held && !snap_locked(LOCK_MS, serve_held, NULL))
        gate_release_held();
    return left;
}

static void *watch(void *unused)
{
    (void)unused;
    watcher = true;
    /* Serving a gate waits on the GPU: never in a way that touches a capture
     * the program makes meanwhile (global mode forbids it process-wide). */
    CUstreamCaptureMode relaxed = CU_STREAM_CAPTURE_MODE_RELAXED;
    if (real_cuThreadExchangeStreamCaptureMode)
        real_cuThreadExchangeStreamCaptureMode(&relaxed);
    for (;;) {
        pthread_mutex_lock(&gate_lock);
        while (!count)
            pthread_cond_wait(&gate_cond, &gate_lock);
        pthread_mutex_unlock(&gate_lock);
        look();
        struct timespec nap = {0, POLL_US * 1000};
        nanosleep(&nap, NULL);
    }
    return NULL;
}

/* At exit, launches still in flight are seen through: a held one would
 * otherwise never be reported. Registered at the first gated launch, after
 * the CUDA runtime's own handler, so it runs while contexts still exist; it
 * gives up after EXIT_WAIT_S (the program's exit goes on regardless). */
static bool none_in_flight(void)
{
    return look() == 0;
}

static void gate_at_exit(void)
{
    if (!poll_until(none_in_flight, EXIT_WAIT_S))
        gate_release_held();
}

/* Starts the watcher with every signal blocked: they are the program's. */
static bool start_watching(void)
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_t attr;
    pthread_t thread;
    bool ok = pthread_attr_init(&attr) == 0;
    ok = ok && pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED) == 0 &&
         pthread_create(&thread, &attr, watch, NULL) == 0;
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (ok)
        atexit(gate_at_exit);
    return ok;
}

/* Whether the device ends kernels that run for long (a display's watchdog): a
 * hold there would end cudump's kernel with an error that ruins the context.
 * Asked once per device; a device that cannot be asked counts as one. */
static bool watchdog(int device)
{
    enum { KERNEL_EXEC_TIMEOUT = 17, MAX_DEVICES = 64, NOT_ASKED = 0, NO = 1, YES = 2 };
    static _Atomic unsigned char known[MAX_DEVICES];
    if (device < 0 || device >= MAX_DEVICES)
        return true;
    unsigned char k = atomic_load_explicit(&known[device], memory_order_relaxed);
    if (k == NOT_ASKED) {
        int on = 1;
        if (!real_cuDeviceGetAttribute ||
            real_cuDeviceGetAttribute(&on, KERNEL_EXEC_TIMEOUT, device) != CUDA_SUCCESS)
            on = 1;
        k = on ? YES : NO;
        atomic_store_explicit(&known[device], k, memory_order_relaxed);
    }
    return k == YES;
}

bool gate_room(int device)
{
    if (watchdog(device))
        return false;
    /* The watcher first: a gate nobody opens would hold the stream for good. */
    if (atomic_load_explicit(&watching, memory_order_acquire))
        return true;
    pthread_mutex_lock(&gate_lock);
    if (!atomic_load(&watching) && !cannot_watch) {
        bool started = start_watching();
        atomic_store_explicit(&watching, started, memory_order_release);
        cannot_watch = !started;
    }
    pthread_mutex_unlock(&gate_lock);
    return atomic_load(&watching);
}

void gate_add(const struct launch_info *li)
{
    CUcontext ctx = launch_stream_ctx(li);
    pthread_mutex_lock(&gate_lock);
    /* Each entry not yet settled has a ring slot of its own, and the ring has
     * fewer slots than GATE_MAX: once the settled ones are gone there is room.
     * Should there be none, the held gates are opened until there is. */
    retire_locked();
    while (count == GATE_MAX) {
        pthread_mutex_unlock(&gate_lock);
        gate_release_held();
        struct timespec nap = {0, 50 * 1000};
        nanosleep(&nap, NULL);
        pthread_mutex_lock(&gate_lock);
        retire_locked();
    }
    entries[(head + count) % GATE_MAX] =
        (struct gate_entry){li->slot, li->slot_pos + 1, li->seq, ctx, now_ns()};
    if (count++ == 0)
        pthread_cond_signal(&gate_cond);
    atomic_store_explicit(&in_flight, count, memory_order_release);
    pthread_mutex_unlock(&gate_lock);
}

void gate_reset_after_fork(void)
{
    /* The child has neither the parent's launches in flight nor its watcher. */
    pthread_mutex_init(&gate_lock, NULL);
    pthread_cond_init(&gate_cond, NULL);
    head = count = 0;
    atomic_store(&in_flight, 0);
    atomic_store(&watching, false);
    cannot_watch = false;
    nside = 0;
    serving = false;
}
