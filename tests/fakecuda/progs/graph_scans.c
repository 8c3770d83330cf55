/*
 * Kernels inside graph launches, for digests and NaN/Inf scans, and the same
 * launches made without a graph:
 *   graph 1 (captured)  scale(x, 2) -> vecAdd(x, y, z) -> scale(z, 0.5),
 *                       replayed 4 times;
 *   graph 2 (explicit)  a child graph { vecAdd(z, y, w) } -> scale(w, 0.25),
 *                       replayed 2 times.
 * Options:
 *   --direct   the same launches, in the same order, on the stream: no graph;
 *   --nan      y[5] is NaN: graph 1's vecAdd leaves z[5] NaN in its first
 *              replay, and graph 2's vecAdd leaves w[5] NaN in its first;
 *   --held     (with --nan) first vecAdd(x, y, w) on the stream, which leaves w[5] NaN,
 *              and the first graph launch right behind it (w is written again by
 *              graph 2, as ever).
 * Every result is checked against the host's (NaN where the host has NaN).
 * Launch counts are kernel executions per kernel, plus graph=<cuGraphLaunch calls>.
 */
#include "progcommon.h"

#include <math.h>

#define N 256
#define THREADS 64
#define REPLAYS1 4
#define REPLAYS2 2
#define NAN_AT 5

static struct tally t;
static CUfunction scale_fn, vec_add_fn;
static CUstream stream;
static CUdeviceptr dx, dy, dz, dw;
static int n = N;
static float two = 2.0f, half = 0.5f, quarter = 0.25f;

static void launch(CUfunction f, void **params)
{
    CHECK(cuLaunchKernel(f, N / THREADS, 1, 1, THREADS, 1, 1, 0, stream, params, NULL));
}

/* Graph 1's work, once: on the stream, or captured there. */
static void first_work(void)
{
    void *s1[] = {&dx, &two, &n};
    void *v1[] = {&dx, &dy, &dz, &n};
    void *s2[] = {&dz, &half, &n};
    launch(scale_fn, s1);
    launch(vec_add_fn, v1);
    launch(scale_fn, s2);
}

static void second_work(void)
{
    void *v2[] = {&dz, &dy, &dw, &n};
    void *s3[] = {&dw, &quarter, &n};
    launch(vec_add_fn, v2);
    launch(scale_fn, s3);
}

static CUDA_KERNEL_NODE_PARAMS node_params(CUfunction f, void **params)
{
    CUDA_KERNEL_NODE_PARAMS p = {.func = f, .gridDimX = N / THREADS, .gridDimY = 1,
                                 .gridDimZ = 1, .blockDimX = THREADS, .blockDimY = 1,
                                 .blockDimZ = 1, .kernelParams = params};
    return p;
}

static void run_graphs(bool held)
{
    CUgraph g1, g2, child;
    CUgraphExec e1, e2;
    CHECK(cuStreamBeginCapture_v2(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
    first_work();
    CHECK(cuStreamEndCapture(stream, &g1));
    CHECK(cuGraphInstantiateWithFlags(&e1, g1, 0));
    CHECK(cuGraphDestroy(g1));

    void *v2[] = {&dz, &dy, &dw, &n};
    void *s3[] = {&dw, &quarter, &n};
    CUDA_KERNEL_NODE_PARAMS vp = node_params(vec_add_fn, v2), sp = node_params(scale_fn, s3);
    CUgraphNode add, child_node, scale_node;
    CHECK(cuGraphCreate(&child, 0));
    CHECK(cuGraphAddKernelNode_v2(&add, child, NULL, 0, &vp));
    CHECK(cuGraphCreate(&g2, 0));
    CHECK(cuGraphAddChildGraphNode(&child_node, g2, NULL, 0, child));
    CHECK(cuGraphAddKernelNode_v2(&scale_node, g2, &child_node, 1, &sp));
    CHECK(cuGraphInstantiateWithFlags(&e2, g2, 0));
    CHECK(cuGraphDestroy(g2));
    CHECK(cuGraphDestroy(child));

    if (held) {
        void *v0[] = {&dx, &dy, &dw, &n};
        launch(vec_add_fn, v0);
        tally_launch(&t, "vecAdd", 1);
    }
    for (int r = 0; r < REPLAYS1; r++)
        CHECK(cuGraphLaunch(e1, stream));
    for (int r = 0; r < REPLAYS2; r++)
        CHECK(cuGraphLaunch(e2, stream));
    tally_launch(&t, "graph", REPLAYS1 + REPLAYS2);
    CHECK(cuStreamSynchronize(stream));
    CHECK(cuGraphExecDestroy(e1));
    CHECK(cuGraphExecDestroy(e2));
}

static void run_direct(void)
{
    for (int r = 0; r < REPLAYS1; r++)
        first_work();
    for (int r = 0; r < REPLAYS2; r++)
        second_work();
    CHECK(cuStreamSynchronize(stream));
}

static bool same(float a, float b)
{
    return isnan(a) ? isnan(b) : a == b;
}

static void expect(const char *what, CUdeviceptr dev, const float *want)
{
    static float got[N];
    CHECK(cuMemcpyDtoH_v2(got, dev, sizeof got));
    for (int i = 0; i < N; i++)
        if (!same(got[i], want[i]))
            FAIL("%s[%d] = %g, expected %g", what, i, got[i], want[i]);
}

int main(int argc, char **argv)
{
    bool direct = false, nan = false, held = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--direct") == 0)
            direct = true;
        else if (strcmp(argv[i], "--nan") == 0)
            nan = true;
        else if (strcmp(argv[i], "--held") == 0)
            held = true;
        else
            FAIL("unknown option %s", argv[i]);
    }
    CUmodule mod = prog_start();
    CHECK(cuModuleGetFunction(&vec_add_fn, mod, "_Z6vecAddPKfS0_Pfi"));
    CHECK(cuModuleGetFunction(&scale_fn, mod, "scale"));
    CHECK(cuStreamCreate(&stream, 0));

    static float x[N], y[N], z[N], w[N];
    for (int i = 0; i < N; i++) {
        x[i] = (float)i;
        y[i] = (float)(i % 5) - 2.0f;
    }
    if (nan)
        y[NAN_AT] = NAN;
    CUdeviceptr *bufs[] = {&dx, &dy, &dz, &dw};
    for (int b = 0; b < 4; b++) {
        CHECK(cuMemAlloc_v2(bufs[b], sizeof x));
        tally_alloc(&t, sizeof x);
    }
    CHECK(cuMemcpyHtoD_v2(dx, x, sizeof x));
    CHECK(cuMemcpyHtoD_v2(dy, y, sizeof y));
    CHECK(cuMemsetD8_v2(dz, 0, sizeof z));
    CHECK(cuMemsetD8_v2(dw, 0, sizeof w));

    if (direct)
        run_direct();
    else
        run_graphs(held);
    tally_launch(&t, "scale", 2 * REPLAYS1 + REPLAYS2);
    tally_launch(&t, "vecAdd", REPLAYS1 + REPLAYS2);

    /* The host's own run of the same work. */
    for (int r = 0; r < REPLAYS1; r++) {
        for (int i = 0; i < N; i++) {
            x[i] *= two;
            z[i] = x[i] + y[i];
            z[i] *= half;
        }
    }
    for (int r = 0; r < REPLAYS2; r++) {
        for (int i = 0; i < N; i++) {
            w[i] = z[i] + y[i];
            w[i] *= quarter;
        }
    }
    expect("x", dx, x);
    expect("z", dz, z);
    expect("w", dw, w);
    printf("verified %s%s\n", direct ? "direct launches" : "graph replays",
           nan ? ", with a NaN in y" : "");
    for (int b = 0; b < 4; b++)
        CHECK(cuMemFree_v2(*bufs[b]));
    CHECK(cuStreamDestroy_v2(stream));
    tally_print(&t);
    return 0;
}
