/*
 * CUDA graphs: a graph is a DAG of nodes (kernel, memcpy, memset, empty and
 * child-graph nodes), built explicitly or recorded by stream capture.
 * Instantiation copies it into an executable graph, whose nodes keep a link
 * to the node they were copied from, so that the original graph's node
 * handles name them (cuGraphExecKernelNodeSetParams), as with the real
 * driver. Launching an executable graph runs its nodes on the calling thread
 * in a topological order (child graphs recursively), never through the
 * launch entry points, as replayed work on a GPU does not.
 *
 * What the real driver does and this model copies (seen on a CUDA 13.0
 * driver): a node's kernel parameters are copied when it is added, into one
 * block that holds the array of parameter pointers followed by the packed
 * values, so cuGraphKernelNodeGetParams answers with kernelParams[i]
 * pointing at parameter i's value (NULL for a kernel without parameters),
 * the same array before and after new parameters; `extra` reads back as NULL
 * and `ctx` as the context the node runs in; a node added or captured by
 * CUkernel reads back both the kernel and its CUfunction; nodes list in the
 * order they were added (a captured graph in submission order, each node
 * depending on the one before), edges by the node they leave, then the node
 * they reach; an existing edge added again, or an instantiation of a cyclic
 * graph, is CUDA_ERROR_INVALID_VALUE; nodes of a child graph node's embedded
 * graph name their copies in an executable graph, nodes of the graph given
 * to cuGraphExecUpdate do not; a graph launch into a capturing stream is
 * refused and invalidates the capture, and an invalidated capture into an
 * existing graph takes that graph with it.
 *
 * Graph objects are not thread-safe, as in the driver: a program must not
 * change one graph from two threads at once. Only stream capture, which
 * records under the capture lock, adds nodes from inside the library.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Parameter bytes a kernel node takes at most: CUDA's limit for a launch. */
#define FC_NODE_ARGS 4096

struct fc_node {
    unsigned int magic;
    int type; /* FC_GRAPH_NODE_TYPE_* */
    struct fc_graph *graph;
    size_t index; /* position in graph->nodes */
    struct fc_node **deps;
    size_t ndeps, deps_cap;
    /* The node this one was copied from by cuGraphClone or instantiation;
     * only ever compared, never followed. */
    const struct fc_node *origin;
    /* FC_GRAPH_NODE_TYPE_KERNEL: launch.args points into params. */
    struct fc_launch launch;
    void **params; /* nparams pointers to the values, then the packed values */
    /* FC_GRAPH_NODE_TYPE_MEMCPY / MEMSET */
    CUDA_MEMCPY3D copy;
    struct fc_memset_node_params set;
    /* FC_GRAPH_NODE_TYPE_GRAPH: the embedded graph, owned by the node. */
    struct fc_graph *child;
    /* An executable graph's node disabled (cuGraphNodeSetEnabled): run as an empty node. */
    bool disabled;
};

struct fc_graph {
    unsigned int magic; /* FC_MAGIC_GRAPH, FC_MAGIC_EXEC or FC_MAGIC_EMBEDDED */
    struct fc_node **nodes; /* in the order they were added */
    size_t count, cap;
    struct fc_node *owner; /* the child-graph node this graph is embedded in */
    struct fc_node **order; /* executable graphs: the order nodes run in */
};

/* ---------------------------------------------------------------- objects */

FC_HIDDEN struct fc_graph *fc_graph_new(void)
{
    struct fc_graph *g = calloc(1, sizeof *g);
    if (g)
        g->magic = FC_MAGIC_GRAPH;
    return g;
}

static void node_free(struct fc_node *n)
{
    if (n->child)
        fc_graph_free(n->child);
    free(n->deps);
    free(n->params);
    n->magic = 0;
    free(n);
}

FC_HIDDEN void fc_graph_free(struct fc_graph *g)
{
    for (size_t i = 0; i < g->count; i++)
        node_free(g->nodes[i]);
    free(g->nodes);
    free(g->order);
    g->magic = 0;
    free(g);
}

FC_HIDDEN void fc_graph_discard(struct fc_graph *g)
{
    for (size_t i = 0; i < g->count; i++)
        node_free(g->nodes[i]);
    g->count = 0;
    /* An embedded graph stays valid (empty): its node still owns it. */
    if (!g->owner)
        g->magic = 0;
}

FC_HIDDEN struct fc_graph *fc_graph_from_handle(CUgraph h)
{
    struct fc_graph *g = (struct fc_graph *)h;
    return g && g->magic == FC_MAGIC_GRAPH ? g : NULL;
}

FC_HIDDEN bool fc_graph_has_node(const struct fc_graph *g, const struct fc_node *node)
{
    return node && node->magic == FC_MAGIC_NODE && node->graph == g;
}

/* A node handle a program may use: a node of a (non-executable) graph. */
static struct fc_node *node_of(CUgraphNode h)
{
    struct fc_node *n = (struct fc_node *)h;
    if (!n || n->magic != FC_MAGIC_NODE || !n->graph || n->graph->magic != FC_MAGIC_GRAPH)
        return NULL;
    return n;
}

static struct fc_node *node_new(int type)
{
    struct fc_node *n = calloc(1, sizeof *n);
    if (n) {
        n->magic = FC_MAGIC_NODE;
        n->type = type;
    }
    return n;
}

static CUresult node_set_deps(struct fc_node *n, struct fc_node *const *deps, size_t count)
{
    if (count > n->deps_cap) {
        struct fc_node **d = realloc(n->deps, count * sizeof *d);
        if (!d)
            return CUDA_ERROR_OUT_OF_MEMORY;
        n->deps = d;
        n->deps_cap = count;
    }
    if (count)
        memcpy(n->deps, deps, count * sizeof *deps);
    n->ndeps = count;
    return CUDA_SUCCESS;
}

static CUresult node_add_dep(struct fc_node *n, struct fc_node *dep)
{
    if (n->ndeps == n->deps_cap) {
        size_t cap = n->deps_cap ? 2 * n->deps_cap : 4;
        struct fc_node **d = realloc(n->deps, cap * sizeof *d);
        if (!d)
            return CUDA_ERROR_OUT_OF_MEMORY;
        n->deps = d;
        n->deps_cap = cap;
    }
    n->deps[n->ndeps++] = dep;
    return CUDA_SUCCESS;
}

static bool depends_on(const struct fc_node *n, const struct fc_node *dep)
{
    for (size_t i = 0; i < n->ndeps; i++)
        if (n->deps[i] == dep)
            return true;
    return false;
}

/* Appends n to g. */
static CUresult graph_append(struct fc_graph *g, struct fc_node *n)
{
    if (g->count == g->cap) {
        size_t cap = g->cap ? 2 * g->cap : 8;
        struct fc_node **nodes = realloc(g->nodes, cap * sizeof *nodes);
        if (!nodes)
            return CUDA_ERROR_OUT_OF_MEMORY;
        g->nodes = nodes;
        g->cap = cap;
    }
    n->graph = g;
    n->index = g->count;
    g->nodes[g->count++] = n;
    return CUDA_SUCCESS;
}

/* Dependencies of a new node: nodes of g, each named once. */
static CUresult check_deps(const struct fc_graph *g, const CUgraphNode *deps, size_t count)
{
    if (count && !deps)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < count; i++) {
        if (!fc_graph_has_node(g, (const struct fc_node *)deps[i]))
            return CUDA_ERROR_INVALID_VALUE;
        for (size_t j = 0; j < i; j++)
            if (deps[j] == deps[i])
                return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

/* Adds the filled-in node n to the graph behind hGraph after deps; frees n
 * on failure. */
static CUresult add_node(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *deps,
                         size_t count, struct fc_node *n)
{
    struct fc_graph *g = fc_graph_from_handle(hGraph);
    CUresult r = CUDA_SUCCESS;
    if (!phGraphNode || !g)
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        r = check_deps(g, deps, count);
    if (r == CUDA_SUCCESS)
        r = node_set_deps(n, (struct fc_node *const *)deps, count);
    if (r == CUDA_SUCCESS)
        r = graph_append(g, n);
    if (r != CUDA_SUCCESS) {
        node_free(n);
        return r;
    }
    *phGraphNode = (CUgraphNode)n;
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- kernel parameters */

/* The block a kernel node keeps its parameters in: k->nparams pointers,
 * then the packed values they point at (8-byte aligned, as malloc gives). */
static void **params_block(const struct fc_builtin *k, const unsigned char *args)
{
    size_t head = k->nparams * sizeof(void *);
    void **block = malloc(head + k->args_size + 1);
    if (!block)
        return NULL;
    unsigned char *values = (unsigned char *)block + head;
    memcpy(values, args, k->args_size);
    for (unsigned int i = 0; i < k->nparams; i++)
        block[i] = values + k->offsets[i];
    return block;
}

/* Gives n the launch l, its parameters copied. New values for the same
 * kernel go into the block the node has, so kernelParams read back before
 * stays the array read back after (as a real driver does). A kernel without
 * parameters reads back kernelParams NULL, as there. */
static CUresult node_set_launch(struct fc_node *n, const struct fc_launch *l)
{
    const struct fc_builtin *k = l->kernel;
    void **block = n->params;
    if (n->type == FC_GRAPH_NODE_TYPE_KERNEL && n->launch.kernel == k && block) {
        memmove(block + k->nparams, l->args, k->args_size);
    } else {
        block = k->nparams ? params_block(k, l->args) : NULL;
        if (k->nparams && !block)
            return CUDA_ERROR_OUT_OF_MEMORY;
        free(n->params);
        n->params = block;
    }
    n->launch = *l;
    /* A node launched by CUkernel also answers with the CUfunction it runs. */
    if (!n->launch.func)
        n->launch.func = fc_function_handle(k);
    n->launch.args = block ? (const unsigned char *)(block + k->nparams) : NULL;
    return CUDA_SUCCESS;
}

/* The packed parameters that `extra` (CU_LAUNCH_PARAM_BUFFER_POINTER and
 * _SIZE pairs up to CU_LAUNCH_PARAM_END) gives. */
static CUresult read_extra(const struct fc_builtin *k, void **extra, unsigned char *args)
{
    const void *buffer = NULL;
    const size_t *size = NULL;
    for (size_t i = 0; extra[i] != FC_LAUNCH_PARAM_END; i += 2) {
        if (extra[i] == FC_LAUNCH_PARAM_BUFFER_POINTER)
            buffer = extra[i + 1];
        else if (extra[i] == FC_LAUNCH_PARAM_BUFFER_SIZE)
            size = extra[i + 1];
        else
            return CUDA_ERROR_INVALID_VALUE;
    }
    if (k->args_size && (!buffer || !size || *size < k->args_size))
        return CUDA_ERROR_INVALID_VALUE;
    if (k->args_size)
        memcpy(args, buffer, k->args_size);
    return CUDA_SUCCESS;
}

/* Checks a CUDA_KERNEL_NODE_PARAMS and packs its parameters into args
 * (FC_NODE_ARGS bytes: cudump's own kernel takes a 3.9 KB struct, which a
 * real driver takes in a kernel node as in a launch). */
static CUresult launch_from_params(const CUDA_KERNEL_NODE_PARAMS *p, struct fc_launch *l,
                                   unsigned char *args)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = fc_require_context();
    if (r != CUDA_SUCCESS)
        return r;
    const struct fc_builtin *k;
    memset(l, 0, sizeof *l);
    if (p->func) {
        /* A CUkernel passed as func is refused, unlike by cuLaunchKernel. */
        if (!(k = fc_function_builtin(p->func)))
            return CUDA_ERROR_INVALID_HANDLE;
        l->func = p->func;
        l->ctx = fc_current_context();
    } else if (p->kern) {
        if (!(k = fc_kernel_builtin(p->kern)))
            return CUDA_ERROR_INVALID_HANDLE;
        l->kern = p->kern;
        l->ctx = p->ctx ? p->ctx : fc_current_context();
    } else {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (!p->gridDimX || !p->gridDimY || !p->gridDimZ || !p->blockDimX || !p->blockDimY ||
        !p->blockDimZ || (unsigned long long)p->blockDimX * p->blockDimY * p->blockDimZ > 1024)
        return CUDA_ERROR_INVALID_VALUE;
    /* An `extra` with nothing before CU_LAUNCH_PARAM_END may come with
     * kernelParams (a real driver accepts it); anything more may not. */
    void **extra = p->extra && p->extra[0] != FC_LAUNCH_PARAM_END ? p->extra : NULL;
    if (p->kernelParams && extra)
        return CUDA_ERROR_INVALID_VALUE;
    if (k->args_size > FC_NODE_ARGS)
        return CUDA_ERROR_NOT_SUPPORTED;
    if (p->kernelParams) {
        for (unsigned int i = 0; i < k->nparams; i++) {
            if (!p->kernelParams[i])
                return CUDA_ERROR_INVALID_VALUE;
            memcpy(args + k->offsets[i], p->kernelParams[i], k->sizes[i]);
        }
    } else if (extra) {
        if ((r = read_extra(k, extra, args)) != CUDA_SUCCESS)
            return r;
    } else if (k->nparams) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    l->kernel = k;
    l->grid = (struct fc_dim3){p->gridDimX, p->gridDimY, p->gridDimZ};
    l->block = (struct fc_dim3){p->blockDimX, p->blockDimY, p->blockDimZ};
    l->smem = p->sharedMemBytes;
    l->args = args;
    return CUDA_SUCCESS;
}

static void params_from_v1(const struct fc_kernel_node_params_v1 *v1,
                           CUDA_KERNEL_NODE_PARAMS *p)
{
    memset(p, 0, sizeof *p);
    memcpy(p, v1, sizeof *v1); /* v2 begins with the v1 layout */
}

static void params_of(const struct fc_node *n, CUDA_KERNEL_NODE_PARAMS *p)
{
    p->func = n->launch.func;
    p->gridDimX = n->launch.grid.x;
    p->gridDimY = n->launch.grid.y;
    p->gridDimZ = n->launch.grid.z;
    p->blockDimX = n->launch.block.x;
    p->blockDimY = n->launch.block.y;
    p->blockDimZ = n->launch.block.z;
    p->sharedMemBytes = n->launch.smem;
    p->kernelParams = n->params;
    p->extra = NULL;
    p->kern = n->launch.kern;
    p->ctx = n->launch.ctx;
}

/* ---------------------------------------------------------------- capture */

FC_HIDDEN CUresult fc_graph_record(struct fc_graph *g, struct fc_node *const *deps, size_t ndeps,
                                   const struct fc_op *op, struct fc_node **out)
{
    static const int types[] = {[FC_OP_LAUNCH] = FC_GRAPH_NODE_TYPE_KERNEL,
                                [FC_OP_MEMCPY] = FC_GRAPH_NODE_TYPE_MEMCPY,
                                [FC_OP_MEMSET] = FC_GRAPH_NODE_TYPE_MEMSET};
    struct fc_node *n = node_new(types[op->kind]);
    if (!n)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = CUDA_SUCCESS;
    if (op->kind == FC_OP_LAUNCH)
        r = node_set_launch(n, &op->launch); /* parameters captured by value */
    n->copy = op->copy;
    n->set = op->set;
    if (r == CUDA_SUCCESS)
        r = node_set_deps(n, deps, ndeps);
    if (r == CUDA_SUCCESS)
        r = graph_append(g, n);
    if (r != CUDA_SUCCESS) {
        node_free(n);
        return r;
    }
    *out = n;
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- copies of graphs */

static struct fc_graph *clone_graph(const struct fc_graph *src, unsigned int magic);

static struct fc_node *clone_node(const struct fc_node *src, unsigned int magic)
{
    struct fc_node *n = node_new(src->type);
    if (!n)
        return NULL;
    n->origin = src;
    n->copy = src->copy;
    n->set = src->set;
    if (src->type == FC_GRAPH_NODE_TYPE_KERNEL && node_set_launch(n, &src->launch) != CUDA_SUCCESS) {
        node_free(n);
        return NULL;
    }
    if (src->child) {
        n->child = clone_graph(src->child, magic == FC_MAGIC_GRAPH ? magic : FC_MAGIC_EMBEDDED);
        if (!n->child) {
            node_free(n);
            return NULL;
        }
        n->child->owner = n;
    }
    return n;
}

/* A copy of src, each node linked to the node it copies. */
static struct fc_graph *clone_graph(const struct fc_graph *src, unsigned int magic)
{
    struct fc_graph *g = fc_graph_new();
    if (!g)
        return NULL;
    g->magic = magic;
    for (size_t i = 0; i < src->count; i++) {
        struct fc_node *n = clone_node(src->nodes[i], magic);
        if (!n || graph_append(g, n) != CUDA_SUCCESS) {
            if (n)
                node_free(n);
            fc_graph_free(g);
            return NULL;
        }
    }
    for (size_t i = 0; i < src->count; i++) {
        const struct fc_node *s = src->nodes[i];
        for (size_t d = 0; d < s->ndeps; d++) {
            if (node_add_dep(g->nodes[i], g->nodes[s->deps[d]->index]) != CUDA_SUCCESS) {
                fc_graph_free(g);
                return NULL;
            }
        }
    }
    return g;
}

/* The order an executable graph runs in: repeatedly the first node (in the
 * order nodes were added) whose dependencies have all run. Child graphs get
 * theirs too. CUDA_ERROR_INVALID_VALUE for a cycle. */
static CUresult order_graph(struct fc_graph *g)
{
    free(g->order);
    g->order = malloc((g->count ? g->count : 1) * sizeof *g->order);
    bool *done = calloc(g->count ? g->count : 1, sizeof *done);
    if (!g->order || !done) {
        free(done);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    CUresult r = CUDA_SUCCESS;
    for (size_t step = 0; step < g->count && r == CUDA_SUCCESS; step++) {
        size_t pick = g->count;
        for (size_t i = 0; i < g->count && pick == g->count; i++) {
            if (done[i])
                continue;
            bool ready = true;
            for (size_t d = 0; d < g->nodes[i]->ndeps && ready; d++)
                ready = done[g->nodes[i]->deps[d]->index];
            if (ready)
                pick = i;
        }
        if (pick == g->count) {
            r = CUDA_ERROR_INVALID_VALUE;
        } else {
            done[pick] = true;
            g->order[step] = g->nodes[pick];
        }
    }
    free(done);
    for (size_t i = 0; i < g->count && r == CUDA_SUCCESS; i++)
        if (g->nodes[i]->child)
            r = order_graph(g->nodes[i]->child);
    return r;
}

/* The node of e (a clone or an executable graph) that was copied from
 * orig, child graphs searched too. */
static struct fc_node *find_copy(const struct fc_graph *e, const struct fc_node *orig)
{
    for (size_t i = 0; i < e->count; i++) {
        struct fc_node *n = e->nodes[i];
        if (n->origin == orig)
            return n;
        if (n->child && (n = find_copy(n->child, orig)))
            return n;
    }
    return NULL;
}

/* ---------------------------------------------------------------- construction */

CUresult cuGraphCreate(CUgraph *phGraph, unsigned int flags)
{
    if (!atomic_load(&fc_initialized))
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!phGraph || flags)
        return CUDA_ERROR_INVALID_VALUE;
    struct fc_graph *g = fc_graph_new();
    if (!g)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *phGraph = (CUgraph)g;
    return CUDA_SUCCESS;
}

CUresult cuGraphDestroy(CUgraph hGraph)
{
    struct fc_graph *g = fc_graph_from_handle(hGraph);
    if (!g)
        return CUDA_ERROR_INVALID_HANDLE;
    /* A child graph node's embedded graph belongs to the node. */
    if (g->owner)
        return CUDA_ERROR_INVALID_VALUE;
    fc_graph_free(g);
    return CUDA_SUCCESS;
}

CUresult cuGraphClone(CUgraph *phGraphClone, CUgraph originalGraph)
{
    struct fc_graph *g = fc_graph_from_handle(originalGraph);
    if (!phGraphClone || !g)
        return CUDA_ERROR_INVALID_VALUE;
    struct fc_graph *c = clone_graph(g, FC_MAGIC_GRAPH);
    if (!c)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *phGraphClone = (CUgraph)c;
    return CUDA_SUCCESS;
}

CUresult cuGraphNodeFindInClone(CUgraphNode *phNode, CUgraphNode hOriginalNode,
                                CUgraph hClonedGraph)
{
    struct fc_graph *c = fc_graph_from_handle(hClonedGraph);
    struct fc_node *orig = node_of(hOriginalNode);
    if (!phNode || !c || !orig)
        return CUDA_ERROR_INVALID_VALUE;
    struct fc_node *n = find_copy(c, orig);
    if (!n)
        return CUDA_ERROR_INVALID_VALUE;
    *phNode = (CUgraphNode)n;
    return CUDA_SUCCESS;
}

CUresult cuGraphAddKernelNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph,
                                 const CUgraphNode *dependencies, size_t numDependencies,
                                 const CUDA_KERNEL_NODE_PARAMS *nodeParams)
{
    unsigned char args[FC_NODE_ARGS];
    struct fc_launch l;
    CUresult r = launch_from_params(nodeParams, &l, args);
    if (r != CUDA_SUCCESS)
        return r;
    struct fc_node *n = node_new(FC_GRAPH_NODE_TYPE_KERNEL);
    if (!n)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if ((r = node_set_launch(n, &l)) != CUDA_SUCCESS) {
        node_free(n);
        return r;
    }
    return add_node(phGraphNode, hGraph, dependencies, numDependencies, n);
}

CUresult cuGraphAddKernelNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                              const CUgraphNode *dependencies, size_t numDependencies,
                              const struct fc_kernel_node_params_v1 *nodeParams)
{
    CUDA_KERNEL_NODE_PARAMS p;
    if (!nodeParams)
        return CUDA_ERROR_INVALID_VALUE;
    params_from_v1(nodeParams, &p);
    return cuGraphAddKernelNode_v2(phGraphNode, hGraph, dependencies, numDependencies, &p);
}

static struct fc_node *typed_node(CUgraphNode hNode, int type)
{
    struct fc_node *n = node_of(hNode);
    return n && n->type == type ? n : NULL;
}

CUresult cuGraphKernelNodeGetParams_v2(CUgraphNode hNode, CUDA_KERNEL_NODE_PARAMS *nodeParams)
{
    struct fc_node *n = typed_node(hNode, FC_GRAPH_NODE_TYPE_KERNEL);
    if (!n || !nodeParams)
        return CUDA_ERROR_INVALID_VALUE;
    params_of(n, nodeParams);
    return CUDA_SUCCESS;
}

CUresult cuGraphKernelNodeGetParams(CUgraphNode hNode, struct fc_kernel_node_params_v1 *nodeParams)
{
    CUDA_KERNEL_NODE_PARAMS p;
    CUresult r = nodeParams ? cuGraphKernelNodeGetParams_v2(hNode, &p) : CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        memcpy(nodeParams, &p, sizeof *nodeParams);
    return r;
}

/* New parameters for kernel node n (of a graph or of an executable graph). */
static CUresult set_kernel_params(struct fc_node *n, const CUDA_KERNEL_NODE_PARAMS *p)
{
    unsigned char args[FC_NODE_ARGS];
    struct fc_launch l;
    CUresult r = launch_from_params(p, &l, args);
    return r != CUDA_SUCCESS ? r : node_set_launch(n, &l);
}

CUresult cuGraphKernelNodeSetParams_v2(CUgraphNode hNode,
                                       const CUDA_KERNEL_NODE_PARAMS *nodeParams)
{
    struct fc_node *n = typed_node(hNode, FC_GRAPH_NODE_TYPE_KERNEL);
    if (!n)
        return CUDA_ERROR_INVALID_VALUE;
    return set_kernel_params(n, nodeParams);
}

CUresult cuGraphKernelNodeSetParams(CUgraphNode hNode,
                                    const struct fc_kernel_node_params_v1 *nodeParams)
{
    CUDA_KERNEL_NODE_PARAMS p;
    if (!nodeParams)
        return CUDA_ERROR_INVALID_VALUE;
    params_from_v1(nodeParams, &p);
    return cuGraphKernelNodeSetParams_v2(hNode, &p);
}

CUresult cuGraphAddMemcpyNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                              const CUgraphNode *dependencies, size_t numDependencies,
                              const CUDA_MEMCPY3D *copyParams, CUcontext ctx)
{
    (void)ctx;
    CUresult r = fc_copy3d_check(copyParams);
    if (r != CUDA_SUCCESS)
        return r;
    struct fc_node *n = node_new(FC_GRAPH_NODE_TYPE_MEMCPY);
    if (!n)
        return CUDA_ERROR_OUT_OF_MEMORY;
    n->copy = *copyParams;
    return add_node(phGraphNode, hGraph, dependencies, numDependencies, n);
}

CUresult cuGraphMemcpyNodeGetParams(CUgraphNode hNode, CUDA_MEMCPY3D *nodeParams)
{
    struct fc_node *n = typed_node(hNode, FC_GRAPH_NODE_TYPE_MEMCPY);
    if (!n || !nodeParams)
        return CUDA_ERROR_INVALID_VALUE;
    *nodeParams = n->copy;
    return CUDA_SUCCESS;
}

CUresult cuGraphMemcpyNodeSetParams(CUgraphNode hNode, const CUDA_MEMCPY3D *nodeParams)
{
    struct fc_node *n = typed_node(hNode, FC_GRAPH_NODE_TYPE_MEMCPY);
    if (!n)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = fc_copy3d_check(nodeParams);
    if (r == CUDA_SUCCESS)
        n->copy = *nodeParams;
    return r;
}

CUresult cuGraphAddMemsetNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                              const CUgraphNode *dependencies, size_t numDependencies,
                              const struct fc_memset_node_params *memsetParams, CUcontext ctx)
{
    (void)ctx;
    CUresult r = fc_memset_check(memsetParams);
    if (r != CUDA_SUCCESS)
        return r;
    struct fc_node *n = node_new(FC_GRAPH_NODE_TYPE_MEMSET);
    if (!n)
        return CUDA_ERROR_OUT_OF_MEMORY;
    n->set = *memsetParams;
    return add_node(phGraphNode, hGraph, dependencies, numDependencies, n);
}

CUresult cuGraphMemsetNodeGetParams(CUgraphNode hNode, struct fc_memset_node_params *nodeParams)
{
    struct fc_node *n = typed_node(hNode, FC_GRAPH_NODE_TYPE_MEMSET);
    if (!n || !nodeParams)
        return CUDA_ERROR_INVALID_VALUE;
    *nodeParams = n->set;
    return CUDA_SUCCESS;
}

CUresult cuGraphMemsetNodeSetParams(CUgraphNode hNode,
                                    const struct fc_memset_node_params *nodeParams)
{
    struct fc_node *n = typed_node(hNode, FC_GRAPH_NODE_TYPE_MEMSET);
    if (!n)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = fc_memset_check(nodeParams);
    if (r == CUDA_SUCCESS)
        n->set = *nodeParams;
    return r;
}

CUresult cuGraphAddEmptyNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                             const CUgraphNode *dependencies, size_t numDependencies)
{
    struct fc_node *n = node_new(FC_GRAPH_NODE_TYPE_EMPTY);
    if (!n)
        return CUDA_ERROR_OUT_OF_MEMORY;
    return add_node(phGraphNode, hGraph, dependencies, numDependencies, n);
}

CUresult cuGraphAddChildGraphNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                  const CUgraphNode *dependencies, size_t numDependencies,
                                  CUgraph childGraph)
{
    struct fc_graph *child = fc_graph_from_handle(childGraph);
    if (!child || childGraph == hGraph)
        return CUDA_ERROR_INVALID_VALUE;
    struct fc_node *n = node_new(FC_GRAPH_NODE_TYPE_GRAPH);
    if (!n)
        return CUDA_ERROR_OUT_OF_MEMORY;
    /* The node embeds a clone: later changes to childGraph do not reach it. */
    if (!(n->child = clone_graph(child, FC_MAGIC_GRAPH))) {
        node_free(n);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    n->child->owner = n;
    return add_node(phGraphNode, hGraph, dependencies, numDependencies, n);
}

CUresult cuGraphChildGraphNodeGetGraph(CUgraphNode hNode, CUgraph *phGraph)
{
    struct fc_node *n = typed_node(hNode, FC_GRAPH_NODE_TYPE_GRAPH);
    if (!n || !phGraph)
        return CUDA_ERROR_INVALID_VALUE;
    /* The embedded graph itself, not a copy: changes to it change the node. */
    *phGraph = (CUgraph)n->child;
    return CUDA_SUCCESS;
}

CUresult cuGraphDestroyNode(CUgraphNode hNode)
{
    struct fc_node *n = node_of(hNode);
    if (!n)
        return CUDA_ERROR_INVALID_VALUE;
    struct fc_graph *g = n->graph;
    for (size_t i = 0; i < g->count; i++) {
        struct fc_node *m = g->nodes[i];
        size_t kept = 0;
        for (size_t d = 0; d < m->ndeps; d++)
            if (m->deps[d] != n)
                m->deps[kept++] = m->deps[d];
        m->ndeps = kept;
    }
    for (size_t i = n->index + 1; i < g->count; i++) {
        g->nodes[i - 1] = g->nodes[i];
        g->nodes[i - 1]->index = i - 1;
    }
    g->count--;
    node_free(n);
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- queries */

CUresult cuGraphNodeGetType(CUgraphNode hNode, int *type)
{
    struct fc_node *n = node_of(hNode);
    if (!n || !type)
        return CUDA_ERROR_INVALID_VALUE;
    *type = n->type;
    return CUDA_SUCCESS;
}

/* The driver's way of answering with a list: with out NULL, its length;
 * otherwise at most *count entries, the rest of a longer array NULL, and
 * *count the number written. */
static CUresult answer_list(struct fc_node *const *list, size_t n, CUgraphNode *out, size_t *count)
{
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    if (!out) {
        *count = n;
        return CUDA_SUCCESS;
    }
    for (size_t i = 0; i < *count; i++)
        out[i] = i < n ? (CUgraphNode)list[i] : NULL;
    if (*count > n)
        *count = n;
    return CUDA_SUCCESS;
}

CUresult cuGraphGetNodes(CUgraph hGraph, CUgraphNode *nodes, size_t *numNodes)
{
    struct fc_graph *g = fc_graph_from_handle(hGraph);
    if (!g)
        return CUDA_ERROR_INVALID_VALUE;
    return answer_list(g->nodes, g->count, nodes, numNodes);
}

/* Nodes of g that pass keep(node, arg), in the order they were added. */
static CUresult filtered(const struct fc_graph *g, bool (*keep)(const struct fc_node *, const void *),
                         const void *arg, struct fc_node ***out, size_t *n)
{
    *out = malloc((g->count ? g->count : 1) * sizeof **out);
    if (!*out)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *n = 0;
    for (size_t i = 0; i < g->count; i++)
        if (keep(g->nodes[i], arg))
            (*out)[(*n)++] = g->nodes[i];
    return CUDA_SUCCESS;
}

static bool is_root(const struct fc_node *n, const void *arg)
{
    (void)arg;
    return n->ndeps == 0;
}

static bool is_dependent(const struct fc_node *n, const void *arg)
{
    return depends_on(n, arg);
}

CUresult cuGraphGetRootNodes(CUgraph hGraph, CUgraphNode *rootNodes, size_t *numRootNodes)
{
    struct fc_graph *g = fc_graph_from_handle(hGraph);
    if (!g)
        return CUDA_ERROR_INVALID_VALUE;
    struct fc_node **roots;
    size_t n;
    CUresult r = filtered(g, is_root, NULL, &roots, &n);
    if (r == CUDA_SUCCESS)
        r = answer_list(roots, n, rootNodes, numRootNodes);
    free(roots);
    return r;
}

/* Edge data reads back as the default (all zero): no other kind is made. */
static void zero_edges(struct fc_graph_edge_data *edgeData, size_t n)
{
    if (edgeData)
        memset(edgeData, 0, n * sizeof *edgeData);
}

static CUresult graph_edges(CUgraph hGraph, CUgraphNode *from, CUgraphNode *to,
                            struct fc_graph_edge_data *edgeData, size_t *numEdges)
{
    struct fc_graph *g = fc_graph_from_handle(hGraph);
    if (!g || !numEdges || !from != !to || (edgeData && !from))
        return CUDA_ERROR_INVALID_VALUE;
    /* Edges in the order of the nodes they leave, then of the nodes they
     * reach (what a real driver lists, whatever order edges were added in). */
    size_t total = 0, k = 0;
    for (size_t i = 0; i < g->count; i++)
        total += g->nodes[i]->ndeps;
    if (!from) {
        *numEdges = total;
        return CUDA_SUCCESS;
    }
    for (size_t i = 0; i < g->count && k < *numEdges; i++) {
        for (size_t j = 0; j < g->count && k < *numEdges; j++) {
            if (depends_on(g->nodes[j], g->nodes[i])) {
                from[k] = (CUgraphNode)g->nodes[i];
                to[k++] = (CUgraphNode)g->nodes[j];
            }
        }
    }
    zero_edges(edgeData, *numEdges);
    for (size_t i = k; i < *numEdges; i++)
        from[i] = to[i] = NULL;
    *numEdges = k;
    return CUDA_SUCCESS;
}

CUresult cuGraphGetEdges_v2(CUgraph hGraph, CUgraphNode *from, CUgraphNode *to,
                            struct fc_graph_edge_data *edgeData, size_t *numEdges)
{
    return graph_edges(hGraph, from, to, edgeData, numEdges);
}

CUresult cuGraphGetEdges(CUgraph hGraph, CUgraphNode *from, CUgraphNode *to, size_t *numEdges)
{
    return graph_edges(hGraph, from, to, NULL, numEdges);
}

static CUresult node_dependencies(CUgraphNode hNode, CUgraphNode *dependencies,
                                  struct fc_graph_edge_data *edgeData, size_t *numDependencies)
{
    struct fc_node *n = node_of(hNode);
    if (!n || (edgeData && !dependencies))
        return CUDA_ERROR_INVALID_VALUE;
    if (dependencies && numDependencies)
        zero_edges(edgeData, *numDependencies);
    return answer_list(n->deps, n->ndeps, dependencies, numDependencies);
}

CUresult cuGraphNodeGetDependencies_v2(CUgraphNode hNode, CUgraphNode *dependencies,
                                       struct fc_graph_edge_data *edgeData,
                                       size_t *numDependencies)
{
    return node_dependencies(hNode, dependencies, edgeData, numDependencies);
}

CUresult cuGraphNodeGetDependencies(CUgraphNode hNode, CUgraphNode *dependencies,
                                    size_t *numDependencies)
{
    return node_dependencies(hNode, dependencies, NULL, numDependencies);
}

static CUresult node_dependents(CUgraphNode hNode, CUgraphNode *dependentNodes,
                                struct fc_graph_edge_data *edgeData, size_t *numDependentNodes)
{
    struct fc_node *n = node_of(hNode);
    if (!n || (edgeData && !dependentNodes))
        return CUDA_ERROR_INVALID_VALUE;
    struct fc_node **list;
    size_t count;
    CUresult r = filtered(n->graph, is_dependent, n, &list, &count);
    if (r == CUDA_SUCCESS && dependentNodes && numDependentNodes)
        zero_edges(edgeData, *numDependentNodes);
    if (r == CUDA_SUCCESS)
        r = answer_list(list, count, dependentNodes, numDependentNodes);
    free(list);
    return r;
}

CUresult cuGraphNodeGetDependentNodes_v2(CUgraphNode hNode, CUgraphNode *dependentNodes,
                                         struct fc_graph_edge_data *edgeData,
                                         size_t *numDependentNodes)
{
    return node_dependents(hNode, dependentNodes, edgeData, numDependentNodes);
}

CUresult cuGraphNodeGetDependentNodes(CUgraphNode hNode, CUgraphNode *dependentNodes,
                                      size_t *numDependentNodes)
{
    return node_dependents(hNode, dependentNodes, NULL, numDependentNodes);
}

/* Checks edges from[i] -> to[i] of g: nodes of g, no self edge, default
 * edge data, and each edge present (removing) or absent and named once
 * (adding). */
static CUresult check_edges(const struct fc_graph *g, const CUgraphNode *from,
                            const CUgraphNode *to, const struct fc_graph_edge_data *edgeData,
                            size_t n, bool present)
{
    static const struct fc_graph_edge_data zero;
    if (n && (!from || !to))
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < n; i++) {
        const struct fc_node *f = (const struct fc_node *)from[i];
        const struct fc_node *t = (const struct fc_node *)to[i];
        if (!fc_graph_has_node(g, f) || !fc_graph_has_node(g, t) || f == t)
            return CUDA_ERROR_INVALID_VALUE;
        if (edgeData && memcmp(&edgeData[i], &zero, sizeof zero) != 0)
            return CUDA_ERROR_NOT_SUPPORTED;
        if (depends_on(t, f) != present)
            return CUDA_ERROR_INVALID_VALUE;
        for (size_t j = 0; j < i; j++)
            if (from[j] == from[i] && to[j] == to[i])
                return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

static CUresult add_dependencies(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to,
                                 const struct fc_graph_edge_data *edgeData, size_t n)
{
    struct fc_graph *g = fc_graph_from_handle(hGraph);
    if (!g)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = check_edges(g, from, to, edgeData, n, false);
    /* Cycles are allowed here; instantiation refuses them, as the driver does. */
    for (size_t i = 0; i < n && r == CUDA_SUCCESS; i++)
        r = node_add_dep((struct fc_node *)to[i], (struct fc_node *)from[i]);
    return r;
}

CUresult cuGraphAddDependencies_v2(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to,
                                   const struct fc_graph_edge_data *edgeData,
                                   size_t numDependencies)
{
    return add_dependencies(hGraph, from, to, edgeData, numDependencies);
}

CUresult cuGraphAddDependencies(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to,
                                size_t numDependencies)
{
    return add_dependencies(hGraph, from, to, NULL, numDependencies);
}

static CUresult remove_dependencies(CUgraph hGraph, const CUgraphNode *from,
                                    const CUgraphNode *to,
                                    const struct fc_graph_edge_data *edgeData, size_t n)
{
    struct fc_graph *g = fc_graph_from_handle(hGraph);
    if (!g)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = check_edges(g, from, to, edgeData, n, true);
    for (size_t i = 0; i < n && r == CUDA_SUCCESS; i++) {
        struct fc_node *t = (struct fc_node *)to[i];
        size_t kept = 0;
        for (size_t d = 0; d < t->ndeps; d++)
            if (t->deps[d] != (struct fc_node *)from[i])
                t->deps[kept++] = t->deps[d];
        t->ndeps = kept;
    }
    return r;
}

CUresult cuGraphRemoveDependencies_v2(CUgraph hGraph, const CUgraphNode *from,
                                      const CUgraphNode *to,
                                      const struct fc_graph_edge_data *edgeData,
                                      size_t numDependencies)
{
    return remove_dependencies(hGraph, from, to, edgeData, numDependencies);
}

CUresult cuGraphRemoveDependencies(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to,
                                   size_t numDependencies)
{
    return remove_dependencies(hGraph, from, to, NULL, numDependencies);
}

/* ---------------------------------------------------------------- executable graphs */

/* Instantiations and stream-ordered allocations made (and allocations that found no
 * room, and the bytes cudump's kernel read), written at exit to the file
 * FAKECUDA_STATS names (if any): tests see how often a tool instantiates graphs, or
 * borrows memory, of its own. */
static _Atomic unsigned long instantiations;
_Atomic unsigned long fc_async_allocations;

static void write_stats(void)
{
    const char *path = getenv("FAKECUDA_STATS");
    FILE *f = path ? fopen(path, "w") : NULL;
    if (f) {
        fprintf(f, "graph_instantiations %lu\nasync_allocations %lu\nout_of_memory %lu\n"
                   "tool_bytes %lu\ntool_waiting %lu\nmail_copies %lu\n"
                   "tool_launches %lu\ntools_runs %lu\nscan_list_launches %lu\n"
                   "mem_allocs %lu\nhost_registrations %lu\n",
                atomic_load(&instantiations), atomic_load(&fc_async_allocations),
                atomic_load(&fc_out_of_memory), atomic_load(&fc_tool_bytes),
                atomic_load(&fc_tool_waiting), atomic_load(&fc_mail_copies),
                atomic_load(&fc_tool_launches), atomic_load(&fc_tools_runs),
                atomic_load(&fc_scan_list_launches), atomic_load(&fc_mem_allocs),
                atomic_load(&fc_host_registrations));
        fclose(f);
    }
}

void fc_stats_at_exit(void)
{
    static atomic_flag registered = ATOMIC_FLAG_INIT;
    if (!atomic_flag_test_and_set(&registered))
        atexit(write_stats);
}

static CUresult instantiate(CUgraphExec *phGraphExec, CUgraph hGraph)
{
    if (!phGraphExec)
        return CUDA_ERROR_INVALID_VALUE;
    fc_stats_at_exit();
    atomic_fetch_add(&instantiations, 1);
    struct fc_graph *g = fc_graph_from_handle(hGraph);
    if (!g)
        return CUDA_ERROR_INVALID_HANDLE;
    /* Instantiation is among the calls a capture forbids (seen on a real
     * driver: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, capture invalidated). */
    CUresult r = fc_capture_check_unsafe();
    if (r != CUDA_SUCCESS)
        return r;
    /* An executable graph owns a copy, so later changes to the graph, or its
     * destruction, leave it as it was. */
    struct fc_graph *e = clone_graph(g, FC_MAGIC_EXEC);
    if (!e)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if ((r = order_graph(e)) != CUDA_SUCCESS) {
        fc_graph_free(e);
        return r;
    }
    *phGraphExec = (CUgraphExec)e;
    return CUDA_SUCCESS;
}

CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph,
                                     unsigned long long flags)
{
    (void)flags;
    return instantiate(phGraphExec, hGraph);
}

CUresult cuGraphInstantiateWithParams(CUgraphExec *phGraphExec, CUgraph hGraph,
                                      CUDA_GRAPH_INSTANTIATE_PARAMS *params)
{
    if (!params)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = instantiate(phGraphExec, hGraph);
    params->hErrNode_out = NULL;
    params->result_out = r == CUDA_SUCCESS ? 0 : 1; /* CUDA_GRAPH_INSTANTIATE_SUCCESS, _ERROR */
    return r;
}

CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec *phGraphExec, CUgraph hGraph,
                                           CUDA_GRAPH_INSTANTIATE_PARAMS *params)
{
    return cuGraphInstantiateWithParams(phGraphExec, hGraph, params);
}

/* The pre-12.0 form, which cuGetProcAddress("cuGraphInstantiate") still
 * gives at every version from 11000 (as the real driver does). */
CUresult cuGraphInstantiate_v2(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode,
                               char *logBuffer, size_t bufferSize)
{
    CUresult r = instantiate(phGraphExec, hGraph);
    if (phErrorNode)
        *phErrorNode = NULL;
    if (logBuffer && bufferSize) {
        const char *msg = r == CUDA_ERROR_INVALID_VALUE ? "graph contains a cycle" : "";
        strncpy(logBuffer, msg, bufferSize - 1);
        logBuffer[bufferSize - 1] = '\0';
    }
    return r;
}

CUresult cuGraphInstantiate(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode,
                            char *logBuffer, size_t bufferSize)
{
    return cuGraphInstantiate_v2(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize);
}

static struct fc_graph *exec_of(CUgraphExec h)
{
    struct fc_graph *e = (struct fc_graph *)h;
    return e && e->magic == FC_MAGIC_EXEC ? e : NULL;
}

CUresult cuGraphExecKernelNodeSetParams_v2(CUgraphExec hGraphExec, CUgraphNode hNode,
                                           const CUDA_KERNEL_NODE_PARAMS *nodeParams)
{
    struct fc_graph *e = exec_of(hGraphExec);
    struct fc_node *orig = node_of(hNode);
    if (!e || !orig)
        return CUDA_ERROR_INVALID_VALUE;
    /* The node of the graph instantiated names its copy; a node of a graph
     * given to cuGraphExecUpdate does not. */
    struct fc_node *n = find_copy(e, orig);
    if (!n || n->type != FC_GRAPH_NODE_TYPE_KERNEL)
        return CUDA_ERROR_INVALID_VALUE;
    return set_kernel_params(n, nodeParams);
}

/* As the driver: kernel, memcpy and memset nodes of the graph instantiated (named by the
 * node they were made from) may be disabled and enabled again, in the exec alone. */
CUresult cuGraphNodeSetEnabled(CUgraphExec hGraphExec, CUgraphNode hNode, unsigned int isEnabled)
{
    struct fc_graph *e = exec_of(hGraphExec);
    struct fc_node *orig = node_of(hNode);
    struct fc_node *n = e && orig ? find_copy(e, orig) : NULL;
    if (!n || (n->type != FC_GRAPH_NODE_TYPE_KERNEL && n->type != FC_GRAPH_NODE_TYPE_MEMCPY &&
               n->type != FC_GRAPH_NODE_TYPE_MEMSET))
        return CUDA_ERROR_INVALID_VALUE;
    n->disabled = !isEnabled;
    return CUDA_SUCCESS;
}

CUresult cuGraphExecKernelNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                        const struct fc_kernel_node_params_v1 *nodeParams)
{
    CUDA_KERNEL_NODE_PARAMS p;
    if (!nodeParams)
        return CUDA_ERROR_INVALID_VALUE;
    params_from_v1(nodeParams, &p);
    return cuGraphExecKernelNodeSetParams_v2(hGraphExec, hNode, &p);
}

static CUresult update_failed(struct fc_graph_exec_update_result_info *info, int result,
                              const struct fc_node *node, const struct fc_node *from)
{
    info->result = result;
    info->errorNode = (CUgraphNode)node;
    info->errorFromNode = (CUgraphNode)from;
    return FC_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
}

/* Whether g can update e: the same nodes, paired in the order they were
 * added, of the same types, with the same edges; copies keep their memory
 * types. */
static CUresult check_update(const struct fc_graph *e, const struct fc_graph *g,
                             struct fc_graph_exec_update_result_info *info)
{
    if (e->count != g->count)
        return update_failed(info, FC_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED, NULL, NULL);
    for (size_t i = 0; i < g->count; i++) {
        const struct fc_node *en = e->nodes[i], *gn = g->nodes[i];
        if (en->type != gn->type)
            return update_failed(info, FC_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED, gn, NULL);
        if (en->ndeps != gn->ndeps)
            return update_failed(info, FC_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED, gn, NULL);
        for (size_t d = 0; d < gn->ndeps; d++) {
            bool found = false;
            for (size_t k = 0; k < en->ndeps && !found; k++)
                found = en->deps[k]->index == gn->deps[d]->index;
            if (!found)
                return update_failed(info, FC_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED, gn,
                                     gn->deps[d]);
        }
        if (gn->type == FC_GRAPH_NODE_TYPE_MEMCPY &&
            (gn->copy.srcMemoryType != en->copy.srcMemoryType ||
             gn->copy.dstMemoryType != en->copy.dstMemoryType))
            return update_failed(info, FC_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED, gn, NULL);
        if (gn->type == FC_GRAPH_NODE_TYPE_GRAPH) {
            CUresult r = check_update(en->child, gn->child, info);
            if (r != CUDA_SUCCESS)
                return r;
        }
    }
    return CUDA_SUCCESS;
}

/* Copies g's node parameters into e (checked by check_update). The nodes of
 * e keep naming the nodes they were instantiated from. */
static CUresult apply_update(struct fc_graph *e, const struct fc_graph *g)
{
    CUresult r = CUDA_SUCCESS;
    for (size_t i = 0; i < g->count && r == CUDA_SUCCESS; i++) {
        struct fc_node *en = e->nodes[i];
        const struct fc_node *gn = g->nodes[i];
        switch (gn->type) {
        case FC_GRAPH_NODE_TYPE_KERNEL:
            r = node_set_launch(en, &gn->launch);
            break;
        case FC_GRAPH_NODE_TYPE_MEMCPY:
            en->copy = gn->copy;
            break;
        case FC_GRAPH_NODE_TYPE_MEMSET:
            en->set = gn->set;
            break;
        case FC_GRAPH_NODE_TYPE_GRAPH:
            r = apply_update(en->child, gn->child);
            break;
        default:
            break;
        }
    }
    return r;
}

CUresult cuGraphExecUpdate_v2(CUgraphExec hGraphExec, CUgraph hGraph,
                              struct fc_graph_exec_update_result_info *resultInfo)
{
    struct fc_graph *e = exec_of(hGraphExec);
    struct fc_graph *g = fc_graph_from_handle(hGraph);
    if (!e || !g || !resultInfo)
        return CUDA_ERROR_INVALID_VALUE;
    struct fc_graph_exec_update_result_info info = {FC_GRAPH_EXEC_UPDATE_SUCCESS, NULL, NULL};
    CUresult r = check_update(e, g, &info);
    if (r == CUDA_SUCCESS && (r = apply_update(e, g)) != CUDA_SUCCESS)
        info.result = FC_GRAPH_EXEC_UPDATE_ERROR;
    *resultInfo = info;
    return r;
}

CUresult cuGraphExecUpdate(CUgraphExec hGraphExec, CUgraph hGraph, CUgraphNode *hErrorNode_out,
                           int *updateResult_out)
{
    struct fc_graph_exec_update_result_info info;
    if (!hErrorNode_out || !updateResult_out)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = cuGraphExecUpdate_v2(hGraphExec, hGraph, &info);
    if (r == CUDA_SUCCESS || r == FC_ERROR_GRAPH_EXEC_UPDATE_FAILURE) {
        *hErrorNode_out = info.errorNode;
        *updateResult_out = info.result;
    }
    return r;
}

/* Runs the nodes of an executable (or embedded) graph in its order. */
static CUresult run_graph(const struct fc_graph *e)
{
    CUresult r = CUDA_SUCCESS;
    for (size_t i = 0; i < e->count && r == CUDA_SUCCESS; i++) {
        const struct fc_node *n = e->order[i];
        if (n->disabled)
            continue;
        switch (n->type) {
        case FC_GRAPH_NODE_TYPE_KERNEL:
            fc_builtin_run(n->launch.kernel, n->launch.args, n->launch.grid, n->launch.block);
            volatile uint64_t *mail;
            if (fc_tools_hold(n->launch.kernel, n->launch.args, &mail)) {
                /* cudump's kernel holding its stream inside a graph would hold the
                 * whole graph, and the shim never serves it there: never allowed. */
                fprintf(stderr, "fakecuda: cudump's kernel held a stream inside a graph\n");
                abort();
            }
            break;
        case FC_GRAPH_NODE_TYPE_MEMCPY:
            r = fc_copy3d(&n->copy);
            break;
        case FC_GRAPH_NODE_TYPE_MEMSET:
            r = fc_memset(&n->set);
            break;
        case FC_GRAPH_NODE_TYPE_GRAPH:
            r = run_graph(n->child);
            break;
        default:
            break;
        }
    }
    return r;
}

static CUresult graph_launch(CUgraphExec hGraphExec, CUstream hStream, bool per_thread)
{
    struct fc_graph *e = exec_of(hGraphExec);
    if (!e)
        return CUDA_ERROR_INVALID_HANDLE;
    struct fc_stream *s;
    CUresult r = fc_resolve_stream(hStream, per_thread, &s);
    if (r != CUDA_SUCCESS)
        return r;
    /* A capture records no graph launch here: refused, capture invalidated. */
    if ((r = fc_uncapturable_work(s)) != CUDA_SUCCESS)
        return r;
    fc_stream_enqueued(s, FC_TAIL_OTHER);
    /* Replayed work never passes the launch entry points, as on a GPU. */
    return run_graph(e);
}

CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
{
    return graph_launch(hGraphExec, hStream, false);
}

CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream)
{
    return graph_launch(hGraphExec, hStream, true);
}

CUresult cuGraphExecDestroy(CUgraphExec hGraphExec)
{
    struct fc_graph *e = exec_of(hGraphExec);
    if (!e)
        return CUDA_ERROR_INVALID_HANDLE;
    fc_graph_free(e);
    return CUDA_SUCCESS;
}
