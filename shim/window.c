/*
 * Stay-on NaN/Inf detection (--watch-nan): windows of launches.
 *
 * Exact scanning (--check-nan) puts a launch of cudump's kernel beside every
 * launch of the program's. Here a launch made with a kept plan of scans (the
 * same plan --check-nan keeps: the controller chose its floating-point
 * buffers once, from the signature or the kernel's name) costs no GPU work
 * and no word to the controller: it only marks the buffers its scans after
 * it would read, with the launch's number, in the open window (a bounded hash
 * table). The window is closed at the program's own waits for the GPU (a
 * synchronize, a synchronous copy: hooks.c), after `watch_window` launches,
 * when it holds TOOL_LIST_MAX buffers, before a launch on another stream
 * (a window's launches are all on one stream of one context, so that its scan,
 * queued on that stream in that context, follows them all), and before its
 * stream is destroyed (given up where it cannot be closed then, and when its
 * context ends). It is not closed while a launch marked in it is not made yet,
 * nor, on a per-thread default stream, by another thread. Closing it is one launch of the batched
 * scan (tools.c's tools_list_run) over every buffer the window touched; its
 * results land in mapped host memory, read once they are there (after the
 * program's wait, or at a later window's end), with nothing waited for.
 *
 * A buffer found non-finite that its last scan found finite (or none scanned
 * before) is reported (MSG_WATCH) with the window's launches that touched
 * it: the producer exactly where only one did, else bounded to those. Then,
 * as the user chose (proto_welcome.watch_then), the process switches to
 * exact scanning (window_on turns false: every kept plan is run as
 * --check-nan runs it, so the next occurrence is named exactly and its
 * producer snapshotted), goes on in windows, or is ended by the controller.
 *
 * Nothing of cudump's goes on a capturing stream: a window whose stream
 * captures stays open until it does not. Windows in flight are at most
 * TOOL_LIST_SLOTS; where the next slot's scan is not done yet, the open window
 * grows, and once full its launches are scanned exactly, one by one.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloctab.h"
#include "channel.h"
#include "functab.h"
#include "interpose.h"
#include "stream.h"
#include "toolblocks.h"
#include "tools.h"
#include "util.h"
#include "window.h"

enum {
    WIN_SLOTS = TOOL_LIST_SLOTS,
    WIN_ENTRIES = TOOL_LIST_MAX,
    WIN_HASH = 2 * TOOL_LIST_MAX,      /* a power of two */
    /* Launches a window holds unless the controller says otherwise: closing one costs
     * one launch of cudump's kernel, so this keeps its host cost under 1% of theirs. */
    WIN_DEFAULT_LAUNCHES = 128,
    WIN_REPORTED = 64,                 /* buffers one MSG_WATCH names at most */
    KNOWN_BAD = 256,                   /* buffers remembered non-finite */
    HOST_RANGES = 256,                 /* ranges the host wrote that a window keeps */
};

/* Device memory the program wrote from the host (a copy, a memset): [start, end). */
struct range {
    uint64_t start, end;
};

struct win_entry {
    struct proto_copy copy;     /* the scan after a launch that touched it */
    uint64_t first, last;       /* the window's launches that touched it */
    uint32_t touches, func;     /* how many, and the last one's function */
    /* Its memory was freed after the window's scan was queued: what the scan found is
     * reported, but not remembered as non-finite (the address may be another buffer's by
     * the next window). */
    bool freed;
};

struct window {
    struct win_entry e[WIN_ENTRIES];
    uint16_t hash[WIN_HASH];    /* index into e + 1; 0: empty */
    unsigned n;
    unsigned modes;             /* the scan modes of its entries, a bit each */
    unsigned launches;
    uint64_t first, last;       /* its launches' numbers */
    CUstream stream;            /* the stream they were made on */
    int ptsz, device;
    /* The context that stream is of (for the NULL stream, the launching thread's current
     * one): its scan is launched there, whichever thread closes it. */
    CUcontext ctx;
    /* A per-thread default stream's thread (its stream is no other's: only it may close
     * the window); 0 for any other stream. */
    uint64_t tid;
    /* Launches marked that their threads have not made yet: a scan queued now could run
     * before them, so the window is not closed while any is (window_after_launch). */
    unsigned inflight;
    bool due;                   /* full: closed by the launch that makes inflight 0 */
    /* What the host wrote between the last window's end and this one's: a buffer found
     * non-finite there is the host's doing or an input's, not a launch's (window_host_wrote). */
    struct range host[HOST_RANGES];
    unsigned nhost;
    /* closed, its scan in flight: */
    bool pending;
    uint64_t tag;
    struct proto_tool_result *results;
    unsigned long long epoch;   /* tools_list_epoch() then */
    unsigned number;
};

struct bad {
    uint64_t src, width, height, pitch;
};

static pthread_mutex_t win_lock = PTHREAD_MUTEX_INITIALIZER;
static struct window *wins;     /* WIN_SLOTS, made at the first mark */
static unsigned open_slot;      /* the window being filled */
static unsigned numbered;       /* windows closed */
static uint64_t tags;
static struct bad known_bad[KNOWN_BAD];
static unsigned nbad;
static _Atomic bool exact;      /* a finding switched the process to exact scans */
/* Set once the batched scan could not run (not for a capture): why, for the notice that
 * report() sends once. */
static bool fell_back;
static _Atomic unsigned fallback_due;
static struct range host_now[HOST_RANGES]; /* written since the last window closed */
static unsigned nhost_now;
static uint64_t opened;         /* windows opened: which one a thread's mark went in */
static _Thread_local uint64_t marked_in; /* the window this thread's last mark went in */

void window_reset_after_fork(void)
{
    /* The child has none of the parent's GPU work: its windows start afresh. */
    pthread_mutex_init(&win_lock, NULL);
    wins = NULL;
    open_slot = numbered = nbad = nhost_now = 0;
    tags = 0;
    atomic_store(&exact, false);
    fell_back = false;
    atomic_store(&fallback_due, 0);
    opened = 0;
    marked_in = 0;
}

/* Whether windows are kept: OPTION_WATCH_NAN, while the controller is there to be told
 * what they find (once it is found gone the shim is a pass-through, channel.h: the
 * windows end too, unscanned). */
static bool watching(void)
{
    return (channel_options() & OPTION_WATCH_NAN) && channel_up();
}

bool window_on(void)
{
    return watching() && !atomic_load_explicit(&exact, memory_order_relaxed);
}

static unsigned max_launches(void)
{
    unsigned w = channel_watch_window();
    return w ? w : WIN_DEFAULT_LAUNCHES;
}

/* Whether a window's finding switches the process to exact per-launch scans. A window's
 * scan reads a buffer once, at the window's end, as the element type of the launch that
 * marked it: what it finds is unconfirmed (the memory may hold another type's data by
 * then) until an exact scan, of the launch that wrote it, sees it. So with `exact` and
 * with `stop` (the controller ends the program once an exact scan confirms a finding),
 * only `go-on` stays in windows. */
static bool switches_to_exact(void)
{
    return channel_watch_then() != WATCH_THEN_GO_ON;
}

/* The bytes a scan reads: [src, end_of(c)). */
static uint64_t end_of(const struct proto_copy *c)
{
    return c->src + (c->height - 1) * c->pitch + c->width;
}

/* Whether scans a and b read overlapping memory as different element types: memory
 * reused within a window (a caching allocator's block handed to a tensor of another
 * type, a graph's pool) read at the end with the first user's type would show that
 * type's NaN/Inf patterns in the second's finite data. */
static bool retyped(const struct proto_copy *a, const struct proto_copy *b)
{
    return tool_mode(a) != tool_mode(b) && a->src < end_of(b) && b->src < end_of(a);
}

/* A scan's mode as a bit of struct window's `modes` (the scan modes are 1-4). */
static unsigned mode_bit(const struct proto_copy *c)
{
    return 1u << (tool_mode(c) & 31);
}

static bool same_scan(const struct proto_copy *a, const struct proto_copy *b)
{
    return a->src == b->src && a->width == b->width && a->height == b->height &&
           a->pitch == b->pitch && tool_mode(a) == tool_mode(b);
}

static unsigned hash_of(const struct proto_copy *c)
{
    uint64_t h = c->src * 0x9E3779B97F4A7C15ull ^ (c->width + c->height * 31) * 0xBF58476D1CE4E5B9ull;
    return (unsigned)(h >> 40) & (WIN_HASH - 1);
}

/* The window's entry for scan c, made if new (room was checked). */
static struct win_entry *entry_for(struct window *w, const struct proto_copy *c)
{
    for (unsigned h = hash_of(c);; h = (h + 1) & (WIN_HASH - 1)) {
        if (!w->hash[h]) {
            struct win_entry *e = &w->e[w->n++];
            *e = (struct win_entry){.copy = *c};
            w->hash[h] = (uint16_t)w->n;
            return e;
        }
        struct win_entry *e = &w->e[w->hash[h] - 1];
        if (same_scan(&e->copy, c))
            return e;
    }
}

static void clear(struct window *w)
{
    w->n = w->launches = w->nhost = w->inflight = w->modes = 0;
    w->due = false;
    w->ctx = NULL;
    w->tid = 0;
    w->first = w->last = 0;
    w->pending = false;
    w->results = NULL;
    memset(w->hash, 0, sizeof w->hash);
}

static int bad_index(const struct proto_copy *c)
{
    for (unsigned i = 0; i < nbad; i++)
        if (known_bad[i].src == c->src && known_bad[i].width == c->width &&
            known_bad[i].height == c->height && known_bad[i].pitch == c->pitch)
            return (int)i;
    return -1;
}

/* What a window's scan found newly non-finite, for MSG_WATCH. */
struct finding {
    struct proto_watch head;
    struct proto_watch_found found[WIN_REPORTED];
};

/* Reads the closed window in slot k if its scan is done (or, with a deadline `until`,
 * monotonic_ns(), once it is, until then at most; 0: not waited for); fills *out with
 * what it found newly non-finite. Returns whether the slot is free again. */
static bool collect_locked(unsigned k, uint64_t until, struct finding *out)
{
    struct window *w = &wins[k];
    out->head.nfound = 0;
    if (!w->pending)
        return true;
    /* Its results went with a context that ended. */
    if (w->epoch != tools_list_epoch()) {
        clear(w);
        return true;
    }
    for (unsigned i = 0; i < w->n; i++) {
        while (__atomic_load_n(&w->results[i].done, __ATOMIC_ACQUIRE) != w->tag) {
            if (!until)
                return false;
            if (monotonic_ns() > until) {
                clear(w); /* the GPU is far behind or stuck: the program exits regardless */
                return true;
            }
            usleep(200);
        }
    }
    out->head = (struct proto_watch){.first = w->first, .last = w->last, .window = w->number,
                                     .exact = switches_to_exact()};
    for (unsigned i = 0; i < w->n; i++) {
        const struct proto_tool_result *r = &w->results[i];
        const struct win_entry *e = &w->e[i];
        if (r->rc != CUDA_SUCCESS)
            continue;
        int b = nbad ? bad_index(&e->copy) : -1;
        if (!r->words[0]) {
            if (b >= 0)
                known_bad[b] = known_bad[--nbad]; /* finite again: a new NaN is news */
            continue;
        }
        if (b >= 0)
            continue; /* non-finite at its last scan too: reported then */
        bool host = false;
        bool remember = !e->freed;
        for (unsigned h = 0; h < w->nhost && !host; h++)
            host = e->copy.src < w->host[h].end && w->host[h].start < end_of(&e->copy);
        if (remember && nbad < KNOWN_BAD)
            known_bad[nbad++] = (struct bad){e->copy.src, e->copy.width, e->copy.height,
                                             e->copy.pitch};
        /* Written by the host since its last scan: what it holds may be the host's (a NaN
         * the program put there, or integers the scan reads as floats). It is sent as such
         * (a launch that touched it may carry it on), not as a launch's finding. */
        if (out->head.nfound < WIN_REPORTED)
            out->found[out->head.nfound++] = (struct proto_watch_found){
                .host = host,
                .address = e->copy.src, .width = e->copy.width, .height = e->copy.height,
                .pitch = e->copy.pitch, .count = r->words[0], .first_index = ~r->words[1],
                .first_touch = e->first, .last_touch = e->last, .touches = e->touches,
                .func = e->func, .mode = tool_mode(&e->copy)};
    }
    clear(w);
    return true;
}

/* The batched scan could not be launched (rc; no cudump_scan_list in the loaded PTX, a
 * failed JIT, host memory that could not be registered, no device memory): windows would
 * be closed unscanned from now on, and nothing found. The process scans every launch
 * exactly instead, as --check-nan does, and the controller is told once. A capture (of
 * another thread's, in global mode) is no reason: the window's next close tries again. */
static void fall_back_locked(CUresult rc)
{
    bool capture = rc >= 900 && rc <= 908; /* the CUDA_ERROR_STREAM_CAPTURE_* family */
    if (rc == CUDA_SUCCESS || capture || fell_back)
        return;
    fell_back = true;
    atomic_store_explicit(&exact, true, memory_order_relaxed);
    atomic_store(&fallback_due, (unsigned)rc);
}

/* Sends what a window found, and switches to exact scans if the user chose that; not
 * where all it found is what the host wrote. */
static void report(const struct finding *f)
{
    unsigned why = atomic_exchange(&fallback_due, 0);
    if (why) {
        struct proto_notice ev = {.kind = NOTICE_WATCH_EXACT, .detail = why};
        channel_send_event(MSG_NOTICE, 0, &ev, sizeof ev);
    }
    bool launches = false;
    for (unsigned i = 0; i < f->head.nfound; i++)
        launches = launches || !f->found[i].host;
    if (!launches)
        return;
    if (f->head.exact)
        atomic_store_explicit(&exact, true, memory_order_relaxed);
    char stack[256];
    struct msg m;
    msg_init(&m, stack, sizeof stack, MSG_WATCH, f->head.last);
    msg_add(&m, &f->head, sizeof f->head);
    msg_add(&m, f->found, f->head.nfound * sizeof f->found[0]);
    channel_send(&m);
    msg_free(&m);
}

/* Closes the open window: its batched scan launched on its stream, and the next slot
 * opened (read first if its scan is done). Returns false, leaving it open, where the
 * next slot's scan is still running or the stream is capturing. A slot read now puts
 * its findings in *out. */
static bool close_locked(struct finding *out)
{
    out->head.nfound = 0;
    struct window *w = &wins[open_slot];
    if (!w->n)
        return true;
    /* A launch marked and not made yet: its scan queued now would run before it. */
    if (w->inflight)
        return false;
    /* Another thread's own default stream: only that thread can reach it. */
    if (w->tid && w->tid != stream_tid())
        return false;
    /* Nobody to tell what it finds (the controller died unnoticed: windows send nothing
     * until they find something): given up, and from now on none is kept (window_on). A
     * look at the controller's process, a syscall, once a window. */
    if (!channel_controller_alive()) {
        clear(w);
        opened++;
        return true;
    }
    unsigned next = (open_slot + 1) % WIN_SLOTS;
    if (!collect_locked(next, 0, out))
        return false;
    /* In the window's context, whatever this thread's is: the NULL stream is the current
     * context's, and the scan must follow that context's launches, not another device's. */
    struct ctx_scope scope = ctx_enter(w->ctx);
    if (!scope.ok) {
        clear(w); /* (its context cannot be entered: nothing of cudump's can go there) */
        opened++;
        return true;
    }
    if (stream_capturing(w->stream, w->ptsz)) {
        ctx_leave(scope);
        return false;
    }
    static const struct proto_copy *copies[WIN_ENTRIES]; /* under win_lock */
    for (unsigned i = 0; i < w->n; i++)
        copies[i] = &w->e[i].copy;
    struct launch_info li = {.stream = w->stream, .ptsz = w->ptsz, .device = w->device,
                             .seq = w->last};
    CUresult rc;
    CUstreamCaptureMode mode = capture_relax();
    memcpy(w->host, host_now, nhost_now * sizeof *host_now);
    w->nhost = nhost_now;
    nhost_now = 0;
    w->tag = ++tags;
    w->results = tools_list_run(&li, copies, w->n, open_slot, w->tag, &rc);
    capture_restore(mode);
    ctx_leave(scope);
    if (w->results) {
        w->pending = true;
        w->epoch = tools_list_epoch();
        w->number = ++numbered;
    } else {
        clear(w); /* the kernel cannot run there: nothing to read */
        fall_back_locked(rc);
    }
    open_slot = next;
    clear(&wins[open_slot]);
    opened++;
    return true;
}

/* The open window, given up unscanned (its stream or context is going). */
static void drop_locked(void)
{
    struct window *w = &wins[open_slot];
    if (w->n) {
        clear(w);
        opened++;
    }
}

/* Whether a scan after the launch (copies[0, n)) reads memory the window holds as another
 * element type. */
static bool retyped_in(const struct window *w, const struct proto_copy *copies, unsigned n)
{
    for (unsigned k = 0; k < n; k++)
        /* (Where every entry is of this scan's mode, none can be another's: most windows.) */
        for (unsigned i = 0; copies[k].phase == PHASE_AFTER &&
                             (w->modes & ~mode_bit(&copies[k])) && i < w->n; i++)
            if (retyped(&w->e[i].copy, &copies[k]))
                return true;
    return false;
}

static void at_exit(void)
{
    window_at_exit();
}

static void register_exit(void)
{
    atexit(at_exit);
}

bool window_mark(const struct launch_info *li, const struct proto_copy *copies, unsigned n)
{
    unsigned scans = 0;
    for (unsigned k = 0; k < n; k++) {
        if (!(copies[k].flags & COPY_TOOL) || tool_mode(&copies[k]) == TOOL_DIGEST)
            return false;
        scans += copies[k].phase == PHASE_AFTER;
    }
    if (!scans || scans > WIN_ENTRIES)
        return false;
    /* A launch that reads one range as two types: scanned exactly, each scan after it. */
    for (unsigned k = 0; k < n; k++)
        for (unsigned j = k + 1; j < n; j++)
            if (copies[k].phase == PHASE_AFTER && copies[j].phase == PHASE_AFTER &&
                retyped(&copies[k], &copies[j]))
                return false;
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, register_exit);
    struct finding found;
    found.head.nfound = 0;
    bool marked = false;
    pthread_mutex_lock(&win_lock);
    if (!wins) {
        wins = calloc(WIN_SLOTS, sizeof *wins);
    }
    struct window *w = wins ? &wins[open_slot] : NULL;
    CUcontext ctx = stream_ctx(li);
    bool per_thread = li->stream == CU_STREAM_PER_THREAD || (li->ptsz && !li->stream);
    uint64_t tid = per_thread ? stream_tid() : 0;
    /* One stream a window (of one context, and for a per-thread stream one thread):
     * another stream's launch closes it first. */
    if (w && w->n && (w->stream != li->stream || w->ptsz != li->ptsz || w->ctx != ctx ||
                      w->tid != tid || w->device != li->device)) {
        if (close_locked(&found))
            w = &wins[open_slot];
        else
            w = NULL; /* (still open on its stream: this launch is scanned exactly) */
    }
    /* Memory the window holds as another element type (reused since): the window is
     * closed first, so that its scan reads that memory before this launch writes it. */
    if (w && w->n && retyped_in(w, copies, n)) {
        if (close_locked(&found))
            w = &wins[open_slot];
        else
            w = NULL;
    }
    if (w && w->n + scans > WIN_ENTRIES) {
        if (close_locked(&found))
            w = &wins[open_slot];
        else
            w = NULL;
    }
    if (w && w->n + scans <= WIN_ENTRIES) {
        if (!w->n) {
            w->stream = li->stream;
            w->ptsz = li->ptsz;
            w->device = li->device;
            w->ctx = ctx;
            w->tid = tid;
            w->first = li->seq;
        }
        for (unsigned k = 0; k < n; k++) {
            if (copies[k].phase != PHASE_AFTER)
                continue;
            struct win_entry *e = entry_for(w, &copies[k]);
            w->modes |= mode_bit(&copies[k]);
            if (!e->touches++)
                e->first = li->seq;
            e->last = li->seq;
            e->func = li->e ? li->e->id : 0;
        }
        w->last = li->seq;
        w->launches++;
        w->inflight++;
        w->due = w->due || w->launches >= max_launches() || w->n + 64 > WIN_ENTRIES;
        marked_in = opened;
        marked = true;
    }
    pthread_mutex_unlock(&win_lock);
    report(&found);
    return marked;
}

void window_after_launch(void)
{
    struct finding found;
    pthread_mutex_lock(&win_lock);
    found.head.nfound = 0;
    struct window *w = wins ? &wins[open_slot] : NULL;
    /* (Not where the window it went in was given up meanwhile.) */
    if (w && marked_in == opened && w->inflight) {
        w->inflight--;
        if (w->due && !w->inflight)
            close_locked(&found);
    }
    pthread_mutex_unlock(&win_lock);
    report(&found);
}

void window_stream_ends(CUstream stream)
{
    if (!watching())
        return;
    struct finding found;
    pthread_mutex_lock(&win_lock);
    found.head.nfound = 0;
    /* Its scan launched while the handle is good, or the window given up: never a launch
     * on a stream destroyed. */
    if (wins && wins[open_slot].n && wins[open_slot].stream == stream &&
        !close_locked(&found))
        drop_locked();
    pthread_mutex_unlock(&win_lock);
    report(&found);
}

void window_context_ends(CUcontext ctx, int device)
{
    pthread_mutex_lock(&win_lock);
    if (wins && wins[open_slot].n &&
        (ctx ? wins[open_slot].ctx == ctx : wins[open_slot].device == device))
        drop_locked();
    pthread_mutex_unlock(&win_lock);
}

void window_sync_before(void)
{
    if (!watching())
        return;
    struct finding found;
    pthread_mutex_lock(&win_lock);
    found.head.nfound = 0;
    if (wins)
        close_locked(&found);
    pthread_mutex_unlock(&win_lock);
    report(&found);
}

void window_memory_frees(CUdeviceptr base)
{
    if (!watching() || !base)
        return;
    struct alloc_info a;
    if (!alloctab_find(base, &a) || a.base != base || !a.size)
        return;
    uint64_t end = base + a.size;
    struct finding found;
    found.head.nfound = 0;
    pthread_mutex_lock(&win_lock);
    if (wins) {
        /* The open window's scan launched before the memory goes (never a scan of memory
         * freed), or the window given up where it cannot be. */
        struct window *w = &wins[open_slot];
        bool holds = false;
        for (unsigned i = 0; i < w->n && !holds; i++)
            holds = w->e[i].copy.src < end && base < end_of(&w->e[i].copy);
        if (holds && !close_locked(&found))
            drop_locked();
        /* What is known non-finite there is forgotten: a buffer made there next is news
         * (also where a window's scan, queued before, is read after). */
        for (unsigned i = 0; i < nbad;) {
            const struct bad *b = &known_bad[i];
            if (b->src < end && base < b->src + (b->height - 1) * b->pitch + b->width)
                known_bad[i] = known_bad[--nbad];
            else
                i++;
        }
        for (unsigned k = 0; k < WIN_SLOTS; k++)
            for (unsigned i = 0; wins[k].pending && i < wins[k].n; i++)
                if (wins[k].e[i].copy.src < end && base < end_of(&wins[k].e[i].copy))
                    wins[k].e[i].freed = true;
    }
    pthread_mutex_unlock(&win_lock);
    report(&found);
}

void window_host_wrote(CUdeviceptr dst, size_t bytes)
{
    if (!watching() || !bytes)
        return;
    struct range r = {dst, dst + bytes};
    pthread_mutex_lock(&win_lock);
    /* Beyond the room kept, the last range grows to cover it: more is counted as the
     * host's, never less. */
    if (nhost_now < HOST_RANGES) {
        host_now[nhost_now++] = r;
    } else {
        struct range *last = &host_now[HOST_RANGES - 1];
        last->start = r.start < last->start ? r.start : last->start;
        last->end = r.end > last->end ? r.end : last->end;
    }
    pthread_mutex_unlock(&win_lock);
}

/* Reads every closed window whose scan is done (all of them, with `wait`: waiting, a few
 * seconds at most for them all, one deadline, however many are in flight on a GPU far
 * behind or stuck). */
static void collect_all(bool wait)
{
    uint64_t until = wait ? monotonic_ns() + (uint64_t)EXIT_WAIT_S * 1000000000ull : 0;
    for (unsigned i = 1; i <= WIN_SLOTS; i++) {
        struct finding found;
        pthread_mutex_lock(&win_lock);
        /* Oldest first: the slot after the open one was closed longest ago. */
        found.head.nfound = 0;
        if (wins)
            collect_locked((open_slot + i) % WIN_SLOTS, until, &found);
        pthread_mutex_unlock(&win_lock);
        report(&found);
    }
}

void window_sync_after(void)
{
    if (watching())
        collect_all(false);
}

void window_at_exit(void)
{
    /* (Not for a controller gone: nobody reads what the wait would find.) */
    if (!watching() || !channel_controller_alive())
        return;
    window_sync_before();
    collect_all(true);
}

/* ---- a graph's scan node ----------------------------------------------------------- */

/* A graph replayed by cuGraphLaunch has no launch calls to mark: its copy (graph.c) gets
 * one node of the batched scan after every node without dependents, over the buffers
 * its kernel nodes' scans read, each once, that the graph writes. Which ones it writes
 * is seen at the replay that plans the scans (scanned node by node, and waited for):
 * its instrumented copy also digests every such buffer before all its nodes and after
 * them all (the probe), and a buffer whose digest did not change is left out of the
 * node (a weight, an input the host writes between replays): the node's GPU time is
 * then one scan of what the graph's kernels wrote. The node keeps a running record of
 * each buffer (tooljob.h), which the host reads whenever it looks, with nothing waited
 * for: how many of the node's scans are done tells which replays a finding lies among. */
enum {
    WG_SEQS = 1024,             /* graph launches remembered, to name a finding's replays */
    WG_ACCS = 3,                /* accumulators an entry: its scan, the probe's two digests */
};

struct wg_entry {
    struct proto_copy copy;
    uint32_t first_node, last_node, touches, func;
    bool written;                   /* the probe saw the graph change it (or could not tell) */
    uint64_t seen_bad, seen_good;   /* the record when last looked at */
    bool reported;                  /* non-finite when last looked at: reported then */
};

/* Memory the device reads or writes, registered and mapped: the scan node's list, its
 * results and records, and the probe's two lists and results, each a region. */
struct wg_area {
    void *base;
    size_t size;
    struct tool_job *jobs, *probe_jobs[2];
    unsigned *starts, *probe_starts[2];
    struct proto_tool_result *results, *probe_results[2];
    uint64_t (*record)[TOOL_RECORD_WORDS];
};

struct window_graph {
    /* The stream of the replay that planned it: the node's list and the accumulators are
     * put on the device there, asynchronously (a synchronous memset or copy would go on
     * the legacy stream, a wait the program never made, and one that loses another
     * thread's capture of a blocking stream). */
    CUstream stream;
    int ptsz;
    unsigned n;                     /* entries */
    unsigned scanned;               /* of which the scan node scans (written ones, first) */
    struct wg_entry *e;
    /* What the GPU reads and writes, made for `cap` entries, and kept for the graph's
     * later copies (window_graph_new's `reuse`): a graph whose copy is made again (its
     * parameters changed, memory it used was freed) costs no new memory each time. */
    unsigned cap;
    struct wg_area a;
    CUdeviceptr acc;                /* WG_ACCS x cap accumulators, zeroed */
    CUdeviceptr list_dev;           /* the scan node's list in device memory, or 0 */
    /* Recorded behind each launch made with the node: the memory above is used again
     * only once the last one is done. */
    CUevent last;
    bool recorded;
    CUfunction fn;
    unsigned max_blocks;
    bool probed;                    /* the probe's nodes are in the instrumented copy */
    uint64_t launched;              /* launches of the graph made with the node */
    uint64_t seqs[WG_SEQS];         /* their numbers, by launch */
};

static CUdeviceptr mapped(const void *host)
{
    CUdeviceptr dev = 0;
    return real_cuMemHostGetDevicePointer_v2 &&
                   real_cuMemHostGetDevicePointer_v2(&dev, (void *)host, 0) == CUDA_SUCCESS
               ? dev
               : 0;
}

/* The entries (into ents, room for n): one a buffer the scans read, and the kernel nodes
 * that touch it. All of them: the probe then keeps those the graph writes, and the scan
 * node scans those, however many (its list is given by address). */
static unsigned graph_entries(struct wg_entry *ents, const struct proto_copy *copies,
                              const uint32_t *node_of, const uint32_t *func_of, unsigned n)
{
    unsigned m = 0;
    for (unsigned i = 0; i < n; i++) {
        const struct proto_copy *c = &copies[i];
        if (!(c->flags & COPY_TOOL) || tool_mode(c) == TOOL_DIGEST || !tools_readable(c))
            continue;
        unsigned k = 0;
        while (k < m && !same_scan(&ents[k].copy, c))
            k++;
        struct wg_entry *e = &ents[k];
        if (k == m) {
            *e = (struct wg_entry){.copy = *c, .first_node = node_of[i], .written = true};
            e->copy.phase = PHASE_AFTER;
            m++;
        }
        if (!e->touches || e->last_node != node_of[i])
            e->touches++;
        e->last_node = node_of[i];
        e->func = func_of[i];
    }
    /* Memory a later node uses as another element type (a block of the graph's pool
     * reused within the replay): the scan node, after them all, reads what the later one
     * left, so only the later one's entry is kept. */
    bool *older = calloc(m ? m : 1, sizeof *older);
    if (!older)
        return 0;
    for (unsigned k = 0; k < m; k++)
        for (unsigned j = 0; j < m && !older[k]; j++)
            older[k] = j != k && retyped(&ents[k].copy, &ents[j].copy) &&
                       (ents[j].last_node > ents[k].last_node ||
                        (ents[j].last_node == ents[k].last_node && j > k));
    unsigned kept = 0;
    for (unsigned k = 0; k < m; k++)
        if (!older[k])
            ents[kept++] = ents[k];
    free(older);
    return kept;
}

/* Carves the area's regions for n entries out of one registered allocation. */
static CUresult area_make(struct wg_area *a, unsigned n)
{
    size_t jobs = (n * sizeof(struct tool_job) + 63) / 64 * 64;
    size_t starts = (n * sizeof(unsigned) + 63) / 64 * 64;
    size_t results = n * sizeof(struct proto_tool_result);
    size_t record = n * sizeof *a->record;
    a->size = (3 * (jobs + starts + results) + record + 4095) / 4096 * 4096;
    a->base = aligned_alloc(4096, a->size);
    if (!a->base)
        return CUDA_ERROR_OUT_OF_MEMORY;
    memset(a->base, 0, a->size);
    char *p = a->base;
    struct tool_job **j[3] = {&a->jobs, &a->probe_jobs[0], &a->probe_jobs[1]};
    unsigned **s[3] = {&a->starts, &a->probe_starts[0], &a->probe_starts[1]};
    struct proto_tool_result **r[3] = {&a->results, &a->probe_results[0], &a->probe_results[1]};
    for (int k = 0; k < 3; k++) {
        *j[k] = (struct tool_job *)p;
        *s[k] = (unsigned *)(p + jobs);
        *r[k] = (struct proto_tool_result *)(p + jobs + starts);
        p += jobs + starts + results;
    }
    a->record = (uint64_t(*)[TOOL_RECORD_WORDS])p;
    CUresult rc = real_cuMemHostRegister_v2
                      ? real_cuMemHostRegister_v2(a->base, a->size,
                                                  CU_MEMHOSTREGISTER_PORTABLE |
                                                      CU_MEMHOSTREGISTER_DEVICEMAP)
                      : CUDA_ERROR_NOT_SUPPORTED;
    if (rc != CUDA_SUCCESS) {
        free(a->base);
        a->base = NULL;
    }
    return rc;
}

/* Whether the GPU is done with wg's memory: no launch made with its node is still to
 * run (the host waits for the last one, which a copy made again seldom has to). */
static bool idle(struct window_graph *wg)
{
    cuEventSynchronize_fn sync = shim_real_cuEventSynchronize();
    return !wg->recorded || (wg->last && sync && sync(wg->last) == CUDA_SUCCESS);
}

/* wg's memory made ready for a new set of entries (m of them, in ents, which it takes):
 * the host's part cleared, the accumulators zeroed on li's stream. */
static CUresult renew(struct window_graph *wg, const struct launch_info *li,
                      struct wg_entry *ents, unsigned m)
{
    cuMemsetD8Async_fn zero = li->ptsz ? shim_real_cuMemsetD8Async_ptsz()
                                       : shim_real_cuMemsetD8Async();
    CUresult rc = zero ? zero(wg->acc, 0, (size_t)wg->cap * WG_ACCS * TOOL_ACC_WORDS * 8,
                              li->stream)
                       : CUDA_ERROR_NOT_SUPPORTED;
    if (rc != CUDA_SUCCESS)
        return rc;
    memset(wg->a.base, 0, wg->a.size);
    free(wg->e);
    wg->e = ents;
    wg->n = wg->scanned = m;
    wg->stream = li->stream;
    wg->ptsz = li->ptsz;
    wg->probed = false;
    wg->launched = 0;
    return CUDA_SUCCESS;
}

struct window_graph *window_graph_new(const struct launch_info *li,
                                      const struct proto_copy *copies, const uint32_t *node_of,
                                      const uint32_t *func_of, unsigned n,
                                      struct window_graph *reuse, CUresult *rc)
{
    struct wg_entry *ents = calloc(n ? n : 1, sizeof *ents);
    unsigned m = ents ? graph_entries(ents, copies, node_of, func_of, n) : 0;
    *rc = !ents ? CUDA_ERROR_OUT_OF_MEMORY : !m ? CUDA_ERROR_NOT_FOUND /* none a scan may read */
                                                : CUDA_SUCCESS;
    if (*rc != CUDA_SUCCESS) {
        free(ents);
        return NULL;
    }
    /* The graph's earlier copy's memory, where it has room and the GPU is done with it. */
    if (reuse && m <= reuse->cap && idle(reuse)) {
        *rc = renew(reuse, li, ents, m);
        if (*rc != CUDA_SUCCESS)
            free(ents);
        return *rc == CUDA_SUCCESS ? reuse : NULL;
    }
    struct window_graph *wg = calloc(1, sizeof *wg);
    *rc = wg ? tools_list_fn(li, &wg->fn, &wg->max_blocks) : CUDA_ERROR_OUT_OF_MEMORY;
    if (*rc != CUDA_SUCCESS) {
        free(ents);
        free(wg);
        return NULL;
    }
    wg->e = ents;
    wg->n = wg->scanned = wg->cap = m;
    cuMemsetD8Async_fn zero = li->ptsz ? shim_real_cuMemsetD8Async_ptsz()
                                       : shim_real_cuMemsetD8Async();
    wg->stream = li->stream;
    wg->ptsz = li->ptsz;
    if (*rc == CUDA_SUCCESS)
        *rc = shim_real_cuMemAlloc_v2() && zero ? area_make(&wg->a, wg->cap)
                                                : CUDA_ERROR_NOT_SUPPORTED;
    if (*rc == CUDA_SUCCESS)
        *rc = shim_real_cuMemAlloc_v2()(&wg->acc, (size_t)wg->cap * WG_ACCS * TOOL_ACC_WORDS * 8);
    /* Zeroed once (the kernel zeroes each accumulator after use), on the stream ahead of
     * the replay that uses them first. */
    if (*rc == CUDA_SUCCESS)
        *rc = zero(wg->acc, 0, (size_t)wg->cap * WG_ACCS * TOOL_ACC_WORDS * 8, li->stream);
    if (*rc != CUDA_SUCCESS && wg) {
        /* (Registered memory and scratch of a failed attempt are kept: this is rare.) */
        if (!wg->a.base) {
            free(wg->e);
            free(wg);
        }
        return NULL;
    }
    return wg;
}

/* The jobs of one list over entries [0, m): scans (which = 0, with the running record)
 * or the probe's digests before (1) and after (2) the graph; returns the grid. */
static unsigned fill_list(struct window_graph *wg, int which, unsigned m)
{
    struct tool_job *jobs = which ? wg->a.probe_jobs[which - 1] : wg->a.jobs;
    unsigned *starts = which ? wg->a.probe_starts[which - 1] : wg->a.starts;
    struct proto_tool_result *results = which ? wg->a.probe_results[which - 1] : wg->a.results;
    CUdeviceptr results_dev = mapped(results), record_dev = which ? 0 : mapped(wg->a.record);
    unsigned grid = 0;
    for (unsigned i = 0; i < m; i++) {
        const struct proto_copy *c = &wg->e[i].copy;
        unsigned blocks = tool_job_blocks(c->width * c->height, which != 0, wg->max_blocks);
        jobs[i] = (struct tool_job){
            .src = c->src, .width = c->width, .height = c->height, .pitch = c->pitch,
            .result = results_dev + (CUdeviceptr)i * sizeof *results,
            .acc = wg->acc + (CUdeviceptr)((unsigned)which * wg->cap + i) * TOOL_ACC_WORDS * 8,
            .tag = 1, .twin = record_dev ? record_dev + (CUdeviceptr)i * sizeof *wg->a.record : 0,
            .mode = which ? TOOL_DIGEST : tool_mode(c), .blocks = blocks};
        starts[i] = grid;
        grid += blocks;
    }
    return grid;
}

/* `graph`'s nodes that nothing depends on (dependents) or that depend on nothing, as a
 * list the caller frees. */
static CUresult ends_of(CUgraph graph, bool sinks, CUgraphNode **out, size_t *nout)
{
    size_t n = 0, m = 0;
    *out = NULL;
    *nout = 0;
    cuGraphNodeGetDependencies_fn get =
        sinks ? real_cuGraphNodeGetDependentNodes : real_cuGraphNodeGetDependencies;
    CUresult rc = real_cuGraphGetNodes && get ? real_cuGraphGetNodes(graph, NULL, &n)
                                              : CUDA_ERROR_NOT_SUPPORTED;
    CUgraphNode *nodes = rc == CUDA_SUCCESS && n ? calloc(n, sizeof *nodes) : NULL;
    if (rc == CUDA_SUCCESS && n && !nodes)
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (rc == CUDA_SUCCESS && n)
        rc = real_cuGraphGetNodes(graph, nodes, &n);
    for (size_t i = 0; rc == CUDA_SUCCESS && i < n; i++) {
        size_t count = 0;
        rc = get(nodes[i], NULL, &count);
        if (rc == CUDA_SUCCESS && !count)
            nodes[m++] = nodes[i];
    }
    if (rc != CUDA_SUCCESS) {
        free(nodes);
        return rc;
    }
    *out = nodes;
    *nout = m;
    return CUDA_SUCCESS;
}

/* Waits (on the host) for what was just queued on wg's stream, the list's copy: a later
 * replay may be made on another stream, and must find the list in place. The stream was
 * waited for at the replay that planned the scans, so this waits for the copy alone.
 * Returns whether it is done. */
static bool copied(const struct window_graph *wg)
{
    cuEventRecord_fn record = wg->ptsz ? shim_real_cuEventRecord_ptsz() : shim_real_cuEventRecord();
    cuEventSynchronize_fn sync = shim_real_cuEventSynchronize();
    CUevent ev = NULL;
    if (!record || !sync || !real_cuEventCreate || !real_cuEventDestroy_v2 ||
        real_cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS)
        return false;
    bool done = record(ev, wg->stream) == CUDA_SUCCESS && sync(ev) == CUDA_SUCCESS;
    real_cuEventDestroy_v2(ev);
    return done;
}

/* A node of the batched scan over list `which` of m entries: after every node nothing
 * depends on, or (before) ahead of every node that depends on nothing. */
static CUresult add_list_node(struct window_graph *wg, CUgraph graph, int which, unsigned m,
                              bool before)
{
    unsigned grid = fill_list(wg, which, m);
    CUdeviceptr jobs_dev = mapped(which ? wg->a.probe_jobs[which - 1] : wg->a.jobs);
    CUdeviceptr starts_dev = mapped(which ? wg->a.probe_starts[which - 1] : wg->a.starts);
    /* The scan node's list is the graph's for good: in device memory, copied once (on the
     * stream, ahead of the first replay with the node, from the registered area, which
     * stays as it is), so that each block of every replay reads its job there rather than
     * across the bus (where that cannot be had, from the mapped host memory). The probe's
     * runs once. */
    cuMemcpyHtoDAsync_fn copy = wg->ptsz ? shim_real_cuMemcpyHtoDAsync_v2_ptsz()
                                         : shim_real_cuMemcpyHtoDAsync_v2();
    size_t bytes = (size_t)((char *)wg->a.probe_jobs[0] - (char *)wg->a.jobs);
    if (!which && !wg->list_dev && shim_real_cuMemAlloc_v2()(&wg->list_dev, bytes) != CUDA_SUCCESS)
        wg->list_dev = 0;
    if (!which && copy && jobs_dev && starts_dev && wg->list_dev &&
        copy(wg->list_dev, wg->a.jobs, bytes, wg->stream) == CUDA_SUCCESS && copied(wg)) {
        starts_dev = wg->list_dev + (starts_dev - jobs_dev);
        jobs_dev = wg->list_dev;
    }
    CUgraphNode *ends = NULL, made = NULL;
    size_t nends = 0;
    CUresult rc = jobs_dev && starts_dev && real_cuGraphAddKernelNode_v2 &&
                          real_cuGraphAddDependencies
                      ? ends_of(graph, !before, &ends, &nends)
                      : CUDA_ERROR_NOT_SUPPORTED;
    if (rc == CUDA_SUCCESS) {
        struct tool_list list = {jobs_dev, starts_dev, m, 0};
        void *params[] = {&list}; /* copied by the driver when the node is added */
        CUDA_KERNEL_NODE_PARAMS p = {.func = wg->fn, .gridDimX = grid, .gridDimY = 1,
                                     .gridDimZ = 1, .blockDimX = TOOL_THREADS, .blockDimY = 1,
                                     .blockDimZ = 1, .kernelParams = params};
        rc = real_cuGraphAddKernelNode_v2(&made, graph, before ? NULL : ends,
                                          before ? 0 : nends, &p);
    }
    for (size_t i = 0; rc == CUDA_SUCCESS && before && i < nends; i++)
        rc = real_cuGraphAddDependencies(graph, &made, &ends[i], 1);
    free(ends);
    return rc;
}

CUresult window_graph_probe(struct window_graph *wg, CUgraph graph)
{
    /* Both before the other is added: the first node is no end of the graph to the second. */
    CUresult rc = add_list_node(wg, graph, 1, wg->n, true);
    if (rc == CUDA_SUCCESS)
        rc = add_list_node(wg, graph, 2, wg->n, false);
    wg->probed = rc == CUDA_SUCCESS;
    return rc;
}

void window_graph_ran(struct window_graph *wg, const struct proto_copy *copies,
                      const bool *bad_of, unsigned n)
{
    /* Reported by the replay's own scans already: not news at the node's first scan. */
    for (unsigned i = 0; i < n; i++)
        for (unsigned k = 0; bad_of[i] && k < wg->n; k++)
            if (same_scan(&wg->e[k].copy, &copies[i]))
                wg->e[k].reported = true;
    if (!wg->probed)
        return;
    /* The replay was waited for: both digests of every buffer are in. A buffer whose
     * digest the probe could not take, or that changed, is the graph's to write. */
    for (unsigned k = 0; k < wg->n; k++) {
        const struct proto_tool_result *b = &wg->a.probe_results[0][k];
        const struct proto_tool_result *a = &wg->a.probe_results[1][k];
        bool known = b->done == 1 && a->done == 1;
        wg->e[k].written = !known || b->words[0] != a->words[0];
    }
    /* The written ones first: the scan node's list is entries [0, scanned). */
    unsigned m = 0;
    for (unsigned k = 0; k < wg->n; k++)
        if (wg->e[k].written) {
            struct wg_entry t = wg->e[m];
            wg->e[m++] = wg->e[k];
            wg->e[k] = t;
        }
    wg->scanned = m;
}

CUresult window_graph_node(struct window_graph *wg, CUgraph graph)
{
    return wg->scanned ? add_list_node(wg, graph, 0, wg->scanned, false) : CUDA_ERROR_NOT_FOUND;
}

void window_graph_launched(struct window_graph *wg, uint64_t seq, CUstream stream, int ptsz)
{
    wg->seqs[wg->launched++ % WG_SEQS] = seq;
    cuEventRecord_fn record = ptsz ? shim_real_cuEventRecord_ptsz() : shim_real_cuEventRecord();
    if (!wg->last && real_cuEventCreate &&
        real_cuEventCreate(&wg->last, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS)
        wg->last = NULL;
    wg->recorded = true;
    /* Where it cannot be recorded, the memory is never used again (no room for reuse). */
    if (!wg->last || !record || record(wg->last, stream) != CUDA_SUCCESS)
        wg->cap = 0;
}

bool window_graph_readable(const struct window_graph *wg)
{
    for (unsigned i = 0; wg && i < wg->scanned; i++)
        if (!tools_readable(&wg->e[i].copy))
            return false;
    return wg != NULL;
}

/* One entry's running record, as one scan of the node left it (never parts of two: its
 * sequence word, read before and after the others, was even and the same both times).
 * Returns false where a scan was writing it all the times it was read. */
struct wg_record {
    uint64_t bad, good, first, count;
};

static bool read_record(const uint64_t *rec, struct wg_record *out)
{
    for (int tries = 0; tries < 64; tries++) {
        uint64_t before = __atomic_load_n(&rec[TOOL_RECORD_SEQ], __ATOMIC_ACQUIRE);
        if (before & 1)
            continue; /* (being written: a scan's thread writes a few words) */
        out->bad = __atomic_load_n(&rec[TOOL_RECORD_BAD], __ATOMIC_ACQUIRE);
        out->good = __atomic_load_n(&rec[TOOL_RECORD_GOOD], __ATOMIC_ACQUIRE);
        out->first = __atomic_load_n(&rec[TOOL_RECORD_FIRST], __ATOMIC_ACQUIRE);
        out->count = __atomic_load_n(&rec[TOOL_RECORD_COUNT], __ATOMIC_ACQUIRE);
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (__atomic_load_n(&rec[TOOL_RECORD_SEQ], __ATOMIC_ACQUIRE) == before)
            return true;
    }
    return false;
}

/* A finding of the scan node, with the graph launches it lies among. */
struct wg_found {
    struct proto_watch_found f;
    uint64_t from, to;              /* the node's scans it lies among: [from, to) */
};

/* Sends the findings in groups of one bound each (MSG_WATCH's head has one). */
static void report_graph(struct window_graph *wg, uint32_t id, struct wg_found *found,
                         unsigned nfound)
{
    uint64_t kept = wg->launched < WG_SEQS ? 0 : wg->launched - WG_SEQS;
    while (nfound) {
        uint64_t from = found[0].from, to = found[0].to;
        struct finding f;
        f.head = (struct proto_watch){.graph = id, .exact = switches_to_exact(),
                                      .replays = (uint32_t)(to - from)};
        /* (older launches' numbers are gone: the bound starts at the oldest kept) */
        f.head.first = wg->seqs[(from < kept ? kept : from) % WG_SEQS];
        f.head.last = wg->seqs[(to - 1) % WG_SEQS];
        unsigned rest = 0;
        for (unsigned i = 0; i < nfound; i++) {
            if (found[i].from == from && found[i].to == to && f.head.nfound < WIN_REPORTED) {
                found[i].f.first_touch = f.head.first;
                found[i].f.last_touch = f.head.last;
                f.found[f.head.nfound++] = found[i].f;
            } else {
                found[rest++] = found[i];
            }
        }
        nfound = rest;
        report(&f);
    }
}

void window_graph_check(struct window_graph *wg, uint32_t id)
{
    if (!wg)
        return;
    /* Entry by entry: each record says how many of the node's scans of that buffer are
     * done (blocks of one job finish before another's, so a look while a replay's node
     * runs finds some entries one scan behind others; they are looked at again next
     * time), and a finding lies among the scans that came in since its last look. */
    enum { FOUND_MAX = WIN_REPORTED }; /* (on the program's thread's stack: 7 KB) */
    struct wg_found found[FOUND_MAX];
    unsigned nfound = 0;
    for (unsigned i = 0; i < wg->scanned; i++) {
        struct wg_entry *e = &wg->e[i];
        struct wg_record r;
        if (!read_record(wg->a.record[i], &r))
            continue;
        uint64_t from = e->seen_bad + e->seen_good, to = r.bad + r.good;
        if (to <= from || to > wg->launched)
            continue; /* nothing new (or not one of the launches counted: never so) */
        bool newly_bad = r.bad > e->seen_bad, newly_good = r.good > e->seen_good;
        if (newly_bad && !e->reported) {
            if (nfound == FOUND_MAX)
                continue; /* (looked at again next time: not marked seen) */
            found[nfound++] = (struct wg_found){
                .from = from, .to = to,
                .f = {.address = e->copy.src, .width = e->copy.width,
                      .height = e->copy.height, .pitch = e->copy.pitch,
                      /* the last finding's own count and first index (one scan's) */
                      .count = r.count, .first_index = ~r.first, .touches = e->touches,
                      .first_node = e->first_node, .func = e->func,
                      .mode = tool_mode(&e->copy), .node = e->last_node}};
        }
        /* Reported: news again only once a scan found it finite (and a later one not). */
        if (newly_bad)
            e->reported = true;
        else if (newly_good)
            e->reported = false;
        e->seen_bad = r.bad;
        e->seen_good = r.good;
    }
    report_graph(wg, id, found, nfound);
}

void window_graph_drop(struct window_graph *wg)
{
    /* Its memory stays: a replay in flight may still write its records. */
    if (wg)
        free(wg->e);
    free(wg);
}
