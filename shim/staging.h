/* The staging area and the result ring in shared memory, and the lock that
 * makes the staging area one launch's at a time (staging.c). */
#ifndef CUDUMP_STAGING_H
#define CUDUMP_STAGING_H

#include "ctxlife.h"
#include "shim.h"

/* Runs fn(arg) holding the staging lock: one wanted launch at a time per
 * process, since they share the staging area (and the plan buffers of
 * plan.c). Waits for it for good with ms 0, else up to ms milliseconds;
 * returns false (fn not run) if the lock could not be had in time. */
bool staging_locked(unsigned ms, void (*fn)(void *), void *arg);
/* The staging area (mapped and pinned on first use); NULL if unavailable. */
char *staging_area(size_t *size);
/* The result ring (pinned on first use); NULL and 0 slots without one. */
struct proto_result_slot *results_ring(uint32_t *slots);
/* Before cudump's kernel is launched: where the context that registered the
 * two areas ended since, unseen (ctxlife.h), they are registered again now. */
void staging_follow_contexts(void);
/* A context to be destroyed (its key): it is no longer asked for its id. */
void staging_context_ends(const struct ctx_key *gone);
void staging_reset_after_fork(void);

#endif
