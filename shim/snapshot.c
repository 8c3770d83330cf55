/*
 * A wanted launch: MSG_BEGIN, the copies the controller plans, MSG_END.
 *
 * The shim sends the controller the launch's raw parameter bytes and the
 * allocation behind every pointer-sized word of them; the controller answers
 * with a plan of 2-D copies (source, width in bytes, rows, source pitch,
 * offset in the staging area) and whether to hold the launch. The staging
 * area follows the control page in the shared memory the controller created
 * for this process; it is registered as pinned memory on first use, so one DMA moves the bytes to where the controller reads them:
 * bulk data never goes through the socket.
 *
 * "before" copies are enqueued on the launch stream ahead of the launch and
 * "after" copies behind it, so they see exactly what the kernel reads and
 * what it leaves. The shim's own driver calls run in the RELAXED capture
 * mode so that they can never invalidate another thread's stream capture.
 * Every plan is bounds-checked before any copy.
 *
 * A plan of digests and scans only may come back marked PLAN_REPEAT: the shim
 * keeps it with the function, keyed by the launch's parameter bytes, and the
 * next launches with the same bytes (a training loop's, step after step) run
 * it without a word to the controller and without waiting for the GPU: their
 * results go through the result ring (repeat.c holds that path).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "launch.h"

struct copy {
    struct proto_copy c;
    CUresult rc;
};

/* One wanted launch at a time per process: they share the staging area.
 * Held from MSG_BEGIN to MSG_END (and across a stop). */
static pthread_mutex_t snap_lock = PTHREAD_MUTEX_INITIALIZER;
static struct copy copies[PROTO_MAX_COPIES];
static unsigned ncopies;
/* The keys of the plan last accepted (PLAN_REPEAT). */
static struct proto_key plan_keys[PROTO_MAX_KEYS];
static unsigned nplan_keys;
static CUstreamCaptureMode saved_mode;
static pthread_mutex_t pin_lock = PTHREAD_MUTEX_INITIALIZER;
static bool staging_pinned, results_pinned;

void launch_reset_after_fork(void)
{
    pthread_mutex_init(&snap_lock, NULL);
    pthread_mutex_init(&pin_lock, NULL);
    staging_pinned = results_pinned = false;
}

/* Pins an area of the shared memory on first use: copies into it are then real
 * async DMAs, and cudump's kernel can write its results into it (mapped). If
 * pinning fails copies still work, through the driver's bounce buffers, and
 * the kernel's results are refused. */
static void pin_once(void *area, size_t size, bool *pinned)
{
    pthread_mutex_lock(&pin_lock);
    if (area && size && !*pinned) {
        *pinned = true;
        if (real_cuMemHostRegister_v2)
            real_cuMemHostRegister_v2(area, size,
                                      CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP);
    }
    pthread_mutex_unlock(&pin_lock);
}

char *staging_area(size_t *size)
{
    char *area = channel_staging();
    *size = area ? channel_staging_size() : 0;
    pin_once(area, *size, &staging_pinned);
    return area;
}

struct proto_result_slot *results_ring(uint32_t *slots)
{
    struct proto_result_slot *ring = channel_results(slots);
    pin_once(ring, (size_t)*slots * sizeof *ring, &results_pinned);
    return ring;
}

/* The bytes of parameter i, from kernelParams or from the `extra` buffer. */
static const unsigned char *param_bytes(const struct launch_info *li, int i)
{
    if (li->params)
        return li->params[i];
    /* extra = {CU_LAUNCH_PARAM_BUFFER_POINTER, buf, CU_LAUNCH_PARAM_BUFFER_SIZE, &size, END} */
    for (void **x = li->extra; x && *x; x += 2) {
        if ((uintptr_t)x[0] == 1)
            return (const unsigned char *)x[1] + li->e->param_offset[i];
    }
    return NULL;
}

static const unsigned char zeros[8];

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
    uint32_t nptrs = 0;
    size_t param_total = 0;
    for (int i = 0; i < nparams; i++) {
        const unsigned char *p = param_bytes(li, i);
        param_total += e->param_size[i];
        for (unsigned off = 0; p && off + sizeof(CUdeviceptr) <= e->param_size[i] &&
                               nptrs < PROTO_MAX_PARAMS;
             off += sizeof(CUdeviceptr)) {
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
                 (li->stop_only ? LAUNCH_STOP_ONLY : 0u) |
                 (li->unsafe_graph ? LAUNCH_UNSAFE_GRAPH : 0u),
        .rc = 0, .nparams = nparams, .nptrs = nptrs, .graph = li->graph, .replay = li->replay,
        .node = li->node};
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
    msg_add(m, li->counted, li->ncounted * sizeof li->counted[0]);
}

static bool follow_ups(bool ok, uint32_t *flags);

/* Checks a plan against the staging area before anything is copied. */
static bool accept_plan(const unsigned char *reply, size_t len, uint32_t *flags, uint32_t *id,
                        unsigned base)
{
    struct proto_plan plan;
    if (len < sizeof plan)
        return false;
    memcpy(&plan, reply, sizeof plan);
    if (plan.ncopies > PROTO_MAX_COPIES - base || plan.nkeys > PROTO_MAX_KEYS ||
        len != sizeof plan + plan.ncopies * sizeof(struct proto_copy) +
                   plan.nkeys * sizeof(struct proto_key))
        return false;
    memcpy(plan_keys, reply + sizeof plan + plan.ncopies * sizeof(struct proto_copy),
           plan.nkeys * sizeof(struct proto_key));
    nplan_keys = plan.nkeys;
    size_t size = 0;
    char *area = plan.ncopies ? staging_area(&size) : NULL;
    if (plan.ncopies && !area)
        return false;
    for (unsigned i = 0; i < plan.ncopies; i++) {
        struct proto_copy c;
        memcpy(&c, reply + sizeof plan + i * sizeof c, sizeof c);
        uint64_t bytes, end;
        bool tool = c.flags & COPY_TOOL;
        uint32_t known = tool ? COPY_TOOL | 0xffu << PROTO_TOOL_MODE_SHIFT : COPY_PIECE;
        if ((c.phase != PHASE_BEFORE && c.phase != PHASE_AFTER) || (c.flags & ~known) ||
            c.width == 0 || c.height == 0 ||
            (c.height > 1 && c.pitch < c.width) ||
            __builtin_mul_overflow(c.width, c.height, &bytes) ||
            /* a tool leaves only its result in staging */
            __builtin_add_overflow(c.offset, tool ? PROTO_TOOL_RESULT : bytes, &end) ||
            end > size)
            return false;
        copies[base + i] = (struct copy){c, CUDA_SUCCESS};
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
    /* Under snap_lock, like every caller: one buffer serves them all, off the
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

static void enqueue_copies(const struct launch_info *li, enum proto_phase phase)
{
    cuMemcpy2DAsync_v2_fn copy2d = li->ptsz ? real_cuMemcpy2DAsync_v2_ptsz : real_cuMemcpy2DAsync_v2;
    size_t size;
    char *area = staging_area(&size);
    static struct tool_request tools[PROTO_MAX_COPIES]; /* under snap_lock; 28 KB */
    unsigned ntools = 0;
    for (unsigned i = 0; i < ncopies; i++) {
        struct copy *c = &copies[i];
        if (c->c.phase != phase || (c->c.flags & COPY_PIECE))
            continue;
        if (c->c.flags & COPY_TOOL) {
            /* All of a phase's in one go: one launch of cudump's kernel. */
            if (area)
                tools[ntools++] = (struct tool_request){
                    &c->c, (struct proto_tool_result *)(area + c->c.offset), i, 1, false, NULL,
                    false};
            else
                c->rc = CUDA_ERROR_NOT_FOUND;
            continue;
        }
        if (!copy2d || !area) {
            c->rc = CUDA_ERROR_NOT_FOUND;
            continue;
        }
        CUDA_MEMCPY2D m = rows_copy(c->c.src, c->c.pitch, area + c->c.offset, 0, c->c.width,
                                    c->c.height);
        c->rc = copy2d(&m, li->stream);
    }
    tools_run(li, tools, ntools, NULL);
    for (unsigned k = 0; k < ntools; k++)
        copies[tools[k].acc].rc = tools[k].result->rc;
}

/* Pieces of buffers larger than the free staging area: each is copied, waited
 * for and handed over before the next one reuses the same staging bytes. */
static void run_pieces(const struct launch_info *li, enum proto_phase phase)
{
    for (unsigned i = 0; i < ncopies; i++) {
        struct copy *c = &copies[i];
        if (c->c.phase != phase || !(c->c.flags & COPY_PIECE))
            continue;
        c->rc = stop_copy_wait(li, c->c.src, c->c.width, c->c.height, c->c.pitch, c->c.offset);
        if (!snap_send_piece(li->seq, i, c->rc))
            return; /* the controller is gone: nobody would take the rest */
    }
}

bool snap_send_piece(uint64_t seq, unsigned index, CUresult rc)
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
                        unsigned n)
{
    msg_init(m, stack, cap, MSG_END, seq);
    struct proto_end end = {.launch_rc = launch_rc, .sync_rc = sync_rc, .ncopies = n};
    msg_add(m, &end, sizeof end);
    for (unsigned i = 0; i < n; i++) {
        int32_t rc = cs[i]->phase == PHASE_AFTER && launch_rc != CUDA_SUCCESS ? -1 : rcs[i];
        msg_add(m, &rc, sizeof rc);
    }
}

static CUstreamCaptureMode relax(void)
{
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    if (real_cuThreadExchangeStreamCaptureMode)
        real_cuThreadExchangeStreamCaptureMode(&mode);
    return mode;
}

static void unrelax(CUstreamCaptureMode mode)
{
    if (real_cuThreadExchangeStreamCaptureMode)
        real_cuThreadExchangeStreamCaptureMode(&mode);
}

/* Reports the copies; the controller answers with a plan of follow-up copies
 * (after the launch: say, every buffer of a launch that just produced a NaN)
 * and PLAN_HALT to hold the launch now that it has run. Returns whether it
 * asked for either; the follow-up copies then replace the reported ones. */
static bool send_end(uint64_t seq, CUresult launch_rc, CUresult sync_rc, uint32_t *flags)
{
    /* Under snap_lock: off the program's stack. */
    static char stack[64 + PROTO_MAX_COPIES * sizeof(int32_t)];
    static const struct proto_copy *cs[PROTO_MAX_COPIES];
    static int32_t rcs[PROTO_MAX_COPIES];
    struct msg m;
    for (unsigned i = 0; i < ncopies; i++) {
        cs[i] = &copies[i].c;
        rcs[i] = copies[i].rc;
    }
    end_message(&m, stack, sizeof stack, seq, launch_rc, sync_rc, cs, rcs, ncopies);
    ncopies = 0;
    return follow_ups(request_plan(&m, 0, flags, NULL), flags);
}

/* The drain's MSG_END. Its answer is empty (PLAN_DEFER). */
void snap_send_end(uint64_t seq, CUresult launch_rc, CUresult sync_rc,
                   const struct proto_copy *const *cs, const int32_t *rcs, unsigned n)
{
    char stack[64 + PROTO_MAX_COPIES * sizeof(int32_t)];
    struct msg m;
    end_message(&m, stack, sizeof stack, seq, launch_rc, sync_rc, cs, rcs, n);
    unsigned char reply[sizeof(struct proto_plan)];
    size_t len = 0;
    channel_request(&m, MSG_PLAN, reply, sizeof reply, &len);
    msg_free(&m);
}

/* Takes the answer to MSG_END or MSG_REPEAT: copies to make now that the
 * launch has run, and whether to hold it. Returns whether there are either. */
static bool follow_ups(bool ok, uint32_t *flags)
{
    for (unsigned i = 0; ok && i < ncopies; i++)
        if (copies[i].c.phase != PHASE_AFTER)
            ok = false; /* the launch has run: there is no "before" any more */
    if (!ok)
        ncopies = *flags = 0;
    return ok && (ncopies || (*flags & PLAN_HALT));
}

/* A launch made with a repeated plan: its results go to the ring's reader,
 * unless a scan found something, which is reported and answered at once. */
static bool repeat_finish(struct launch_info *li, CUresult launch_rc, uint32_t *flags)
{
    char stack[256]; /* the slot itself (8 KB) goes on the heap: this is rare */
    struct msg m;
    msg_init(&m, stack, sizeof stack, MSG_REPEAT, li->seq);
    ncopies = 0;
    *flags = 0;
    if (!repeat_end(li, launch_rc, &m)) {
        msg_free(&m);
        return false;
    }
    return follow_ups(request_plan(&m, 0, flags, NULL), flags);
}

/* ---- graph launches: copies by copy nodes (graph.c builds the graph) ---- */

void snap_begin(void)
{
    pthread_mutex_lock(&snap_lock);
    drain_wait_idle();
    saved_mode = relax();
    ncopies = 0;
}

unsigned snap_plan_node(const struct launch_info *li)
{
    char stack[4096];
    struct msg m;
    msg_init(&m, stack, sizeof stack, MSG_BEGIN, li->seq);
    build_begin(&m, li);
    uint32_t flags;
    unsigned before = ncopies;
    request_plan(&m, before, &flags, NULL); /* refused: ncopies stays as it was */
    return ncopies - before;
}

enum proto_resume_mode graph_node_stop(struct launch_info *li)
{
    pthread_mutex_lock(&snap_lock);
    drain_wait_idle();
    CUstreamCaptureMode mode = relax();
    li->stop_only = true;
    char stack[4096];
    struct msg m;
    msg_init(&m, stack, sizeof stack, MSG_BEGIN, li->seq);
    build_begin(&m, li);
    struct proto_plan plan = {0};
    size_t len = 0;
    enum proto_resume_mode how = RESUME_CONTINUE;
    if (channel_request(&m, MSG_PLAN, &plan, sizeof plan, &len) && len == sizeof plan &&
        (plan.flags & PLAN_HALT))
        how = stop_serve(li, PHASE_BEFORE, CUDA_SUCCESS);
    msg_free(&m);
    li->stop_only = false;
    unrelax(mode);
    pthread_mutex_unlock(&snap_lock);
    return how;
}

void graph_node_stop_after(struct launch_info *li, CUresult launch_rc)
{
    pthread_mutex_lock(&snap_lock);
    CUstreamCaptureMode mode = relax();
    if (launch_rc == CUDA_SUCCESS)
        launch_wait_stream(li);
    stop_serve(li, PHASE_AFTER, launch_rc);
    unrelax(mode);
    pthread_mutex_unlock(&snap_lock);
}

unsigned snap_count(void)
{
    return ncopies;
}

const struct proto_copy *snap_copy(unsigned i)
{
    return &copies[i].c;
}

void snap_set_rc(unsigned i, CUresult rc)
{
    copies[i].rc = rc;
}

void snap_end(uint64_t seq, CUresult launch_rc, CUresult sync_rc)
{
    uint32_t flags;
    if (ncopies)
        send_end(seq, launch_rc, sync_rc, &flags); /* no follow-ups for graph launches */
    ncopies = 0;
    unrelax(saved_mode);
    pthread_mutex_unlock(&snap_lock);
}

/* The launch's parameter bytes, one after the other: what a repeated plan is
 * kept by. False if the launch gave none or they do not fit. */
static bool param_key(const struct launch_info *li, unsigned char *key, size_t *n)
{
    const struct func_entry *e = li->e;
    size_t total = 0;
    if (e->nparams < 0 || !(li->params || li->extra))
        return false;
    for (int i = 0; i < e->nparams; i++) {
        const unsigned char *p = param_bytes(li, i);
        if (!p || e->param_size[i] > REPEAT_MAX_BYTES - total)
            return false;
        memcpy(key + total, p, e->param_size[i]);
        total += e->param_size[i];
    }
    *n = total;
    return true;
}

/* Keeps the plan just received if the controller said it may be repeated
 * (digests and scans only; a plan that holds the launch never is). Returns
 * it, or NULL if it was not kept. */
static struct repeat_plan *keep_plan(struct launch_info *li, const unsigned char *key, size_t nkey,
                      uint32_t gen, unsigned long long epoch, unsigned long long removals,
                      uint32_t id, bool gate)
{
    static const struct proto_copy *kept[PROTO_MAX_REPEAT]; /* under snap_lock */
    if (ncopies > PROTO_MAX_REPEAT)
        return NULL;
    for (unsigned i = 0; i < ncopies; i++) {
        if (!(copies[i].c.flags & COPY_TOOL))
            return NULL;
        kept[i] = &copies[i].c;
    }
    return repeat_store(li->e, key, nkey, gen, epoch, removals, id, gate, kept, ncopies, plan_keys,
                 nplan_keys);
}

bool launch_begin(struct launch_info *li)
{
    pthread_mutex_lock(&snap_lock);
    drain_wait_idle(); /* the staging area is the drain's until then */
    gate_serve_newest();
    saved_mode = relax();
    ncopies = 0;
    li->repeat = NULL;
    /* A launch the controller only wants digests or scans of may be one it
     * planned before, byte for byte: then it is not asked again. */
    static unsigned char key[REPEAT_MAX_BYTES]; /* under snap_lock: off the program's stack */
    size_t nkey = 0;
    const volatile struct proto_control *ctl = channel_control();
    uint32_t gen = ctl ? ctl->generation : 0;
    unsigned long long epoch = alloctab_epoch(), removals = alloctab_removals();
    bool keyed = !(li->wants & WANT_STOP) && !li->interrupted && !li->graph &&
                 param_key(li, key, &nkey);
    struct repeat_plan *known = keyed ? repeat_find(li->e, key, nkey, gen) : NULL;
    if (known && (!repeat_copies(known) || repeat_start(li, known, true))) {
        if (li->repeat)
            return true; /* snap_lock and the capture mode stay until launch_finish */
        unrelax(saved_mode);
        pthread_mutex_unlock(&snap_lock);
        return false; /* nothing is wanted of this launch */
    }
    bool ring_full = known != NULL; /* a plan was found, and no room in the ring for it */
    if (li->wants & WANT_CAPTURE)
        modules_send(li->e);
    char stack[4096];
    struct msg m;
    msg_init(&m, stack, sizeof stack, MSG_BEGIN, li->seq);
    build_begin(&m, li);
    uint32_t flags, id;
    bool ok = request_plan(&m, 0, &flags, &id);
    struct repeat_plan *kept = NULL;
    if (ok && keyed && (flags & PLAN_REPEAT) && !(flags & PLAN_HALT))
        kept = keep_plan(li, key, nkey, gen, epoch, removals, id, flags & PLAN_GATE);
    /* This launch is made with the plan just kept, as the launches after it
     * will be: its results come back through the ring, and the program does
     * not wait for the stream to report them (only scans that find something
     * are waited for, as ever). Not when the ring is full: the copies are
     * accepted, and made the ordinary way without waiting for room. */
    if (kept && ncopies && !ring_full && repeat_start(li, kept, false)) {
        li->slot->flags |= RESULT_ASKED;
        ncopies = 0;
        return true; /* snap_lock and the capture mode stay until launch_finish */
    }
    if (ok && (flags & PLAN_HALT))
        li->step = stop_serve(li, PHASE_BEFORE, CUDA_SUCCESS) == RESUME_STEP;
    li->deferred = false;
    if (ok && ncopies && (flags & PLAN_DEFER) && !li->step) {
        static const struct proto_copy *cs[PROTO_MAX_COPIES]; /* under snap_lock */
        for (unsigned i = 0; i < ncopies; i++)
            cs[i] = &copies[i].c;
        li->deferred = drain_start(li, cs, ncopies);
    }
    if (ok && ncopies && !li->deferred) {
        enqueue_copies(li, PHASE_BEFORE);
        run_pieces(li, PHASE_BEFORE);
    }
    if (ok && (ncopies || li->step))
        return true; /* snap_lock and the capture mode stay until launch_finish */
    unrelax(saved_mode);
    pthread_mutex_unlock(&snap_lock);
    return false;
}

CUresult launch_wait_stream(const struct launch_info *li)
{
    CUevent ev = NULL;
    CUresult rc = real_cuEventCreate ? real_cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING)
                                     : CUDA_ERROR_NOT_FOUND;
    if (rc != CUDA_SUCCESS)
        return rc;
    cuEventRecord_fn record = li->ptsz ? real_cuEventRecord_ptsz : real_cuEventRecord;
    rc = record ? record(ev, li->stream) : CUDA_ERROR_NOT_FOUND;
    if (rc == CUDA_SUCCESS)
        rc = gate_wait_event(ev, 0); /* under snap_lock: no gate is served meanwhile */
    real_cuEventDestroy_v2(ev);
    return rc;
}

CUresult stop_copy_wait(const struct launch_info *li, CUdeviceptr src, size_t width, size_t height,
                        size_t pitch, size_t offset)
{
    size_t size;
    char *area = staging_area(&size);
    cuMemcpy2DAsync_v2_fn copy2d = li->ptsz ? real_cuMemcpy2DAsync_v2_ptsz : real_cuMemcpy2DAsync_v2;
    if (!area || !copy2d)
        return CUDA_ERROR_NOT_FOUND;
    CUDA_MEMCPY2D m = rows_copy(src, pitch, area + offset, 0, width, height);
    CUresult rc = copy2d(&m, li->stream);
    return rc == CUDA_SUCCESS ? launch_wait_stream(li) : rc;
}

CUresult stop_write_wait(const struct launch_info *li, CUdeviceptr dst, size_t size, size_t offset)
{
    size_t area_size;
    char *area = staging_area(&area_size);
    cuMemcpy2DAsync_v2_fn copy2d = li->ptsz ? real_cuMemcpy2DAsync_v2_ptsz : real_cuMemcpy2DAsync_v2;
    if (!area || !copy2d)
        return CUDA_ERROR_NOT_FOUND;
    /* A device address: the driver refuses one that is not (the controller writes only
     * inside the device allocations it knows). */
    CUDA_MEMCPY2D m = {.srcMemoryType = CU_MEMORYTYPE_HOST,
                       .srcHost = area + offset,
                       .srcPitch = size,
                       .dstMemoryType = CU_MEMORYTYPE_DEVICE,
                       .dstDevice = dst,
                       .dstPitch = size,
                       .WidthInBytes = size,
                       .Height = 1};
    CUresult rc = copy2d(&m, li->stream);
    return rc == CUDA_SUCCESS ? launch_wait_stream(li) : rc;
}

/* Each round makes the "after" copies, waits for the kernel and them (the
 * controller reads the staging area as soon as it hears back) and reports
 * them; the answer may ask for follow-up copies, which make the next round.
 * The controller asks once per finding; the bound only keeps a confused one
 * from holding the launch: copies it asks for past it are not made. Returns
 * whether an answer asked to hold the launch (PLAN_HALT). */
static bool after_rounds(struct launch_info *li, CUresult launch_rc, bool more, int round)
{
    bool halt = false;
    for (; more; round++) {
        if (launch_rc == CUDA_SUCCESS) {
            enqueue_copies(li, PHASE_AFTER);
            run_pieces(li, PHASE_AFTER);
        }
        CUresult sync_rc = launch_wait_stream(li);
        uint32_t flags;
        if (!ncopies || !send_end(li->seq, launch_rc, sync_rc, &flags))
            break;
        if (flags & PLAN_HALT)
            halt = true;
        if (round == 4)
            break;
    }
    ncopies = 0;
    return halt;
}

void launch_finish(struct launch_info *li, CUresult launch_rc)
{
    /* A repeated plan's launch reports nothing unless a scan found something. */
    int round = 0;
    bool more = true;
    if (li->deferred) {
        drain_finish(li, launch_rc); /* the launch goes on; the drain reports it */
        more = false;
    }
    if (li->repeat) {
        uint32_t flags;
        more = repeat_finish(li, launch_rc, &flags);
        if (flags & PLAN_HALT)
            li->step = true;
        round = 1;
    }
    if (after_rounds(li, launch_rc, more, round))
        li->step = true;
    /* After MSG_END: the staging area is free again for the stop's reads. */
    if (li->step)
        stop_serve(li, PHASE_AFTER, launch_rc);
    unrelax(saved_mode);
    pthread_mutex_unlock(&snap_lock);
}

bool snap_locked(unsigned ms, void (*f)(void *), void *arg)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += ms / 1000;
    until.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    if (pthread_mutex_timedlock(&snap_lock, &until) != 0)
        return false;
    f(arg);
    pthread_mutex_unlock(&snap_lock);
    return true;
}

bool snap_serve_gate(struct proto_result_slot *slot, uint64_t seq, CUstream stream)
{
    drain_wait_idle(); /* the staging area is the drain's until then */
    /* From here the kernel waits TOOL_SERVE_NS, not TOOL_HOLD_NS (tooljob.h). */
    uint32_t held = GATE_HELD;
    if (!__atomic_compare_exchange_n(&slot->gate, &held, GATE_SERVING, false, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE))
        return false; /* opened meanwhile by a thread that had to wait on the GPU */
    /* The launch is this thread's to report from now on: the ring's reader
     * skips it whatever the gate comes to read. */
    slot->flags |= RESULT_TAKEN;
    CUstreamCaptureMode mode = relax();
    char stack[256]; /* the slot itself (16 KB) goes on the heap: this is rare */
    struct msg m;
    msg_init(&m, stack, sizeof stack, MSG_REPEAT, seq);
    msg_add(&m, slot, sizeof *slot);
    ncopies = 0;
    uint32_t flags = 0;
    bool ok = request_plan(&m, 0, &flags, NULL);
    /* The launch's own stream is held: the copies go on `stream`. A hold it
     * asks for (PLAN_HALT) is not kept: the launching thread is long gone. */
    struct launch_info li = {.stream = stream, .seq = seq};
    after_rounds(&li, (CUresult)slot->launch_rc, follow_ups(ok, &flags), 1);
    unrelax(mode);
    return ok;
}
