/*
 * A launch held for the prompt.
 *
 * The launching thread is where the launch's context and stream are
 * current, so it is the one that serves the controller while the launch is
 * held: it makes the device quiescent for the context, reports MSG_STOPPED,
 * and answers reads, writes (`set var`), allocation queries and backtrace
 * requests until told to go on. It owns the connection meanwhile, so every other thread of the
 * process that needs the controller waits (and the controller holds the
 * launches of all processes through their control pages): all-stop.
 *
 * Each request is bounds-checked before any copy. If the controller goes
 * away the thread simply goes on: the program never hangs because of cudump.
 */
#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ahead.h"
#include "alloctab.h"
#include "calls.h"
#include "channel.h"
#include "functab.h"
#include "gate.h"
#include "interpose.h"
#include "plain.h"
#include "staging.h"
#include "stop.h"
#include "util.h"

/* Waits for everything the context has queued, unless a stream capture is
 * under way somewhere (a context-wide sync would invalidate it): then only
 * the launch's own stream. */
static CUresult quiesce(const struct launch_info *li)
{
    cuCtxSynchronize_fn sync = shim_real_cuCtxSynchronize();
    if (atomic_load(&shim_stats.captures_active) == 0 && sync)
        return sync();
    return gate_wait_stream(li);
}

static bool reply_result(CUresult rc, const void *data, size_t len)
{
    if (len > PROTO_MAX_MESSAGE - 64)
        len = 0, rc = -1; /* never more than one message can carry */
    char stack[256];
    struct msg m;
    msg_init(&m, stack, sizeof stack, MSG_RESULT, 0);
    struct proto_result r = {.rc = rc, .nbytes = len};
    msg_add(&m, &r, sizeof r);
    if (len)
        msg_add(&m, data, len);
    bool ok = channel_send_locked(&m);
    msg_free(&m);
    return ok;
}

static bool serve_read(const struct launch_info *li, const unsigned char *p, size_t len)
{
    struct proto_read r;
    if (len != sizeof r)
        return reply_result(-1, NULL, 0);
    memcpy(&r, p, sizeof r);
    size_t size = 0;
    char *area = staging_area(&size);
    uint64_t bytes, end;
    if (!area || r.width == 0 || r.height == 0 || (r.height > 1 && r.pitch < r.width) ||
        __builtin_mul_overflow(r.width, r.height, &bytes) ||
        __builtin_add_overflow(r.offset, bytes, &end) || end > size)
        return reply_result(-1, NULL, 0);
    CUresult rc = plain_copy_wait(li, r.src, r.width, r.height, r.height > 1 ? r.pitch : r.width,
                                 r.offset);
    return reply_result(rc, NULL, 0);
}

/* `set var` at the prompt: bytes the controller put in staging go to device memory. */
static bool serve_write(const struct launch_info *li, const unsigned char *p, size_t len)
{
    struct proto_write w;
    if (len != sizeof w)
        return reply_result(-1, NULL, 0);
    memcpy(&w, p, sizeof w);
    size_t size = 0;
    char *area = staging_area(&size);
    uint64_t end;
    if (!area || w.size == 0 || __builtin_add_overflow(w.offset, w.size, &end) || end > size)
        return reply_result(-1, NULL, 0);
    calls_touch(); /* scans made ahead of this write are stale */
    return reply_result(plain_write_wait(li, w.dst, w.size, w.offset), NULL, 0);
}

static bool serve_query(const unsigned char *p, size_t len)
{
    struct proto_query q;
    if (len != sizeof q)
        return reply_result(-1, NULL, 0);
    memcpy(&q, p, sizeof q);
    struct alloc_info a;
    if (!alloc_resolve(q.address, true, &a))
        return reply_result(CUDA_ERROR_NOT_FOUND, NULL, 0);
    struct proto_pointer out = {.base = a.base, .size = a.size, .pitch = a.pitch,
                                .width = a.width, .height = a.height, .elem = a.elem_size,
                                .kind = (uint32_t)a.kind};
    return reply_result(CUDA_SUCCESS, &out, sizeof out);
}

/* The launching thread's host stack, without the shim's own frames. */
static bool serve_backtrace(void)
{
    void *frames[PROTO_MAX_FRAMES + 16];
    int n = backtrace(frames, (int)(sizeof frames / sizeof frames[0]));
    Dl_info self;
    bool have_self = dladdr((void *)serve_backtrace, &self) != 0;
    struct strbuf text;
    char stack[4096];
    sb_init(&text, stack, sizeof stack);
    int kept = 0;
    for (int i = 0; i < n && kept < PROTO_MAX_FRAMES; i++) {
        Dl_info info;
        memset(&info, 0, sizeof info);
        bool known = dladdr(frames[i], &info) != 0;
        if (known && have_self && info.dli_fbase == self.dli_fbase)
            continue;
        const char *module = known && info.dli_fname ? info.dli_fname : "?";
        const char *symbol = known && info.dli_sname ? info.dli_sname : "";
        uintptr_t base = known ? (uintptr_t)(info.dli_saddr ? info.dli_saddr : info.dli_fbase) : 0;
        /* C++ symbols run long; 4 KiB each keeps a reply of 64 frames well bounded. */
        sb_printf(&text, "0x%llx\t%.1024s\t%.4096s\t%llu\n",
                  (unsigned long long)(uintptr_t)frames[i], module, symbol,
                  (unsigned long long)((uintptr_t)frames[i] - base));
        kept++;
    }
    bool ok = reply_result(text.oom ? -1 : CUDA_SUCCESS, text.data, text.oom ? 0 : text.len);
    sb_free(&text);
    return ok;
}

struct counts_ctx {
    struct strbuf *sb;
};

static void add_count(struct func_entry *e, void *ctx)
{
    struct counts_ctx *c = ctx;
    struct proto_count count = {.id = e->id, .launches = (uint64_t)atomic_load(&e->launches),
                                .graph_launches = (uint64_t)atomic_load(&e->graph_launches)};
    sb_append(c->sb, &count, sizeof count);
}

/* How often each function of this process has launched so far. */
static bool serve_counts(void)
{
    struct strbuf sb;
    char stack[4096];
    sb_init(&sb, stack, sizeof stack);
    struct counts_ctx ctx = {&sb};
    functab_each(add_count, &ctx);
    bool ok = reply_result(sb.oom ? -1 : CUDA_SUCCESS, sb.data, sb.oom ? 0 : sb.len);
    sb_free(&sb);
    return ok;
}

/* The kernels of the graph whose launch is held, in run order. */
static bool serve_graph_nodes(stop_graph_nodes_fn graph_nodes)
{
    enum { MAX_NODES = 4096 }; /* 160 KiB: well inside one message */
    struct proto_graph_node *nodes = graph_nodes ? malloc(MAX_NODES * sizeof *nodes) : NULL;
    size_t n = nodes ? graph_nodes(nodes, MAX_NODES) : 0;
    bool ok = reply_result(n ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND, nodes, n * sizeof *nodes);
    free(nodes);
    return ok;
}

/* A stop being served: what the loop needs, and how it ends. */
struct stop {
    struct launch_info *li;
    stop_graph_nodes_fn graph_nodes;
    struct proto_stopped stopped;
    enum proto_resume_mode mode;
};

/* Reports the stop and answers requests until told how to go on; owns the
 * connection meanwhile (channel_exclusive). */
static void serve(void *arg)
{
    struct stop *st = arg;
    struct launch_info *li = st->li;
    char stack[64];
    struct msg m;
    msg_init(&m, stack, sizeof stack, MSG_STOPPED, li->seq);
    msg_add(&m, &st->stopped, sizeof st->stopped);
    bool up = channel_send_locked(&m);
    msg_free(&m);
    while (up) {
        unsigned char payload[256];
        uint16_t kind;
        uint64_t tag;
        size_t len;
        if (!channel_recv_locked(&kind, &tag, payload, sizeof payload, &len))
            break;
        if (kind == MSG_RESUME && len == sizeof(struct proto_resume)) {
            struct proto_resume r;
            memcpy(&r, payload, sizeof r);
            if (r.mode <= RESUME_KILL)
                st->mode = (enum proto_resume_mode)r.mode;
            break;
        }
        if (kind == MSG_READ)
            up = serve_read(li, payload, len);
        else if (kind == MSG_QUERY)
            up = serve_query(payload, len);
        else if (kind == MSG_BACKTRACE)
            up = serve_backtrace();
        else if (kind == MSG_COUNTS)
            up = serve_counts();
        else if (kind == MSG_GRAPH_NODES)
            up = serve_graph_nodes(st->graph_nodes);
        else if (kind == MSG_WRITE)
            up = serve_write(li, payload, len);
        else
            up = reply_result(-1, NULL, 0);
    }
}

enum proto_resume_mode stop_serve(struct launch_info *li, enum proto_phase phase,
                                  CUresult launch_rc, stop_graph_nodes_fn graph_nodes)
{
    struct stop st = {.li = li, .graph_nodes = graph_nodes,
                      .stopped = {.phase = phase, .launch_rc = launch_rc},
                      .mode = RESUME_CONTINUE};
    /* The user may change memory at a stop: scans made ahead would not see it. */
    ahead_void();
    st.stopped.sync_rc = phase == PHASE_BEFORE ? quiesce(li) : CUDA_SUCCESS;
    channel_exclusive(serve, &st);
    if (st.mode == RESUME_KILL) {
        raise(SIGKILL);
        for (;;)
            pause();
    }
    return st.mode;
}
