/*
 * Plans the shim repeats on its own (PLAN_REPEAT), and the result ring.
 *
 * A launch that only wants digests and scans costs, asked about, two round
 * trips to the controller and a wait for the GPU: far more than the launch.
 * Most launches of a training loop repeat one another byte for byte (the same
 * kernels over the same buffers, step after step), so the controller may mark
 * such a plan repeatable. The shim keeps it with the function, keyed by the
 * parameter bytes, and a later launch with the same bytes, under the same
 * control generation and allocation table, runs the same tool copies with no
 * message at all: the launch goes into a slot of the result ring, and cudump's
 * kernel writes each result, then its `done`, into that slot from the GPU.
 *
 * Scans are the exception: a launch that leaves NaN or Inf where there was
 * none is worth snapshotting as it left its buffers. With PLAN_GATE the
 * launch goes on at once, and cudump's kernel after it holds the stream on
 * the GPU when a scan finds something new; the watcher (watch.c) then has the launch
 * reported and its buffers copied before the stream moves on. Without
 * (--break-on-nan, which holds the launching thread, or where the watcher
 * cannot run) the shim waits for the results itself,
 * and if one shows a new non-finite value it reports the launch at once
 * (MSG_REPEAT), which the controller answers with the copies to make, as it
 * answers MSG_END.
 *
 * Everything here runs under the staging lock, one wanted launch at a time.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ahead.h"
#include "alloctab.h"
#include "calls.h"
#include "functab.h"
#include "gate.h"
#include "plan.h"
#include "repeat.h"
#include "staging.h"
#include "stream.h"
#include "tools.h"
#include "trace.h"
#include "watch.h"

enum { REPEAT_WAYS = PROTO_REPEAT_WAYS };

struct repeat_plan {
    unsigned lineage;           /* a forked child plans anew: its buffers are not these */
    uint32_t gen;               /* the control generation it was planned under */
    uint32_t id;                /* the controller's number for it */
    bool gate;                  /* PLAN_GATE: nobody waits for its scans */
    unsigned long long epoch;   /* the allocation table it was planned against */
    unsigned long long removals; /* and the table's removals then (alloctab_removals) */
    unsigned long long seen;    /* the table last found with none of the other words
                                 * pointing into it, when they were these bytes */
    unsigned long long checked; /* removals + 1 when its copies were last found inside
                                 * tracked allocations (tools.c); 0: not yet */
    bool tracked_before;        /* the launch in progress: so were its copies before it */
    size_t nbytes;
    unsigned char *bytes;       /* the parameter bytes, owned */
    unsigned nkeys;             /* 0: every byte counts */
    struct proto_key *keys;     /* owned */
    unsigned ncopies;
    struct proto_copy *copies;  /* owned: up to PROTO_MAX_REPEAT (a multi-tensor kernel's hundreds) */
    int *before;                /* owned: per copy, the scan of its buffer before the launch, or -1 */
    uint64_t serial;            /* this plan, among all plans ever kept (0: none) */
    unsigned nbefore;           /* its copies before the launch */
    bool plain_memory;          /* those all in plain device allocations: only then may they
                                 * be scanned ahead (ahead_of) */
    struct plan_ref next;       /* the plan of the launch that came right after its last one */
    unsigned misses;            /* scans ahead of `next` made in a row and not used */
    unsigned skipped;           /* launches since, while they are not tried (ahead.h) */
};

/* A function's plans. A model runs one kernel over many buffers in a forward
 * (BERT-base: one GEMM kernel over about a hundred sets of weights), and the
 * plans are replaced in turn, so a loop with more of them than ways would miss
 * every time: the ways grow by doubling, from a few, up to REPEAT_WAYS, before
 * any is replaced. */
enum { REPEAT_FIRST_WAYS = 8 };

struct repeat_cache {
    struct repeat_plan *way;    /* owned: `ways` of them */
    unsigned ways;
    unsigned next;              /* the way the next new plan takes or replaces */
    unsigned last;              /* the way last found: a loop's launches come in the order
                                 * their plans were stored, so the search starts after it */
};

static unsigned lineage;
static uint64_t serials; /* under the staging lock */

/* The last launch made with a kept plan (under the staging lock), as scans
 * ahead name theirs (its plan the predictor; no slot): the launch after it
 * learns that it came next (repeat_plan.next) when nothing came between them. */
static struct ahead last;
static bool last_alone;         /* no other call was in progress when its tools were made */
static uint64_t last_context;   /* its context (below; 0: none) */

/* A plan that recurs with other plans after it (a kernel over the same
 * buffers in every layer of a model: an activation, a residual add) would
 * guess wrong most times with only the plan that came after its last launch
 * (repeat_plan.next). So the plan that came next is also remembered for the
 * context of a launch: the serials of the plans of the launches made in a row
 * up to it (each right after the one before), at most CONTEXT_PLANS of them,
 * hashed. A layer's own weights then tell its launches apart. The table is
 * direct-mapped: a context whose entry was taken by another falls back on
 * repeat_plan.next, and whatever it names is checked as any guess is. */
enum { CONTEXT_PLANS = 8, CONTEXT_SLOTS = 4096 };

struct successor {
    uint64_t context;
    struct plan_ref next;
};

static struct successor *successors;    /* CONTEXT_SLOTS, made at the first need */
static uint64_t chain[CONTEXT_PLANS];   /* the serials of the launches in a row, newest last */
static unsigned chain_len;

/* This launch's plan joins the chain (a launch not right after the last starts
 * another); returns the chain's context. */
static uint64_t context_of(bool in_row, uint64_t serial)
{
    if (!in_row)
        chain_len = 0;
    if (chain_len == CONTEXT_PLANS)
        memmove(chain, chain + 1, sizeof chain - sizeof chain[0]);
    else
        chain_len++;
    chain[chain_len - 1] = serial;
    uint64_t h = chain_len;
    for (unsigned i = 0; i < chain_len; i++) {
        h = (h ^ chain[i]) * 0x9e3779b97f4a7c15ull;
        h ^= h >> 29;
    }
    return h | 1; /* never 0, which names none */
}

/* The entry a context maps to; NULL where the table could not be made (tried
 * once: without it the plans' own successors still serve). */
static struct successor *successor_slot(uint64_t context)
{
    static bool tried;
    if (!successors && !tried) {
        tried = true;
        successors = calloc(CONTEXT_SLOTS, sizeof *successors);
    }
    return successors ? &successors[(context >> 32) % CONTEXT_SLOTS] : NULL;
}

void repeat_reset_after_fork(void)
{
    lineage++;
    chain_len = 0;
    last_context = 0;
}

/* Whether the word at `at` lies in one of the keys, which are sorted by
 * offset; *k is where the search starts, and the words are asked about in
 * order, so a multi-tensor kernel's hundreds of keys cost one pass. */
static bool in_keys(const struct repeat_plan *p, size_t at, unsigned *k)
{
    while (*k < p->nkeys && (size_t)p->keys[*k].offset + p->keys[*k].size < at + 8)
        ++*k;
    return *k < p->nkeys && at >= p->keys[*k].offset;
}

static bool keys_match(const struct repeat_plan *p, const unsigned char *bytes)
{
    for (unsigned k = 0; k < p->nkeys; k++)
        if (memcmp(p->bytes + p->keys[k].offset, bytes + p->keys[k].offset, p->keys[k].size))
            return false;
    return true;
}

/* With keys, the other bytes may differ (a seed, a step count), but none of
 * their words may point into a tracked allocation: that would be a buffer the
 * plan does not know. Words are taken per parameter, as MSG_BEGIN takes them. */
static bool no_other_buffer(const struct func_entry *e, const struct repeat_plan *p,
                            const unsigned char *bytes)
{
    size_t at = 0;
    unsigned k = 0;
    for (int i = 0; i < e->nparams; i++) {
        for (size_t off = 0; off + 8 <= e->param_size[i]; off += 8) {
            CUdeviceptr v;
            struct alloc_info a;
            memcpy(&v, bytes + at + off, sizeof v);
            if (v && !in_keys(p, at + off, &k) && alloctab_find(v, &a))
                return false;
        }
        at += e->param_size[i];
    }
    return true;
}

/* Whether a kept plan still holds, whatever the bytes of the launch. A plan
 * kept by its pointer words holds until an allocation goes away: its extents
 * end where allocations end, and a word that comes to point into a new
 * allocation is caught by repeat_find (no_other_buffer). One kept by all its
 * bytes (rules with overrides) is planned again after any change to the table. */
static bool plan_holds(const struct repeat_plan *p, uint32_t gen, unsigned long long epoch,
                       unsigned long long removals)
{
    return p->bytes && p->gen == gen && p->lineage == lineage &&
           (p->nkeys ? p->removals == removals : p->epoch == epoch);
}

static struct plan_ref plan_ref(const struct func_entry *e, const struct repeat_plan *p)
{
    return (struct plan_ref){e, (unsigned)(p - e->repeats->way), p->serial};
}

/* The plan `r` names, if it is still kept (not replaced since). */
static struct repeat_plan *plan_at(const struct plan_ref *r)
{
    const struct repeat_cache *c = r->serial && r->e ? r->e->repeats : NULL;
    if (!c || r->way >= c->ways || c->way[r->way].serial != r->serial)
        return NULL;
    return &c->way[r->way];
}

struct repeat_plan *repeat_find(const struct func_entry *e, const unsigned char *bytes, size_t n,
                                uint32_t gen)
{
    struct repeat_cache *c = e->repeats;
    if (!c)
        return NULL;
    unsigned long long epoch = alloctab_epoch(), removals = alloctab_removals();
    for (unsigned k = 1; k <= c->ways; k++) {
        unsigned i = (c->last + k) % c->ways;
        struct repeat_plan *p = &c->way[i];
        if (p->nbytes != n || !plan_holds(p, gen, epoch, removals))
            continue;
        if (!p->nkeys ? memcmp(p->bytes, bytes, n) == 0 : keys_match(p, bytes)) {
            /* The other words are looked up again only when they or the table
             * changed: in a loop, neither does. */
            if (p->nkeys && (p->seen != epoch || memcmp(p->bytes, bytes, n) != 0)) {
                if (!no_other_buffer(e, p, bytes))
                    return NULL;
                memcpy(p->bytes, bytes, n); /* the keys are the same */
                p->seen = epoch;
            }
            c->last = i;
            return p;
        }
    }
    return NULL;
}

static bool same_buffer(const struct proto_copy *a, const struct proto_copy *b)
{
    return a->src == b->src && a->width == b->width && a->height == b->height &&
           a->pitch == b->pitch && a->flags == b->flags;
}

/* The scan of the same buffer before the launch, if the plan has one (found
 * once, when the plan is kept: a multi-tensor kernel has hundreds of copies). */
static int scan_before(const struct proto_copy *copies, unsigned n, const struct proto_copy *c)
{
    int found = -1;
    if (c->phase != PHASE_AFTER)
        return found;
    for (unsigned b = 0; b < n; b++)
        if (copies[b].phase == PHASE_BEFORE && same_buffer(&copies[b], c))
            found = (int)b;
    return found;
}

static int by_offset(const void *a, const void *b)
{
    uint32_t x = ((const struct proto_key *)a)->offset, y = ((const struct proto_key *)b)->offset;
    return (x > y) - (x < y);
}

static struct repeat_plan *repeat_store(struct func_entry *e, const unsigned char *bytes, size_t n,
                                 uint32_t gen, unsigned long long epoch,
                                 unsigned long long removals, uint32_t id, bool gate,
                                 const struct proto_copy *const *copies, unsigned ncopies,
                                 const struct proto_key *keys, unsigned nkeys)
{
    if (n > REPEAT_MAX_BYTES || ncopies > PROTO_MAX_REPEAT)
        return NULL;
    for (unsigned k = 0; k < nkeys; k++)
        if (keys[k].size > n || keys[k].offset > n - keys[k].size)
            return NULL; /* a key outside the bytes: not a plan to trust */
    if (!e->repeats && !(e->repeats = calloc(1, sizeof *e->repeats)))
        return NULL;
    struct repeat_cache *c = e->repeats;
    if (c->next == c->ways && c->ways < REPEAT_WAYS) {
        /* Every way holds a plan: twice as many, the new ones empty. */
        unsigned ways = c->ways ? 2 * c->ways : REPEAT_FIRST_WAYS;
        struct repeat_plan *grown = realloc(c->way, ways * sizeof *grown);
        if (grown) {
            memset(grown + c->ways, 0, (ways - c->ways) * sizeof *grown);
            c->way = grown;
            c->ways = ways;
        }
    }
    if (!c->ways)
        return NULL;
    if (c->next >= c->ways)
        c->next = 0;   /* at most REPEAT_WAYS (or memory ran out): the oldest is replaced */
    struct repeat_plan *p = &c->way[c->next++];
    unsigned char *owned = realloc(p->bytes, n ? n : 1);
    struct proto_key *owned_keys = realloc(p->keys, (nkeys ? nkeys : 1) * sizeof *keys);
    struct proto_copy *owned_copies =
        realloc(p->copies, (ncopies ? ncopies : 1) * sizeof *owned_copies);
    int *owned_before = realloc(p->before, (ncopies ? ncopies : 1) * sizeof *owned_before);
    if (!owned || !owned_keys || !owned_copies || !owned_before) {
        free(owned ? owned : p->bytes);
        free(owned_keys ? owned_keys : p->keys);
        free(owned_copies ? owned_copies : p->copies);
        free(owned_before ? owned_before : p->before);
        memset(p, 0, sizeof *p);
        return NULL;
    }
    memcpy(owned, bytes, n);
    memcpy(owned_keys, keys, nkeys * sizeof *keys);
    qsort(owned_keys, nkeys, sizeof *owned_keys, by_offset);
    for (unsigned i = 0; i < ncopies; i++)
        owned_copies[i] = *copies[i];
    for (unsigned i = 0; i < ncopies; i++)
        owned_before[i] = scan_before(owned_copies, ncopies, &owned_copies[i]);
    unsigned nbefore = 0;
    bool plain = true;
    for (unsigned i = 0; i < ncopies; i++) {
        struct alloc_info a;
        if (owned_copies[i].phase != PHASE_BEFORE)
            continue;
        nbefore++;
        plain = plain && alloctab_find(owned_copies[i].src, &a) &&
                (a.kind == AK_LINEAR || a.kind == AK_PITCHED);
    }
    *p = (struct repeat_plan){.serial = ++serials, .nbefore = nbefore, .plain_memory = plain,
                              .lineage = lineage, .gen = gen, .id = id, .gate = gate,
                              .epoch = epoch, .removals = removals, .seen = ~0ull,
                              .nbytes = n, .bytes = owned, .nkeys = nkeys, .keys = owned_keys,
                              .ncopies = ncopies, .copies = owned_copies,
                              .before = owned_before};
    return p;
}

unsigned repeat_copies(const struct repeat_plan *p)
{
    return p->ncopies;
}

const struct proto_copy *repeat_plan_copies(const struct repeat_plan *p)
{
    return p->copies;
}

/* ---- the result ring ---------------------------------------------------- */

/* Reserves the next slot. A full ring means the controller is behind; after
 * waiting about 0.2 s for it (if `wait`) the launch is asked about instead. */
static struct proto_result_slot *reserve(uint64_t *pos, bool wait)
{
    uint32_t slots;
    struct proto_result_slot *ring = results_ring(&slots);
    volatile struct proto_control *ctl = channel_control_rw();
    if (!ring || !ctl ||
        !ring_reserve(&ctl->results_head, &ctl->results_tail, slots, wait ? 4000 : 0, pos))
        return NULL;
    return &ring[*pos & (slots - 1)];
}

/* Appends the requests of plan p's tools of one phase, into the slot at ring
 * position pos, to reqs[n...]; returns the new count. After a gated launch
 * its scans mark (tooljob.h), beside the scans of the same buffers before. */
static unsigned add_requests(struct tool_request *reqs, unsigned n, struct repeat_plan *p,
                             struct proto_result_slot *slot, uint64_t pos,
                             enum proto_phase phase, bool gated)
{
    uint32_t slots;
    results_ring(&slots);
    unsigned at = (unsigned)(pos & (slots - 1));
    bool checked = p->checked == alloctab_removals() + 1;
    for (unsigned k = 0; k < p->ncopies; k++) {
        const struct proto_copy *c = &p->copies[k];
        if (c->phase != phase)
            continue;
        reqs[n] = (struct tool_request){.copy = c, .result = &slot->results[k],
                                        .acc = PROTO_MAX_COPIES + at * PROTO_MAX_REPEAT + k,
                                        .tag = pos + 1, .checked = checked};
        if (gated && tool_mode(c) != TOOL_DIGEST) {
            reqs[n].marks = true;
            reqs[n].before = p->before[k] < 0 ? NULL : &slot->results[p->before[k]];
        }
        n++;
    }
    return n;
}

/* Whether every request of reqs[0, n) was found inside tracked allocations. */
static bool all_checked(const struct tool_request *reqs, unsigned n)
{
    for (unsigned k = 0; k < n; k++)
        if (!reqs[k].checked)
            return false;
    return true;
}

static bool has_scans(const struct repeat_plan *p)
{
    for (unsigned k = 0; k < p->ncopies; k++)
        if (tool_mode(&p->copies[k]) != TOOL_DIGEST)
            return true;
    return false;
}

/* The scans ahead to make with this launch's "after" tools, if any (ahead.h). */
struct ahead_plan {
    struct repeat_plan *plan;
    struct proto_result_slot *slot;
    uint64_t pos;
    unsigned long long begun;   /* calls_begun(), read before anything was queued */
    CUcontext ctx;              /* of the stream: stream 0 is each context's own */
};

/* Runs one phase's tools, and with the "after" ones those of `ahead` (if not
 * NULL) before its launch; after a gated launch, the last of cudump's kernels
 * holds the stream if a scan finds something new. Returns whether it will. */
static bool run_phase(const struct repeat_run *run, const struct launch_info *li,
                      enum proto_phase phase, const struct ahead_plan *ahead)
{
    struct repeat_plan *p = run->plan;
    uint32_t slots;
    results_ring(&slots);
    bool gated = phase == PHASE_AFTER && run->gated;
    unsigned long long removals = alloctab_removals();
    static struct tool_request reqs[PROTO_MAX_REPEAT]; /* under the staging lock; 28 KB */
    /* Those made ahead first: the last launch of cudump's kernel, the one that holds
     * the stream, then has this launch's own jobs, which count for the hold. */
    unsigned before = ahead ? add_requests(reqs, 0, ahead->plan, ahead->slot, ahead->pos,
                                           PHASE_BEFORE, false)
                            : 0;
    for (unsigned k = 0; k < before; k++)
        reqs[k].ahead = true;
    unsigned n = add_requests(reqs, before, p, run->slot, run->slot_pos, phase, gated);
    struct tool_hold hold = {&run->slot->gate, &run->slot->mail,
                             (unsigned)(run->slot_pos & (slots - 1))};
    /* After the launch, nobody waits for a gated launch's scans or for digests
     * (repeat_end): the launcher thread may make that launch of the kernel. */
    unsigned how = phase == PHASE_AFTER && (gated || !has_scans(p)) ? TOOLS_HAND_OFF : 0;
    /* Right after the program's launch, if nothing of cudump's (the flight recorder's mark)
     * went on the stream after it, it was made plainly, and no other call of the program's
     * was in progress before it was made, nor has begun since (tools.h): the count is the
     * one read before the launch, as a call that began after that and ended already put
     * its work between the launch and cudump's kernel. */
    unsigned long long begun = phase == PHASE_AFTER ? run->begun : calls_begun();
    if (phase == PHASE_AFTER && run->alone && !li->flight && !li->programmatic &&
        calls_running() == 1)
        how |= TOOLS_RIGHT_AFTER;
    bool held = tools_run(li, reqs, n, gated ? &hold : NULL, how, begun);
    /* Copies all found inside tracked allocations stay there until one goes. */
    bool all = all_checked(reqs + before, n - before);
    if (phase == PHASE_BEFORE)
        p->tracked_before = all;
    else
        p->checked = all && p->tracked_before ? removals + 1 : 0;
    if (ahead)
        ahead->plan->tracked_before = all_checked(reqs, before);
    return held;
}

/* Whether every launch handed to the ring and not yet read by the controller
 * has all its results. */
static bool ring_settled(void)
{
    uint32_t slots;
    struct proto_result_slot *ring = results_ring(&slots);
    const volatile struct proto_control *ctl = channel_control();
    if (!ring || !ctl)
        return true;
    uint64_t head = ctl->results_head;
    for (uint64_t pos = ctl->results_tail; pos < head; pos++) {
        const struct proto_result_slot *s = &ring[pos & (slots - 1)];
        /* A slot not yet handed over is a launch still being made: not waited for. */
        if (__atomic_load_n(&s->ready, __ATOMIC_ACQUIRE) == pos + 1 &&
            !gate_results_in(s, pos + 1))
            return false;
    }
    return true;
}

/* At exit, the results of launches made with kept plans that are still on the
 * GPU are waited for a while (EXIT_WAIT_S at most, and not at all once the
 * controller is gone): a program that exits without synchronizing would
 * otherwise take its last launches' digests and scans with it. Registered
 * before the gate's own handler (watch.c), so it runs after it: a held gate is
 * served first, and the launches behind it can finish. */
static bool results_done(void *unused)
{
    (void)unused;
    return !channel_controller_alive() || ring_settled();
}

static void results_at_exit(void)
{
    ahead_void(); /* no launch comes after the last */
    poll_until(results_done, NULL, EXIT_WAIT_S);
}

static void register_exit(void)
{
    atexit(results_at_exit);
}

/* Fills in a slot's header for a launch of plan p, results not yet in. */
static void slot_begin(struct proto_result_slot *slot, const struct repeat_plan *p)
{
    slot->plan = p->id;
    slot->ncopies = p->ncopies;
    slot->launch_rc = 0;
    slot->flags = 0;
    slot->gate = GATE_NONE;
    for (unsigned k = 0; k < p->ncopies; k++)
        slot->results[k] = (struct proto_tool_result){.rc = -1};
}

/* Reserves the next slot (reserve) and begins it for a launch of plan p. */
static struct proto_result_slot *slot_for(const struct repeat_plan *p, bool wait, uint64_t *pos)
{
    struct proto_result_slot *slot = reserve(pos, wait);
    if (slot)
        slot_begin(slot, p);
    return slot;
}

static void slot_event(struct proto_result_slot *slot, const struct launch_info *li)
{
    slot->event = (struct proto_launch){
        .seq = li->seq, .occurrence = li->occurrence,
        .stream = (uint64_t)(uintptr_t)li->stream, .tid = li->tid, .id = li->e->id,
        .device = li->device, .grid = {li->grid[0], li->grid[1], li->grid[2]},
        .block = {li->block[0], li->block[1], li->block[2]}, .smem = li->smem, .api = li->api,
        .nparams = -1, .scope = li->scope, .step = li->step, .source = li->source};
}

/* Whether nothing came between launch `a` (its tools made when calls_begun()
 * read a->begun) and this one, li, on the same stream, thread and device, whose
 * own call is the only one begun since and the only one in progress. */
static bool right_after(const struct ahead *a, const struct launch_info *li)
{
    return a->begun + 1 == calls_begun() && calls_running() == 1 && a->stream == li->stream &&
           a->ptsz == li->ptsz && a->tid == li->tid && a->device == li->device;
}

static void ahead_scored(const struct plan_ref *predictor, bool used)
{
    struct repeat_plan *p = plan_at(predictor);
    if (p)
        p->misses = used ? 0 : p->misses + 1;
}

void repeat_ahead_drop(const struct ahead *a)
{
    ahead_drop(a);
    ahead_scored(&a->predictor, false);
}

bool repeat_ahead_for(const struct repeat_plan *p, const struct ahead *a)
{
    return p && p->serial == a->serial;
}

bool repeat_start(struct repeat_run *run, const struct launch_info *li, struct repeat_plan *p,
                  bool wait, const struct ahead *a, bool *consumed)
{
    static pthread_once_t exit_once = PTHREAD_ONCE_INIT;
    pthread_once(&exit_once, register_exit);
    *consumed = a != NULL;
    /* Before the launch, for cudump's kernel after it (run_phase); read first, as
     * ahead_of reads them. */
    unsigned long long begun = calls_begun();
    bool alone = calls_running() == 1;
    /* The plan of the last launch learns that this one came right after it. */
    bool in_row = last_alone && right_after(&last, li);
    if (in_row) {
        struct repeat_plan *before = plan_at(&last.predictor);
        /* Not after a plan replaced since: its contexts do not come back. */
        struct successor *s = before && last_context ? successor_slot(last_context) : NULL;
        if (before)
            before->next = plan_ref(li->e, p);
        if (s)
            *s = (struct successor){last_context, plan_ref(li->e, p)};
    }
    last.predictor.serial = 0;
    last_context = 0;
    uint64_t context = context_of(in_row, p->serial);
    bool gated = p->gate && has_scans(p) && watch_room(li->device);
    if (a && (a->serial != p->serial ||
              !right_after(a, li) ||
              stream_ctx(li) != a->ctx)) {
        repeat_ahead_drop(a); /* before a slot is reserved: the reader may wait at its slot */
        a = NULL;
    }
    if (a) {
        /* Its "before" tools were made with the launch before it, into this slot. */
        ahead_scored(&a->predictor, true);
        volatile struct proto_control *ctl = channel_control_rw();
        if (ctl)
            __atomic_fetch_add(&ctl->ahead_used, 1, __ATOMIC_RELAXED);
        slot_event(a->slot, li);
        a->slot->flags = 0;
        a->slot->gate = gated ? GATE_ARMED : GATE_NONE;
        *run = (struct repeat_run){.plan = p, .slot = a->slot, .slot_pos = a->pos,
                                   .gated = gated, .context = context, .begun = begun,
                                   .alone = alone};
        return true;
    }
    uint64_t pos;
    struct proto_result_slot *slot = slot_for(p, wait, &pos);
    if (!slot)
        return false;
    slot->gate = gated ? GATE_ARMED : GATE_NONE;
    slot_event(slot, li);
    *run = (struct repeat_run){.plan = p, .slot = slot, .slot_pos = pos, .gated = gated,
                               .context = context, .begun = begun, .alone = alone};
    run_phase(run, li, PHASE_BEFORE, NULL);
    return true;
}

/* The plan whose "before" tools to make ahead with the "after" tools of this
 * launch of p, and the slot reserved for them; false if none (ahead.h). */
static bool ahead_of(struct repeat_plan *p, uint64_t context, const struct launch_info *li,
                     struct ahead_plan *out)
{
    if (channel_options() & OPTION_NO_AHEAD)
        return false;
    struct plan_ref missed;
    if (ahead_missed(&missed))
        ahead_scored(&missed, false);
    /* Read first, then whether this launch's call is the only one in progress: a call
     * that begins after the read is counted at the next launch, and one begun before it
     * is still in progress, or ended before the scans are queued. */
    unsigned long long begun = calls_begun();
    /* Two in a row not used: tried again at every 16th launch only. */
    if (!p->next.serial || calls_running() != 1 ||
        (p->misses >= 2 && (++p->skipped & 15) != 0))
        return false;
    /* The context's guess, else (none, or its plan replaced since) the plan's own. */
    const struct successor *s = successor_slot(context);
    struct repeat_plan *q = context && s && s->context == context ? plan_at(&s->next) : NULL;
    if (!q)
        q = plan_at(&p->next);
    const volatile struct proto_control *ctl = channel_control();
    /* Not over managed or host memory, which the host may write with no call between the
     * launches, nor over pool or VMM memory, which the program may free on another stream
     * (or unmap) while the scans wait on this one for a launch that does not come. */
    if (!q || !q->plain_memory || !ctl ||
        !plan_holds(q, ctl->generation, alloctab_epoch(), alloctab_removals()))
        return false;
    if (!q->nbefore || p->ncopies - p->nbefore + q->nbefore > PROTO_MAX_REPEAT)
        return false;
    CUcontext ctx = stream_ctx(li);
    if (!ctx)
        return false;
    uint64_t pos;
    struct proto_result_slot *slot = slot_for(q, false, &pos);
    if (!slot)
        return false;
    /* Taken until a launch uses it: a process that ends before one comes leaves the
     * reader a slot it knows to skip (results.py). */
    slot->flags = RESULT_TAKEN;
    *out = (struct ahead_plan){q, slot, pos, begun, ctx};
    return true;
}

/* Whether a scan found non-finite values after the launch in a buffer that
 * had none before it (or that was not scanned before it). */
static bool new_nonfinite(const struct repeat_plan *p, const struct proto_result_slot *slot)
{
    for (unsigned k = 0; k < p->ncopies; k++) {
        const struct proto_copy *c = &p->copies[k];
        if (c->phase != PHASE_AFTER || tool_mode(c) == TOOL_DIGEST || slot->results[k].rc != 0 ||
            slot->results[k].words[0] == 0)
            continue;
        int b = p->before[k];
        if (b < 0 || slot->results[b].rc != 0 || slot->results[b].words[0] == 0)
            return true;
    }
    return false;
}

/* Runs the "after" tools and hands the slot to the ring's reader. Returns true
 * if a scan found new non-finite values: the slot is then appended to
 * `report` (a MSG_REPEAT) for the caller to send. A gated launch returns
 * false at once: gate.c and the watcher take it from there. */
static bool repeat_end(struct repeat_run *run, const struct launch_info *li, CUresult launch_rc,
                       struct msg *report)
{
    struct proto_result_slot *slot = run->slot;
    slot->launch_rc = launch_rc;
    struct ahead_plan ahead;
    bool with_ahead = launch_rc == CUDA_SUCCESS && ahead_of(run->plan, run->context, li, &ahead);
    bool held = launch_rc == CUDA_SUCCESS &&
                run_phase(run, li, PHASE_AFTER, with_ahead ? &ahead : NULL);
    last = (struct ahead){.predictor = plan_ref(li->e, run->plan), .stream = li->stream,
                          .ptsz = li->ptsz, .device = li->device, .tid = li->tid};
    if (with_ahead) {
        struct ahead made = last;
        made.slot = ahead.slot;
        made.pos = ahead.pos;
        made.serial = ahead.plan->serial;
        made.begun = ahead.begun;
        made.ctx = ahead.ctx;
        ahead_put(&made);
    }
    last_context = run->context;
    last.begun = calls_begun();
    last_alone = launch_rc == CUDA_SUCCESS && calls_running() == 1;
    if (run->gated && held) {
        /* Nobody waits: the GPU holds the stream if a scan finds something.
         * (The slot is the reader's first: gate.c knows a slot by its `ready`.) */
        __atomic_store_n(&slot->ready, run->slot_pos + 1, __ATOMIC_RELEASE);
        gate_add(slot, run->slot_pos + 1, li->seq, stream_ctx(li), li->stream, li->ptsz);
        return false;
    }
    bool found = false;
    if (has_scans(run->plan)) {
        /* The results are written from the GPU: once the stream is through,
         * they are all there. */
        found = gate_wait_stream(li) == CUDA_SUCCESS && new_nonfinite(run->plan, slot);
        /* A gate the stream does not wait on (the wait could not be queued):
         * the kernel may have written it, and the ring's reader would wait. */
        __atomic_store_n(&slot->gate, GATE_NONE, __ATOMIC_RELEASE);
        if (found)
            slot->flags |= RESULT_TAKEN;
    }
    if (found) {
        msg_add(report, slot, sizeof *slot);
        slot->ncopies = 0; /* the ring's reader has nothing left to wait for in it */
    }
    __atomic_store_n(&slot->ready, run->slot_pos + 1, __ATOMIC_RELEASE);
    return found;
}

bool repeat_finish(struct repeat_run *run, const struct launch_info *li, CUresult launch_rc,
                   uint32_t *flags)
{
    char stack[256]; /* the slot itself (8 KB) goes on the heap: this is rare */
    struct msg m;
    msg_init(&m, stack, sizeof stack, MSG_REPEAT, li->seq);
    plan_clear();
    *flags = 0;
    bool found = repeat_end(run, li, launch_rc, &m);
    *run = (struct repeat_run){0};
    if (!found) {
        msg_free(&m);
        return false;
    }
    return plan_follow_ups(plan_request(&m, flags), flags);
}

struct repeat_plan *repeat_keep(const struct launch_info *li, const unsigned char *key,
                                size_t nkey, uint32_t gen, unsigned long long epoch,
                                unsigned long long removals, uint32_t id, bool gate)
{
    static const struct proto_copy *kept[PROTO_MAX_REPEAT]; /* under the staging lock */
    unsigned ncopies, nkeys;
    const struct plan_copy *copies = plan_copies(&ncopies);
    const struct proto_key *keys = plan_keys(&nkeys);
    if (ncopies > PROTO_MAX_REPEAT)
        return NULL;
    for (unsigned i = 0; i < ncopies; i++) {
        if (!(copies[i].c.flags & COPY_TOOL))
            return NULL;
        kept[i] = &copies[i].c;
    }
    return repeat_store(li->e, key, nkey, gen, epoch, removals, id, gate, kept, ncopies, keys,
                        nkeys);
}
