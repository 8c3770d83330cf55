/*
 * Launches whose NaN scans nobody waits for (PLAN_GATE): the record of those
 * in flight, and the shim's own waits on the GPU, which must never wait
 * behind a held gate for good.
 *
 * --check-nan scans a launch's buffers before and after it. Waiting for the
 * results at every launch would make the program wait for the GPU at every
 * launch, which is what makes a scan costly: the CPU can no longer run ahead.
 * So the launching thread does not wait. The scan kernel after the launch
 * writes GATE_HELD into the launch's result slot when it finds non-finite
 * values in a buffer that had none before, and then waits on the GPU until
 * the gate is open (tooljob.h), which holds the stream. The buffers stay as
 * the launch left them on that stream until someone opens the gate (or the
 * kernel gives up after TOOL_HOLD_NS and opens it itself). That someone is
 * the watcher (watch.c). The program never waits on the shim for long:
 *   - a thread of the shim that waits on the GPU itself, holding the staging
 *     lock, may be waiting behind a held gate: it opens every held gate
 *     first, and again while it waits (gate_wait_event), without copies;
 *   - the watcher opens the gate without copies if it cannot serve it.
 * A gate opened without copies is GATE_RELEASED: the controller's ring reader
 * then reports the launch from its results, with no snapshot of its buffers.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>

#include "ahead.h"
#include "gate.h"
#include "handoff.h"
#include "interpose.h"
#include "util.h"

enum {
    GATE_MAX = 1024,            /* launches in flight kept track of (the ring has fewer slots) */
    SETTLE_S = 10,              /* how long a call of the program waits for them (gate_settle) */
};

/* A serving thread's wait for its copies on the side stream. The GPU does not
 * promise that they run while the held stream waits: streams share a few
 * hardware queues, and a side stream's copies seen queued behind the held
 * kernel would wait for it for good (seen with cuDNN's kernels on an H200).
 * So a wait that has not ended after SERVE_STALL_MS opens the gate; the copies
 * then complete, but after whatever the program queued behind the launch, so
 * they and the rest of the serve are reported failed (CUDA_ERROR_TIMEOUT). */
enum { SERVE_STALL_MS = 2000 };

/* Copies that serve a held gate are made by the kernel that holds it, through
 * the slot's mailbox (GATE_COPY), which cannot queue behind itself. A copy not
 * made after MAIL_WAIT_MS and a further millisecond per MAIL_MS_BYTES of it
 * (256 MB/s, far below what the kernel's block copies: the GPU tests print its
 * rate) is given up, as a stalled wait is: the kernel no longer runs (its
 * context ended under it). Giving up opens the gate, and the kernel stops
 * copying within a MiB (tools.cu's copy_rows). */
enum { MAIL_WAIT_MS = 2000 };
#define MAIL_MS_BYTES (256ull << 10)

/* One process's gated launches, in the order they were made. */
static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cond = PTHREAD_COND_INITIALIZER;
static struct gate_entry entries[GATE_MAX];
static unsigned head, count;
static atomic_uint in_flight;   /* count, read without the lock */
/* Gated launches ever added and ever retired (in the order they were added),
 * so that a thread that settles waits for the launches in flight when it came,
 * not for those other threads add meanwhile. */
static unsigned long long added, retired;

/* Set while this thread serves a held gate: its own waits are on a side
 * stream, which no gate holds. */
static _Thread_local bool serving;
/* The gate it serves, and whether it had to open it before its copies were
 * done (a stalled wait): every copy of that serve is then reported failed. */
static _Thread_local struct proto_result_slot *serving_slot;
static _Thread_local bool serve_stalled;
/* The number of the last copy asked for through a mailbox, in this process. */
static _Atomic uint64_t mail_seq;

static uint32_t gate_of(const struct gate_entry *g)
{
    return __atomic_load_n(&g->slot->gate, __ATOMIC_ACQUIRE);
}

bool gate_results_in(const struct proto_result_slot *s, uint64_t tag)
{
    unsigned n = s->ncopies < PROTO_MAX_REPEAT ? s->ncopies : PROTO_MAX_REPEAT;
    for (unsigned k = 0; k < n; k++)
        if (s->results[k].rc == 0 && __atomic_load_n(&s->results[k].done, __ATOMIC_ACQUIRE) != tag)
            return false;
    return true;
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
    return gate != GATE_HELD && gate != GATE_SERVING && gate != GATE_COPY &&
           gate_results_in(s, g->tag);
}

static void retire_locked(void)
{
    while (count && settled(&entries[head])) {
        head = (head + 1) % GATE_MAX;
        count--;
        retired++;
    }
    atomic_store_explicit(&in_flight, count, memory_order_release);
}

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

unsigned gate_held(struct gate_entry *out, unsigned cap)
{
    pthread_mutex_lock(&gate_lock);
    unsigned n = held_locked(out, cap);
    pthread_mutex_unlock(&gate_lock);
    return n;
}

unsigned gate_look(bool *held)
{
    pthread_mutex_lock(&gate_lock);
    retire_locked();
    struct gate_entry any;
    unsigned left = count;
    *held = held_locked(&any, 1) != 0;
    pthread_mutex_unlock(&gate_lock);
    return left;
}

static bool legacy(CUstream s, int ptsz)
{
    return (s == NULL && !ptsz) || s == CU_STREAM_LEGACY;
}

unsigned gate_pending_for(CUstream stream, int ptsz, unsigned long long from, bool *held)
{
    *held = false;
    if (!atomic_load_explicit(&in_flight, memory_order_acquire))
        return 0;
    pthread_mutex_lock(&gate_lock);
    retire_locked();
    struct gate_entry any;
    *held = held_locked(&any, 1) != 0;
    unsigned n = 0;
    for (unsigned i = 0; i < count; i++) {
        const struct gate_entry *g = &entries[(head + i) % GATE_MAX];
        bool behind = (g->stream == stream && g->ptsz == ptsz) || legacy(g->stream, g->ptsz) ||
                      legacy(stream, ptsz);
        if (retired + i >= from && behind && !settled(g))
            n++;
    }
    pthread_mutex_unlock(&gate_lock);
    return n;
}

unsigned long long gate_added(void)
{
    pthread_mutex_lock(&gate_lock);
    unsigned long long n = added;
    pthread_mutex_unlock(&gate_lock);
    return n;
}

bool gate_newest_held(void)
{
    if (!atomic_load_explicit(&in_flight, memory_order_acquire))
        return false;
    pthread_mutex_lock(&gate_lock);
    bool held = count && gate_of(&entries[(head + count - 1) % GATE_MAX]) == GATE_HELD;
    pthread_mutex_unlock(&gate_lock);
    return held;
}

void gate_wait_any(void)
{
    pthread_mutex_lock(&gate_lock);
    while (!count)
        pthread_cond_wait(&gate_cond, &gate_lock);
    pthread_mutex_unlock(&gate_lock);
}

void gate_open(const struct gate_entry *g, uint32_t how)
{
    uint32_t from[] = {GATE_HELD, GATE_SERVING, GATE_COPY};
    for (int i = 0; i < 3; i++) {
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

void gate_serving(bool on)
{
    serving = on;
}

void gate_serve_slot(struct proto_result_slot *slot)
{
    serving_slot = slot;
    serve_stalled = false;
}

bool gate_serve_stalled(void)
{
    return serve_stalled;
}

/* Gives the GPU a moment: yields at first, then naps 20 us a round. */
static void backoff(unsigned spin)
{
    if (spin < 64) {
        sched_yield();
    } else {
        struct timespec nap = {0, 20 * 1000};
        nanosleep(&nap, NULL);
    }
}

bool gate_mail_open(void)
{
    return serving && serving_slot;
}

/* Opens the gate being served without the copies: every copy of the serve is
 * then reported failed, as after a stalled wait. */
static void serve_gives_up(uint32_t from)
{
    __atomic_compare_exchange_n(&serving_slot->gate, &from, GATE_RELEASED, false,
                                __ATOMIC_RELEASE, __ATOMIC_RELAXED);
    serve_stalled = true;
}

CUresult gate_mail_copy(CUdeviceptr src, size_t width, size_t height, size_t pitch,
                        CUdeviceptr dst)
{
    struct proto_result_slot *s = serving_slot;
    if (!s || serve_stalled)
        return CUDA_ERROR_TIMEOUT;
    struct proto_gate_mail *m = &s->mail;
    uint64_t seq = atomic_fetch_add(&mail_seq, 1) + 1;
    m->src = src;
    m->dst = dst;
    m->width = width;
    m->height = height;
    m->pitch = pitch;
    __atomic_store_n(&m->seq, seq, __ATOMIC_RELEASE);
    /* The kernel reads the mailbox once the gate says so. It writes the gate
     * only to give up (GATE_RELEASED), so a failed exchange means it left. */
    uint32_t was = GATE_SERVING;
    if (!__atomic_compare_exchange_n(&s->gate, &was, GATE_COPY, false, __ATOMIC_RELEASE,
                                     __ATOMIC_ACQUIRE)) {
        serve_stalled = true;
        return CUDA_ERROR_TIMEOUT;
    }
    uint64_t limit = (uint64_t)MAIL_WAIT_MS + (uint64_t)width * height / MAIL_MS_BYTES;
    uint64_t deadline = monotonic_ns() + limit * 1000000u;
    /* On host memory only: no call into the driver, which could wait behind the hold. */
    for (unsigned spin = 0;; spin++) {
        if (__atomic_load_n(&m->done, __ATOMIC_ACQUIRE) == seq) {
            was = GATE_COPY;
            if (!__atomic_compare_exchange_n(&s->gate, &was, GATE_SERVING, false,
                                             __ATOMIC_RELEASE, __ATOMIC_ACQUIRE))
                serve_stalled = true; /* made while held; the kernel left since */
            return CUDA_SUCCESS;
        }
        /* The kernel wrote `done` before it gave up, if it made the copy at all. */
        if (__atomic_load_n(&s->gate, __ATOMIC_ACQUIRE) != GATE_COPY) {
            bool made = __atomic_load_n(&m->done, __ATOMIC_ACQUIRE) == seq;
            serve_stalled = true;
            return made ? CUDA_SUCCESS : CUDA_ERROR_TIMEOUT;
        }
        if (monotonic_ns() >= deadline) {
            serve_gives_up(GATE_COPY);
            return CUDA_ERROR_TIMEOUT;
        }
        backoff(spin);
    }
}

CUresult gate_wait_event(CUevent ev, unsigned grace_ms)
{
    cuEventSynchronize_fn sync = shim_real_cuEventSynchronize();
    cuEventQuery_fn query = shim_real_cuEventQuery();
    if (!query || (!serving && !atomic_load_explicit(&in_flight, memory_order_acquire)))
        return sync ? sync(ev) : CUDA_ERROR_NOT_FOUND;
    /* One poll loop for both kinds of waiter. A serving thread waits on a side
     * stream no gate holds, but opens its own gate if the wait stalls; any
     * other thread's stream may be held, or come to be while it waits, so it
     * opens held gates (after grace_ms). */
    uint64_t limit = serving ? (uint64_t)SERVE_STALL_MS * 1000000u : (uint64_t)grace_ms * 1000000u;
    uint64_t deadline = monotonic_ns() + limit;
    for (unsigned spin = 0;; spin++) {
        if (!serving && (!grace_ms || monotonic_ns() >= deadline))
            gate_release_held();
        CUresult rc = query(ev);
        if (rc != CUDA_ERROR_NOT_READY)
            return serving && serve_stalled && rc == CUDA_SUCCESS ? CUDA_ERROR_TIMEOUT : rc;
        if (serving && !serve_stalled && serving_slot && monotonic_ns() >= deadline)
            serve_gives_up(GATE_SERVING);
        backoff(spin);
    }
}

CUresult gate_wait_on(CUstream stream, int ptsz, unsigned grace_ms)
{
    CUevent ev = NULL;
    CUresult rc = real_cuEventCreate ? real_cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING)
                                     : CUDA_ERROR_NOT_FOUND;
    if (rc != CUDA_SUCCESS)
        return rc;
    cuEventRecord_fn record = ptsz ? shim_real_cuEventRecord_ptsz() : shim_real_cuEventRecord();
    rc = record ? record(ev, stream) : CUDA_ERROR_NOT_FOUND;
    if (rc == CUDA_SUCCESS)
        rc = gate_wait_event(ev, grace_ms);
    real_cuEventDestroy_v2(ev);
    return rc;
}

CUresult gate_wait_stream(const struct launch_info *li)
{
    /* A launch of cudump's kernel handed to the launcher is on the stream before the
     * wait is (a wait for a gated launch's scans where none of its own holds). */
    handoff_fence();
    /* Under the staging lock: no gate is served meanwhile, so no grace. */
    return gate_wait_on(li->stream, li->ptsz, 0);
}

void gate_add(struct proto_result_slot *slot, uint64_t tag, uint64_t seq, CUcontext ctx,
              CUstream stream, int ptsz)
{
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
        (struct gate_entry){slot, tag, seq, ctx, monotonic_ns(), stream, ptsz};
    added++;
    if (count++ == 0)
        pthread_cond_signal(&gate_cond);
    atomic_store_explicit(&in_flight, count, memory_order_release);
    pthread_mutex_unlock(&gate_lock);
}

/* Whether the gated launches added before `*upto` was taken are all settled
 * (retiring those that are). */
static bool settled_upto(void *upto)
{
    pthread_mutex_lock(&gate_lock);
    retire_locked();
    bool done = retired >= *(const unsigned long long *)upto;
    pthread_mutex_unlock(&gate_lock);
    return done;
}

void gate_settle(void)
{
    if (serving || !atomic_load_explicit(&in_flight, memory_order_acquire))
        return;
    /* Called from calls that are not counted (a function looked up): scans made ahead
     * would keep the ring's reader at their slot while this thread waits here. */
    ahead_void();
    pthread_mutex_lock(&gate_lock);
    unsigned long long upto = added;
    pthread_mutex_unlock(&gate_lock);
    /* The watcher serves them meanwhile (in relaxed capture mode, on its own
     * thread): this thread only waits, outside the driver. */
    if (!poll_until(settled_upto, &upto, SETTLE_S))
        gate_release_held();
}

void gate_reset_after_fork(void)
{
    /* The child has neither the parent's launches in flight nor its watcher. */
    pthread_mutex_init(&gate_lock, NULL);
    pthread_cond_init(&gate_cond, NULL);
    head = count = 0;
    added = retired = 0;
    atomic_store(&in_flight, 0);
    serving = false;
}
