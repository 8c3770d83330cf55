/* Plans the shim repeats on its own (PLAN_REPEAT), made through the result
 * ring (repeat.c). */
#ifndef CUDUMP_REPEAT_H
#define CUDUMP_REPEAT_H

#include "ahead.h"
#include "launchinfo.h"

struct func_entry;
struct repeat_plan;

/* Launches with more parameter bytes are always asked about: CUDA's limit is
 * 32,764 (a multi-tensor kernel's metadata takes most of it). */
enum { REPEAT_MAX_BYTES = 32768 };

/* A launch being made with a repeated plan: this strategy's own state. */
struct repeat_run {
    struct repeat_plan *plan;
    struct proto_result_slot *slot;     /* its slot of the result ring */
    uint64_t slot_pos;
    bool gated;                         /* its scans not waited for (gate.c, watch.c) */
    uint64_t context;                   /* the plans of the launches in a row up to it */
    unsigned long long begun;           /* calls_begun() before the launch was made, */
    bool alone;                         /* its call then the only one in progress */
};

/* The plan kept for a launch of e with these parameter bytes, if it still holds. */
struct repeat_plan *repeat_find(const struct func_entry *e, const unsigned char *bytes,
                                size_t n, uint32_t gen);
/* Keeps the plan just accepted (plan.c) if it may be repeated (digests and
 * scans only), keyed by the launch's parameter bytes; returns it, or NULL if
 * it could not be kept. */
struct repeat_plan *repeat_keep(const struct launch_info *li, const unsigned char *key,
                                size_t nkey, uint32_t gen, unsigned long long epoch,
                                unsigned long long removals, uint32_t id, bool gate);
unsigned repeat_copies(const struct repeat_plan *p);
/* Its copies (repeat_copies of them). */
const struct proto_copy *repeat_plan_copies(const struct repeat_plan *p);
/* Takes a result ring slot for the launch and runs the plan's "before" tools;
 * false if the ring has no room (ask the controller instead), after waiting a
 * while for the controller to make some if `wait`. Scans ahead taken from
 * ahead.h (`a`, or NULL) are consumed (*consumed): where they were made for
 * this launch their slot is taken instead and the "before" tools are not made
 * again, else they are dropped. */
bool repeat_start(struct repeat_run *run, const struct launch_info *li, struct repeat_plan *p,
                  bool wait, const struct ahead *a, bool *consumed);
/* Whether scans ahead `a` were made for a launch of plan p (NULL: none). */
bool repeat_ahead_for(const struct repeat_plan *p, const struct ahead *a);
/* Voids scans ahead taken and not used, and counts them against the plan that made them. */
void repeat_ahead_drop(const struct ahead *a);
/* After the launch: runs the "after" tools and hands the slot to the ring's
 * reader. A launch whose scan found new non-finite values is reported at once
 * (MSG_REPEAT); returns whether the answer asks for follow-up copies (now the
 * plan's, plan.c) or to hold the launch (*flags). */
bool repeat_finish(struct repeat_run *run, const struct launch_info *li, CUresult launch_rc,
                   uint32_t *flags);
void repeat_reset_after_fork(void);

#endif
