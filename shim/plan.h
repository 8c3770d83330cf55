/* What the controller plans for a launch (plan.c): MSG_BEGIN and its answer,
 * the copies of the plan, and the reports that follow them (MSG_PIECE,
 * MSG_END, MSG_REPEAT). Under the staging lock, one launch at a time. */
#ifndef CUDUMP_PLAN_H
#define CUDUMP_PLAN_H

#include "channel.h"
#include "launchinfo.h"

/* Counts the launch for its function's counted rules (not a captured one: its
 * graph's launches count instead); with WANT_COUNTED, drops WANT_SNAPSHOT from
 * li->wants unless one of them takes this launch. */
void plan_select(struct launch_info *li);

/* One copy of the plan, and how it went. */
struct plan_copy {
    struct proto_copy c;
    CUresult rc;
};
/* The copies of the plan (under the staging lock), and how many. */
struct plan_copy *plan_copies(unsigned *n);
/* Forgets them. */
void plan_clear(void);
/* The keys of the plan last accepted (PLAN_REPEAT). */
const struct proto_key *plan_keys(unsigned *n);

/* Sends MSG_BEGIN for the launch and takes the answer's copies after the
 * `base` copies already planned (graph nodes append theirs); false, with no
 * copies added, if none came or it was refused. *flags: the plan's flags,
 * *id (if not NULL) its number. */
bool plan_begin(const struct launch_info *li, unsigned base, uint32_t *flags, uint32_t *id);
/* Whether the last plan refused was refused for want of room: its copies and the `base`
 * before them are more than PROTO_MAX_COPIES (a graph replay's later kernel nodes). */
bool plan_lacked_room(void);
/* MSG_BEGIN that asks only whether to hold (a graph's kernel node). */
bool plan_ask_stop(const struct launch_info *li);
/* Sends m (MSG_REPEAT), frees it, and takes the MSG_PLAN answer as the copies. */
bool plan_request(struct msg *m, uint32_t *flags);
/* Takes the answer to MSG_END or MSG_REPEAT: copies to make now that the
 * launch has run, and whether to hold it. Returns whether there are either. */
bool plan_follow_ups(bool ok, uint32_t *flags);
/* Reports the copies (MSG_END) and forgets them; the controller answers with
 * follow-up copies and PLAN_HALT to hold the launch now that it has run.
 * Returns whether it asked for either; the follow-ups are then the copies. */
bool plan_report_end(uint64_t seq, CUresult launch_rc, CUresult sync_rc, uint32_t *flags);
/* Hands one piece of a streamed copy over (MSG_PIECE) and waits until it is taken;
 * false if the controller is gone. */
bool plan_send_piece(uint64_t seq, unsigned index, CUresult rc);
/* Reports copies made elsewhere (the drain's MSG_END) and waits for the
 * answer, which is not used. */
void plan_send_end(uint64_t seq, CUresult launch_rc, CUresult sync_rc,
                   const struct proto_copy *const *cs, const int32_t *rcs, unsigned n);
/* MSG_END of a launch whose copies lie in the write-behind area (number, and
 * where each lies): sent, not answered. False if it could not be sent. */
bool plan_send_behind(uint64_t seq, CUresult launch_rc, CUresult sync_rc,
                      const struct proto_copy *const *cs, const int32_t *rcs, unsigned n,
                      uint64_t number, const uint64_t *offsets);
/* The launch's parameter bytes, one after the other: what a repeated plan is
 * kept by. False if the launch gave none or they do not fit in `cap`. */
bool plan_param_key(const struct launch_info *li, unsigned char *key, size_t cap, size_t *n);

#endif
