/*
 * cudump's kernel after a launch, launched by a thread of the shim while the
 * program goes on (handoff.c).
 */
#ifndef CUDUMP_HANDOFF_H
#define CUDUMP_HANDOFF_H

#include <stdatomic.h>

#include "protocol.h"
#include "shim.h"
#include "tooljob.h"
#include "toollaunch.h"

/* Launches handed over, and launches made, process-wide (they order every
 * thread's calls: handoff.c). Read by handoff_fence, inline, in every wrapped call. */
extern _Atomic unsigned handoff_posted, handoff_made;

/* Waits until the launch handed over last has been made. */
void handoff_wait(void);

/* At the start of every wrapped call of the program but those that work on
 * the host alone (interpose.c): whatever it does next reaches the driver after
 * cudump's kernel. Two loads when nothing is handed over. */
static inline void handoff_fence(void)
{
    if (__builtin_expect(atomic_load_explicit(&handoff_posted, memory_order_relaxed) !=
                             atomic_load_explicit(&handoff_made, memory_order_acquire),
                         0))
        handoff_wait();
}

/* Hands the launch of cudump's kernel over `jobs` (grid blocks of TOOL_THREADS,
 * on `stream`, in `ctx`, whose function is fn; made by `launcher`) to the
 * launcher thread, and
 * returns at once; a launch that fails there is written into the k results (at
 * most 2 * TOOL_JOBS: the jobs' own and their twins')
 * (their rc), and the gate, if given, is set to GATE_NONE, as where the
 * launching thread would have seen the failure. Returns false, having done
 * nothing, where it is not to be handed over (the controller did not ask for
 * it: --hand-off; or the launcher was found slower here, handtune.h) or cannot
 * be (no launcher thread): the caller launches it itself. */
bool handoff_launch(const struct tool_launcher *launcher, CUcontext ctx, CUfunction fn,
                    unsigned grid, CUstream stream, const struct tool_jobs *jobs,
                    struct proto_tool_result *const *results, unsigned k, uint32_t *gate);

/* A forked child has no launcher thread, and nothing of the parent's is handed over. */
void handoff_reset_after_fork(void);

#endif
