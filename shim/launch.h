/* The launch pipeline (launch.c): every wanted kernel launch passes through
 * launch_run; the fast path of one nobody wants is inline here. */
#ifndef CUDUMP_LAUNCH_H
#define CUDUMP_LAUNCH_H

#include "channel.h"
#include "functab.h"
#include "launchinfo.h"
#include "stream.h"

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
        stream_capturing(stream, ptsz)) {
        atomic_fetch_add_explicit(&shim_stats.captured, 1, memory_order_relaxed);
        counts_add_process(false);
        return;
    }
    atomic_fetch_add_explicit(&e->launches, 1, memory_order_relaxed);
    counts_add_func(e->id, false, 1);
}

/* A wanted launch (li filled in from the launch call: function, wants,
 * shape, stream, parameters, variant): numbers it, does what the controller
 * plans around `call(arg)`, which makes the launch itself, and returns what
 * that returned. With the flight recorder on, every launch of a known
 * function comes here (wants 0: only recorded, flight.c). */
CUresult launch_run(struct launch_info *li, CUresult (*call)(void *), void *arg);

#endif
