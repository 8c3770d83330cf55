/* Deferred copies through scratch memory (PLAN_DEFER), drained by a thread of
 * the shim's own (drain.c). */
#ifndef CUDUMP_DRAIN_H
#define CUDUMP_DRAIN_H

#include "launchinfo.h"

/* Waits until no deferred launch is being drained: the staging area is free. */
void drain_wait_idle(void);
/* The program has waited for the GPU: the deferred launch's bytes reach the
 * controller before it goes on, so that a crash right after loses nothing.
 * Bounded (and no wait once the controller is gone); one load when idle. */
void drain_settle(void);
/* Takes scratch memory for a PLAN_DEFER plan's n plain copies and copies the "before"
 * buffers into it on the launch stream; false (nothing done) if it cannot. */
bool drain_start(const struct launch_info *li, const struct proto_copy *const *copies, unsigned n);
/* Copies the "after" buffers into scratch and hands the launch to the drain thread. */
void drain_finish(const struct launch_info *li, CUresult launch_rc);
void drain_reset_after_fork(void);

#endif
