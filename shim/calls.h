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

static inline void calls_enter(bool waits)
{
    /* In progress before it counts as begun: a thread that reads calls_begun() and
     * then calls_running() sees this call in one or the other (repeat.c's check
     * that no other call comes between a launch and cudump's kernel after it). */
    if (!waits)
        atomic_fetch_add_explicit(&calls_in_progress, 1, memory_order_seq_cst);
    atomic_fetch_add_explicit(&calls_begun_count, 1, memory_order_seq_cst);
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

/* The shim itself changed device memory (a write at a stop): as if a call had begun. */
static inline void calls_touch(void)
{
    atomic_fetch_add_explicit(&calls_begun_count, 1, memory_order_seq_cst);
}

/* A forked child has one thread, in none of the parent's calls but the one it forked in. */
void calls_reset_after_fork(void);

#endif
