/*
 * The watcher: serves the gates of launches whose NaN scans nobody waits for
 * (PLAN_GATE; gate.c keeps the record of those in flight).
 *
 * It looks at the gates of launches still in flight, and for a held one it
 * takes the staging lock, marks the gate GATE_SERVING (the kernel then waits
 * longer), reports the launch (MSG_REPEAT) and has the copies the controller
 * asks for made by the kernel that holds the stream (the slot's mailbox,
 * gate_mail_copy; a copy the kernel cannot make, or cudump's own kernel the
 * answer asks to run, goes on a stream of its own that does not wait for the
 * held one), then opens the gate. If the lock cannot be had within a second, the
 * gate is opened without copies: the program must go on. At exit, gated
 * launches still in flight are seen through (gate_at_exit).
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "ctxlife.h"
#include "drain.h"
#include "gate.h"
#include "interpose.h"
#include "plain.h"
#include "plan.h"
#include "staging.h"
#include "stream.h"
#include "tooljob.h"
#include "util.h"
#include "watch.h"

enum {
    POLL_US = 200,              /* how often the watcher looks while any are in flight */
    LOCK_MS = 1000,             /* how long it waits for the staging lock */
    MAX_SIDE_STREAMS = 32,      /* contexts served: a handful per process at most */
    MAX_HELD = 1024,            /* held launches served in one go (gate.c keeps no more) */
    SETTLE_HERE_MS = 500,       /* how long watch_settle_here waits for scans still running */
};
#define SERVE_MARGIN_NS 2000000000ull /* no serve begins later than TOOL_HOLD_NS less this */

static pthread_mutex_t watch_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_bool watching;    /* set once, under the lock; read without it */
static bool cannot_watch;

/* The streams copies of held launches go on, one per context (under the
 * staging lock, and side_lock: a context's end drops its stream from any thread). */
static pthread_mutex_t side_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    struct ctx_key key;         /* key.ctx NULL: a free entry */
    CUstream stream;
} side[MAX_SIDE_STREAMS];
static unsigned nside;

static _Thread_local bool watcher;   /* this thread is the watcher */

/* A stream of the context that does not wait for the held one (ctx current);
 * made again where the context ended and came back under the same handle. */
static CUstream side_stream(CUcontext ctx)
{
    pthread_mutex_lock(&side_lock);
    unsigned at = nside;
    for (unsigned i = 0; i < nside && at == nside; i++) {
        enum ctx_match m = ctx_key_match(&side[i].key, ctx);
        if (m == CTX_SAME) {
            CUstream s = side[i].stream;
            pthread_mutex_unlock(&side_lock);
            return s;
        }
        if (m == CTX_ENDED)
            at = i; /* its stream went with the context: not destroyed, made anew */
    }
    for (unsigned i = 0; i < nside && at == nside; i++)
        if (!side[i].key.ctx)
            at = i;
    CUstream s = NULL;
    if (at < MAX_SIDE_STREAMS && shim_real_cuStreamCreate() &&
        shim_real_cuStreamCreate()(&s, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS) {
        ctx_key_set(&side[at].key, ctx);
        side[at].stream = s;
        if (at == nside)
            nside++;
    } else {
        s = NULL;
    }
    pthread_mutex_unlock(&side_lock);
    return s;
}

void watch_forget(const struct ctx_key *gone)
{
    pthread_mutex_lock(&side_lock);
    for (unsigned i = 0; i < nside; i++)
        if (ctx_key_is(&side[i].key, gone))
            side[i].key = (struct ctx_key){0};
    pthread_mutex_unlock(&side_lock);
}

/* Reports a held launch (MSG_REPEAT with its slot), makes the copies the
 * answer asks for on `stream`, a stream of the launch's context that does
 * not wait for the held one. Returns whether the controller took the
 * report. Under the staging lock. */
static bool serve_gate(struct proto_result_slot *slot, uint64_t seq, CUstream stream)
{
    drain_wait_idle(); /* the staging area is the drain's until then */
    /* From here the kernel waits TOOL_SERVE_NS, not TOOL_HOLD_NS (tooljob.h). */
    uint32_t held = GATE_HELD;
    if (!__atomic_compare_exchange_n(&slot->gate, &held, GATE_SERVING, false, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE))
        return false; /* opened meanwhile by a thread that had to wait on the GPU */
    /* The launch is this thread's to report from now on: the ring's reader
     * skips it whatever the gate comes to read. */
    slot->flags |= RESULT_TAKEN;
    CUstreamCaptureMode mode = capture_relax();
    char stack[256]; /* the slot itself (16 KB) goes on the heap: this is rare */
    struct msg m;
    msg_init(&m, stack, sizeof stack, MSG_REPEAT, seq);
    msg_add(&m, slot, sizeof *slot);
    plan_clear();
    uint32_t flags = 0;
    bool ok = plan_request(&m, &flags);
    /* The launch's own stream is held: the copies are made by the kernel that
     * holds it (plain.c), or else go on `stream`. A hold it asks for
     * (PLAN_HALT) is not kept: the launching thread is long gone. */
    struct launch_info li = {.stream = stream, .seq = seq};
    plain_after(&li, (CUresult)slot->launch_rc, plan_follow_ups(ok, &flags), 1);
    capture_restore(mode);
    return ok;
}

static void serve_held(void *unused)
{
    (void)unused;
    static struct gate_entry held[MAX_HELD]; /* under the staging lock */
    unsigned n = gate_held(held, MAX_HELD);
    gate_serving(true);
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
        bool late = monotonic_ns() - g->added_ns > TOOL_HOLD_NS - SERVE_MARGIN_NS;
        gate_serve_slot(g->slot);
        bool served = s && !late && serve_gate(g->slot, g->seq, s);
        served = served && !gate_serve_stalled();
        gate_serve_slot(NULL);
        gate_open(g, served ? GATE_SERVED : GATE_RELEASED);
        ctx_leave(scope);
    }
    gate_serving(false);
}

void watch_serve_newest(void)
{
    if (gate_newest_held())
        serve_held(NULL);
}

void watch_settle_here(CUstream stream, int ptsz)
{
    /* Launches before this number were waited out once and never settled (their
     * context ended with them in flight): not waited for again. */
    static unsigned long long from; /* under the staging lock */
    uint64_t until = monotonic_ns() + (uint64_t)SETTLE_HERE_MS * 1000000u;
    for (;;) {
        bool held;
        unsigned left = gate_pending_for(stream, ptsz, from, &held);
        if (held) {
            serve_held(NULL); /* on any stream: the wait after would let it go */
        } else if (!left) {
            return;
        } else {
            struct timespec nap = {0, 20 * 1000};
            nanosleep(&nap, NULL);
        }
        if (monotonic_ns() > until) {
            from = gate_added();
            return;
        }
    }
}

/* One look at the launches in flight: settled ones are forgotten, held ones
 * served, or opened without copies if the staging lock stays taken (the
 * program must go on). Returns how many were in flight. */
static unsigned look(void)
{
    bool held;
    unsigned left = gate_look(&held);
    if (held && !staging_locked(LOCK_MS, serve_held, NULL))
        gate_release_held();
    return left;
}

static void *watch(void *unused)
{
    (void)unused;
    watcher = true;
    /* Serving a gate waits on the GPU: never in a way that touches a capture
     * the program makes meanwhile (global mode forbids it process-wide). */
    capture_relax();
    for (;;) {
        gate_wait_any();
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
static bool none_in_flight(void *unused)
{
    (void)unused;
    return look() == 0;
}

static void gate_at_exit(void)
{
    if (!poll_until(none_in_flight, NULL, EXIT_WAIT_S))
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

bool watch_room(int device)
{
    if (watchdog(device))
        return false;
    /* The watcher first: a gate nobody opens would hold the stream for good. */
    if (atomic_load_explicit(&watching, memory_order_acquire))
        return true;
    pthread_mutex_lock(&watch_lock);
    if (!atomic_load(&watching) && !cannot_watch) {
        bool started = start_watching();
        atomic_store_explicit(&watching, started, memory_order_release);
        cannot_watch = !started;
    }
    pthread_mutex_unlock(&watch_lock);
    return atomic_load(&watching);
}

void watch_reset_after_fork(void)
{
    /* The child has no watcher of its own yet. */
    pthread_mutex_init(&watch_lock, NULL);
    atomic_store(&watching, false);
    cannot_watch = false;
    pthread_mutex_init(&side_lock, NULL);
    nside = 0;
}
