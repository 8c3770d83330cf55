/*
 * What the controller plans for a wanted launch.
 *
 * The shim sends the controller the launch's raw parameter bytes, the
 * allocation behind every pointer-sized word of them and the TMA tensor maps
 * among them (MSG_BEGIN); the
 * controller answers with a plan of 2-D copies (source, width in bytes, rows,
 * source pitch, offset in the staging area) and whether to hold the launch.
 * Every plan is bounds-checked against the staging area before any copy.
 * After the copies, MSG_END reports how each went; its answer may ask for
 * follow-up copies (a launch that just produced a NaN: every buffer).
 *
 * The plan's copies live here, one plan at a time under the staging lock:
 * they are large (PROTO_MAX_COPIES), so off the program's stack.
 */
#include <string.h>

#include "alloctab.h"
#include "channel.h"
#include "functab.h"
#include "plan.h"
#include "tensormap.h"

static struct plan_copy copies[PROTO_MAX_COPIES];
static unsigned ncopies;
/* The keys of the plan last accepted (PLAN_REPEAT). */
static struct proto_key keys[PROTO_MAX_KEYS];
static unsigned nkeys;

struct plan_copy *plan_copies(unsigned *n)
{
    *n = ncopies;
    return copies;
}

void plan_clear(void)
{
    ncopies = 0;
}

const struct proto_key *plan_keys(unsigned *n)
{
    *n = nkeys;
    return keys;
}

static bool selects(const struct proto_selector *s, uint64_t n)
{
    if (n <= s->skip)
        return false;
    uint64_t k = n - s->skip - 1;
    return k % s->every == 0 && (s->count == UINT64_MAX || k / s->every < s->count);
}

void plan_select(struct launch_info *li)
{
    struct func_entry *e = li->e;
    unsigned nsel = atomic_load_explicit(&e->nselectors, memory_order_acquire);
    volatile struct proto_control *ctl = channel_control_rw();
    li->ncounted = 0;
    if (!nsel || !ctl || li->captured)
        return;
    bool taken = false;
    for (unsigned i = 0; i < nsel && i < PROTO_MAX_SELECTORS; i++) {
        const struct proto_selector *s = &e->sel[i];
        uint64_t n = __atomic_add_fetch(&ctl->rule_counts[s->counter], 1, __ATOMIC_RELAXED);
        li->counted[li->ncounted++] = (struct proto_counted){.counter = s->counter, .n = n};
        taken |= selects(s, n);
    }
    if ((li->wants & WANT_COUNTED) && !taken)
        li->wants &= ~(unsigned)WANT_SNAPSHOT;
}

/* The bytes of parameter i, from kernelParams or from the `extra` buffer. */
static const unsigned char *param_bytes(const struct launch_info *li, int i)
{
    return func_param_bytes(li->e, li->params, li->extra, i);
}

static const unsigned char zeros[8];

/* The tensor maps in parameter i: every 128-byte window of it that holds the
 * bytes of a map the process made, alone or inside a struct such as CUTLASS's
 * Params. A CUtensorMap lies at a multiple of 64 in the real parameter block,
 * but the offsets the driver reports need not start at a multiple of 64 (an
 * H100 gave 112 for a kernel's first parameter), so every 8-byte step is
 * tried. Appended to tmaps[*n...]. */
static void find_tensormaps(const struct func_entry *e, int i, const unsigned char *p,
                            struct proto_tensormap *tmaps, uint32_t *n)
{
    uint32_t size = e->param_size[i];
    for (uint32_t off = 0; size >= PROTO_TMAP_BYTES && off <= size - PROTO_TMAP_BYTES &&
                           *n < PROTO_MAX_TMAPS;
         off += PROTO_TMAP_STEP) {
        struct tmap_info m;
        if (!tensormap_find(p + off, &m))
            continue;
        struct alloc_info a = {0};
        bool in = alloc_resolve(m.address, true, &a);
        struct proto_tensormap *t = &tmaps[(*n)++];
        *t = (struct proto_tensormap){
            .arg = (uint32_t)i, .offset = off, .address = m.address, .encoding = m.encoding,
            .dtype = m.dtype, .rank = m.rank, .interleave = m.interleave,
            .base = in ? a.base : 0, .size = in ? a.size : 0,
            .kind = in ? (uint32_t)a.kind : 0};
        memcpy(t->dims, m.dims, sizeof t->dims);
        memcpy(t->strides, m.strides, sizeof t->strides);
        off += PROTO_TMAP_BYTES - PROTO_TMAP_STEP; /* maps do not overlap */
    }
}

/* Whether the word at `off` of parameter i is inside one of its tensor maps:
 * then it is the map's, not a pointer of its own. */
static bool in_tensormap(const struct proto_tensormap *tmaps, uint32_t n, int i, unsigned off)
{
    for (uint32_t k = 0; k < n; k++)
        if (tmaps[k].arg == (uint32_t)i && off >= tmaps[k].offset &&
            off < tmaps[k].offset + PROTO_TMAP_BYTES)
            return true;
    return false;
}

/* Appends the launch description, parameter layout and bytes, and the
 * allocation behind every pointer-sized word (words inside by-value structs
 * count too: PyTorch passes its buffers as std::array<char*, N>). */
static void build_begin(struct msg *m, const struct launch_info *li)
{
    struct func_entry *e = li->e;
    /* A kernel without parameters may be launched with neither. */
    bool have_args = e->nparams == 0 || (e->nparams > 0 && (li->params || li->extra));
    int nparams = have_args ? e->nparams : -1;
    struct proto_pointer ptrs[PROTO_MAX_PARAMS];
    uint32_t nptrs = 0, ntmaps = 0;
    struct proto_tensormap tmaps[PROTO_MAX_TMAPS];
    /* A program that made no tensor map has none to find. */
    bool maps = tensormap_any();
    size_t param_total = 0;
    for (int i = 0; i < nparams; i++) {
        const unsigned char *p = param_bytes(li, i);
        param_total += e->param_size[i];
        uint32_t tmaps_before = ntmaps;
        if (p && maps)
            find_tensormaps(e, i, p, tmaps, &ntmaps);
        for (unsigned off = 0; p && off + sizeof(CUdeviceptr) <= e->param_size[i] &&
                               nptrs < PROTO_MAX_PARAMS;
             off += sizeof(CUdeviceptr)) {
            if (ntmaps > tmaps_before &&
                in_tensormap(tmaps + tmaps_before, ntmaps - tmaps_before, i, off))
                continue;
            CUdeviceptr v;
            memcpy(&v, p + off, sizeof v);
            struct alloc_info a;
            /* A lone 8-byte argument is worth asking the driver about;
             * words inside structs only count if cudump tracked them. */
            if (!alloc_resolve(v, e->param_size[i] == sizeof v, &a))
                continue;
            ptrs[nptrs++] = (struct proto_pointer){
                .arg = (uint32_t)i, .offset = off, .base = a.base, .size = a.size,
                .pitch = a.pitch, .width = a.width, .height = a.height, .elem = a.elem_size,
                .kind = (uint32_t)a.kind};
        }
    }
    struct proto_launch head = {
        .seq = li->seq, .occurrence = li->occurrence, .stream = (uint64_t)(uintptr_t)li->stream,
        .tid = li->tid, .id = e->id, .device = li->device,
        .grid = {li->grid[0], li->grid[1], li->grid[2]},
        .block = {li->block[0], li->block[1], li->block[2]}, .smem = li->smem, .api = li->api,
        .flags = (li->interrupted ? LAUNCH_INTERRUPTED : 0u) | (li->graph ? LAUNCH_GRAPH : 0u) |
                 li->begin_flags,
        .rc = 0, .nparams = nparams, .nptrs = nptrs, .graph = li->graph, .replay = li->replay,
        .node = li->node, .ntmaps = ntmaps, .scope = li->scope, .step = li->step,
        .source = li->source};
    msg_add(m, &head, sizeof head);
    for (int i = 0; i < nparams; i++) {
        struct proto_param p = {e->param_offset[i], e->param_size[i]};
        msg_add(m, &p, sizeof p);
    }
    for (int i = 0; i < nparams; i++) {
        const unsigned char *p = param_bytes(li, i);
        /* A parameter the launch gave no bytes for reads as zeros. */
        for (uint32_t done = 0; !p && done < e->param_size[i]; done += 8)
            msg_add(m, zeros, e->param_size[i] - done < 8 ? e->param_size[i] - done : 8);
        if (p)
            msg_add(m, p, e->param_size[i]);
    }
    msg_add(m, zeros, (8 - param_total % 8) % 8);
    msg_add(m, ptrs, nptrs * sizeof ptrs[0]);
    msg_add(m, tmaps, ntmaps * sizeof tmaps[0]);
    msg_add(m, li->counted, li->ncounted * sizeof li->counted[0]);
}

/* The last plan checked had more copies than room after its base (under the staging lock). */
static bool lacked_room;

bool plan_lacked_room(void)
{
    return lacked_room;
}

/* Checks a plan against the staging area before anything is copied. */
static bool accept_plan(const unsigned char *reply, size_t len, uint32_t *flags, uint32_t *id,
                        unsigned base)
{
    struct proto_plan plan;
    if (len < sizeof plan)
        return false;
    memcpy(&plan, reply, sizeof plan);
    lacked_room = plan.ncopies > PROTO_MAX_COPIES - base;
    if (plan.ncopies > PROTO_MAX_COPIES - base || plan.nkeys > PROTO_MAX_KEYS ||
        len != sizeof plan + plan.ncopies * sizeof(struct proto_copy) +
                   plan.nkeys * sizeof(struct proto_key))
        return false;
    memcpy(keys, reply + sizeof plan + plan.ncopies * sizeof(struct proto_copy),
           plan.nkeys * sizeof(struct proto_key));
    nkeys = plan.nkeys;
    /* Checked against the staging area, not pinned yet: a deferred launch's
     * copies may never pass through it (behind.c), and pinning it is slow. */
    size_t size = channel_staging_size();
    if (plan.ncopies && !channel_staging())
        return false;
    for (unsigned i = 0; i < plan.ncopies; i++) {
        struct proto_copy c;
        memcpy(&c, reply + sizeof plan + i * sizeof c, sizeof c);
        uint64_t bytes, end;
        bool tool = c.flags & COPY_TOOL;
        uint32_t known = tool ? COPY_TOOL | 0xffffu << PROTO_TOOL_MODE_SHIFT : COPY_PIECE;
        if ((c.phase != PHASE_BEFORE && c.phase != PHASE_AFTER) || (c.flags & ~known) ||
            c.width == 0 || c.height == 0 ||
            (c.height > 1 && c.pitch < c.width) ||
            __builtin_mul_overflow(c.width, c.height, &bytes) ||
            /* a tool leaves only its result in staging */
            __builtin_add_overflow(c.offset, tool ? PROTO_TOOL_RESULT : bytes, &end) ||
            end > size)
            return false;
        copies[base + i] = (struct plan_copy){c, CUDA_SUCCESS};
    }
    ncopies = base + plan.ncopies;
    *flags = plan.flags;
    *id = plan.id;
    return true;
}

/* Sends m (MSG_BEGIN, MSG_END or MSG_REPEAT), frees it, and takes the MSG_PLAN
 * answer into copies[base...] (and its id, if asked); false, with no copies
 * added, if none came or it was refused. */
static bool request_plan(struct msg *m, unsigned base, uint32_t *flags, uint32_t *id)
{
    /* Under the staging lock, like every caller: one buffer serves them all, off the
     * program's stack (it is 28 KB). */
    static unsigned char reply[sizeof(struct proto_plan) +
                               PROTO_MAX_COPIES * sizeof(struct proto_copy) +
                               PROTO_MAX_KEYS * sizeof(struct proto_key)];
    size_t len = 0;
    uint32_t plan_id = 0;
    *flags = 0;
    bool ok = channel_request(m, MSG_PLAN, reply, sizeof reply, &len) &&
              accept_plan(reply, len, flags, &plan_id, base);
    if (id)
        *id = plan_id;
    msg_free(m);
    return ok;
}

bool plan_begin(const struct launch_info *li, unsigned base, uint32_t *flags, uint32_t *id)
{
    char stack[4096];
    struct msg m;
    msg_init(&m, stack, sizeof stack, MSG_BEGIN, li->seq);
    build_begin(&m, li);
    return request_plan(&m, base, flags, id);
}

bool plan_ask_stop(const struct launch_info *li)
{
    char stack[4096];
    struct msg m;
    msg_init(&m, stack, sizeof stack, MSG_BEGIN, li->seq);
    build_begin(&m, li);
    struct proto_plan plan = {0};
    size_t len = 0;
    bool halt = channel_request(&m, MSG_PLAN, &plan, sizeof plan, &len) && len == sizeof plan &&
                (plan.flags & PLAN_HALT);
    msg_free(&m);
    return halt;
}

bool plan_request(struct msg *m, uint32_t *flags)
{
    return request_plan(m, 0, flags, NULL);
}

bool plan_send_piece(uint64_t seq, unsigned index, CUresult rc)
{
    char stack[64];
    struct msg m;
    msg_init(&m, stack, sizeof stack, MSG_PIECE, seq);
    struct proto_piece piece = {.index = index, .rc = rc};
    msg_add(&m, &piece, sizeof piece);
    char ack[16];
    size_t len = 0;
    bool ok = channel_request(&m, MSG_ACK, ack, sizeof ack, &len);
    msg_free(&m);
    return ok;
}

/* MSG_END with each copy's result, -1 for an "after" copy of a failed launch (not
 * attempted). */
static void end_message(struct msg *m, char *stack, size_t cap, uint64_t seq, CUresult launch_rc,
                        CUresult sync_rc, const struct proto_copy *const *cs, const int32_t *rcs,
                        unsigned n, uint64_t behind)
{
    msg_init(m, stack, cap, MSG_END, seq);
    struct proto_end end = {.launch_rc = launch_rc, .sync_rc = sync_rc, .ncopies = n,
                            .behind = behind};
    msg_add(m, &end, sizeof end);
    for (unsigned i = 0; i < n; i++) {
        int32_t rc = cs[i]->phase == PHASE_AFTER && launch_rc != CUDA_SUCCESS ? -1 : rcs[i];
        msg_add(m, &rc, sizeof rc);
    }
}

bool plan_send_behind(uint64_t seq, CUresult launch_rc, CUresult sync_rc,
                      const struct proto_copy *const *cs, const int32_t *rcs, unsigned n,
                      uint64_t number, const uint64_t *offsets)
{
    char stack[64 + PROTO_MAX_COPIES * (sizeof(int32_t) + sizeof(uint64_t))];
    struct msg m;
    end_message(&m, stack, sizeof stack, seq, launch_rc, sync_rc, cs, rcs, n, number);
    msg_add(&m, offsets, n * sizeof *offsets);
    /* No answer comes: the controller writes the files behind the program. */
    bool ok = channel_send(&m);
    msg_free(&m);
    return ok;
}

/* Reports the copies; the controller answers with a plan of follow-up copies
 * (after the launch: say, every buffer of a launch that just produced a NaN)
 * and PLAN_HALT to hold the launch now that it has run. Returns whether it
 * asked for either; the follow-up copies then replace the reported ones. */
bool plan_report_end(uint64_t seq, CUresult launch_rc, CUresult sync_rc, uint32_t *flags)
{
    /* Under the staging lock: off the program's stack. */
    static char stack[64 + PROTO_MAX_COPIES * sizeof(int32_t)];
    static const struct proto_copy *cs[PROTO_MAX_COPIES];
    static int32_t rcs[PROTO_MAX_COPIES];
    struct msg m;
    for (unsigned i = 0; i < ncopies; i++) {
        cs[i] = &copies[i].c;
        rcs[i] = copies[i].rc;
    }
    end_message(&m, stack, sizeof stack, seq, launch_rc, sync_rc, cs, rcs, ncopies, 0);
    ncopies = 0;
    return plan_follow_ups(request_plan(&m, 0, flags, NULL), flags);
}

/* The drain's MSG_END. Its answer is empty (PLAN_DEFER). */
void plan_send_end(uint64_t seq, CUresult launch_rc, CUresult sync_rc,
                   const struct proto_copy *const *cs, const int32_t *rcs, unsigned n)
{
    char stack[64 + PROTO_MAX_COPIES * sizeof(int32_t)];
    struct msg m;
    end_message(&m, stack, sizeof stack, seq, launch_rc, sync_rc, cs, rcs, n, 0);
    unsigned char reply[sizeof(struct proto_plan)];
    size_t len = 0;
    channel_request(&m, MSG_PLAN, reply, sizeof reply, &len);
    msg_free(&m);
}

/* Takes the answer to MSG_END or MSG_REPEAT: copies to make now that the
 * launch has run, and whether to hold it. Returns whether there are either. */
bool plan_follow_ups(bool ok, uint32_t *flags)
{
    for (unsigned i = 0; ok && i < ncopies; i++)
        if (copies[i].c.phase != PHASE_AFTER)
            ok = false; /* the launch has run: there is no "before" any more */
    if (!ok)
        ncopies = *flags = 0;
    return ok && (ncopies || (*flags & PLAN_HALT));
}

/* The launch's parameter bytes, one after the other: what a repeated plan is
 * kept by. False if the launch gave none or they do not fit. */
bool plan_param_key(const struct launch_info *li, unsigned char *key, size_t cap, size_t *n)
{
    const struct func_entry *e = li->e;
    size_t total = 0;
    if (e->nparams < 0 || !(li->params || li->extra))
        return false;
    for (int i = 0; i < e->nparams; i++) {
        const unsigned char *p = param_bytes(li, i);
        if (!p || e->param_size[i] > cap - total)
            return false;
        memcpy(key + total, p, e->param_size[i]);
        total += e->param_size[i];
    }
    *n = total;
    return true;
}

