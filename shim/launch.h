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
    const char *api;
    /* filled in by launch_before */
    unsigned long long seq;
    unsigned long long occurrence;
    bool captured;
    bool snapshot_armed;
};

bool launch_stream_capturing(CUstream stream, int ptsz);

/* Finds the function's entry and what the controller wants of it. With no
 * controller connected, returns NULL and wants 0: a pure pass-through. */
static inline struct func_entry *launch_lookup(CUfunction f, unsigned *wants)
{
    *wants = 0;
    if (!channel_up())
        return NULL;
    struct func_entry *e = functab_get((uintptr_t)f);
    if (!e)
        return NULL;
    if (__builtin_expect(atomic_load_explicit(&e->state, memory_order_acquire) != FN_READY, 0))
        functab_register(e);
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
        return;
    }
    atomic_fetch_add_explicit(&e->launches, 1, memory_order_relaxed);
}

void launch_before(struct launch_info *li);
void launch_after(struct launch_info *li, CUresult rc);
void launch_graph(CUgraphExec exec, CUstream stream, int ptsz);
void launch_reset_after_fork(void);

#endif
