/*
 * CUDA graphs, the ways programs use them:
 *   capture    two kernels captured on a stream, the graph replayed 10 times;
 *   explicit   a graph built node by node: a child graph (a memcpy node then
 *              a kernel), a memset node, a kernel and a 2-D copy, the edges
 *              added so that the order nodes were added in is not one they
 *              can run in;
 *   setparams  cuGraphExecKernelNodeSetParams changing the scale factor
 *              between replays;
 *   update     cuGraphExecUpdate with a graph captured again, and with one
 *              of another shape;
 *   tograph    cuStreamBeginCaptureToGraph after a node of an existing graph,
 *              and a graph launch into a capturing stream (refused);
 *   device     a graph instantiated for device launch (cuGraphInstantiateWithParams),
 *              launched twice from the host.
 * Every result is checked against the host's; the program exits 1 on the
 * first mismatch. Launch counts are kernel-node executions per kernel, plus
 * graph=<cuGraphLaunch calls>.
 */
#include "progcommon.h"

#define N 256
#define THREADS 64
#define REPLAYS 10

static struct tally t;
static CUfunction scale_fn, vec_add_fn;
static CUstream stream;

static const char *type_name(int type)
{
    switch (type) {
    case FC_GRAPH_NODE_TYPE_KERNEL:
        return "kernel";
    case FC_GRAPH_NODE_TYPE_MEMCPY:
        return "memcpy";
    case FC_GRAPH_NODE_TYPE_MEMSET:
        return "memset";
    case FC_GRAPH_NODE_TYPE_GRAPH:
        return "graph";
    case FC_GRAPH_NODE_TYPE_EMPTY:
        return "empty";
    default:
        return "other";
    }
}

static CUdeviceptr alloc_floats(size_t n)
{
    CUdeviceptr p;
    CHECK(cuMemAlloc_v2(&p, n * sizeof(float)));
    tally_alloc(&t, n * sizeof(float));
    return p;
}

static void download(float *host, CUdeviceptr dev, size_t n)
{
    CHECK(cuMemcpyDtoH_v2(host, dev, n * sizeof(float)));
}

static void expect_floats(const char *what, const float *got, const float *want, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (got[i] != want[i])
            FAIL("%s: [%zu] = %g, expected %g", what, i, got[i], want[i]);
}

static CUDA_KERNEL_NODE_PARAMS kernel_params(CUfunction f, void **params)
{
    CUDA_KERNEL_NODE_PARAMS p = {.func = f,
                                      .gridDimX = N / THREADS,
                                      .gridDimY = 1,
                                      .gridDimZ = 1,
                                      .blockDimX = THREADS,
                                      .blockDimY = 1,
                                      .blockDimZ = 1,
                                      .kernelParams = params};
    return p;
}

/* The graph's nodes in the order cuGraphGetNodes gives, and their types
 * joined by commas into types. */
static size_t list_nodes(CUgraph g, CUgraphNode *nodes, size_t max, char *types, size_t len)
{
    size_t n = 0;
    CHECK(cuGraphGetNodes(g, NULL, &n));
    if (n > max)
        FAIL("graph has %zu nodes, more than %zu", n, max);
    size_t got = max;
    CHECK(cuGraphGetNodes(g, nodes, &got));
    if (got != n)
        FAIL("cuGraphGetNodes gave %zu nodes, then %zu", n, got);
    for (size_t i = n; i < max; i++)
        if (nodes[i])
            FAIL("cuGraphGetNodes left entry %zu set", i);
    types[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        int type;
        CHECK(cuGraphNodeGetType(nodes[i], &type));
        strncat(types, i ? "," : "", len - strlen(types) - 1);
        strncat(types, type_name(type), len - strlen(types) - 1);
    }
    return n;
}

static size_t count_edges(CUgraph g)
{
    size_t n = 0;
    CHECK(cuGraphGetEdges_v2(g, NULL, NULL, NULL, &n));
    return n;
}

static size_t count_roots(CUgraph g)
{
    size_t n = 0;
    CHECK(cuGraphGetRootNodes(g, NULL, &n));
    return n;
}

static void launch_graph(CUgraphExec exec)
{
    CHECK(cuGraphLaunch(exec, stream));
    CHECK(cuStreamSynchronize(stream));
    tally_launch(&t, "graph", 1);
}

/* ---- capture: x = 2x + y, captured once, replayed REPLAYS times ---- */

struct captured {
    CUgraph graph;
    CUgraphExec exec;
    CUgraphNode nodes[2];
    CUdeviceptr dx, dy;
    float x[N], y[N];
};

/* Captures scale(x, factor) then vecAdd(x, y, x) on the stream. */
static CUgraph capture_scale_add(CUdeviceptr *dx, CUdeviceptr *dy, float factor)
{
    static int n = N;
    static float f;
    f = factor;
    void *s[] = {dx, &f, &n};
    void *v[] = {dx, dy, dx, &n};
    CHECK(cuStreamBeginCapture_v2(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CUstreamCaptureStatus status;
    cuuint64_t id;
    CUgraph capturing;
    const CUgraphNode *deps;
    const struct fc_graph_edge_data *edges;
    size_t ndeps;
    CHECK(cuStreamGetCaptureInfo_v3(stream, &status, &id, &capturing, &deps, &edges, &ndeps));
    if (status != CU_STREAM_CAPTURE_STATUS_ACTIVE || ndeps != 0 || id == 0)
        FAIL("capture info at the start: status %d, %zu dependencies", (int)status, ndeps);
    CHECK(cuLaunchKernel(scale_fn, N / THREADS, 1, 1, THREADS, 1, 1, 0, stream, s, NULL));
    CHECK(cuStreamGetCaptureInfo_v3(stream, &status, &id, &capturing, &deps, &edges, &ndeps));
    if (ndeps != 1 || !deps || !edges)
        FAIL("capture info after a launch: %zu dependencies", ndeps);
    CUgraphNode first = deps[0];
    CHECK(cuLaunchKernel(vec_add_fn, N / THREADS, 1, 1, THREADS, 1, 1, 0, stream, v, NULL));
    CUgraph g;
    CHECK(cuStreamEndCapture(stream, &g));
    if (g != capturing)
        FAIL("cuStreamEndCapture gave another graph than the capture built");
    CUgraphNode nodes[4];
    char types[64];
    if (list_nodes(g, nodes, 4, types, sizeof types) != 2 || nodes[0] != first)
        FAIL("captured graph: nodes %s", types);
    return g;
}

static void part_capture(struct captured *c)
{
    for (int i = 0; i < N; i++) {
        c->x[i] = (float)i;
        c->y[i] = (float)(i % 5);
    }
    c->dx = alloc_floats(N);
    c->dy = alloc_floats(N);
    CHECK(cuMemcpyHtoD_v2(c->dx, c->x, sizeof c->x));
    CHECK(cuMemcpyHtoD_v2(c->dy, c->y, sizeof c->y));

    c->graph = capture_scale_add(&c->dx, &c->dy, 2.0f);
    float now[N];
    download(now, c->dx, N);
    expect_floats("captured work ran during the capture", now, c->x, N);

    char types[64];
    CUgraphNode extra[2];
    size_t n = list_nodes(c->graph, c->nodes, 2, types, sizeof types);
    CUgraphNode from[2], to[2];
    size_t ne = 2;
    CHECK(cuGraphGetEdges_v2(c->graph, from, to, NULL, &ne));
    if (ne != 1 || from[0] != c->nodes[0] || to[0] != c->nodes[1])
        FAIL("captured graph: %zu edges, not nodes[0] -> nodes[1]", ne);
    size_t nr = 2;
    CHECK(cuGraphGetRootNodes(c->graph, extra, &nr));
    if (nr != 1 || extra[0] != c->nodes[0])
        FAIL("captured graph: %zu roots", nr);
    printf("capture: nodes %zu edges %zu roots %zu types %s\n", n, ne, nr, types);

    /* The parameters read back are the values launched, by the layout. */
    CUDA_KERNEL_NODE_PARAMS p;
    CHECK(cuGraphKernelNodeGetParams_v2(c->nodes[0], &p));
    CUdeviceptr x_arg;
    float s_arg;
    int n_arg;
    memcpy(&x_arg, p.kernelParams[0], sizeof x_arg);
    memcpy(&s_arg, p.kernelParams[1], sizeof s_arg);
    memcpy(&n_arg, p.kernelParams[2], sizeof n_arg);
    if (p.func != scale_fn || p.kern || p.extra || x_arg != c->dx || s_arg != 2.0f || n_arg != N ||
        p.gridDimX != N / THREADS || p.blockDimX != THREADS)
        FAIL("captured scale node reads back wrong");
    CUcontext ctx;
    CHECK(cuCtxGetCurrent(&ctx));
    if (p.ctx != ctx)
        FAIL("captured node's context is not the current one");
    const char *name;
    CHECK(cuFuncGetName(&name, p.func));
    printf("capture: node 0 %s scale=%g n=%d\n", name, (double)s_arg, n_arg);

    CHECK(cuGraphInstantiateWithFlags(&c->exec, c->graph, 0));
    for (int r = 0; r < REPLAYS; r++)
        launch_graph(c->exec);
    tally_launch(&t, "scale", REPLAYS);
    tally_launch(&t, "vecAdd", REPLAYS);
    for (int r = 0; r < REPLAYS; r++)
        for (int i = 0; i < N; i++)
            c->x[i] = c->x[i] * 2.0f + c->y[i];
    download(now, c->dx, N);
    expect_floats("capture replays", now, c->x, N);
    printf("capture: replays %d x[1]=%g x[255]=%g\n", REPLAYS, (double)now[1], (double)now[255]);
}

/* ---- explicit: a child graph, a memset, a kernel and a 2-D copy ---- */

#define SIDE 16 /* z seen as SIDE rows of SIDE floats */
#define BLOCK 8 /* the 2-D copy takes a BLOCK x BLOCK square of it */
#define BX 4
#define BY 2

static void part_explicit(void)
{
    static float in[N], z[N], w[BLOCK * BLOCK], want_z[N], want_w[BLOCK * BLOCK];
    static int n = N;
    static float three = 3.0f;
    for (int i = 0; i < N; i++)
        in[i] = (float)(i % 17) - 4.0f;
    CUdeviceptr dz = alloc_floats(N), dv = alloc_floats(N), dw = alloc_floats(BLOCK * BLOCK);

    /* The child: copy in -> z, then z *= 3. */
    CUgraph child;
    CHECK(cuGraphCreate(&child, 0));
    CUDA_MEMCPY3D up = {.srcMemoryType = CU_MEMORYTYPE_HOST,
                             .srcHost = in,
                             .dstMemoryType = CU_MEMORYTYPE_DEVICE,
                             .dstDevice = dz,
                             .WidthInBytes = sizeof in,
                             .Height = 1,
                             .Depth = 1};
    CUgraphNode copy_in, scale_node;
    CHECK(cuGraphAddMemcpyNode(&copy_in, child, NULL, 0, &up, NULL));
    void *s[] = {&dz, &three, &n};
    CUDA_KERNEL_NODE_PARAMS sp = kernel_params(scale_fn, s);
    CHECK(cuGraphAddKernelNode_v2(&scale_node, child, &copy_in, 1, &sp));

    /* The parent, nodes added before the edges that order them:
     * vecAdd(z, v, z) after the child and the memset, the 2-D copy last. */
    CUgraph g;
    CHECK(cuGraphCreate(&g, 0));
    void *v[] = {&dz, &dv, &dz, &n};
    CUDA_KERNEL_NODE_PARAMS vp = kernel_params(vec_add_fn, v);
    CUgraphNode add, child_node, set, copy_out;
    CHECK(cuGraphAddKernelNode_v2(&add, g, NULL, 0, &vp));
    CHECK(cuGraphAddChildGraphNode(&child_node, g, NULL, 0, child));
    /* The node embeds a copy: the child graph may go. */
    CHECK(cuGraphDestroy(child));
    float one = 1.0f;
    struct fc_memset_node_params ms = {.dst = dv, .elementSize = 4, .width = N, .height = 1};
    memcpy(&ms.value, &one, sizeof one);
    CHECK(cuGraphAddMemsetNode(&set, g, NULL, 0, &ms, NULL));
    CUDA_MEMCPY3D block = {.srcXInBytes = BX * sizeof(float),
                                .srcY = BY,
                                .srcMemoryType = CU_MEMORYTYPE_DEVICE,
                                .srcDevice = dz,
                                .srcPitch = SIDE * sizeof(float),
                                .dstMemoryType = CU_MEMORYTYPE_DEVICE,
                                .dstDevice = dw,
                                .dstPitch = BLOCK * sizeof(float),
                                .WidthInBytes = BLOCK * sizeof(float),
                                .Height = BLOCK,
                                .Depth = 1};
    CHECK(cuGraphAddMemcpyNode(&copy_out, g, &add, 1, &block, NULL));
    CUgraphNode from[] = {child_node, set}, to[] = {add, add};
    CHECK(cuGraphAddDependencies_v2(g, from, to, NULL, 2));
    EXPECT(cuGraphAddDependencies_v2(g, from, to, NULL, 1), CUDA_ERROR_INVALID_VALUE);

    CUgraphNode nodes[8];
    char types[64];
    size_t count = list_nodes(g, nodes, 8, types, sizeof types);
    if (count != 4 || nodes[0] != add || nodes[1] != child_node || nodes[2] != set ||
        nodes[3] != copy_out)
        FAIL("explicit graph lists %zu nodes out of order", count);
    CUgraphNode deps[4];
    size_t nd = 4;
    CHECK(cuGraphNodeGetDependencies_v2(add, deps, NULL, &nd));
    if (nd != 2 || deps[0] != child_node || deps[1] != set)
        FAIL("vecAdd node has %zu dependencies", nd);
    printf("explicit: nodes %zu roots %zu edges %zu types %s\n", count, count_roots(g),
           count_edges(g), types);

    CUgraph embedded;
    CHECK(cuGraphChildGraphNodeGetGraph(child_node, &embedded));
    if (embedded == child)
        FAIL("the child graph node did not copy its graph");
    CUgraphNode child_nodes[4];
    size_t cn = list_nodes(embedded, child_nodes, 4, types, sizeof types);
    printf("explicit: child nodes %zu edges %zu types %s\n", cn, count_edges(embedded), types);

    /* A clone is independent of its original. */
    CUgraph copy;
    CHECK(cuGraphClone(&copy, g));
    CUgraphNode cloned_out;
    CHECK(cuGraphNodeFindInClone(&cloned_out, copy_out, copy));
    if (cloned_out == copy_out)
        FAIL("cuGraphNodeFindInClone gave the original node");
    CHECK(cuGraphDestroyNode(cloned_out));
    size_t in_copy = 0, in_g = 0;
    CHECK(cuGraphGetNodes(copy, NULL, &in_copy));
    CHECK(cuGraphGetNodes(g, NULL, &in_g));
    printf("explicit: clone nodes %zu edges %zu, original nodes %zu edges %zu\n", in_copy,
           count_edges(copy), in_g, count_edges(g));
    CHECK(cuGraphDestroy(copy));

    CUgraphExec exec;
    CUDA_GRAPH_INSTANTIATE_PARAMS ip = {.flags = 0};
    CHECK(cuGraphInstantiateWithParams(&exec, g, &ip));
    CHECK(cuGraphDestroy(g));
    for (int r = 0; r < 2; r++) {
        CHECK(cuMemsetD8_v2(dz, 0, N * sizeof(float)));
        launch_graph(exec);
    }
    tally_launch(&t, "scale", 2);
    tally_launch(&t, "vecAdd", 2);
    for (int i = 0; i < N; i++)
        want_z[i] = in[i] * 3.0f + 1.0f;
    for (int r = 0; r < BLOCK; r++)
        for (int c = 0; c < BLOCK; c++)
            want_w[r * BLOCK + c] = want_z[(BY + r) * SIDE + BX + c];
    download(z, dz, N);
    download(w, dw, BLOCK * BLOCK);
    expect_floats("explicit graph z", z, want_z, N);
    expect_floats("explicit graph 2-D copy", w, want_w, BLOCK * BLOCK);
    double zsum = 0, wsum = 0;
    for (int i = 0; i < N; i++)
        zsum += z[i];
    for (int i = 0; i < BLOCK * BLOCK; i++)
        wsum += w[i];
    printf("explicit: launches 2 z[0]=%g z[20]=%g sum %g w[0]=%g w[9]=%g sum %g\n", (double)z[0],
           (double)z[20], zsum, (double)w[0], (double)w[9], wsum);
    CHECK(cuGraphExecDestroy(exec));
}

/* ---- setparams: memset q = 1, then q *= s, s changed between replays ---- */

static void part_setparams(void)
{
    static int n = N;
    static float s = 1.0f;
    CUdeviceptr dq = alloc_floats(N);
    CUgraph g;
    CHECK(cuGraphCreate(&g, 0));
    float one = 1.0f;
    struct fc_memset_node_params ms = {.dst = dq, .elementSize = 4, .width = N, .height = 1};
    memcpy(&ms.value, &one, sizeof one);
    CUgraphNode set, scale_node;
    CHECK(cuGraphAddMemsetNode(&set, g, NULL, 0, &ms, NULL));
    void *params[] = {&dq, &s, &n};
    CUDA_KERNEL_NODE_PARAMS p = kernel_params(scale_fn, params);
    CHECK(cuGraphAddKernelNode_v2(&scale_node, g, &set, 1, &p));
    /* The node holds copies: changing the variables changes nothing. */
    s = 99.0f;
    CUgraphExec exec;
    CHECK(cuGraphInstantiateWithFlags(&exec, g, 0));

    static const float factors[] = {1.5f, 2.5f, 3.5f};
    float q[N];
    for (int r = 0; r < 3; r++) {
        float f = factors[r];
        void *np[] = {&dq, &f, &n};
        CUDA_KERNEL_NODE_PARAMS update = kernel_params(scale_fn, np);
        CHECK(cuGraphExecKernelNodeSetParams_v2(exec, scale_node, &update));
        launch_graph(exec);
        download(q, dq, N);
        for (int i = 0; i < N; i++)
            if (q[i] != f)
                FAIL("setparams replay %d: q[%d] = %g, expected %g", r + 1, i, q[i], f);
        printf("setparams: replay %d scale %g q[0]=%g q[255]=%g\n", r + 1, (double)f,
               (double)q[0], (double)q[255]);
    }
    tally_launch(&t, "scale", 3);

    /* The graph's own node kept its parameters... */
    CUDA_KERNEL_NODE_PARAMS back;
    CHECK(cuGraphKernelNodeGetParams_v2(scale_node, &back));
    float kept;
    memcpy(&kept, back.kernelParams[1], sizeof kept);
    if (kept != 1.0f)
        FAIL("graph node's scale is %g after cuGraphExecKernelNodeSetParams", kept);
    /* ...and changing it leaves the executable graph alone. */
    float big = 100.0f;
    void *bp[] = {&dq, &big, &n};
    CUDA_KERNEL_NODE_PARAMS bigger = kernel_params(scale_fn, bp);
    CHECK(cuGraphKernelNodeSetParams_v2(scale_node, &bigger));
    launch_graph(exec);
    tally_launch(&t, "scale", 1);
    download(q, dq, N);
    if (q[0] != factors[2])
        FAIL("executable graph changed with its graph: q[0] = %g", q[0]);
    printf("setparams: graph node scale %g, executable graph still %g\n", (double)kept,
           (double)q[0]);
    CHECK(cuGraphExecDestroy(exec));
    CHECK(cuGraphDestroy(g));
}

/* ---- update: the captured graph's executable graph updated ---- */

static void part_update(struct captured *c)
{
    /* The same work captured again with another factor and addend. */
    float y2[N];
    for (int i = 0; i < N; i++)
        y2[i] = (float)(i % 3) + 0.5f;
    CUdeviceptr dy2 = alloc_floats(N);
    CHECK(cuMemcpyHtoD_v2(dy2, y2, sizeof y2));
    CUgraph again = capture_scale_add(&c->dx, &dy2, 0.5f);
    struct fc_graph_exec_update_result_info info;
    CHECK(cuGraphExecUpdate_v2(c->exec, again, &info));
    if (info.result != FC_GRAPH_EXEC_UPDATE_SUCCESS)
        FAIL("cuGraphExecUpdate_v2 result %d", info.result);
    launch_graph(c->exec);
    tally_launch(&t, "scale", 1);
    tally_launch(&t, "vecAdd", 1);
    for (int i = 0; i < N; i++)
        c->x[i] = c->x[i] * 0.5f + y2[i];
    float now[N];
    download(now, c->dx, N);
    expect_floats("replay after cuGraphExecUpdate", now, c->x, N);
    printf("update: result %d x[1]=%g x[255]=%g\n", info.result, (double)now[1],
           (double)now[255]);

    /* After an update, the instantiated graph's nodes still name the
     * executable graph's; the update graph's do not. */
    CUgraphNode new_nodes[2];
    char types[64];
    list_nodes(again, new_nodes, 2, types, sizeof types);
    CUDA_KERNEL_NODE_PARAMS p;
    CHECK(cuGraphKernelNodeGetParams_v2(new_nodes[0], &p));
    CUresult by_new = cuGraphExecKernelNodeSetParams_v2(c->exec, new_nodes[0], &p);
    CUresult by_old = cuGraphExecKernelNodeSetParams_v2(c->exec, c->nodes[0], &p);
    printf("update: set params by update graph's node -> %d, by instantiated graph's -> %d\n",
           (int)by_new, (int)by_old);
    if (by_new != CUDA_ERROR_INVALID_VALUE || by_old != CUDA_SUCCESS)
        FAIL("node handles after cuGraphExecUpdate");

    /* Another shape is refused, and the executable graph stays as it was. */
    CHECK(cuGraphDestroyNode(new_nodes[1]));
    CUresult r = cuGraphExecUpdate_v2(c->exec, again, &info);
    printf("update: other topology -> %d result %d\n", (int)r, info.result);
    if (r != FC_ERROR_GRAPH_EXEC_UPDATE_FAILURE ||
        info.result != FC_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED)
        FAIL("update to another topology was not refused");
    CHECK(cuGraphDestroy(again));
}

/* ---- tograph: capture into an existing graph; graph launch in capture ---- */

static void part_tograph(struct captured *c)
{
    static int n = N;
    static float f = 4.0f;
    CUdeviceptr dr = alloc_floats(N);
    CUgraph g;
    CHECK(cuGraphCreate(&g, 0));
    float seven = 7.0f;
    struct fc_memset_node_params ms = {.dst = dr, .elementSize = 4, .width = N, .height = 1};
    memcpy(&ms.value, &seven, sizeof seven);
    CUgraphNode set;
    CHECK(cuGraphAddMemsetNode(&set, g, NULL, 0, &ms, NULL));
    CHECK(cuStreamBeginCaptureToGraph(stream, g, &set, NULL, 1, CU_STREAM_CAPTURE_MODE_GLOBAL));
    void *s[] = {&dr, &f, &n};
    CHECK(cuLaunchKernel(scale_fn, N / THREADS, 1, 1, THREADS, 1, 1, 0, stream, s, NULL));
    CUgraph ended;
    CHECK(cuStreamEndCapture(stream, &ended));
    CUgraphNode nodes[4], deps[2];
    char types[64];
    size_t count = list_nodes(g, nodes, 4, types, sizeof types);
    size_t nd = 2;
    CHECK(cuGraphNodeGetDependencies_v2(nodes[1], deps, NULL, &nd));
    if (ended != g || count != 2 || nd != 1 || deps[0] != set)
        FAIL("capture into an existing graph");
    CUgraphExec exec;
    CHECK(cuGraphInstantiateWithFlags(&exec, g, 0));
    launch_graph(exec);
    tally_launch(&t, "scale", 1);
    float r[N];
    download(r, dr, N);
    for (int i = 0; i < N; i++)
        if (r[i] != 28.0f)
            FAIL("tograph: r[%d] = %g, expected 28", i, r[i]);
    printf("tograph: nodes %zu types %s r[0]=%g\n", count, types, (double)r[0]);

    /* A graph launch cannot be captured: refused (the graph does not run),
     * and the capture is lost. */
    CHECK(cuStreamBeginCapture_v2(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CUresult launched = cuGraphLaunch(c->exec, stream);
    CUgraph lost = NULL;
    CUresult end = cuStreamEndCapture(stream, &lost);
    printf("tograph: graph launch in capture -> %d, end capture -> %d\n", (int)launched, (int)end);
    if (launched != FC_ERROR_STREAM_CAPTURE_UNSUPPORTED ||
        end != FC_ERROR_STREAM_CAPTURE_INVALIDATED || lost)
        FAIL("graph launch into a capturing stream");
    download(r, c->dx, N);
    expect_floats("graph launched from a capture ran", r, c->x, N);
    CHECK(cuGraphExecDestroy(exec));
    CHECK(cuGraphDestroy(g));
}

/* ---- device: q = 1 then q *= 4, in a graph made for device launch ---- */

static void part_device(void)
{
    static int n = N;
    static float four = 4.0f;
    CUdeviceptr dq = alloc_floats(N);
    CUgraph g;
    CHECK(cuGraphCreate(&g, 0));
    float one = 1.0f;
    struct fc_memset_node_params ms = {.dst = dq, .elementSize = 4, .width = N, .height = 1};
    memcpy(&ms.value, &one, sizeof one);
    CUgraphNode set, scale_node;
    CHECK(cuGraphAddMemsetNode(&set, g, NULL, 0, &ms, NULL));
    void *params[] = {&dq, &four, &n};
    CUDA_KERNEL_NODE_PARAMS p = kernel_params(scale_fn, params);
    CHECK(cuGraphAddKernelNode_v2(&scale_node, g, &set, 1, &p));
    CUgraphExec exec;
    CUDA_GRAPH_INSTANTIATE_PARAMS ip = {.flags = CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH};
    CHECK(cuGraphInstantiateWithParams(&exec, g, &ip));
    float q[N];
    for (int r = 0; r < 2; r++) {
        launch_graph(exec);
        download(q, dq, N);
        for (int i = 0; i < N; i++)
            if (q[i] != 4.0f)
                FAIL("device graph replay %d: q[%d] = %g", r + 1, i, (double)q[i]);
    }
    tally_launch(&t, "scale", 2);
    printf("device: replays 2 q[0]=%g\n", (double)q[0]);
    CHECK(cuGraphExecDestroy(exec));
    CHECK(cuGraphDestroy(g));
}

int main(void)
{
    CUmodule mod = prog_start();
    CHECK(cuModuleGetFunction(&vec_add_fn, mod, "_Z6vecAddPKfS0_Pfi"));
    CHECK(cuModuleGetFunction(&scale_fn, mod, "scale"));
    CHECK(cuStreamCreate(&stream, 0));

    /* Names in the order the summary line lists them. */
    tally_launch(&t, "scale", 0);
    tally_launch(&t, "vecAdd", 0);
    tally_launch(&t, "graph", 0);
    static struct captured c;
    part_capture(&c);
    part_explicit();
    part_setparams();
    part_update(&c);
    part_tograph(&c);
    part_device();

    CHECK(cuGraphExecDestroy(c.exec));
    CHECK(cuGraphDestroy(c.graph));
    CHECK(cuStreamDestroy_v2(stream));
    printf("verified graphs\n");
    tally_print(&t);
    return 0;
}
