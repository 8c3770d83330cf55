/*
 * The launch pipeline: what happens to a kernel launch the controller wants.
 *
 * It reads top to bottom, in launch_run and run_wanted:
 *
 *   look up      the hook's launch_lookup (launch.h): the function's entry and
 *                what is wanted of it, cached per control generation;
 *   number       sequence number, occurrence, capture state, counted rules;
 *   decide       under the staging lock: a repeated plan the shim keeps, or
 *                the controller's plan for this launch (MSG_BEGIN), and with
 *                it the strategy that makes its copies; a hold first if asked;
 *   copy before  the strategy's copies ordered before the launch;
 *   launch       the program's own call, unchanged;
 *   copy after   the strategy's copies after it, waited for and reported;
 *   report       the trace event, MSG_END, a hold after the launch (`step`).
 *
 * The ways of copying are strategies behind one interface of two calls,
 * strategy_before and strategy_after (a switch on enum copier below); each
 * lives in its own file and never calls back into this one:
 *
 *   COPIER_PLAIN   plain.c   copies and cudump's kernel on the launch stream,
 *                            into staging; the launching thread waits;
 *   COPIER_DEFER   drain.c   device-to-device into scratch, handed over by
 *                            the drain thread while the program goes on;
 *   COPIER_REPEAT  repeat.c  a plan the shim repeats without asking, results
 *                            through the result ring, gated scans (gate.c,
 *                            watch.c) where nobody waits;
 *   COPIER_NONE              nothing to copy (a hold only).
 *
 * Graph launches (cuGraphLaunch) take graph.c's path: copies by copy nodes
 * in a clone of the graph. Nothing is done on a capturing stream (copies
 * would invalidate the capture or land in the graph, and a captured launch
 * does not run), and the shim's own driver calls run in the RELAXED capture
 * mode. The staging lock is taken and released inside staging_locked: no
 * lock outlives a function.
 */
#include <unistd.h>

#include "drain.h"
#include "flight.h"
#include "graph.h"
#include "pysource.h"
#include "scope.h"
#include "gate.h"
#include "launch.h"
#include "modules.h"
#include "plain.h"
#include "plan.h"
#include "repeat.h"
#include "staging.h"
#include "stop.h"
#include "trace.h"
#include "watch.h"
#include "window.h"
#include "alloctab.h"

/* ---- look up ---------------------------------------------------------------- */

/* While the controller holds another launch (all-stop), wait here. The
 * controller clears `hold` when the user goes on; if it dies meanwhile the
 * wait ends too, so the target never hangs because of cudump. */
static void hold_wait(void)
{
    const volatile struct proto_control *ctl;
    while ((ctl = channel_control()) != NULL && ctl->hold) {
        if (!channel_controller_alive())
            return;
        usleep(500);
    }
}

struct func_entry *launch_slow(struct func_entry *e, unsigned *wants, bool *interrupted)
{
    if (atomic_load_explicit(&e->state, memory_order_acquire) != FN_READY) {
        /* Its first launch may load it, waiting for the context (gate.h). */
        gate_settle();
        functab_register(e);
    }
    hold_wait();
    const volatile struct proto_control *ctl = channel_control();
    if (ctl && atomic_load_explicit(&e->gen, memory_order_relaxed) != ctl->generation)
        functab_refresh(e);
    *wants = atomic_load_explicit(&e->wants, memory_order_relaxed);
    /* Ctrl-C at the prompt: the first launch of any kernel to see it stops. */
    volatile struct proto_control *rw = channel_control_rw();
    if (rw && rw->interrupt && __atomic_exchange_n(&rw->interrupt, 0, __ATOMIC_ACQ_REL)) {
        *wants |= WANT_STOP;
        *interrupted = true;
    }
    return e;
}

/* ---- the strategies ------------------------------------------------------------ */

enum copier { COPIER_NONE, COPIER_PLAIN, COPIER_DEFER, COPIER_REPEAT };

/* One wanted launch on its way through the pipeline. */
struct launch_run {
    struct launch_info *li;
    CUresult (*call)(void *);   /* the launch itself */
    void *arg;
    CUresult rc;                /* what it returned */
    bool launched;              /* made under the staging lock (copies after it) */
    enum copier how;            /* the strategy that makes its copies */
    struct repeat_plan *plan;   /* COPIER_REPEAT: the plan, and whether to wait for room */
    bool wait;
    struct repeat_run repeat;   /* COPIER_REPEAT: its own state */
    struct ahead ahead;         /* scans ahead taken for this launch (ahead.h), */
    bool ahead_taken;           /* until used or dropped */
    bool step;                  /* hold again once the kernel has run */
    bool windowed;              /* marked in the open window of --watch-nan (window.h) */
};

/* Copies before the launch, the way `how` makes them. Returns false (nothing
 * done) where the strategy cannot take the launch now. */
static bool strategy_before(struct launch_run *r, enum copier how)
{
    switch (how) {
    case COPIER_REPEAT: {
        bool consumed;
        bool started = repeat_start(&r->repeat, r->li, r->plan, r->wait,
                                    r->ahead_taken ? &r->ahead : NULL, &consumed);
        if (consumed)
            r->ahead_taken = false;
        if (!started)
            return false;
        break;
    }
    case COPIER_DEFER: {
        static const struct proto_copy *cs[PROTO_MAX_COPIES]; /* under the staging lock */
        unsigned n;
        const struct plan_copy *copies = plan_copies(&n);
        for (unsigned i = 0; i < n; i++)
            cs[i] = &copies[i].c;
        if (!drain_start(r->li, cs, n))
            return false;
        break;
    }
    case COPIER_PLAIN:
        plain_before(r->li);
        break;
    case COPIER_NONE:
        break;
    }
    r->how = how;
    return true;
}

/* Copies after the launch, waited for and reported as the strategy does.
 * Returns whether the controller asked to hold the launch now that it has run. */
static bool strategy_after(struct launch_run *r, CUresult launch_rc)
{
    switch (r->how) {
    case COPIER_DEFER:
        drain_finish(r->li, launch_rc); /* the launch goes on; the drain reports it */
        return plain_after(r->li, launch_rc, false, 0);
    case COPIER_REPEAT: {
        /* A repeated plan's launch reports nothing unless a scan found something. */
        uint32_t flags;
        bool more = repeat_finish(&r->repeat, r->li, launch_rc, &flags);
        bool halt = plain_after(r->li, launch_rc, more, 1);
        return halt || (flags & PLAN_HALT);
    }
    case COPIER_PLAIN:
    case COPIER_NONE:
        break;
    }
    return plain_after(r->li, launch_rc, true, 0);
}

/* ---- the pipeline -------------------------------------------------------------- */

/* Numbers the launch and counts it for its counted rules. */
static void number(struct launch_info *li)
{
    li->seq = atomic_fetch_add(&shim_stats.seq, 1) + 1;
    li->captured = stream_capturing(li->stream, li->ptsz);
    if (li->captured) {
        atomic_fetch_add(&shim_stats.captured, 1);
        counts_add_process(false);
    } else {
        li->occurrence = atomic_fetch_add(&li->e->launches, 1) + 1;
    }
    li->device = stream_device();
    li->tid = stream_tid();
    scope_stamp(&li->scope, &li->step);
    li->source = pysource_here();
    plan_select(li);
}

/* Decides how the launch's copies are made and makes those before it; a
 * hold before the launch if the plan asks. Returns whether anything remains
 * for after the launch (then it is made under the staging lock). */
static bool decide_how(struct launch_run *r)
{
    struct launch_info *li = r->li;
    plan_clear();
    /* A launch the controller only wants digests or scans of may be one it
     * planned before, byte for byte: then it is not asked again. */
    static unsigned char key[REPEAT_MAX_BYTES]; /* under the staging lock: off the program's stack */
    size_t nkey = 0;
    const volatile struct proto_control *ctl = channel_control();
    uint32_t gen = ctl ? ctl->generation : 0;
    unsigned long long epoch = alloctab_epoch(), removals = alloctab_removals();
    bool keyed = !(li->wants & WANT_STOP) && !li->interrupted && !li->graph &&
                 plan_param_key(li, key, sizeof key, &nkey);
    struct repeat_plan *known = keyed ? repeat_find(li->e, key, nkey, gen) : NULL;
    if (r->ahead_taken && !repeat_ahead_for(known, &r->ahead)) {
        repeat_ahead_drop(&r->ahead); /* before the controller is asked: not this launch's */
        r->ahead_taken = false;
    }
    if (known) {
        if (!repeat_copies(known))
            return false; /* nothing is wanted of this launch */
        /* --watch-nan: its buffers marked in the open window, scanned at its end
         * (window.h); the launch is made as it is, with nothing of cudump's beside it. */
        if (window_on() && window_mark(li, repeat_plan_copies(known), repeat_copies(known))) {
            r->windowed = true;
            return false;
        }
        r->plan = known;
        r->wait = true;
        if (strategy_before(r, COPIER_REPEAT))
            return true;
    }
    bool ring_full = known != NULL; /* a plan was found, and no room in the ring for it */
    if (li->wants & WANT_CAPTURE)
        modules_send(li->e);
    uint32_t flags, id;
    bool ok = plan_begin(li, 0, &flags, &id);
    unsigned ncopies;
    plan_copies(&ncopies);
    struct repeat_plan *kept = NULL;
    if (ok && keyed && (flags & PLAN_REPEAT) && !(flags & PLAN_HALT))
        kept = repeat_keep(li, key, nkey, gen, epoch, removals, id, flags & PLAN_GATE);
    /* This launch is made with the plan just kept, as the launches after it
     * will be: its results come back through the ring, and the program does
     * not wait for the stream to report them (only scans that find something
     * are waited for, as ever). Not when the ring is full: the copies are
     * accepted, and made the ordinary way without waiting for room. */
    if (kept && ncopies && !ring_full) {
        r->plan = kept;
        r->wait = false;
        if (strategy_before(r, COPIER_REPEAT)) {
            r->repeat.slot->flags |= RESULT_ASKED;
            plan_clear();
            return true;
        }
    }
    if (ok && (flags & PLAN_HALT))
        r->step = stop_serve(li, PHASE_BEFORE, CUDA_SUCCESS, NULL) == RESUME_STEP;
    if (!ok || (!ncopies && !r->step))
        return false;
    if (!ncopies)
        return strategy_before(r, COPIER_NONE);
    if ((flags & PLAN_DEFER) && !r->step && strategy_before(r, COPIER_DEFER))
        return true;
    return strategy_before(r, COPIER_PLAIN);
}

/* decide_how, with the scans ahead made for this launch (ahead.h) at hand:
 * the repeated plan's strategy uses them if they are its own; otherwise they
 * are void. */
static bool decide(struct launch_run *r)
{
    r->ahead_taken = ahead_take(&r->ahead);
    bool armed = decide_how(r);
    if (r->ahead_taken)
        repeat_ahead_drop(&r->ahead);
    r->ahead_taken = false;
    return armed;
}

/* The launch has been made: recorded as such, counted, and traced. */
static void launched(const struct launch_info *li, CUresult rc)
{
    flight_end(li, rc);
    if (li->captured && rc == CUDA_SUCCESS && li->scope)
        graph_captured(li);
    if (rc != CUDA_SUCCESS && !li->captured)
        atomic_fetch_sub(&li->e->launches, 1);
    else if (!li->captured)
        counts_add_func(li->e->id, false, 1); /* once it has run: not a launch killed held */
    if (li->wants & WANT_TRACE)
        trace_launch(li, rc);
}

/* Under the staging lock: decide, copy before, launch, copy after, report. */
static void run_wanted(void *arg)
{
    struct launch_run *r = arg;
    struct launch_info *li = r->li;
    shim_busy++;
    drain_wait_idle(); /* the staging area is the drain's until then */
    watch_serve_newest();
    CUstreamCaptureMode mode = capture_relax();
    bool armed = decide(r);
    if (!armed) {
        capture_restore(mode);
        shim_busy--;
        return; /* the launch is made once the lock is released */
    }
    shim_busy--;
    r->rc = r->call(r->arg);
    r->launched = true;
    shim_busy++;
    launched(li, r->rc);
    if (strategy_after(r, r->rc))
        r->step = true;
    /* After MSG_END: the staging area is free again for the stop's reads. */
    if (r->step)
        stop_serve(li, PHASE_AFTER, r->rc, NULL);
    capture_restore(mode);
    shim_busy--;
}

/* A launch nobody wants anything of, made while the flight recorder is on:
 * numbered as cheaply as the fast path counts one (the capture state asked of
 * the driver only while something captures), recorded, made, counted. */
static CUresult recorded(struct launch_info *li, CUresult (*call)(void *), void *arg)
{
    shim_busy++;
    li->seq = atomic_fetch_add_explicit(&shim_stats.seq, 1, memory_order_relaxed) + 1;
    li->captured =
        atomic_load_explicit(&shim_stats.captures_active, memory_order_relaxed) > 0 &&
        stream_capturing(li->stream, li->ptsz);
    li->device = -1;
    li->tid = stream_tid();
    scope_stamp(&li->scope, &li->step);
    li->source = pysource_here();
    flight_begin(li);
    shim_busy--;
    CUresult rc = call(arg);
    shim_busy++;
    flight_end(li, rc);
    if (li->captured && rc == CUDA_SUCCESS && li->scope)
        graph_captured(li);
    if (rc == CUDA_SUCCESS && li->captured) {
        atomic_fetch_add_explicit(&shim_stats.captured, 1, memory_order_relaxed);
        counts_add_process(false);
    } else if (rc == CUDA_SUCCESS) {
        atomic_fetch_add_explicit(&li->e->launches, 1, memory_order_relaxed);
        counts_add_func(li->e->id, false, 1);
    }
    shim_busy--;
    return rc;
}

CUresult launch_run(struct launch_info *li, CUresult (*call)(void *), void *arg)
{
    /* Scans ahead are used or dropped in decide(): a launch that does not get there
     * voids them now, so that the ring's reader does not wait at their slot. */
    if (!(li->wants & (WANT_SNAPSHOT | WANT_STOP)))
        ahead_void();
    if (!li->wants)
        return recorded(li, call, arg);
    struct launch_run r = {.li = li, .call = call, .arg = arg, .how = COPIER_NONE};
    shim_busy++;
    number(li);
    flight_begin(li);
    shim_busy--;
    /* Copies would invalidate a capture or land in the graph, and a captured
     * launch does not run: while a stream captures, launches are only recorded. */
    if ((li->wants & (WANT_SNAPSHOT | WANT_STOP)) && !li->captured)
        staging_locked(0, run_wanted, &r);
    else if (li->captured)
        ahead_void();
    if (!r.launched) {
        r.rc = call(arg);
        shim_busy++;
        launched(li, r.rc);
        if (r.windowed)
            window_after_launch();
        shim_busy--;
    }
    return r.rc;
}
