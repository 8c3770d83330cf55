/* The watcher: a thread of the shim's own that serves held gates (watch.c). */
#ifndef CUDUMP_WATCH_H
#define CUDUMP_WATCH_H

#include "ctxlife.h"
#include "shim.h"

/* Whether a launch on the device may be gated now (under the staging lock):
 * the watcher runs, and the device has no watchdog that would end a hold. */
bool watch_room(int device);
/* Under the staging lock, before a launch: serves the held gates if the
 * newest gated launch is held (the GPU has caught up with it: its stream
 * would make the launch wait). One look, so that a launch pays next to nothing. */
void watch_serve_newest(void);
/* Under the staging lock, before a launch on `stream` this thread then waits
 * for on the GPU (a graph's, with copy nodes): serves held launches on this
 * thread, which has the lock the watcher would need, until the gated launches
 * that stream might wait behind are settled. Otherwise the wait would let a
 * launch held before it go without its copies (gate_wait_event). Gives up
 * after a bound (those launches are not waited for again), and the wait then
 * lets them go as before. Before any plan is made: serving one uses the plan
 * buffers. */
void watch_settle_here(CUstream stream, int ptsz);
/* A context destroyed (its key, taken before): its side stream went with it. */
void watch_forget(const struct ctx_key *gone);
void watch_reset_after_fork(void);

#endif
