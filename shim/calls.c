/* The program's wrapped driver calls, counted (calls.h). */
#include "calls.h"

_Atomic unsigned long long calls_begun_count;
_Atomic int calls_in_progress;

void calls_reset_after_fork(void)
{
    /* fork() is not a wrapped call: the forking thread is in none. */
    atomic_store(&calls_in_progress, 0);
    atomic_fetch_add(&calls_begun_count, 1);
}
