/*
 * Kernels inside CUDA graphs.
 *
 * Kernels replayed by cuGraphLaunch never pass a launch call, so the shim
 * learns each executable graph's kernels when it is instantiated: it walks
 * the graph (child graphs included) in an order the nodes can run in and
 * keeps, per kernel node, its function, grid, block and shared memory.
 * Parameter changes made to the executable graph afterwards
 * (cuGraphExecKernelNodeSetParams, cuGraphExecUpdate) are applied to that
 * record too.
 *
 * A graph launch then costs one counter increment; per-node launch counts are
 * folded in when the graph is destroyed or the process ends. Only when the
 * controller traces does each launch report its kernel nodes.
 *
 * Snapshots of kernels inside a graph: the shim keeps its own clone of the
 * graph each executable graph was made from. When a rule wants a kernel node
 * of a launch, the launch runs an instrumented copy of that clone instead of
 * the application's executable graph: the same nodes with the same
 * parameters, plus copy nodes that take the planned buffers into the pinned
 * staging area — "before" copies between the node and what it depends on,
 * "after" copies between it and everything that depends on it — so the
 * numerics are those of graph mode and the application's graphs are never
 * touched. A kernel inside a child graph gets its copy nodes in the clone's
 * copy of that child graph, found by the node's route (below).
 *
 * Digests and NaN/Inf scans (COPY_TOOL) cannot go on the program's stream in
 * the middle of a graph launch, so they too are nodes of the instrumented
 * copy: kernel nodes of cudump's own kernel (tools.c), placed around the node
 * as the copy nodes are, up to TOOL_JOBS buffers of one node and phase per
 * node, writing their results into the staging slots the plan gave them with
 * the plan's accumulators, as the stream's launches of the kernel do. Nothing
 * in a graph holds a stream: the graph is waited for and its scans reported
 * once it has run. Where cudump's kernel cannot be had (the driver cannot load
 * its PTX) the scans fail with that reason and, if nothing else was wanted,
 * the application's own graph runs.
 *
 * The instrumented copy is kept and launched again while the replays plan the
 * same copies; its scans are checked again whenever allocations have come or
 * gone (cudump's kernel never reads outside an allocation).
 *
 * A graph instantiated for device launch may also be launched by kernels,
 * which the shim never sees: the controller is told once, when it is made.
 */
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "alloctab.h"
#include "channel.h"
#include "ctxlife.h"
#include "drain.h"
#include "flight.h"
#include "functab.h"
#include "gate.h"
#include "graph.h"
#include "interpose.h"
#include "plan.h"
#include "pysource.h"
#include "scope.h"
#include "staging.h"
#include "stop.h"
#include "stream.h"
#include "tools.h"
#include "trace.h"
#include "watch.h"
#include "window.h"

/* Child graphs nested deeper than this are not looked into. */
enum { GRAPH_MAX_DEPTH = 16 };

struct graph_kernel {
    CUgraphNode node;           /* in the graph it was instantiated from */
    struct func_entry *e;
    unsigned grid[3], block[3], smem;
    bool top;                   /* a node of the graph itself, not of a child graph */
    /* Where the node sits, so that it can be found in copies of the graph: `anchor` is
     * the node of the graph itself that is the kernel node or holds it (a child graph
     * node), and route[l] its index among cuGraphGetNodes of the child graph at level
     * l + 1. cuGraphNodeFindInClone finds the anchor in a copy; the route does the rest. */
    CUgraphNode anchor;
    unsigned depth;
    unsigned route[GRAPH_MAX_DEPTH];
    CUgraphNode clone_anchor;   /* the anchor in the shim's clone */
    CUgraphNode clone_node;     /* the kernel node in the shim's clone; NULL: not found */
    uint32_t scope;             /* open where it was captured; 0: the graph launch's */
    unsigned char *params;      /* the parameter values, at the layout's offsets */
    void **argv;                /* kernelParams-style pointers into `params` */
};

struct graph_exec {
    CUgraphExec exec;
    CUgraph src;                /* the shim's clone of the graph it was made from */
    uint64_t id;                /* per process, from 1 */
    _Atomic unsigned long long replays;
    bool unsafe;                /* never instrumented: see LAUNCH_UNSAFE_GRAPH */
    bool stale;                 /* a node was set in the exec alone: run unchanged (graph_exec_set) */
    bool told_left_out;         /* NOTICE_GRAPH_LEFT_OUT sent */
    unsigned long long counted; /* replays already folded into the functions' counts */
    size_t nkernels;
    struct graph_kernel *kernels;
    /* The last instrumented copy (the clone plus copy nodes, instantiated), kept for
     * the next replay that plans the same copies: a rule on every replay then costs
     * its copies, not a clone and an instantiation each time. */
    CUgraphExec cached;
    unsigned ncached;
    struct proto_copy *cached_copies;
    uint32_t *cached_nodes;       /* the kernel each copy is ordered around */
    CUresult *cached_rcs;         /* how each copy went when it was made */
    unsigned long long cached_epoch; /* alloctab_epoch() its scans were checked at */
    struct ctx_key ctx;         /* the context it was instantiated in (ctx NULL: none known) */
    bool ctx_gone;              /* that context was destroyed (graph_forget_context) */
    /* --watch-nan: the clone with one node of the batched scan after everything
     * (window.h), made from the scans planned for a replay, and launched instead of the
     * application's graph while the buffers it scans stay held and the control generation
     * stays (may_watch). */
    CUgraphExec watched;
    /* Its node's state; kept when the copy goes (parameters changed, memory it scanned
     * freed), for the next copy to use its memory again. */
    struct window_graph *wg;
    unsigned long long watched_removals;
    uint32_t watched_gen;
};

/* Executable graphs are few and long-lived; launches look them up under one
 * mutex, which costs nothing next to cuGraphLaunch itself. */
static pthread_mutex_t graphs_lock = PTHREAD_MUTEX_INITIALIZER;
static struct graph_exec **graphs;
static size_t ngraphs, graphs_cap;
static uint64_t next_graph_id;

struct walk {
    struct graph_kernel *k;
    size_t n, cap;
    bool failed;
    bool unsafe;                /* memory-allocation or conditional nodes */
    CUgraphNode anchor;         /* of the nodes being walked (see graph_kernel) */
    unsigned route[GRAPH_MAX_DEPTH];
};

/* Copies a kernel node's parameter values (for MSG_BEGIN when a rule wants it). */
static void keep_params(struct graph_kernel *gk, void **kernelParams)
{
    struct func_entry *e = gk->e;
    free(gk->params);
    free(gk->argv);
    gk->params = NULL;
    gk->argv = NULL;
    if (!kernelParams || e->nparams <= 0)
        return;
    size_t size = 0;
    for (int i = 0; i < e->nparams; i++)
        if (e->param_offset[i] + e->param_size[i] > size)
            size = e->param_offset[i] + e->param_size[i];
    gk->params = calloc(size ? size : 1, 1);
    gk->argv = calloc((size_t)e->nparams, sizeof *gk->argv);
    if (!gk->params || !gk->argv) {
        free(gk->params);
        free(gk->argv);
        gk->params = NULL;
        gk->argv = NULL;
        return;
    }
    for (int i = 0; i < e->nparams; i++) {
        gk->argv[i] = gk->params + e->param_offset[i];
        if (kernelParams[i])
            memcpy(gk->argv[i], kernelParams[i], e->param_size[i]);
    }
}

static void free_kernels(struct graph_kernel *k, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(k[i].params);
        free(k[i].argv);
    }
    free(k);
}

/* ---- scopes at capture --------------------------------------------------------
 * A kernel node made by a captured launch keeps the scope its thread had open
 * then: its node handle is the capturing stream's one dependency right after
 * the launch. Kept by node handle in a table that forgets the oldest where it
 * is crowded (a node then reports the scope of the graph's launch). */
enum { CAPTURED_SLOTS = 8192, CAPTURED_PROBES = 16 };
static struct { CUgraphNode node; uint32_t scope; } captured_scopes[CAPTURED_SLOTS];
static pthread_mutex_t captured_lock = PTHREAD_MUTEX_INITIALIZER;

static size_t captured_home(CUgraphNode node)
{
    return (size_t)(((uintptr_t)node >> 3) * 0x9E3779B97F4A7C15ull >> 51); /* 13 bits */
}

void graph_captured(const struct launch_info *li)
{
    cuStreamGetCaptureInfo_v3_fn info =
        li->ptsz ? real_cuStreamGetCaptureInfo_v3_ptsz : real_cuStreamGetCaptureInfo_v3;
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    const CUgraphNode *deps = NULL;
    size_t n = 0;
    if (!info || info(li->stream, &status, NULL, NULL, &deps, NULL, &n) != CUDA_SUCCESS ||
        status != CU_STREAM_CAPTURE_STATUS_ACTIVE || n != 1 || !deps || !deps[0])
        return;
    size_t home = captured_home(deps[0]), at = home;
    pthread_mutex_lock(&captured_lock);
    for (size_t k = 0; k < CAPTURED_PROBES; k++) {
        size_t i = (home + k) % CAPTURED_SLOTS;
        if (!captured_scopes[i].node || captured_scopes[i].node == deps[0]) {
            at = i;
            break;
        }
    }
    captured_scopes[at].node = deps[0];
    captured_scopes[at].scope = li->scope;
    pthread_mutex_unlock(&captured_lock);
}

static uint32_t captured_scope(CUgraphNode node)
{
    uint32_t scope = 0;
    size_t home = captured_home(node);
    pthread_mutex_lock(&captured_lock);
    for (size_t k = 0; k < CAPTURED_PROBES && !scope; k++) {
        size_t i = (home + k) % CAPTURED_SLOTS;
        if (captured_scopes[i].node == node)
            scope = captured_scopes[i].scope;
    }
    pthread_mutex_unlock(&captured_lock);
    return scope;
}

static void add_kernel(struct walk *w, CUgraphNode node, unsigned depth)
{
    CUDA_KERNEL_NODE_PARAMS p;
    memset(&p, 0, sizeof p);
    if (!real_cuGraphKernelNodeGetParams_v2 || real_cuGraphKernelNodeGetParams_v2(node, &p) != CUDA_SUCCESS)
        return;
    uintptr_t handle = p.func ? (uintptr_t)p.func : (uintptr_t)p.kern;
    struct func_entry *e = functab_get(handle);
    if (!e)
        return;
    /* A graph node may hold a handle the program never launched directly (the
     * runtime's per-context function, a CUkernel): name it now, not at exit. */
    if (atomic_load_explicit(&e->state, memory_order_acquire) != FN_READY)
        functab_register(e);
    if (w->n == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 16;
        struct graph_kernel *grown = realloc(w->k, cap * sizeof *grown);
        if (!grown) {
            w->failed = true;
            return;
        }
        w->k = grown;
        w->cap = cap;
    }
    struct graph_kernel *gk = &w->k[w->n];
    memset(gk, 0, sizeof *gk);
    *gk = (struct graph_kernel){.node = node, .e = e,
                                .grid = {p.gridDimX, p.gridDimY, p.gridDimZ},
                                .block = {p.blockDimX, p.blockDimY, p.blockDimZ},
                                .smem = p.sharedMemBytes, .top = depth == 0,
                                .anchor = w->anchor, .depth = depth,
                                .scope = captured_scope(node)};
    memcpy(gk->route, w->route, depth * sizeof *gk->route);
    keep_params(&w->k[w->n], p.kernelParams);
    w->n++;
}

/* Appends the graph's kernel nodes, child graphs flattened in place, in a
 * topological order (Kahn's algorithm; ties in the order the graph lists). */
static void walk_graph(struct walk *w, CUgraph graph, unsigned depth)
{
    size_t n = 0, ne = 0;
    if (depth > GRAPH_MAX_DEPTH || !real_cuGraphGetNodes || real_cuGraphGetNodes(graph, NULL, &n) != CUDA_SUCCESS ||
        n == 0)
        return;
    CUgraphNode *nodes = calloc(n, sizeof *nodes);
    unsigned *indegree = calloc(n, sizeof *indegree);
    CUgraphNode *from = NULL, *to = NULL;
    bool *done = calloc(n, sizeof *done);
    if (!nodes || !indegree || !done || real_cuGraphGetNodes(graph, nodes, &n) != CUDA_SUCCESS)
        goto out;
    if (real_cuGraphGetEdges && real_cuGraphGetEdges(graph, NULL, NULL, &ne) == CUDA_SUCCESS && ne) {
        from = calloc(ne, sizeof *from);
        to = calloc(ne, sizeof *to);
        if (!from || !to || real_cuGraphGetEdges(graph, from, to, &ne) != CUDA_SUCCESS)
            goto out;
        for (size_t i = 0; i < ne; i++)
            for (size_t j = 0; j < n; j++)
                if (nodes[j] == to[i])
                    indegree[j]++;
    }
    for (size_t placed = 0; placed < n; placed++) {
        size_t j = 0;
        while (j < n && (done[j] || indegree[j]))
            j++;
        if (j == n)
            break; /* a cycle: the driver refuses it anyway */
        done[j] = true;
        if (depth == 0)
            w->anchor = nodes[j];
        else
            w->route[depth - 1] = (unsigned)j;
        int type = -1;
        if (real_cuGraphNodeGetType && real_cuGraphNodeGetType(nodes[j], &type) == CUDA_SUCCESS) {
            CUgraph child = NULL;
            if (type == CU_GRAPH_NODE_TYPE_MEM_ALLOC || type == CU_GRAPH_NODE_TYPE_MEM_FREE ||
                type == CU_GRAPH_NODE_TYPE_CONDITIONAL)
                w->unsafe = true;
            if (type == CU_GRAPH_NODE_TYPE_KERNEL)
                add_kernel(w, nodes[j], depth);
            else if (type == CU_GRAPH_NODE_TYPE_GRAPH && real_cuGraphChildGraphNodeGetGraph &&
                     real_cuGraphChildGraphNodeGetGraph(nodes[j], &child) == CUDA_SUCCESS)
                walk_graph(w, child, depth + 1);
        }
        for (size_t i = 0; i < ne; i++)
            if (from[i] == nodes[j])
                for (size_t k = 0; k < n; k++)
                    if (nodes[k] == to[i] && indegree[k])
                        indegree[k]--;
    }
out:
    free(nodes);
    free(indegree);
    free(done);
    free(from);
    free(to);
}

static void fold_counts_locked(struct graph_exec *g)
{
    unsigned long long replays = atomic_load(&g->replays);
    unsigned long long add = replays - g->counted;
    g->counted = replays;
    for (size_t i = 0; add && i < g->nkernels; i++) {
        atomic_fetch_add(&g->kernels[i].e->graph_launches, add);
        counts_add_func(g->kernels[i].e->id, true, add);
    }
}

/* Whether the context the graph was instantiated in still exists: the shim's
 * clone and instrumented copy went with it otherwise, and the driver does not
 * check a handle of an ended context (ctxlife.h). A destroyed context was
 * marked before its handle went; the handle of a primary context (reset, or
 * released for the last time, unseen) stays, and its id tells. */
static bool context_alive(struct graph_exec *g)
{
    return !g->ctx_gone && (!g->ctx.ctx || ctx_key_match(&g->ctx, g->ctx.ctx) == CTX_SAME);
}

/* The copy with the scan node no longer matches: its findings so far are read, and it
 * goes (its node's state stays, for the next copy). */
static void drop_watched(struct graph_exec *g)
{
    if (g->wg && g->watched)
        window_graph_check(g->wg, (uint32_t)g->id);
    if (g->watched && shim_real_cuGraphExecDestroy() && context_alive(g))
        shim_real_cuGraphExecDestroy()(g->watched);
    g->watched = NULL;
}

/* The instrumented copy no longer matches (parameters changed, or the graph goes); nor
 * does the copy with the scan node. */
static void drop_cached(struct graph_exec *g)
{
    drop_watched(g);
    if (g->cached && shim_real_cuGraphExecDestroy() && context_alive(g))
        shim_real_cuGraphExecDestroy()(g->cached);
    g->cached = NULL;
    g->ncached = 0;
    free(g->cached_copies);
    free(g->cached_nodes);
    free(g->cached_rcs);
    g->cached_copies = NULL;
    g->cached_nodes = NULL;
    g->cached_rcs = NULL;
}

static void free_graph(struct graph_exec *g)
{
    bool alive = context_alive(g);
    drop_cached(g);
    window_graph_drop(g->wg);
    g->wg = NULL;
    if (g->src && real_cuGraphDestroy && alive)
        real_cuGraphDestroy(g->src);
    free_kernels(g->kernels, g->nkernels);
    free(g);
}

static void forget_locked(CUgraphExec exec)
{
    for (size_t i = 0; i < ngraphs; i++) {
        if (graphs[i]->exec == exec) {
            fold_counts_locked(graphs[i]);
            free_graph(graphs[i]);
            graphs[i] = graphs[--ngraphs];
            return;
        }
    }
}

/* Whether `node` is the kernel node gk describes: same function, shape and parameters. */
static bool same_kernel(const struct graph_kernel *gk, CUgraphNode node)
{
    int type = -1;
    CUDA_KERNEL_NODE_PARAMS p;
    memset(&p, 0, sizeof p);
    if (!node || real_cuGraphNodeGetType(node, &type) != CUDA_SUCCESS ||
        type != CU_GRAPH_NODE_TYPE_KERNEL ||
        real_cuGraphKernelNodeGetParams_v2(node, &p) != CUDA_SUCCESS)
        return false;
    uintptr_t handle = p.func ? (uintptr_t)p.func : (uintptr_t)p.kern;
    if (functab_get(handle) != gk->e || p.gridDimX != gk->grid[0] || p.gridDimY != gk->grid[1] ||
        p.gridDimZ != gk->grid[2] || p.blockDimX != gk->block[0] ||
        p.blockDimY != gk->block[1] || p.blockDimZ != gk->block[2] ||
        p.sharedMemBytes != gk->smem)
        return false;
    for (int i = 0; gk->argv && p.kernelParams && i < gk->e->nparams; i++)
        if (p.kernelParams[i] && memcmp(p.kernelParams[i], gk->argv[i], gk->e->param_size[i]))
            return false;
    return true;
}

/* The node of child graph `child` at route index `index`; at the last level, if that
 * is not gk (a driver may list a copy's nodes in another order), the one node of the
 * child graph that is. */
static CUgraphNode child_node_at(const struct graph_kernel *gk, CUgraph child, unsigned index,
                                 bool last)
{
    size_t count = 0;
    if (real_cuGraphGetNodes(child, NULL, &count) != CUDA_SUCCESS || count == 0)
        return NULL;
    CUgraphNode *nodes = calloc(count, sizeof *nodes), found = NULL;
    if (!nodes || real_cuGraphGetNodes(child, nodes, &count) != CUDA_SUCCESS) {
        free(nodes);
        return NULL;
    }
    if (index < count)
        found = nodes[index];
    if (last && !same_kernel(gk, found)) {
        found = NULL;
        for (size_t i = 0; i < count; i++) {
            if (!same_kernel(gk, nodes[i]))
                continue;
            if (found) { /* two alike: no telling which */
                found = NULL;
                break;
            }
            found = nodes[i];
        }
    }
    free(nodes);
    return found;
}

/* gk's node in `copy`, a clone of the graph that `anchor` (gk's anchor, or its own copy
 * in the graph `copy` was cloned from) belongs to; *owner is the graph holding it, for
 * nodes added next to it. NULL if it cannot be found for certain. */
static CUgraphNode locate(const struct graph_kernel *gk, CUgraphNode anchor, CUgraph copy,
                          CUgraph *owner)
{
    CUgraphNode n = NULL;
    if (!anchor || real_cuGraphNodeFindInClone(&n, anchor, copy) != CUDA_SUCCESS)
        return NULL;
    *owner = copy;
    for (unsigned l = 0; n && l < gk->depth; l++) {
        CUgraph child = NULL;
        if (!real_cuGraphChildGraphNodeGetGraph ||
            real_cuGraphChildGraphNodeGetGraph(n, &child) != CUDA_SUCCESS)
            return NULL;
        *owner = child;
        n = child_node_at(gk, child, gk->route[l], l + 1 == gk->depth);
    }
    return same_kernel(gk, n) ? n : NULL;
}

/* Tells the controller about a graph made for device launch (see the top). */
static void notice_device_graph(uint64_t id)
{
    struct proto_notice ev = {.kind = NOTICE_DEVICE_GRAPH, .graph = id};
    channel_send_event(MSG_NOTICE, 0, &ev, sizeof ev);
}

void graph_remember(CUgraphExec exec, CUgraph graph, unsigned long long flags)
{
    if (!exec)
        return;
    shim_busy++;
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    if (real_cuThreadExchangeStreamCaptureMode)
        real_cuThreadExchangeStreamCaptureMode(&mode);
    struct walk w = {0};
    walk_graph(&w, graph, 0);
    CUgraph src = NULL;
    if (real_cuGraphClone && real_cuGraphNodeFindInClone && real_cuGraphGetNodes &&
        real_cuGraphNodeGetType && real_cuGraphKernelNodeGetParams_v2 &&
        real_cuGraphClone(&src, graph) == CUDA_SUCCESS) {
        for (size_t i = 0; i < w.n; i++) {
            struct graph_kernel *gk = &w.k[i];
            CUgraph owner = NULL;
            if (real_cuGraphNodeFindInClone(&gk->clone_anchor, gk->anchor, src) != CUDA_SUCCESS)
                gk->clone_anchor = NULL;
            gk->clone_node = gk->clone_anchor ? locate(gk, gk->anchor, src, &owner) : NULL;
        }
    }
    if (real_cuThreadExchangeStreamCaptureMode)
        real_cuThreadExchangeStreamCaptureMode(&mode);
    struct graph_exec *g = calloc(1, sizeof *g);
    pthread_mutex_lock(&graphs_lock);
    forget_locked(exec); /* an address the driver reused */
    if (g && !w.failed && ngraphs == graphs_cap) {
        size_t cap = graphs_cap ? graphs_cap * 2 : 16;
        struct graph_exec **grown = realloc(graphs, cap * sizeof *grown);
        if (grown) {
            graphs = grown;
            graphs_cap = cap;
        }
    }
    uint64_t device_graph = 0;
    if (g && !w.failed && ngraphs < graphs_cap) {
        CUcontext ctx = NULL;
        if (real_cuCtxGetCurrent && real_cuCtxGetCurrent(&ctx) == CUDA_SUCCESS && ctx)
            ctx_key_set(&g->ctx, ctx);
        g->exec = exec;
        g->src = src;
        src = NULL;
        g->unsafe = w.unsafe;
        g->id = ++next_graph_id;
        if (flags & CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH)
            device_graph = g->id;
        g->nkernels = w.n;
        g->kernels = w.k;
        graphs[ngraphs++] = g;
        g = NULL;
        w.k = NULL;
    }
    pthread_mutex_unlock(&graphs_lock);
    free(g);
    if (w.k)
        free_kernels(w.k, w.n);
    if (src && real_cuGraphDestroy)
        real_cuGraphDestroy(src);
    if (device_graph)
        notice_device_graph(device_graph);
    shim_busy--;
}

void graph_forget(CUgraphExec exec)
{
    pthread_mutex_lock(&graphs_lock);
    forget_locked(exec);
    pthread_mutex_unlock(&graphs_lock);
}

void graph_forget_context(const struct ctx_key *gone)
{
    pthread_mutex_lock(&graphs_lock);
    for (size_t i = 0; i < ngraphs; i++)
        if (ctx_key_is(&graphs[i]->ctx, gone))
            graphs[i]->ctx_gone = true;
    pthread_mutex_unlock(&graphs_lock);
}

void graph_updated(CUgraphExec exec, CUgraph graph)
{
    /* The executable graph now runs `graph`'s parameters: learn them again,
     * keeping the launches counted so far. */
    bool stale = false;
    pthread_mutex_lock(&graphs_lock);
    for (size_t i = 0; i < ngraphs; i++)
        if (graphs[i]->exec == exec) {
            fold_counts_locked(graphs[i]);
            stale = stale || graphs[i]->stale;
        }
    pthread_mutex_unlock(&graphs_lock);
    graph_remember(exec, graph, 0);
    /* A node enabled or disabled, or set, in the exec alone may stay so across an update
     * (that the driver resets it is not relied on): still run unchanged. */
    pthread_mutex_lock(&graphs_lock);
    for (size_t i = 0; stale && i < ngraphs; i++)
        if (graphs[i]->exec == exec)
            graphs[i]->stale = true;
    pthread_mutex_unlock(&graphs_lock);
}

void graph_exec_set(CUgraphExec exec)
{
    uint64_t id = 0;
    pthread_mutex_lock(&graphs_lock);
    for (size_t i = 0; i < ngraphs; i++) {
        struct graph_exec *g = graphs[i];
        if (g->exec != exec || g->stale)
            continue;
        g->stale = true;
        drop_cached(g);
        id = g->id;
    }
    pthread_mutex_unlock(&graphs_lock);
    if (id) {
        struct proto_notice ev = {.kind = NOTICE_GRAPH_SET, .graph = id};
        channel_send_event(MSG_NOTICE, 0, &ev, sizeof ev);
    }
}

void graph_node_params(CUgraphExec exec, CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS *params)
{
    pthread_mutex_lock(&graphs_lock);
    for (size_t i = 0; i < ngraphs; i++) {
        if (graphs[i]->exec != exec)
            continue;
        for (size_t k = 0; k < graphs[i]->nkernels; k++) {
            struct graph_kernel *gk = &graphs[i]->kernels[k];
            if (gk->node != node)
                continue;
            uintptr_t handle = params->func ? (uintptr_t)params->func : (uintptr_t)params->kern;
            struct func_entry *e = functab_get(handle);
            if (e && e != gk->e) {
                fold_counts_locked(graphs[i]);
                gk->e = e;
            }
            gk->grid[0] = params->gridDimX, gk->grid[1] = params->gridDimY;
            gk->grid[2] = params->gridDimZ;
            gk->block[0] = params->blockDimX, gk->block[1] = params->blockDimY;
            gk->block[2] = params->blockDimZ;
            gk->smem = params->sharedMemBytes;
            keep_params(gk, params->kernelParams);
            /* The shim's clone follows, so an instrumented launch runs these too. */
            if (gk->clone_node && real_cuGraphKernelNodeSetParams_v2)
                real_cuGraphKernelNodeSetParams_v2(gk->clone_node, params);
            drop_cached(graphs[i]);
        }
    }
    pthread_mutex_unlock(&graphs_lock);
}

/* The graph whose launch this thread holds at a breakpoint (for MSG_GRAPH_NODES). */
static SHIM_TLS struct graph_exec *held_graph;

static size_t held_nodes(struct proto_graph_node *out, size_t cap)
{
    struct graph_exec *g = held_graph;
    size_t n = 0;
    for (size_t k = 0; g && k < g->nkernels && n < cap; k++, n++) {
        struct graph_kernel *gk = &g->kernels[k];
        out[n] = (struct proto_graph_node){(uint32_t)k, gk->e->id,
                                           {gk->grid[0], gk->grid[1], gk->grid[2]},
                                           {gk->block[0], gk->block[1], gk->block[2]},
                                           gk->smem, gk->top ? 0u : 1u};
    }
    return n;
}

/* The launching thread and its device, asked once per graph launch. */
static SHIM_TLS int here_device = -1;
static SHIM_TLS uint64_t here_tid;
static SHIM_TLS uint32_t here_scope, here_step, here_source; /* the graph launch's */

static void learn_here(void)
{
    CUdevice dev;
    here_device = real_cuCtxGetDevice && real_cuCtxGetDevice(&dev) == CUDA_SUCCESS ? dev : -1;
    if (!here_tid)
        here_tid = (uint64_t)syscall(SYS_gettid);
}

static struct launch_info node_launch(struct graph_exec *g, size_t k, CUstream stream, int ptsz,
                                      unsigned long long seq, unsigned long long replay)
{
    struct graph_kernel *gk = &g->kernels[k];
    struct launch_info li = {.e = gk->e, .wants = atomic_load(&gk->e->wants),
                             .grid = {gk->grid[0], gk->grid[1], gk->grid[2]},
                             .block = {gk->block[0], gk->block[1], gk->block[2]},
                             .smem = gk->smem, .stream = stream, .params = gk->argv,
                             .extra = NULL, .ptsz = ptsz,
                             .api = ptsz ? API_cuGraphLaunch_ptsz : API_cuGraphLaunch,
                             .seq = seq, .occurrence = replay, .device = here_device,
                             .tid = here_tid, .graph = g->id, .replay = (uint32_t)replay,
                             .node = (uint32_t)k};
    /* The scope open where the node was captured; else the graph launch's. */
    li.scope = gk->scope ? gk->scope : here_scope;
    li.step = here_step;
    li.source = here_source;
    return li;
}

/* Whether any kernel node wants `want` (wants refreshed as a launch would). */
static bool nodes_want(struct graph_exec *g, unsigned want)
{
    const volatile struct proto_control *ctl = channel_control();
    bool any = false;
    for (size_t k = 0; ctl && k < g->nkernels; k++) {
        struct graph_kernel *gk = &g->kernels[k];
        if (!gk->argv || (want == WANT_SNAPSHOT && !gk->clone_node))
            continue;
        struct func_entry *e = gk->e;
        if (atomic_load_explicit(&e->state, memory_order_acquire) != FN_READY)
            functab_register(e);
        else if (atomic_load_explicit(&e->gen, memory_order_relaxed) != ctl->generation)
            functab_refresh(e);
        if (atomic_load_explicit(&e->wants, memory_order_relaxed) & want)
            any = true;
    }
    return any;
}

/* A graph's kernel node with a breakpoint: asks whether to hold, and holds
 * (under the staging lock, like every launch's conversation). */
struct node_stop {
    struct launch_info *li;
    enum proto_phase phase;
    CUresult launch_rc;
    enum proto_resume_mode how;
};

static void node_stop_locked(void *arg)
{
    struct node_stop *ns = arg;
    struct launch_info *li = ns->li;
    if (ns->phase == PHASE_BEFORE)
        drain_wait_idle();
    CUstreamCaptureMode mode = capture_relax();
    if (ns->phase == PHASE_BEFORE) {
        li->begin_flags |= LAUNCH_STOP_ONLY;
        if (plan_ask_stop(li))
            ns->how = stop_serve(li, PHASE_BEFORE, CUDA_SUCCESS, held_nodes);
        li->begin_flags &= ~(uint32_t)LAUNCH_STOP_ONLY;
    } else {
        /* After the graph ran: that node held again (the answer to `step`). */
        if (ns->launch_rc == CUDA_SUCCESS)
            gate_wait_stream(li);
        stop_serve(li, PHASE_AFTER, ns->launch_rc, held_nodes);
    }
    capture_restore(mode);
}

/* Returns the resume mode (RESUME_CONTINUE when not held). */
static enum proto_resume_mode node_stop(struct launch_info *li, enum proto_phase phase,
                                        CUresult launch_rc)
{
    struct node_stop ns = {li, phase, launch_rc, RESUME_CONTINUE};
    staging_locked(0, node_stop_locked, &ns);
    return ns.how;
}

/* Breakpoints on kernels inside the graph: the launch is held before the graph
 * runs, once per node that stops. Returns true if one asked to step (hold again
 * once the graph has run). */
static long stop_nodes(struct graph_exec *g, CUstream stream, int ptsz, unsigned long long seq,
                       unsigned long long replay)
{
    long step = -1;
    for (size_t k = 0; k < g->nkernels; k++) {
        struct graph_kernel *gk = &g->kernels[k];
        if (!gk->argv || !(atomic_load(&gk->e->wants) & WANT_STOP))
            continue;
        struct launch_info li = node_launch(g, k, stream, ptsz, seq, replay);
        if (node_stop(&li, PHASE_BEFORE, CUDA_SUCCESS) == RESUME_STEP && step < 0)
            step = (long)k;
    }
    return step;
}

/* The nodes kn depends on, or (dependents) those that depend on it, as a list
 * the caller frees (NULL when there are none). */
static CUresult neighbours(CUgraphNode kn, bool dependents, CUgraphNode **out, size_t *n)
{
    cuGraphNodeGetDependencies_fn get =
        dependents ? real_cuGraphNodeGetDependentNodes : real_cuGraphNodeGetDependencies;
    size_t count = 0;
    *out = NULL;
    *n = 0;
    CUresult rc = get(kn, NULL, &count);
    if (rc != CUDA_SUCCESS || count == 0)
        return rc;
    CUgraphNode *list = calloc(count, sizeof *list);
    if (!list)
        return CUDA_ERROR_OUT_OF_MEMORY;
    rc = get(kn, list, &count);
    if (rc != CUDA_SUCCESS) {
        free(list);
        return rc;
    }
    *out = list;
    *n = count;
    return CUDA_SUCCESS;
}

/* A node of cudump's: a copy into staging, or a launch of cudump's kernel. */
struct extra_node {
    const CUDA_MEMCPY3D *copy;
    CUcontext ctx;
    const CUDA_KERNEL_NODE_PARAMS *kernel;
};

static CUresult add_node(CUgraph graph, const CUgraphNode *deps, size_t n,
                         const struct extra_node *x, CUgraphNode *made)
{
    return x->copy ? real_cuGraphAddMemcpyNode(made, graph, deps, n, x->copy, x->ctx)
                   : real_cuGraphAddKernelNode_v2(made, graph, deps, n, x->kernel);
}

/* Adds x to `graph` ordered around its kernel node kn: "before" between kn and
 * what it depends on, "after" between kn and everything that depends on it, so
 * that it sees the buffers exactly as the kernel finds and leaves them. */
static CUresult add_around(CUgraph graph, CUgraphNode kn, enum proto_phase phase,
                           const struct extra_node *x)
{
    CUgraphNode *list = NULL, made = NULL;
    size_t n = 0;
    /* Asked before the node is added: kn's own neighbours, not cudump's. */
    CUresult rc = neighbours(kn, phase == PHASE_AFTER, &list, &n);
    if (rc == CUDA_SUCCESS && phase == PHASE_BEFORE) {
        rc = add_node(graph, list, n, x, &made);
        if (rc == CUDA_SUCCESS)
            rc = real_cuGraphAddDependencies(graph, &made, &kn, 1);
    } else if (rc == CUDA_SUCCESS) {
        rc = add_node(graph, &kn, 1, x, &made);
        for (size_t i = 0; rc == CUDA_SUCCESS && i < n; i++)
            rc = real_cuGraphAddDependencies(graph, &made, &list[i], 1);
    }
    free(list);
    return rc;
}

/* One copy node in the instrumented graph, ordered around kernel node kn. */
static CUresult add_copy(CUgraph graph, CUgraphNode kn, const struct proto_copy *c, char *area,
                         CUcontext ctx)
{
    CUDA_MEMCPY3D m;
    memset(&m, 0, sizeof m);
    m.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    m.srcDevice = c->src;
    m.srcPitch = c->pitch;
    m.srcHeight = c->height;
    m.dstMemoryType = CU_MEMORYTYPE_HOST;
    m.dstHost = area + c->offset;
    m.dstPitch = c->width;
    m.dstHeight = c->height;
    m.WidthInBytes = c->width;
    m.Height = c->height;
    m.Depth = 1;
    struct extra_node x = {.copy = &m, .ctx = ctx};
    return add_around(graph, kn, (enum proto_phase)c->phase, &x);
}

/* One launch of cudump's kernel in the instrumented graph, ordered around kn. */
static CUresult add_tool(CUgraph graph, CUgraphNode kn, enum proto_phase phase, CUfunction fn,
                         struct tool_jobs *jobs, unsigned grid)
{
    void *params[] = {jobs}; /* copied by the driver when the node is added */
    CUDA_KERNEL_NODE_PARAMS p = {.func = fn, .gridDimX = grid, .gridDimY = 1, .gridDimZ = 1,
                                 .blockDimX = TOOL_THREADS, .blockDimY = 1, .blockDimZ = 1,
                                 .kernelParams = params};
    struct extra_node x = {.kernel = &p};
    return add_around(graph, kn, phase, &x);
}

static bool have_graph_services(void)
{
    return real_cuGraphClone && real_cuGraphNodeFindInClone && real_cuGraphAddMemcpyNode &&
           real_cuGraphNodeGetDependencies && real_cuGraphNodeGetDependentNodes &&
           real_cuGraphAddDependencies && real_cuGraphDestroy && real_cuCtxGetCurrent &&
           shim_real_cuGraphInstantiateWithFlags() && shim_real_cuGraphExecDestroy();
}

/* The plan's copy c (plan.c: under the staging lock), and its result. */
static const struct proto_copy *plan_copy(unsigned c)
{
    unsigned n;
    return &plan_copies(&n)[c].c;
}

static void set_rc(unsigned c, CUresult rc)
{
    unsigned n;
    plan_copies(&n)[c].rc = rc;
}

static unsigned plan_count(void)
{
    unsigned n;
    plan_copies(&n);
    return n;
}

/* Whether the cached instrumented copy makes exactly the copies planned now.
 * Where allocations came or went since it was made, each of its scans and
 * digests must still be as readable (or not) as it was then: cudump's kernel
 * never reads a buffer that no longer lies inside an allocation. */
static bool same_plan(struct graph_exec *g, unsigned total, const uint32_t *node_of)
{
    if (!g->cached || g->ncached != total)
        return false;
    for (unsigned c = 0; c < total; c++)
        if (g->cached_nodes[c] != node_of[c] ||
            memcmp(&g->cached_copies[c], plan_copy(c), sizeof g->cached_copies[c]) != 0)
            return false;
    unsigned long long epoch = alloctab_epoch();
    if (epoch == g->cached_epoch)
        return true;
    for (unsigned c = 0; c < total; c++)
        if ((plan_copy(c)->flags & COPY_TOOL) &&
            tools_readable(plan_copy(c)) != (g->cached_rcs[c] == CUDA_SUCCESS))
            return false;
    g->cached_epoch = epoch;
    return true;
}

static void keep_cached(struct graph_exec *g, CUgraphExec exec, unsigned total,
                        const uint32_t *node_of, unsigned long long epoch)
{
    g->cached_copies = malloc(total * sizeof *g->cached_copies);
    g->cached_nodes = malloc(total * sizeof *g->cached_nodes);
    g->cached_rcs = malloc(total * sizeof *g->cached_rcs);
    if (!g->cached_copies || !g->cached_nodes || !g->cached_rcs) {
        drop_cached(g);
        shim_real_cuGraphExecDestroy()(exec);
        return;
    }
    unsigned n;
    const struct plan_copy *copies = plan_copies(&n);
    for (unsigned c = 0; c < total; c++) {
        g->cached_copies[c] = copies[c].c;
        g->cached_rcs[c] = copies[c].rc;
    }
    memcpy(g->cached_nodes, node_of, total * sizeof *node_of);
    g->cached = exec;
    g->ncached = total;
    g->cached_epoch = epoch;
}

/* Scratch for the scans and digests of one instrumented graph, under the
 * staging lock (off the program's stack). */
static struct tool_request tool_reqs[PROTO_MAX_COPIES];
static struct tool_request *tool_of[PROTO_MAX_COPIES];
static struct tool_job tool_jobs_made[PROTO_MAX_COPIES];
static bool tool_taken[PROTO_MAX_COPIES];
static struct tool_job tool_group[TOOL_JOBS];
static unsigned tool_members[TOOL_JOBS];
static struct tool_jobs tool_param;

/* The plan's COPY_TOOL copies, checked as cudump's kernel checks them on a
 * stream, as jobs of the kernel (before anything is cloned: a graph none of
 * whose scans can run is not copied for them). Sets each one's rc; returns
 * how many jobs there are, and the kernel in *fn. Each job writes its result
 * where the plan put it in staging, with the copy's index in the plan as its
 * accumulator, as on the stream. */
static unsigned tool_jobs_of(struct graph_exec *g, const struct launch_info *li, unsigned total,
                             const uint32_t *node_of, char *area, CUfunction *fn)
{
    unsigned n = 0, njobs = 0;
    for (unsigned c = 0; c < total; c++) {
        const struct proto_copy *copy = plan_copy(c);
        if (!(copy->flags & COPY_TOOL))
            continue;
        if (node_of[c] >= g->nkernels || !real_cuGraphAddKernelNode_v2) {
            set_rc(c, CUDA_ERROR_NOT_SUPPORTED);
            continue;
        }
        tool_reqs[n++] = (struct tool_request){
            .copy = copy, .result = (struct proto_tool_result *)(area + copy->offset), .acc = c,
            .tag = 1};
    }
    tools_graph_jobs(li, tool_reqs, n, tool_jobs_made, tool_of, &njobs, fn);
    for (unsigned i = 0; i < n; i++)
        set_rc(tool_reqs[i].acc, tool_reqs[i].result->rc);
    return njobs;
}

/* The jobs as nodes of cudump's kernel: those of one kernel node and phase
 * together (TOOL_JOBS a node), each ordered around its kernel node like the
 * copy nodes. Returns false if one could not be added (its copies then fail
 * with the reason). */
static bool add_tools(struct graph_exec *g, CUgraph graph, const uint32_t *node_of,
                      unsigned njobs, CUfunction fn)
{
    bool all = true;
    memset(tool_taken, 0, njobs * sizeof *tool_taken);
    for (unsigned i = 0; i < njobs; i++) {
        if (tool_taken[i])
            continue;
        uint32_t k = node_of[tool_of[i]->acc], phase = tool_of[i]->copy->phase;
        unsigned m = 0;
        for (unsigned j = i; j < njobs && m < TOOL_JOBS; j++) {
            if (tool_taken[j] || node_of[tool_of[j]->acc] != k || tool_of[j]->copy->phase != phase)
                continue;
            tool_taken[j] = true;
            tool_group[m] = tool_jobs_made[j];
            tool_members[m++] = tool_of[j]->acc;
        }
        const struct graph_kernel *gk = &g->kernels[k];
        CUgraph owner = NULL;
        CUgraphNode kn = locate(gk, gk->clone_anchor, graph, &owner);
        CUresult rc = CUDA_ERROR_NOT_FOUND;
        if (kn) {
            unsigned grid = tools_pack(&tool_param, tool_group, m);
            rc = add_tool(owner, kn, (enum proto_phase)phase, fn, &tool_param, grid);
        }
        for (unsigned j = 0; j < m; j++)
            set_rc(tool_members[j], rc);
        all = all && rc == CUDA_SUCCESS;
    }
    return all;
}

/* The clone of the application's graph with copy nodes and nodes of cudump's
 * kernel, instantiated into *out; sets each copy's result. *out stays NULL
 * where nothing could be added (the application's graph then runs).
 * *complete: every copy has its node, or was refused before any was added
 * (a buffer outside the allocations cudump's kernel may read), so the copy is
 * worth keeping for replays that plan the same. */
static CUresult build_instrumented(struct graph_exec *g, const struct launch_info *li,
                                   unsigned total, const uint32_t *node_of,
                                   struct window_graph *probe, CUgraphExec *out, bool *complete)
{
    size_t size = 0;
    char *area = staging_area(&size);
    *out = NULL;
    *complete = true;
    if (!have_graph_services() || !area)
        return CUDA_ERROR_NOT_SUPPORTED;
    CUfunction fn = NULL;
    unsigned njobs = tool_jobs_of(g, li, total, node_of, area, &fn), ncopies = 0;
    for (unsigned c = 0; c < total; c++)
        ncopies += !(plan_copy(c)->flags & COPY_TOOL);
    if (njobs == 0 && ncopies == 0)
        return CUDA_SUCCESS;
    CUgraph graph = NULL;
    CUcontext ctx = NULL;
    CUresult build = real_cuGraphClone(&graph, g->src);
    if (build == CUDA_SUCCESS)
        build = real_cuCtxGetCurrent(&ctx);
    for (unsigned c = 0; build == CUDA_SUCCESS && c < total; c++) {
        const struct proto_copy *copy = plan_copy(c);
        if (copy->flags & COPY_TOOL)
            continue;
        CUgraphNode kn = NULL;
        CUgraph owner = NULL;
        CUresult rc = (copy->flags & COPY_PIECE) || node_of[c] >= g->nkernels
                          ? CUDA_ERROR_NOT_SUPPORTED /* no streaming inside a graph */
                          : CUDA_SUCCESS;
        if (rc == CUDA_SUCCESS) {
            const struct graph_kernel *gk = &g->kernels[node_of[c]];
            kn = locate(gk, gk->clone_anchor, graph, &owner);
            rc = kn ? add_copy(owner, kn, copy, area, ctx) : CUDA_ERROR_NOT_FOUND;
        }
        if (rc != CUDA_SUCCESS)
            *complete = false;
        set_rc(c, rc);
    }
    if (build == CUDA_SUCCESS && njobs && !add_tools(g, graph, node_of, njobs, fn))
        *complete = false;
    /* --watch-nan: which buffers the graph writes, seen at this replay (window.h). */
    if (build == CUDA_SUCCESS && probe)
        window_graph_probe(probe, graph);
    if (build == CUDA_SUCCESS)
        build = shim_real_cuGraphInstantiateWithFlags()(out, graph, 0);
    if (build != CUDA_SUCCESS)
        *out = NULL;
    if (graph)
        real_cuGraphDestroy(graph);
    return build;
}

/* The launch with copy nodes; falls back to the application's graph if the
 * instrumented one cannot be made (its copies are then reported as failed). */
struct instrumented {
    cuGraphLaunch_fn real;
    struct graph_exec *g;
    CUstream stream;
    int ptsz;
    unsigned long long seq, replay;
    CUresult rc;
};

/* --watch-nan, at the replay that plans the scans of the graph's kernel nodes: the scan
 * node's state (window.h), whose probe goes into the instrumented copy; NULL where the
 * graph is not watched so (a rule wants more of a node than NaN/Inf scans: snapshots,
 * digests; the instrumented copy is then kept for every replay). */
static struct window_graph *watch_begin(struct graph_exec *g, const struct launch_info *li,
                                        unsigned total, const uint32_t *node_of)
{
    static struct proto_copy copies[PROTO_MAX_COPIES]; /* under the staging lock */
    static uint32_t funcs[PROTO_MAX_COPIES];
    if (g->unsafe || g->watched || !total || !have_graph_services() ||
        !shim_real_cuGraphInstantiateWithFlags())
        return NULL;
    for (unsigned c = 0; c < total; c++) {
        const struct proto_copy *copy = plan_copy(c);
        if (!(copy->flags & COPY_TOOL) || tool_mode(copy) == TOOL_DIGEST ||
            node_of[c] >= g->nkernels)
            return NULL;
        copies[c] = *copy;
        funcs[c] = g->kernels[node_of[c]].e->id;
    }
    CUresult rc;
    return window_graph_new(li, copies, node_of, funcs, total, g->wg, &rc);
}

/* At exit: what the scan nodes found by then (the program's last wait has read the rest). */
static void watch_checked_at_exit(void)
{
    if (channel_options() & OPTION_WATCH_NAN)
        graph_watch_check();
}

static void watch_at_exit(void)
{
    atexit(watch_checked_at_exit);
}

/* A scan node's state that will not be used: dropped, and no longer the graph's. */
static void forget_wg(struct graph_exec *g, struct window_graph *wg)
{
    if (g->wg == wg)
        g->wg = NULL;
    window_graph_drop(wg);
}

/* The replay that planned the scans has run (`ran`: and been waited for): the clone with
 * the scan node after everything (g->watched), over the buffers the probe saw the graph
 * write, for the replays after this one. */
static void watch_end(struct graph_exec *g, struct window_graph *wg, bool ran, unsigned total)
{
    static struct proto_copy copies[PROTO_MAX_COPIES]; /* under the staging lock */
    static bool bad[PROTO_MAX_COPIES];
    const volatile struct proto_control *ctl = channel_control();
    size_t size = 0;
    char *area = staging_area(&size);
    if (!ran || !ctl || !area) {
        forget_wg(g, wg);
        return;
    }
    for (unsigned c = 0; c < total; c++) {
        copies[c] = *plan_copy(c);
        /* What this replay's scans found (the plan put each result in staging). */
        const struct proto_tool_result *r =
            copies[c].offset + sizeof *r <= size ? (const void *)(area + copies[c].offset) : NULL;
        bad[c] = r && r->rc == CUDA_SUCCESS && r->words[0] != 0;
    }
    window_graph_ran(wg, copies, bad, total);
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, watch_at_exit);
    uint32_t gen = ctl->generation;
    CUgraph graph = NULL;
    CUgraphExec exec = NULL;
    CUresult rc = real_cuGraphClone(&graph, g->src);
    if (rc == CUDA_SUCCESS)
        rc = window_graph_node(wg, graph);
    if (rc == CUDA_SUCCESS)
        rc = shim_real_cuGraphInstantiateWithFlags()(&exec, graph, 0);
    if (rc == CUDA_SUCCESS) {
        if (g->wg != wg)
            window_graph_drop(g->wg); /* (too small for this one: its memory stays) */
        g->watched = exec;
        g->wg = wg;
        g->watched_removals = alloctab_removals();
        g->watched_gen = gen;
    } else {
        forget_wg(g, wg);
    }
    if (graph)
        real_cuGraphDestroy(graph);
}

/* Reports the copies of a graph launch (MSG_END). Copies its answer asks for
 * now (the buffers a NaN producer left) cannot be made: the graph has run on
 * past the node, so they are reported as not made. A hold it asks for
 * (--break-on-nan) is served here, once the graph has run. */
static void end_copies(struct launch_info *li, CUresult launch_rc, CUresult sync_rc)
{
    uint32_t flags = 0, halt = 0;
    if (plan_count() && plan_report_end(li->seq, launch_rc, sync_rc, &flags)) {
        halt = flags & PLAN_HALT;
        unsigned n = plan_count();
        for (unsigned c = 0; c < n; c++)
            set_rc(c, CUDA_ERROR_NOT_SUPPORTED);
        if (n && plan_report_end(li->seq, launch_rc, sync_rc, &flags))
            halt |= flags & PLAN_HALT;
    }
    plan_clear();
    if (halt) {
        if (launch_rc == CUDA_SUCCESS)
            gate_wait_stream(li);
        stop_serve(li, PHASE_AFTER, launch_rc, held_nodes);
    }
}

/* Whether a kernel node's function wants snapshots, and cudump has what it needs to
 * copy around it (its clone in the instrumented graph, its arguments). */
static bool wants_copies(const struct graph_kernel *gk)
{
    return gk->clone_node && gk->argv && (atomic_load(&gk->e->wants) & WANT_SNAPSHOT);
}

/* Plans each wanted node (one MSG_BEGIN each, copies appended), runs the
 * instrumented graph, reports. Under the staging lock. */
static CUresult instrumented_locked(cuGraphLaunch_fn real, struct graph_exec *g, CUstream stream,
                                    int ptsz, unsigned long long seq, unsigned long long replay)
{
    uint32_t node_of[PROTO_MAX_COPIES];
    unsigned left_out = 0; /* wanted nodes whose plan found no room after the others' */
    for (size_t k = 0; k < g->nkernels; k++) {
        struct graph_kernel *gk = &g->kernels[k];
        if (!wants_copies(gk))
            continue;
        struct launch_info li = node_launch(g, k, stream, ptsz, seq, replay);
        li.begin_flags |= g->unsafe ? LAUNCH_UNSAFE_GRAPH : 0u;
        /* A node's run counts for its rules as a launch does. */
        plan_select(&li);
        if (!(li.wants & WANT_SNAPSHOT))
            continue;
        unsigned first = plan_count();
        uint32_t flags;
        /* refused: the plan stays as it was */
        if (!plan_begin(&li, first, &flags, NULL) && plan_lacked_room())
            left_out++;
        unsigned added = plan_count() - first;
        for (unsigned c = first; c < first + added; c++)
            node_of[c] = (uint32_t)k;
    }
    /* A replay's copies are one plan of PROTO_MAX_COPIES at most: a large graph's last
     * kernel nodes (a decode graph's last layers, its logits) go unscanned. Said once. */
    if (left_out && !g->told_left_out) {
        g->told_left_out = true;
        struct proto_notice ev = {.kind = NOTICE_GRAPH_LEFT_OUT, .graph = g->id,
                                  .detail = left_out};
        channel_send_event(MSG_NOTICE, 0, &ev, sizeof ev);
    }
    /* The graph as a whole: its stream, for waits, loading cudump's kernel and a hold. */
    struct launch_info li = node_launch(g, 0, stream, ptsz, seq, replay);
    unsigned total = plan_count();
    if (total == 0 || g->unsafe) {
        end_copies(&li, CUDA_SUCCESS, CUDA_SUCCESS);
        return real(g->exec, stream);
    }
    CUgraphExec instrumented = NULL;
    CUresult build = CUDA_SUCCESS;
    bool complete = true;
    unsigned long long epoch = alloctab_epoch();
    /* --watch-nan: this replay's copy also has the probe (window.h), and is not kept. */
    struct window_graph *probe = window_on() ? watch_begin(g, &li, total, node_of) : NULL;
    if (!probe && same_plan(g, total, node_of)) {
        instrumented = g->cached;
        for (unsigned c = 0; c < total; c++)
            set_rc(c, g->cached_rcs[c]);
    } else {
        drop_cached(g);
        build = build_instrumented(g, &li, total, node_of, probe, &instrumented, &complete);
    }
    CUresult launch_rc, sync_rc = CUDA_SUCCESS;
    if (instrumented) {
        launch_rc = real(instrumented, stream);
        if (launch_rc == CUDA_SUCCESS)
            sync_rc = gate_wait_stream(&li);
        if (instrumented != g->cached) {
            if (complete && launch_rc == CUDA_SUCCESS && !probe)
                keep_cached(g, instrumented, total, node_of, epoch);
            else
                shim_real_cuGraphExecDestroy()(instrumented);
        }
    } else {
        /* Nothing of cudump's could be added: each copy says why. */
        for (unsigned c = 0; build != CUDA_SUCCESS && c < total; c++)
            set_rc(c, build);
        launch_rc = real(g->exec, stream);
    }
    if (probe)
        watch_end(g, probe, launch_rc == CUDA_SUCCESS && sync_rc == CUDA_SUCCESS, total);
    end_copies(&li, launch_rc, sync_rc);
    return launch_rc;
}

/* Whether a node of the graph may have copies: its function wants snapshots and
 * the graph can be instrumented (a node's rules are counted later, once). */
static bool may_instrument(const struct graph_exec *g)
{
    if (g->unsafe)
        return false;
    for (size_t k = 0; k < g->nkernels; k++)
        if (wants_copies(&g->kernels[k]))
            return true;
    return false;
}

static void instrumented(void *arg)
{
    struct instrumented *in = arg;
    drain_wait_idle();
    CUstreamCaptureMode mode = capture_relax();
    /* A launch of the program's before the graph may be held (a NaN producer): the
     * graph would wait behind it, and the wait for the graph would let it go without
     * its snapshots. */
    if (may_instrument(in->g))
        watch_settle_here(in->stream, in->ptsz);
    plan_clear();
    in->rc = instrumented_locked(in->real, in->g, in->stream, in->ptsz, in->seq, in->replay);
    capture_restore(mode);
}

/* The launch with copy nodes (see above). */
static CUresult run_instrumented(cuGraphLaunch_fn real, struct graph_exec *g, CUstream stream,
                                 int ptsz, unsigned long long seq, unsigned long long replay)
{
    struct instrumented in = {real, g, stream, ptsz, seq, replay, CUDA_SUCCESS};
    staging_locked(0, instrumented, &in);
    return in.rc;
}

/* Whether the copy with the scan node may run this replay: made at the control
 * generation as it still is, in a context that still is, over buffers all still held
 * (after a free anywhere, they are looked up again: a free of memory the graph does not
 * use keeps the copy). Where it may not, it goes now, so that this very replay plans
 * the scans again and makes the next copy. */
static bool may_watch(struct graph_exec *g)
{
    if (!g->watched)
        return false;
    const volatile struct proto_control *ctl = channel_control();
    unsigned long long removals = alloctab_removals();
    bool ok = window_on() && ctl && ctl->generation == g->watched_gen && context_alive(g) &&
              !g->unsafe;
    /* A controller that died unnoticed (a watched replay sends nothing until its node
     * finds something): the shim is a pass-through from now on (channel.h), and the graph
     * runs as the program made it. A look at its process, a syscall, a replay. */
    if (ok && !channel_controller_alive())
        ok = false;
    if (ok && removals != g->watched_removals) {
        ok = window_graph_readable(g->wg);
        if (ok)
            g->watched_removals = removals;
    }
    if (!ok)
        drop_watched(g);
    return ok;
}

/* The replay with the scan node: what earlier replays' scans found is read first (nothing
 * is waited for), and the open window of launches ends before the graph (window.h). */
static CUresult run_watched(cuGraphLaunch_fn real, struct graph_exec *g, CUstream stream,
                            int ptsz, unsigned long long seq)
{
    window_graph_check(g->wg, (uint32_t)g->id);
    window_sync_before();
    CUresult rc = real(g->watched, stream);
    if (rc == CUDA_SUCCESS)
        window_graph_launched(g->wg, seq, stream, ptsz);
    return rc;
}

void graph_watch_check(void)
{
    pthread_mutex_lock(&graphs_lock);
    for (size_t i = 0; i < ngraphs; i++)
        if (graphs[i]->wg)
            window_graph_check(graphs[i]->wg, (uint32_t)graphs[i]->id);
    pthread_mutex_unlock(&graphs_lock);
}

static CUresult run_graph(cuGraphLaunch_fn real, CUgraphExec exec, CUstream stream, int ptsz)
{
    unsigned long long seq = atomic_fetch_add(&shim_stats.seq, 1) + 1;
    learn_here();
    scope_stamp(&here_scope, &here_step);
    here_source = pysource_here();
    pthread_mutex_lock(&graphs_lock);
    struct graph_exec *g = NULL;
    for (size_t i = 0; i < ngraphs && !g; i++)
        if (graphs[i]->exec == exec)
            g = graphs[i];
    unsigned long long replay = g ? atomic_load(&g->replays) + 1 : 0;
    /* While the stream captures, the launch becomes a node of the captured graph:
     * nothing runs now, so nothing is copied. */
    bool capturing = stream_capturing(stream, ptsz);
    held_graph = g;
    long step = g && !capturing && nodes_want(g, WANT_STOP)
                    ? stop_nodes(g, stream, ptsz, seq, replay) : -1;
    bool watch = g && !capturing && step < 0 && !g->stale && may_watch(g);
    bool instrument = !watch && g && g->src && !g->stale && !capturing &&
                      nodes_want(g, WANT_SNAPSHOT);
    /* One flight ring slot for the whole graph launch, marked done after it. */
    struct launch_info flown = {
        .stream = stream, .ptsz = ptsz, .api = ptsz ? API_cuGraphLaunch_ptsz : API_cuGraphLaunch,
        .seq = seq, .tid = stream_tid(), .captured = capturing, .graph = g ? g->id : 0,
        .scope = here_scope, .step = here_step, .source = here_source};
    flight_begin(&flown);
    /* Counted for summary.json: a replay run watched is not waited for, one instrumented
     * is, so the two say where a graph loop's time under cudump went. */
    volatile struct proto_control *ctl = (watch || instrument) ? channel_control_rw() : NULL;
    if (ctl)
        __atomic_fetch_add(watch ? &ctl->graph_watched : &ctl->graph_instrumented, 1,
                           __ATOMIC_RELAXED);
    CUresult rc = watch        ? run_watched(real, g, stream, ptsz, seq)
                  : instrument ? run_instrumented(real, g, stream, ptsz, seq, replay)
                               : real(exec, stream);
    flight_end(&flown, rc);
    if (step >= 0) {
        /* `step` at a node inside a graph: the whole graph runs, then that node
         * is held again to show what the graph left. */
        struct launch_info li = node_launch(g, (size_t)step, stream, ptsz, seq, replay);
        node_stop(&li, PHASE_AFTER, rc);
    }
    held_graph = NULL;
    if (rc == CUDA_SUCCESS) {
        atomic_fetch_add(&shim_stats.graph_launches, 1);
        counts_add_process(true);
        if (g)
            atomic_fetch_add(&g->replays, 1);
        /* Every kernel node under --trace; else those whose function the controller
         * wants to hear of (a collective's, which it numbers in launch order, nodes
         * too: cudump/launches/collectives.py). */
        bool all = channel_options() & OPTION_TRACE_GRAPHS;
        if (all)
            trace_graph(exec, stream, ptsz, seq);
        for (size_t k = 0; g && k < g->nkernels; k++) {
            struct graph_kernel *gk = &g->kernels[k];
            if (atomic_load_explicit(&gk->e->state, memory_order_acquire) != FN_READY)
                functab_register(gk->e);
            if (!all && !(atomic_load(&gk->e->wants) & WANT_TRACE))
                continue;
            struct launch_info li = node_launch(g, k, stream, ptsz, seq, replay);
            trace_graph_kernel(&li, g->id, (uint32_t)replay, (uint32_t)k);
        }
    }
    pthread_mutex_unlock(&graphs_lock);
    return rc;
}

CUresult graph_launch(cuGraphLaunch_fn real, CUgraphExec exec, CUstream stream, int ptsz)
{
    if (!channel_up()) {
        CUresult rc = real(exec, stream);
        if (rc == CUDA_SUCCESS) {
            atomic_fetch_add(&shim_stats.seq, 1);
            atomic_fetch_add(&shim_stats.graph_launches, 1);
        }
        return rc;
    }
    shim_busy++;
    CUresult rc = run_graph(real, exec, stream, ptsz);
    shim_busy--;
    return rc;
}

void graph_fold_all(void)
{
    pthread_mutex_lock(&graphs_lock);
    for (size_t i = 0; i < ngraphs; i++)
        fold_counts_locked(graphs[i]);
    pthread_mutex_unlock(&graphs_lock);
}

void graph_reset_after_fork(void)
{
    here_tid = 0;
    /* The child has no executable graphs of its own yet: the parent's are not its. */
    pthread_mutex_init(&graphs_lock, NULL);
    /* The clones are the parent's driver objects: not freed through the driver here. */
    for (size_t i = 0; i < ngraphs; i++) {
        free_kernels(graphs[i]->kernels, graphs[i]->nkernels);
        free(graphs[i]->cached_copies);
        free(graphs[i]->cached_nodes);
        free(graphs[i]->cached_rcs);
        free(graphs[i]);
    }
    ngraphs = 0;
}
