/*
 * Scans ahead: the next launch's "before" tools made by the launch of the
 * "after" tools of the one before it (repeat.c decides; this file keeps the
 * one pending, ahead.c).
 *
 * A launch made with a kept plan costs two launches of cudump's kernel: the
 * scans (or digests) of its buffers before it, and those after it. Most of a
 * model's launches follow one another in the same order at every step, with
 * nothing between them. So the plan of the launch that came next last time is
 * remembered (after this plan, and after the plans of the launches made in a
 * row up to this one: repeat.c), and when this launch's "after" tools are
 * made, that plan's "before" tools go in the same launch of cudump's kernel,
 * into a result slot reserved for the next launch: one launch of cudump's
 * kernel per launch of the program instead of two. They read the buffers as
 * the next launch will find them only if nothing happened in between: the next
 * launch uses them if it is a launch of that plan, on the same stream and
 * thread, and no other wrapped call began since (calls.h; calls that work on
 * the host alone are not counted), none was in progress when they were made,
 * and no stop was served. Otherwise they are void: the slot goes to the ring's
 * reader marked to be skipped (RESULT_TAKEN) once its results are in, and the
 * launch scans its buffers itself, as without scans ahead.
 *
 * At most one is pending per process. Any counted call other than a kernel
 * launch voids it at once (ahead_void), and so does a wait for gated launches
 * (gate_settle), so that the ring's reader does not wait at its slot while the
 * program does something else.
 */
#ifndef CUDUMP_AHEAD_H
#define CUDUMP_AHEAD_H

#include "launchinfo.h"

/* A kept plan, named so that a plan replaced since is not taken for it. */
struct plan_ref {
    const struct func_entry *e;
    unsigned way;
    uint64_t serial;            /* 0: none */
};

struct ahead {
    struct proto_result_slot *slot;     /* reserved for the next launch */
    uint64_t pos;                       /* its position in the ring */
    uint64_t serial;                    /* the plan it expects (repeat.c's serial) */
    struct plan_ref predictor;          /* the plan of the launch that made it */
    CUstream stream;
    int ptsz;
    int device;
    uint64_t tid;
    CUcontext ctx;                      /* of the stream (stream 0 is each context's own) */
    unsigned long long begun;           /* calls_begun() before it was made */
};

/* Makes `a` the pending one (there is none: the launch that makes it took any). */
void ahead_put(const struct ahead *a);
/* Takes the pending one: true with *a, which the caller then uses or drops. */
bool ahead_take(struct ahead *a);
/* Voids a taken one: its slot is handed to the ring's reader to skip. */
void ahead_drop(const struct ahead *a);
/* Voids the pending one, if any (any thread, any time; one load when none). */
void ahead_void(void);
/* The predictor of the last one voided by ahead_void, taken: true with *p. */
bool ahead_missed(struct plan_ref *p);
void ahead_reset_after_fork(void);

#endif
