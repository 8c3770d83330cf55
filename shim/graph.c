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
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "launch.h"

struct graph_kernel {
    CUgraphNode node;           /* in the graph it was instantiated from */
    struct func_entry *e;
    unsigned grid[3], block[3], smem;
};

struct graph_exec {
    CUgraphExec exec;
    uint64_t id;                /* per process, from 1 */
    _Atomic unsigned long long replays;
    unsigned long long counted; /* replays already folded into the functions' counts */
    size_t nkernels;
    struct graph_kernel *kernels;
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
};

static void add_kernel(struct walk *w, CUgraphNode node)
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
    w->k[w->n++] = (struct graph_kernel){node, e, {p.gridDimX, p.gridDimY, p.gridDimZ},
                                         {p.blockDimX, p.blockDimY, p.blockDimZ},
                                         p.sharedMemBytes};
}

/* Appends the graph's kernel nodes, child graphs flattened in place, in a
 * topological order (Kahn's algorithm; ties in the order the graph lists). */
static void walk_graph(struct walk *w, CUgraph graph, int depth)
{
    size_t n = 0, ne = 0;
    if (depth > 16 || !real_cuGraphGetNodes || real_cuGraphGetNodes(graph, NULL, &n) != CUDA_SUCCESS ||
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
        int type = -1;
        if (real_cuGraphNodeGetType && real_cuGraphNodeGetType(nodes[j], &type) == CUDA_SUCCESS) {
            CUgraph child = NULL;
            if (type == CU_GRAPH_NODE_TYPE_KERNEL)
                add_kernel(w, nodes[j]);
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
    for (size_t i = 0; add && i < g->nkernels; i++)
        atomic_fetch_add(&g->kernels[i].e->graph_launches, add);
}

static void forget_locked(CUgraphExec exec)
{
    for (size_t i = 0; i < ngraphs; i++) {
        if (graphs[i]->exec == exec) {
            fold_counts_locked(graphs[i]);
            free(graphs[i]->kernels);
            free(graphs[i]);
            graphs[i] = graphs[--ngraphs];
            return;
        }
    }
}

static void remember(CUgraphExec exec, CUgraph graph)
{
    if (!exec)
        return;
    shim_busy++;
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    if (real_cuThreadExchangeStreamCaptureMode)
        real_cuThreadExchangeStreamCaptureMode(&mode);
    struct walk w = {0};
    walk_graph(&w, graph, 0);
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
    if (g && !w.failed && ngraphs < graphs_cap) {
        g->exec = exec;
        g->id = ++next_graph_id;
        g->nkernels = w.n;
        g->kernels = w.k;
        graphs[ngraphs++] = g;
        g = NULL;
        w.k = NULL;
    }
    pthread_mutex_unlock(&graphs_lock);
    free(g);
    free(w.k);
    shim_busy--;
}

CUresult hook_cuGraphInstantiateWithFlags(cuGraphInstantiateWithFlags_fn real, int ptsz,
                                          CUgraphExec *exec, CUgraph graph, unsigned long long flags)
{
    (void)ptsz;
    CUresult rc = real(exec, graph, flags);
    if (rc == CUDA_SUCCESS && exec && channel_up())
        remember(*exec, graph);
    return rc;
}

CUresult hook_cuGraphInstantiate(cuGraphInstantiate_fn real, int ptsz, CUgraphExec *exec,
                                 CUgraph graph, CUgraphNode *errorNode, char *log, size_t logSize)
{
    (void)ptsz;
    CUresult rc = real(exec, graph, errorNode, log, logSize);
    if (rc == CUDA_SUCCESS && exec && channel_up())
        remember(*exec, graph);
    return rc;
}

CUresult hook_cuGraphExecDestroy(cuGraphExecDestroy_fn real, int ptsz, CUgraphExec exec)
{
    (void)ptsz;
    pthread_mutex_lock(&graphs_lock);
    forget_locked(exec);
    pthread_mutex_unlock(&graphs_lock);
    return real(exec);
}

CUresult hook_cuGraphExecUpdate(cuGraphExecUpdate_fn real, int ptsz, CUgraphExec exec,
                                CUgraph graph, void *resultInfo)
{
    (void)ptsz;
    CUresult rc = real(exec, graph, resultInfo);
    if (rc == CUDA_SUCCESS && channel_up()) {
        /* The executable graph now runs `graph`'s parameters: learn them again,
         * keeping the launches counted so far. */
        pthread_mutex_lock(&graphs_lock);
        for (size_t i = 0; i < ngraphs; i++)
            if (graphs[i]->exec == exec)
                fold_counts_locked(graphs[i]);
        pthread_mutex_unlock(&graphs_lock);
        remember(exec, graph);
    }
    return rc;
}

CUresult hook_cuGraphExecKernelNodeSetParams(cuGraphExecKernelNodeSetParams_fn real, int ptsz,
                                             CUgraphExec exec, CUgraphNode node,
                                             const CUDA_KERNEL_NODE_PARAMS *params)
{
    (void)ptsz;
    CUresult rc = real(exec, node, params);
    if (rc != CUDA_SUCCESS || !params)
        return rc;
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
        }
    }
    pthread_mutex_unlock(&graphs_lock);
    return rc;
}

void graph_launched(CUgraphExec exec, CUstream stream, int ptsz, unsigned long long seq)
{
    bool trace = channel_up() && (channel_options() & OPTION_TRACE_GRAPHS);
    pthread_mutex_lock(&graphs_lock);
    struct graph_exec *g = NULL;
    for (size_t i = 0; i < ngraphs && !g; i++)
        if (graphs[i]->exec == exec)
            g = graphs[i];
    unsigned long long replay = g ? atomic_fetch_add(&g->replays, 1) + 1 : 0;
    for (size_t k = 0; trace && g && k < g->nkernels; k++) {
        struct graph_kernel *gk = &g->kernels[k];
        struct func_entry *e = gk->e;
        if (atomic_load_explicit(&e->state, memory_order_acquire) != FN_READY)
            functab_register(e);
        struct launch_info li = {e, 0, {gk->grid[0], gk->grid[1], gk->grid[2]},
                                 {gk->block[0], gk->block[1], gk->block[2]}, gk->smem, stream,
                                 NULL, NULL, ptsz,
                                 ptsz ? API_cuGraphLaunch_ptsz : API_cuGraphLaunch,
                                 false, 0, 0, 0, 0, false, false, false};
        li.seq = seq;
        li.occurrence = replay;
        launch_graph_kernel(&li, g->id, (uint32_t)replay, (uint32_t)k);
    }
    pthread_mutex_unlock(&graphs_lock);
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
    /* The child has no executable graphs of its own yet: the parent's are not its. */
    pthread_mutex_init(&graphs_lock, NULL);
    for (size_t i = 0; i < ngraphs; i++) {
        free(graphs[i]->kernels);
        free(graphs[i]);
    }
    ngraphs = 0;
}
