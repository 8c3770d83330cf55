/*
 * The program's calls into the driver that cudump wraps, counted (calls.c).
 *
 * Scans ahead (ahead.h) are made with one launch for the next: they are good
 * only if nothing reached the GPU, or let the host act on it, between the two
 * launches. Every wrapped call counts as begun when it enters (but those that
 * work on the host alone: api.h's HOST rows), and one that
 * may put work on a stream (anything but a wait or a query) counts as in
 * progress until it returns, so that a call another thread began earlier and
 * has not finished is seen too. A wait or query counts as begun again when it
 * returns: the host may act on what it learnt. The counters cost one atomic
 * add or two per call; the driver's own call costs microseconds.
 */
#ifndef CUDUMP_CALLS_H
#define CUDUMP_CALLS_H

#include "shim.h"

/* Process-wide, by nature: they count every thread's calls. */
extern _Atomic unsigned long long calls_begun_count;
extern _Atomic int calls_in_progress;
/* Launches of cudump's kernel being made on the condition that no call has
 * begun since a given count (calls_fence). */
extern _Atomic int calls_fenced;

/* Waits (a while at most) until no launch holds the fence. */
void calls_fence_wait(void);

static inline void calls_enter(bool waits)
{
    /* In progress before it counts as begun: a thread that reads calls_begun() and
     * then calls_running() sees this call in one or the other (repeat.c's check
     * that no other call comes between a launch and cudump's kernel after it). */
    if (!waits)
        atomic_fetch_add_explicit(&calls_in_progress, 1, memory_order_seq_cst);
    atomic_fetch_add_explicit(&calls_begun_count, 1, memory_order_seq_cst);
    /* Counted first, then the fence looked at (calls_fence does the two the other
     * way round): either the launch behind the fence sees this call, or this call
     * sees the fence and reaches the driver only after that launch has. */
    if (!waits && __builtin_expect(atomic_load_explicit(&calls_fenced, memory_order_seq_cst), 0))
        calls_fence_wait();
}

static inline void calls_leave(bool waits)
{
    if (waits)
        atomic_fetch_add_explicit(&calls_begun_count, 1, memory_order_seq_cst);
    else
        atomic_fetch_sub_explicit(&calls_in_progress, 1, memory_order_seq_cst);
}

/* Calls begun so far. */
static inline unsigned long long calls_begun(void)
{
    return atomic_load_explicit(&calls_begun_count, memory_order_seq_cst);
}

/* Calls that may put work on a stream, in progress now (the caller's own included). */
static inline int calls_running(void)
{
    return atomic_load_explicit(&calls_in_progress, memory_order_seq_cst);
}

/* Before a launch of cudump's kernel that must come right after the program's
 * launch on its stream: true if no call has begun since `begun` was read, and
 * then, until calls_unfence(), a call of the program's that may put work on a
 * stream and begins meanwhile waits before it reaches the driver, so that it
 * cannot come between (a call that read the count just before could otherwise
 * reach the stream first, while this thread is on its way into the driver). */
static inline bool calls_fence(unsigned long long begun)
{
    atomic_fetch_add_explicit(&calls_fenced, 1, memory_order_seq_cst);
    if (atomic_load_explicit(&calls_begun_count, memory_order_seq_cst) == begun)
        return true;
    atomic_fetch_sub_explicit(&calls_fenced, 1, memory_order_release);
    return false;
}

/* The launch behind the fence is on the stream. */
static inline void calls_unfence(void)
{
    atomic_fetch_sub_explicit(&calls_fenced, 1, memory_order_release);
}

/* The shim itself changed device memory (a write at a stop): as if a call had begun. */
static inline void calls_touch(void)
{
    atomic_fetch_add_explicit(&calls_begun_count, 1, memory_order_seq_cst);
}

/* A forked child has one thread, in none of the parent's calls but the one it forked in. */
void calls_reset_after_fork(void);

#endif
