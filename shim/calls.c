/* The program's wrapped driver calls, counted (calls.h). */
#include <sched.h>

#include "calls.h"
#include "util.h"

_Atomic unsigned long long calls_begun_count;
_Atomic int calls_in_progress;
_Atomic int calls_fenced;

/* A launch takes microseconds: the wait is bounded all the same (the program
 * comes first), and a call that gives up is only one that may come between. */
enum { FENCE_WAIT_NS = 1000000000 };

void calls_fence_wait(void)
{
    uint64_t until = monotonic_ns() + FENCE_WAIT_NS;
    while (atomic_load_explicit(&calls_fenced, memory_order_acquire) && monotonic_ns() < until)
        sched_yield();
}

void calls_reset_after_fork(void)
{
    /* fork() is not a wrapped call: the forking thread is in none. */
    atomic_store(&calls_in_progress, 0);
    atomic_store(&calls_fenced, 0); /* nothing of the parent's is being launched here */
    atomic_fetch_add(&calls_begun_count, 1);
}
