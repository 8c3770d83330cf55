/*
 * cudump's own kernel (shim/gpu/tools.cu): content digests and NaN/Inf scans
 * of buffers, run on the launch's stream in place of copies (COPY_TOOL), so
 * that only a struct proto_tool_result per buffer crosses the bus.
 *
 * The module is loaded from PTX once per context, with the driver's own JIT:
 * no toolkit is needed where the shim is built or run. Each context also gets
 * device scratch for the kernel's accumulators (shim/tooljob.h): one per copy
 * of a plan, and PROTO_MAX_REPEAT per slot of the result ring, so that the
 * launches of repeated plans, which nobody waits for, never share one; and a
 * word per slot for the launch that holds a gated launch's stream. The
 * kernel zeroes them after use; the scratch is zeroed once, here.
 *
 * Results are written by the kernel straight into host memory (the staging
 * area, the result ring), pinned and mapped: no copy and no memset per
 * launch, one kernel launch for up to TOOL_JOBS buffers. Inside a graph
 * launch the same jobs become kernel nodes of the graph (graph.c asks for
 * them: tools_graph_jobs, tools_pack), checked here the same way.
 *
 * A copy that reads outside an allocation fails with an error code; a kernel
 * that does faults the whole context. So a tool only runs over a byte range
 * that lies inside one allocation the shim knows (or the driver reports), and
 * a scan only over elements aligned to their size; anything else is refused
 * with CUDA_ERROR_INVALID_VALUE and the controller reports it. A repeated
 * plan's copies are looked up once: while no tracked allocation goes away they
 * stay inside theirs (tool_request.checked).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "alloctab.h"
#include "ctxlife.h"
#include "gate.h"
#include "handoff.h"
#include "interpose.h"
#include "staging.h"
#include "stream.h"
#include "toolblocks.h"
#include "tools.h"
#include "tooljob.h"
#include "toollaunch.h"
#include "tools_ptx.h"

_Static_assert(sizeof(struct proto_tool_result) == PROTO_TOOL_RESULT, "tool result size");
_Static_assert(sizeof(struct proto_result_slot) == PROTO_RESULT_SLOT_SIZE, "result slot size");
_Static_assert(sizeof(struct tool_job) == 96, "tool_job has no implicit padding");
_Static_assert(sizeof(struct tool_jobs) <= 4096, "the kernel's parameter fits any launch");
_Static_assert(PROTO_MAX_COPIES <= PROTO_MAX_REPEAT, "run_on takes any plan's requests");
_Static_assert(offsetof(struct proto_gate_mail, seq) == TOOL_MAIL_SEQ * 8 &&
                   offsetof(struct proto_gate_mail, done) == TOOL_MAIL_DONE * 8 &&
                   offsetof(struct proto_gate_mail, src) == TOOL_MAIL_SRC * 8 &&
                   offsetof(struct proto_gate_mail, dst) == TOOL_MAIL_DST * 8 &&
                   offsetof(struct proto_gate_mail, width) == TOOL_MAIL_WIDTH * 8 &&
                   offsetof(struct proto_gate_mail, height) == TOOL_MAIL_HEIGHT * 8 &&
                   offsetof(struct proto_gate_mail, pitch) == TOOL_MAIL_PITCH * 8,
               "the kernel reads the mailbox's words where protocol.h puts them");

enum {
    MAX_TOOL_CONTEXTS = 32,
    ACC_BYTES = TOOL_ACC_WORDS * 8,
};

struct tool_ctx {
    struct ctx_key key;     /* its context (key.ctx NULL: a free entry) */
    CUresult rc;            /* why the module or scratch could not be had */
    CUfunction fn;
    bool waits;             /* fn is the Hopper build's, which waits for the kernel before
                             * it: launched with programmatic stream serialization */
    CUdeviceptr scratch;    /* accumulators: PROTO_MAX_COPIES, then the ring's; then
                             * one word per ring slot for holds (tooljob.h's hold_acc) */
    unsigned accs;          /* how many accumulators */
    unsigned holds;         /* and hold words */
    unsigned max_blocks;    /* per job: enough blocks in flight to fill the GPU */
    struct view {           /* where the device sees the staging area and the result ring */
        char *host;
        size_t size;
        CUdeviceptr dev;
    } views[2];
    CUfunction list_fn;     /* the batched scan (cudump_scan_list), or NULL */
    struct list_area *list; /* its lists and results, made at its first use */
    CUdeviceptr list_acc;   /* and its accumulators: TOOL_LIST_SLOTS x TOOL_LIST_MAX */
    CUdeviceptr list_dev;   /* each slot's jobs and starts, copied there before its launch */
    CUresult list_rc;       /* why those could not be had */
};

/* One slot of the batched scan's area: pinned host memory the device maps, so that
 * the shim writes the list and reads the results with no copy. */
struct list_slot {
    struct tool_job jobs[TOOL_LIST_MAX];
    unsigned starts[TOOL_LIST_MAX];
    struct proto_tool_result results[TOOL_LIST_MAX];
};
struct list_area {
    struct list_slot slot[TOOL_LIST_SLOTS];
};

/* Contexts the kernel is loaded in: a handful at once per process at most.
 * An entry goes with its context (tools_forget, or its key says the context
 * ended): its module and scratch went with it. */
static pthread_mutex_t tools_lock = PTHREAD_MUTEX_INITIALIZER;
static struct tool_ctx tools[MAX_TOOL_CONTEXTS];
static unsigned ntools;
/* Counts contexts forgotten: results of the batched scan lie in memory that went with
 * its context (tools_list_epoch). */
static _Atomic unsigned long long list_epoch;

unsigned long long tools_list_epoch(void)
{
    return atomic_load_explicit(&list_epoch, memory_order_acquire);
}

void tools_reset_after_fork(void)
{
    /* The child has no GPU state of the parent's: forget every context. */
    pthread_mutex_init(&tools_lock, NULL);
    ntools = 0;
}

static unsigned element_size(unsigned mode)
{
    return mode == TOOL_SCAN_F64 ? 8 : mode == TOOL_SCAN_F16 || mode == TOOL_SCAN_BF16 ? 2 : 4;
}

static void load_kernel(struct tool_ctx *t, const struct launch_info *li)
{
    CUmodule module = NULL;
    cuModuleGetFunction_fn get = shim_real_cuModuleGetFunction();
    cuMemAlloc_fn alloc = shim_real_cuMemAlloc_v2();
    cuMemsetD8Async_fn zero =
        li->ptsz ? shim_real_cuMemsetD8Async_ptsz() : shim_real_cuMemsetD8Async();
    uint32_t slots = 0;
    struct proto_result_slot *ring = results_ring(&slots);
    t->accs = PROTO_MAX_COPIES + slots * PROTO_MAX_REPEAT;
    t->holds = slots;
    size_t bytes = (size_t)(t->accs + t->holds) * ACC_BYTES;
    cuModuleLoadData_fn load = shim_real_cuModuleLoadData();
    t->rc = load && get && alloc && zero ? CUDA_SUCCESS : CUDA_ERROR_NOT_SUPPORTED;
    CUdevice dev;
    int major = 0, sms = 0;
    bool have_dev = real_cuCtxGetDevice && real_cuDeviceGetAttribute &&
                    real_cuCtxGetDevice(&dev) == CUDA_SUCCESS;
    /* Hopper and later: the build that waits for the kernel before it, if the driver
     * takes it; else the one for every GPU. */
    if (t->rc == CUDA_SUCCESS && have_dev &&
        real_cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev) ==
            CUDA_SUCCESS &&
        major >= 9 && load(&module, tools_ptx_sm90) == CUDA_SUCCESS) {
        /* (Its function not found, the module stays, unused, until the context goes.) */
        t->waits = get(&t->fn, module, "cudump_tools") == CUDA_SUCCESS;
    }
    if (t->rc == CUDA_SUCCESS && !t->waits) {
        t->rc = load(&module, tools_ptx);
        if (t->rc == CUDA_SUCCESS)
            t->rc = get(&t->fn, module, "cudump_tools");
    }
    /* The batched scan, from the same module (PTX older than it lacks it: NULL). */
    if (t->rc == CUDA_SUCCESS && get(&t->list_fn, module, "cudump_scan_list") != CUDA_SUCCESS)
        t->list_fn = NULL;
    if (t->rc == CUDA_SUCCESS)
        t->rc = alloc(&t->scratch, bytes);
    /* Zeroed before any kernel of this context can use it: ordered on this
     * stream, and waited for, since later kernels may run on other streams. */
    if (t->rc == CUDA_SUCCESS)
        t->rc = zero(t->scratch, 0, bytes, li->stream);
    if (t->rc == CUDA_SUCCESS)
        t->rc = gate_wait_stream(li);
    if (t->rc == CUDA_SUCCESS && have_dev &&
        real_cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev) ==
            CUDA_SUCCESS &&
        sms > 0)
        t->max_blocks = (unsigned)sms * 8;
    /* Results are written into these two areas only: their device addresses,
     * asked for once per context rather than per result. */
    t->views[0].host = staging_area(&t->views[0].size);
    t->views[1] = (struct view){(char *)ring, (size_t)slots * sizeof *ring, 0};
    for (int i = 0; i < 2 && t->rc == CUDA_SUCCESS; i++) {
        if (t->views[i].host && real_cuMemHostGetDevicePointer_v2 &&
            real_cuMemHostGetDevicePointer_v2(&t->views[i].dev, t->views[i].host, 0) !=
                CUDA_SUCCESS)
            t->views[i].dev = 0;
    }
}

/* The device's address of `size` bytes in staging or the result ring; 0 if none. */
static CUdeviceptr device_address(const struct tool_ctx *t, const void *host, size_t size)
{
    if (!host)
        return 0;
    for (int i = 0; i < 2; i++) {
        const struct view *v = &t->views[i];
        if (v->dev && (const char *)host >= v->host &&
            (const char *)host + size <= v->host + v->size)
            return v->dev + (CUdeviceptr)((const char *)host - v->host);
    }
    return 0;
}

/* The context's kernel and scratch, loaded on first use, and again in a
 * context that ended and came back under the same handle (ctx is current);
 * *loaded: now (its scratch zeroed on the launch's stream, and waited for). */
static const struct tool_ctx *tool_context(CUcontext ctx, const struct launch_info *li,
                                           bool *loaded)
{
    pthread_mutex_lock(&tools_lock);
    struct tool_ctx *t = NULL, *free_entry = NULL;
    bool ended = false;
    for (unsigned i = 0; i < ntools && !t; i++) {
        enum ctx_match m = ctx_key_match(&tools[i].key, ctx);
        if (m != CTX_OTHER) {
            t = &tools[i];
            ended = m == CTX_ENDED;
        } else if (!tools[i].key.ctx && !free_entry) {
            free_entry = &tools[i];
        }
    }
    if (!t && !free_entry && ntools < MAX_TOOL_CONTEXTS)
        free_entry = &tools[ntools++];
    if (ended)
        atomic_fetch_add_explicit(&list_epoch, 1, memory_order_acq_rel);
    if (!t || ended) {
        t = t ? t : free_entry;
        if (t) {
            *t = (struct tool_ctx){.max_blocks = 256};
            ctx_key_set(&t->key, ctx);
            load_kernel(t, li);
            *loaded = true;
        }
    }
    pthread_mutex_unlock(&tools_lock);
    return t;
}

void tools_forget(const struct ctx_key *gone)
{
    pthread_mutex_lock(&tools_lock);
    for (unsigned i = 0; i < ntools; i++)
        if (ctx_key_is(&tools[i].key, gone)) {
            tools[i] = (struct tool_ctx){0};
            atomic_fetch_add_explicit(&list_epoch, 1, memory_order_acq_rel);
        }
    pthread_mutex_unlock(&tools_lock);
}

/* Whether the bytes a copy reads lie inside one allocation; *tracked: one
 * the shim tracks (its removal would be seen), not one the driver reported. */
static bool inside_allocation(const struct proto_copy *c, bool *tracked)
{
    struct alloc_info a;
    uint64_t span, end, limit;
    if (__builtin_mul_overflow(c->height - 1, c->pitch, &span) ||
        __builtin_add_overflow(span, c->width, &span) ||
        __builtin_add_overflow(c->src, span, &end) || !alloc_resolve(c->src, true, &a) ||
        __builtin_add_overflow(a.base, a.size, &limit))
        return false;
    *tracked = a.kind != AK_RANGE;
    return c->src >= a.base && end <= limit;
}

static CUresult tool_check(const struct proto_copy *c, unsigned mode, bool *tracked)
{
    unsigned sum = tool_sum(c);
    if (mode >= TOOL_MODES || sum >= TOOL_MODES || (sum && mode != TOOL_DIGEST))
        return CUDA_ERROR_INVALID_VALUE;
    unsigned esize = element_size(mode);
    if (mode != TOOL_DIGEST &&
        (c->src % esize || c->width % esize || (c->height > 1 && c->pitch % esize)))
        return CUDA_ERROR_INVALID_VALUE;
    /* A digest's sum reads whole elements, each aligned (the kernel skips it otherwise). */
    esize = element_size(sum);
    if (sum && (c->src % esize || (c->height > 1 && c->pitch % esize)))
        return CUDA_ERROR_INVALID_VALUE;
    return inside_allocation(c, tracked) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* How the context's kernel is launched on the launch's stream: so that it waits
 * on the GPU only right after the program's plain launch (TOOLS_RIGHT_AFTER),
 * where the kernel before it is known: elsewhere (before a launch, behind the
 * flight recorder's mark) it is launched plainly, and its wait returns at once. */
static struct tool_launcher launcher_for(const struct launch_info *li, const struct tool_ctx *t,
                                         unsigned how, unsigned long long begun)
{
    struct tool_launcher l = {
        li->ptsz ? shim_real_cuLaunchKernel_ptsz() : shim_real_cuLaunchKernel(), NULL, begun};
    if (t->waits && (how & TOOLS_RIGHT_AFTER))
        l.ex = li->ptsz ? shim_real_cuLaunchKernelEx_ptsz() : shim_real_cuLaunchKernelEx();
    return l;
}

/* Launches the kernel over the jobs gathered so far. */
static CUresult launch_jobs(const struct launch_info *li, const struct tool_ctx *t,
                           struct tool_jobs *jobs, unsigned grid, unsigned how,
                           unsigned long long begun)
{
    struct tool_launcher l = launcher_for(li, t, how, begun);
    return toollaunch(&l, t->fn, grid, li->stream, jobs);
}

/* The requests whose checks pass, in order, as jobs; those that mark, mark at
 * `mark` (0: none does). */
static unsigned accept_jobs(const struct tool_ctx *t, struct tool_request *reqs, unsigned n,
                            CUdeviceptr mark, struct tool_job *jobs, struct tool_request **of)
{
    unsigned njobs = 0;
    for (unsigned i = 0; i < n; i++) {
        struct tool_request *r = &reqs[i];
        const struct proto_copy *c = r->copy;
        unsigned mode = tool_mode(c);
        CUdeviceptr result = device_address(t, r->result, sizeof *r->result);
        bool tracked = false;
        CUresult rc = r->acc >= t->accs ? CUDA_ERROR_INVALID_VALUE
                      : !result         ? CUDA_ERROR_NOT_SUPPORTED /* not pinned and mapped */
                      : r->checked      ? CUDA_SUCCESS
                                        : tool_check(c, mode, &tracked);
        r->result->rc = rc;
        r->checked = rc == CUDA_SUCCESS && (r->checked || tracked);
        if (rc != CUDA_SUCCESS)
            continue;
        jobs[njobs] = (struct tool_job){
            .src = c->src, .width = c->width, .height = c->height, .pitch = c->pitch,
            .result = result, .acc = t->scratch + (CUdeviceptr)r->acc * ACC_BYTES,
            .tag = r->tag, .mark = r->marks ? mark : 0,
            .before = device_address(t, r->before, sizeof *r->before),
            .mode = mode | tool_sum(c) << 8 | (mark && !r->ahead ? TOOL_HOLDS : 0),
            .blocks = tool_job_blocks(c->width * c->height, mode == TOOL_DIGEST,
                                      t->max_blocks)};
        of[njobs++] = r;
    }
    return njobs;
}

static void clear_words(const struct launch_info *li, CUdeviceptr words)
{
    cuMemsetD8Async_fn zero =
        li->ptsz ? shim_real_cuMemsetD8Async_ptsz() : shim_real_cuMemsetD8Async();
    if (zero)
        zero(words, 0, 2 * sizeof(unsigned long long), li->stream);
}

/* Whether the launcher thread may launch the kernel on this launch's stream:
 * not on a per-thread default stream, which would be the launcher's own. */
static bool named_alike(const struct launch_info *li)
{
    return !li->ptsz && li->stream != CU_STREAM_PER_THREAD;
}

/* Whether two jobs read the same bytes the same way. */
static bool same_job(const struct tool_job *a, const struct tool_job *b)
{
    return a->src == b->src && a->width == b->width && a->height == b->height &&
           a->pitch == b->pitch && (a->mode & 0xffffu) == (b->mode & 0xffffu);
}

/* A buffer a launch writes is most often one the next launch reads: the scans
 * after the launch and those made ahead for the next then read it twice in one
 * launch of the kernel (and a kernel given one buffer as two arguments has it
 * twice in one phase). A job that neither marks nor counts for a hold (one made
 * ahead, a digest) is folded into another job that reads the same bytes the
 * same way, as its twin (tooljob.h); twin_of[j] is then the request of job j's
 * twin. Only lists of up to TOOL_JOBS are looked through (each job against
 * every other: a microsecond at most), which is every list but a multi-tensor
 * kernel's. Returns how many jobs are left. */
static unsigned fold_twins(struct tool_job *all, struct tool_request **of,
                           struct tool_request **twin_of, unsigned total)
{
    enum { FOLD_MAX = TOOL_JOBS };
    for (unsigned j = 0; j < total; j++)
        twin_of[j] = NULL;
    if (total > FOLD_MAX)
        return total;
    bool folded[FOLD_MAX] = {false};
    for (unsigned i = 0; i < total; i++) {
        if (all[i].mark || (all[i].mode & TOOL_HOLDS) || twin_of[i])
            continue; /* (a job with a twin keeps it: one twin a job) */
        for (unsigned j = 0; j < total; j++)
            if (j != i && !folded[j] && !twin_of[j] && same_job(&all[i], &all[j])) {
                all[j].twin = all[i].result;
                all[j].twin_tag = all[i].tag;
                twin_of[j] = of[i];
                folded[i] = true;
                break;
            }
    }
    unsigned kept = 0;
    for (unsigned i = 0; i < total; i++) {
        if (folded[i])
            continue;
        all[kept] = all[i];
        of[kept] = of[i];
        twin_of[kept++] = twin_of[i];
    }
    return kept;
}

/* Runs the accepted jobs, TOOL_JOBS per launch; the last launch holds the
 * stream at `hold` if it is given. With TOOLS_HAND_OFF, jobs that take one
 * launch are handed to the launcher thread (handoff.h). Returns whether the
 * launch that holds was made (or handed over). */
static bool run_on(const struct launch_info *li, const struct tool_ctx *t,
                   struct tool_request *reqs, unsigned n, const struct tool_hold *hold,
                   unsigned how, unsigned long long begun)
{
    static struct tool_job all[PROTO_MAX_REPEAT];      /* under the staging lock; 40 KB */
    static struct tool_request *of[PROTO_MAX_REPEAT], *twin_of[PROTO_MAX_REPEAT];
    CUdeviceptr gate = hold ? device_address(t, hold->gate, sizeof *hold->gate) : 0;
    CUdeviceptr words = gate && hold->acc < t->holds
                            ? t->scratch + (CUdeviceptr)(t->accs + hold->acc) * ACC_BYTES
                            : 0;
    unsigned total = accept_jobs(t, reqs, n < PROTO_MAX_REPEAT ? n : PROTO_MAX_REPEAT,
                                 words ? words + 8 : 0, all, of);
    for (unsigned i = PROTO_MAX_REPEAT; i < n; i++)
        reqs[i].result->rc = CUDA_ERROR_INVALID_VALUE;
    total = fold_twins(all, of, twin_of, total);
    bool held = false;
    struct tool_jobs jobs; /* only the jobs used are filled in: the kernel reads no further */
    for (unsigned first = 0; first < total; first += TOOL_JOBS) {
        /* Only the first launch follows the program's own: the next follow cudump's. */
        if (first)
            how &= ~(unsigned)TOOLS_RIGHT_AFTER;
        unsigned k = total - first < TOOL_JOBS ? total - first : TOOL_JOBS, grid = 0;
        bool last = first + k == total;
        memcpy(jobs.job, all + first, k * sizeof *all);
        for (unsigned i = 0; i < k; i++)
            grid += all[first + i].blocks;
        jobs.njobs = k;
        jobs.hold_jobs = 0;
        for (unsigned i = 0; i < k; i++)
            jobs.hold_jobs += (jobs.job[i].mode & TOOL_HOLDS) != 0;
        /* Only the held launch's own jobs count for the hold: a launch with none of
         * them holds nothing (shim/ahead.h puts them last, so the last launch has some). */
        jobs.hold = last && words && jobs.hold_jobs ? gate : 0;
        jobs.hold_acc = words;
        jobs.hold_mail = jobs.hold && hold->mail ? device_address(t, hold->mail, sizeof *hold->mail)
                                                 : 0;
        if ((how & TOOLS_HAND_OFF) && k == total && named_alike(li)) {
            struct proto_tool_result *results[2 * TOOL_JOBS];
            unsigned nres = 0;
            for (unsigned i = 0; i < k; i++) {
                results[nres++] = of[i]->result;
                if (twin_of[i])
                    results[nres++] = twin_of[i]->result;
            }
            /* Each result's rc says CUDA_SUCCESS already (accept_jobs); a launch
             * that fails there says otherwise, and opens the gate. */
            struct tool_launcher l = launcher_for(li, t, how, begun);
            if (handoff_launch(&l, t->key.ctx, t->fn, grid, li->stream, &jobs, results, nres,
                               jobs.hold ? hold->gate : NULL))
                return jobs.hold != 0;
        }
        CUresult rc = launch_jobs(li, t, &jobs, grid, how, begun);
        for (unsigned i = 0; i < k; i++) {
            of[first + i]->result->rc = rc;
            if (twin_of[first + i])
                twin_of[first + i]->result->rc = rc;
        }
        held = jobs.hold && rc == CUDA_SUCCESS;
        /* The launch that zeroes the hold's words did not run: a mark an earlier
         * one left would hold the slot's next gated launch for nothing. */
        if (last && words && rc != CUDA_SUCCESS && first > 0)
            clear_words(li, words);
    }
    return held;
}

CUresult tools_mail_target(CUdeviceptr src, size_t width, size_t height, size_t pitch,
                           const void *host, CUdeviceptr *dst)
{
    /* The kernel reads the bytes as they are: where they are not all one
     * allocation's it would fault, and take the program's context with it. The
     * kernel counts in 32 bits (tools.cu). */
    struct proto_copy c = {.src = src, .width = width, .height = height, .pitch = pitch};
    bool tracked = false;
    size_t size;
    if (!width || !height || (height > 1 && pitch < width) ||
        __builtin_mul_overflow(width, height, &size) || size >= (1ull << 32) ||
        !inside_allocation(&c, &tracked))
        return CUDA_ERROR_INVALID_VALUE;
    CUcontext ctx = NULL;
    if (!real_cuCtxGetCurrent || real_cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || !ctx)
        return CUDA_ERROR_INVALID_CONTEXT;
    *dst = 0;
    pthread_mutex_lock(&tools_lock);
    for (unsigned i = 0; i < ntools && !*dst; i++)
        if (ctx_key_match(&tools[i].key, ctx) == CTX_SAME)
            *dst = device_address(&tools[i], host, size);
    pthread_mutex_unlock(&tools_lock);
    return *dst ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

bool tools_readable(const struct proto_copy *c)
{
    bool tracked = false;
    return tool_check(c, tool_mode(c), &tracked) == CUDA_SUCCESS;
}

unsigned tools_pack(struct tool_jobs *out, const struct tool_job *jobs, unsigned k)
{
    /* Zeroed whole: a graph node keeps every byte of its parameter, used or not. */
    memset(out, 0, sizeof *out);
    unsigned grid = 0;
    k = k < TOOL_JOBS ? k : TOOL_JOBS;
    memcpy(out->job, jobs, k * sizeof *jobs);
    for (unsigned i = 0; i < k; i++)
        grid += jobs[i].blocks;
    out->njobs = k;
    return grid;
}

/* The stream's context made current (if it is not) and cudump's kernel in it:
 * CUDA_SUCCESS with *t, or why not. ctx_leave(*scope) afterwards either way.
 * *loaded: the kernel was loaded now, with work of its own put on the stream. */
static CUresult tools_enter(const struct launch_info *li, struct ctx_scope *scope,
                            const struct tool_ctx **t, bool *loaded)
{
    CUcontext ctx = stream_ctx(li);
    *scope = ctx_enter(ctx);
    *t = NULL;
    *loaded = false;
    if (!scope->ok)
        return CUDA_ERROR_INVALID_CONTEXT;
    staging_follow_contexts();
    *t = tool_context(ctx, li, loaded);
    return *t == NULL ? CUDA_ERROR_OUT_OF_MEMORY : (*t)->rc;
}

CUresult tools_graph_jobs(const struct launch_info *li, struct tool_request *reqs, unsigned n,
                          struct tool_job *jobs, struct tool_request **of, unsigned *njobs,
                          CUfunction *fn)
{
    *njobs = 0;
    *fn = NULL;
    if (!n)
        return CUDA_SUCCESS;
    struct ctx_scope scope;
    const struct tool_ctx *t;
    bool loaded;
    CUresult rc = tools_enter(li, &scope, &t, &loaded);
    if (rc == CUDA_SUCCESS) {
        /* Every plan copy has its own accumulator (acc < PROTO_MAX_COPIES), as on the
         * stream: the graph's scans run while the staging lock is held and are waited
         * for before it is let go, so no other launch of the kernel shares one. */
        *njobs = accept_jobs(t, reqs, n < PROTO_MAX_COPIES ? n : PROTO_MAX_COPIES, 0, jobs, of);
        *fn = t->fn;
        for (unsigned i = PROTO_MAX_COPIES; i < n; i++)
            reqs[i].result->rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        for (unsigned i = 0; i < n; i++)
            reqs[i].result->rc = rc;
    }
    ctx_leave(scope);
    return rc;
}

bool tools_run(const struct launch_info *li, struct tool_request *reqs, unsigned n,
               const struct tool_hold *hold, unsigned how, unsigned long long begun)
{
    if (!n)
        return false;
    struct ctx_scope scope;
    const struct tool_ctx *t;
    bool loaded;
    CUresult rc = tools_enter(li, &scope, &t, &loaded);
    bool held = false;
    if (rc == CUDA_SUCCESS) {
        /* Loading it put a memset and a wait on the stream after the program's launch. */
        if (loaded)
            how &= ~(unsigned)TOOLS_RIGHT_AFTER;
        held = run_on(li, t, reqs, n, hold, how, begun);
    } else {
        for (unsigned i = 0; i < n; i++)
            reqs[i].result->rc = rc;
    }
    ctx_leave(scope);
    return held;
}

/* The batched scan's area and accumulators in the current context (t's), made at its
 * first use: pinned host memory the device maps, and zeroed device scratch (the kernel
 * zeroes each accumulator after use, as cudump_tools does). */
static CUresult list_ready(struct tool_ctx *t, const struct launch_info *li)
{
    if (t->list || t->list_rc != CUDA_SUCCESS)
        return t->list_rc;
    cuMemAlloc_fn alloc = shim_real_cuMemAlloc_v2();
    cuMemsetD8Async_fn zero =
        li->ptsz ? shim_real_cuMemsetD8Async_ptsz() : shim_real_cuMemsetD8Async();
    size_t acc_bytes = (size_t)TOOL_LIST_SLOTS * TOOL_LIST_MAX * ACC_BYTES;
    /* Host memory of the shim's own, registered in this context as the staging area is:
     * a registration ends with its context, and so does this entry (tools_list_epoch).
     * The memory itself is kept: a window may still read it once (its results stale). */
    void *area = aligned_alloc(4096, (sizeof *t->list + 4095) / 4096 * 4096);
    CUresult rc = !area || !t->list_fn || !alloc || !zero || !real_cuMemHostRegister_v2 ||
                          !real_cuMemHostGetDevicePointer_v2
                      ? CUDA_ERROR_NOT_SUPPORTED
                      : real_cuMemHostRegister_v2(area, sizeof *t->list,
                                                  CU_MEMHOSTREGISTER_PORTABLE |
                                                      CU_MEMHOSTREGISTER_DEVICEMAP);
    if (rc == CUDA_SUCCESS)
        rc = alloc(&t->list_acc, acc_bytes);
    /* (Without room for it, the kernel reads each slot's list across the bus.) */
    if (rc == CUDA_SUCCESS &&
        alloc(&t->list_dev, TOOL_LIST_SLOTS * offsetof(struct list_slot, results)) != CUDA_SUCCESS)
        t->list_dev = 0;
    if (rc == CUDA_SUCCESS)
        rc = zero(t->list_acc, 0, acc_bytes, li->stream);
    if (rc == CUDA_SUCCESS) {
        memset(area, 0, sizeof *t->list);
        t->list = area;
    } else if (!t->list_acc) {
        free(area); /* (registered and then short of device memory: kept, once a context) */
    }
    t->list_rc = rc;
    return rc;
}

/* A job's device address of host memory in the batched scan's area. */
static CUdeviceptr list_device(const void *host)
{
    CUdeviceptr dev = 0;
    return real_cuMemHostGetDevicePointer_v2((void *)&dev, (void *)host, 0) == CUDA_SUCCESS
               ? dev
               : 0;
}

struct proto_tool_result *tools_list_run(const struct launch_info *li,
                                         const struct proto_copy *const *copies, unsigned n,
                                         unsigned slot, uint64_t tag, CUresult *rc)
{
    *rc = n > TOOL_LIST_MAX || slot >= TOOL_LIST_SLOTS ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
    if (*rc != CUDA_SUCCESS || !n)
        return NULL;
    struct ctx_scope scope;
    const struct tool_ctx *ct;
    bool loaded;
    *rc = tools_enter(li, &scope, &ct, &loaded);
    struct proto_tool_result *results = NULL;
    if (*rc == CUDA_SUCCESS) {
        pthread_mutex_lock(&tools_lock);
        struct tool_ctx *t = (struct tool_ctx *)ct;
        *rc = list_ready(t, li);
        struct list_slot *ls = t->list ? &t->list->slot[slot] : NULL;
        pthread_mutex_unlock(&tools_lock);
        CUdeviceptr jobs_dev = ls ? list_device(ls->jobs) : 0;
        CUdeviceptr starts_dev = ls ? list_device(ls->starts) : 0;
        CUdeviceptr results_dev = ls ? list_device(ls->results) : 0;
        if (*rc == CUDA_SUCCESS && !(jobs_dev && starts_dev && results_dev))
            *rc = CUDA_ERROR_NOT_SUPPORTED;
        unsigned njobs = 0, grid = 0;
        for (unsigned i = 0; *rc == CUDA_SUCCESS && i < n; i++) {
            const struct proto_copy *c = copies[i];
            unsigned mode = tool_mode(c);
            bool tracked = false;
            struct proto_tool_result *r = &ls->results[i];
            r->rc = mode == TOOL_DIGEST ? CUDA_ERROR_INVALID_VALUE : tool_check(c, mode, &tracked);
            r->words[0] = r->words[1] = 0;
            if (r->rc != CUDA_SUCCESS) {
                r->done = tag; /* nothing of the GPU's to wait for */
                continue;
            }
            r->done = 0;
            unsigned blocks = tool_job_blocks(c->width * c->height, false, t->max_blocks);
            ls->jobs[njobs] = (struct tool_job){
                .src = c->src, .width = c->width, .height = c->height, .pitch = c->pitch,
                .result = results_dev + (CUdeviceptr)i * sizeof *r,
                .acc = t->list_acc +
                       (CUdeviceptr)(slot * TOOL_LIST_MAX + njobs) * ACC_BYTES,
                .tag = tag, .mode = mode, .blocks = blocks};
            ls->starts[njobs++] = grid;
            grid += blocks;
        }
        /* The list copied into device memory on the stream (the slot's host list stays as
         * it is until its results are read, after the copy): each block then reads its
         * job and searches the starts there, not across the bus. */
        cuMemcpyHtoDAsync_fn copy =
            li->ptsz ? shim_real_cuMemcpyHtoDAsync_v2_ptsz() : shim_real_cuMemcpyHtoDAsync_v2();
        CUdeviceptr on_device =
            t->list_dev + (CUdeviceptr)slot * offsetof(struct list_slot, results);
        if (*rc == CUDA_SUCCESS && njobs && t->list_dev && copy &&
            copy(on_device, ls, offsetof(struct list_slot, results), li->stream) ==
                CUDA_SUCCESS) {
            jobs_dev = on_device + offsetof(struct list_slot, jobs);
            starts_dev = on_device + offsetof(struct list_slot, starts);
        }
        if (*rc == CUDA_SUCCESS && njobs) {
            struct tool_list list = {jobs_dev, starts_dev, njobs, 0};
            void *params[] = {&list};
            cuLaunchKernel_fn launch =
                li->ptsz ? shim_real_cuLaunchKernel_ptsz() : shim_real_cuLaunchKernel();
            *rc = launch ? toollaunch_counted(launch(t->list_fn, grid, 1, 1, TOOL_THREADS, 1,
                                                     1, 0, li->stream, params, NULL))
                         : CUDA_ERROR_NOT_SUPPORTED;
            if (*rc != CUDA_SUCCESS)
                for (unsigned i = 0; i < n; i++)
                    if (ls->results[i].done != tag) {
                        ls->results[i].rc = *rc;
                        ls->results[i].done = tag;
                    }
        }
        results = ls && *rc == CUDA_SUCCESS ? ls->results : NULL;
    }
    ctx_leave(scope);
    return results;
}

CUresult tools_list_fn(const struct launch_info *li, CUfunction *fn, unsigned *max_blocks)
{
    struct ctx_scope scope;
    const struct tool_ctx *t;
    bool loaded;
    CUresult rc = tools_enter(li, &scope, &t, &loaded);
    *fn = NULL;
    if (rc == CUDA_SUCCESS && !t->list_fn)
        rc = CUDA_ERROR_NOT_FOUND; /* PTX older than the batched scan */
    if (rc == CUDA_SUCCESS) {
        *fn = t->list_fn;
        *max_blocks = t->max_blocks;
    }
    ctx_leave(scope);
    return rc;
}
