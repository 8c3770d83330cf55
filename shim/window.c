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
 * when it holds TOOL_LIST_MAX buffers, and before a launch on another stream
 * (a window's launches are all on one stream, so that its scan, queued on
 * that stream, follows them all). Closing it is one launch of the batched
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

#include "channel.h"
#include "functab.h"
#include "stream.h"
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
};

struct win_entry {
    struct proto_copy copy;     /* the scan after a launch that touched it */
    uint64_t first, last;       /* the window's launches that touched it */
    uint32_t touches, func;     /* how many, and the last one's function */
};

struct window {
    struct win_entry e[WIN_ENTRIES];
    uint16_t hash[WIN_HASH];    /* index into e + 1; 0: empty */
    unsigned n;
    unsigned launches;
    uint64_t first, last;       /* its launches' numbers */
    CUstream stream;            /* the stream they were made on */
    int ptsz, device;
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
static _Thread_local bool close_due;

void window_reset_after_fork(void)
{
    /* The child has none of the parent's GPU work: its windows start afresh. */
    pthread_mutex_init(&win_lock, NULL);
    wins = NULL;
    open_slot = numbered = nbad = 0;
    tags = 0;
    atomic_store(&exact, false);
    close_due = false;
}

bool window_on(void)
{
    return (channel_options() & OPTION_WATCH_NAN) &&
           !atomic_load_explicit(&exact, memory_order_relaxed);
}

static unsigned max_launches(void)
{
    unsigned w = channel_watch_window();
    return w ? w : WIN_DEFAULT_LAUNCHES;
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
    w->n = w->launches = 0;
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

/* Reads the closed window in slot k if its scan is done (or, with `wait`, once it
 * is, for a few seconds at most); fills *out with what it found newly non-finite.
 * Returns whether the slot is free again. */
static bool collect_locked(unsigned k, bool wait, struct finding *out)
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
    uint64_t until = monotonic_ns() + (uint64_t)EXIT_WAIT_S * 1000000000ull;
    for (unsigned i = 0; i < w->n; i++) {
        while (__atomic_load_n(&w->results[i].done, __ATOMIC_ACQUIRE) != w->tag) {
            if (!wait)
                return false;
            if (monotonic_ns() > until) {
                clear(w); /* the GPU is far behind or stuck: the program exits regardless */
                return true;
            }
            usleep(200);
        }
    }
    out->head = (struct proto_watch){.first = w->first, .last = w->last, .window = w->number,
                                     .exact = channel_watch_then() == WATCH_THEN_EXACT};
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
        if (nbad < KNOWN_BAD)
            known_bad[nbad++] = (struct bad){e->copy.src, e->copy.width, e->copy.height,
                                             e->copy.pitch};
        if (out->head.nfound < WIN_REPORTED)
            out->found[out->head.nfound++] = (struct proto_watch_found){
                .address = e->copy.src, .width = e->copy.width, .height = e->copy.height,
                .pitch = e->copy.pitch, .count = r->words[0], .first_index = ~r->words[1],
                .first_touch = e->first, .last_touch = e->last, .touches = e->touches,
                .func = e->func, .mode = tool_mode(&e->copy)};
    }
    clear(w);
    return true;
}

/* Sends what a window found, and switches to exact scans if the user chose that. */
static void report(const struct finding *f)
{
    if (!f->head.nfound)
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
    unsigned next = (open_slot + 1) % WIN_SLOTS;
    if (!collect_locked(next, false, out))
        return false;
    if (stream_capturing(w->stream, w->ptsz))
        return false;
    static const struct proto_copy *copies[WIN_ENTRIES]; /* under win_lock */
    for (unsigned i = 0; i < w->n; i++)
        copies[i] = &w->e[i].copy;
    struct launch_info li = {.stream = w->stream, .ptsz = w->ptsz, .device = w->device,
                             .seq = w->last};
    CUresult rc;
    CUstreamCaptureMode mode = capture_relax();
    w->tag = ++tags;
    w->results = tools_list_run(&li, copies, w->n, open_slot, w->tag, &rc);
    capture_restore(mode);
    if (w->results) {
        w->pending = true;
        w->epoch = tools_list_epoch();
        w->number = ++numbered;
    } else {
        clear(w); /* the kernel cannot run there: nothing to read */
    }
    open_slot = next;
    clear(&wins[open_slot]);
    return true;
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
    /* One stream a window: another stream's launch closes it first. */
    if (w && w->n && (w->stream != li->stream || w->ptsz != li->ptsz || w->device != li->device)) {
        if (close_locked(&found))
            w = &wins[open_slot];
        else
            w = NULL; /* (still open on its stream: this launch is scanned exactly) */
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
            w->first = li->seq;
        }
        for (unsigned k = 0; k < n; k++) {
            if (copies[k].phase != PHASE_AFTER)
                continue;
            struct win_entry *e = entry_for(w, &copies[k]);
            if (!e->touches++)
                e->first = li->seq;
            e->last = li->seq;
            e->func = li->e ? li->e->id : 0;
        }
        w->last = li->seq;
        w->launches++;
        close_due = w->launches >= max_launches() || w->n + 64 > WIN_ENTRIES;
        marked = true;
    }
    pthread_mutex_unlock(&win_lock);
    report(&found);
    return marked;
}

void window_after_launch(void)
{
    if (!close_due)
        return;
    close_due = false;
    struct finding found;
    pthread_mutex_lock(&win_lock);
    found.head.nfound = 0;
    if (wins)
        close_locked(&found);
    pthread_mutex_unlock(&win_lock);
    report(&found);
}

void window_sync_before(void)
{
    if (!(channel_options() & OPTION_WATCH_NAN))
        return;
    struct finding found;
    pthread_mutex_lock(&win_lock);
    found.head.nfound = 0;
    if (wins)
        close_locked(&found);
    pthread_mutex_unlock(&win_lock);
    report(&found);
}

/* Reads every closed window whose scan is done (all of them, waiting, with `wait`). */
static void collect_all(bool wait)
{
    for (unsigned i = 1; i <= WIN_SLOTS; i++) {
        struct finding found;
        pthread_mutex_lock(&win_lock);
        /* Oldest first: the slot after the open one was closed longest ago. */
        found.head.nfound = 0;
        if (wins)
            collect_locked((open_slot + i) % WIN_SLOTS, wait, &found);
        pthread_mutex_unlock(&win_lock);
        report(&found);
    }
}

void window_sync_after(void)
{
    if (channel_options() & OPTION_WATCH_NAN)
        collect_all(false);
}

void window_at_exit(void)
{
    if (!(channel_options() & OPTION_WATCH_NAN))
        return;
    window_sync_before();
    collect_all(true);
}
