/*
 * A training-like loop of STEPS steps, three launches a step over float buffers:
 *   w = x + x (vecAdd), y = w * w (square), z = y + w (vecAdd)
 * At the start of each step x is written from the host (a synchronous copy); at the
 * steps listed in POISON it holds 3e38 at INDEX, so that the step's first launch
 * overflows w to +inf there and the two after it carry it on. With SYNC 1 the program
 * synchronizes its context after every launch, with 0 never, and at the end it reads z
 * back. With SYNC 2 the three launches are captured once into a CUDA graph on a stream
 * of their own (global mode), and each step copies x on that stream, waits for the
 * copy, and replays the graph. With SYNC 3 the steps run on a stream of their own,
 * and then, with the last step's launches not waited for, that stream captures the three
 * launches (global mode) while a fourth, w = x + x, is made on a second stream; the graph
 * is launched once and its node count printed (`graph nodes N`: 3 unless something else
 * went into the capture). With SYNC 4 the steps run on a stream of their own, which is
 * destroyed after the last step with its launches not waited for (as the driver allows).
 * With SYNC 5 each step's three launches (in the primary context, on the NULL stream) are
 * followed by w2 = x2 + x2 in a second context, on its NULL stream, not waited for.
 * With SYNC 6 a second thread waits until the stand-in holds a launch back
 * (FAKECUDA_PAUSE_LAUNCH) and then synchronizes the context, as SYNC 0 otherwise.
 * With SYNC 7 the steps of SYNC 2 run on a second thread while the first captures a
 * blocking stream of its own (relaxed mode, one launch in it); the capture is ended after
 * the steps and its node count printed (`graph nodes 1`; a synchronous call on the legacy
 * stream meanwhile would have lost it: `capture invalidated`, status 3).
 * SYNC 8 is SYNC 2 with a scratch buffer the graph never uses allocated and freed before
 * each replay (a server freeing per request). SYNC 9 is SYNC 2 with the graph's first
 * kernel node given its own parameters again (cuGraphExecKernelNodeSetParams) before
 * each replay (a decode loop updating its graph each token). SYNC 10 is SYNC 2 with the
 * graph's last kernel node (z = y + w) disabled in the executable graph from step 3 on
 * (cuGraphNodeSetEnabled): z is then step 2's at the end. SYNC 11 is SYNC 2 with a wait
 * for a second stream (with nothing on it) after each replay: a look at the GPU's progress
 * while the replay may still run. SYNC 12 is SYNC 2 with the three launches captured
 * LAYERS times over (a large graph: 3 x LAYERS kernel nodes).
 * SYNC 13 is SYNC 0 with w freed and allocated again (of the same size) after the first
 * poisoned step; it prints `w reused` where the new w is at the old one's address.
 * With STEPS_READY and STEPS_GO set (paths), the program creates STEPS_READY after its
 * first step and waits for STEPS_GO to exist (120 s at most) before the others.
 * Usage: steps STEPS SYNC INDEX [POISON...]
 * Prints `sum S` (of z, with non-finite elements left out) and the launch tally.
 */
#define _DEFAULT_SOURCE
#include "progcommon.h"

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#define N 1024
#define LAYERS 400

/* STEPS_READY, STEPS_GO: a test does something between the first step and the others. */
static void wait_to_go(void)
{
    const char *ready = getenv("STEPS_READY"), *go = getenv("STEPS_GO");
    if (!ready || !go)
        return;
    FILE *f = fopen(ready, "w");
    if (!f)
        FAIL("cannot create %s", ready);
    fclose(f);
    time_t until = time(NULL) + 120;
    while (access(go, F_OK) != 0 && time(NULL) < until)
        usleep(10000);
}

/* SYNC 6's second thread: a synchronize while a launch of the first is held back. */
static void *sync_when_paused(void *ctx)
{
    CHECK(cuCtxSetCurrent((CUcontext)ctx));
    time_t until = time(NULL) + 30;
    while (!fakecuda_launch_paused() && time(NULL) < until)
        sched_yield();
    CHECK(cuCtxSynchronize());
    return NULL;
}

/* SYNC 7's second thread: the steps of SYNC 2. */
struct replays {
    CUcontext ctx;
    CUgraphExec exec;
    CUstream stream;
    CUdeviceptr dx;
    float *x;
    int steps, index, argc;
    char **argv;
};

static void *replay_steps(void *arg)
{
    struct replays *r = arg;
    CHECK(cuCtxSetCurrent(r->ctx));
    for (int k = 1; k <= r->steps; k++) {
        bool poison = false;
        for (int p = 4; p < r->argc; p++)
            poison = poison || atoi(r->argv[p]) == k;
        prog_floats(r->x, N, 0.001f * (float)k, 0.0001f);
        if (poison)
            r->x[r->index] = 3e38f;
        CHECK(cuMemcpyHtoDAsync_v2(r->dx, r->x, N * sizeof(float), r->stream));
        CHECK(cuStreamSynchronize(r->stream));
        CHECK(cuGraphLaunch(r->exec, r->stream));
    }
    CHECK(cuStreamSynchronize(r->stream));
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 4)
        FAIL("usage: steps STEPS SYNC INDEX [POISON...]");
    int steps = atoi(argv[1]), sync = atoi(argv[2]), index = atoi(argv[3]);
    if (index < 0 || index >= N)
        FAIL("INDEX must be below %d", N);
    struct tally t = {0};
    CUfunction add, square;
    CUmodule mod = prog_start();
    CHECK(cuModuleGetFunction(&add, mod, "_Z6vecAddPKfS0_Pfi"));
    CHECK(cuModuleGetFunction(&square, mod, "_Z6squarePKfPfi"));
    static float x[N], z[N];
    CUdeviceptr dx, dw, dy, dz;
    CHECK(cuMemAlloc_v2(&dx, sizeof x));
    CHECK(cuMemAlloc_v2(&dw, sizeof x));
    CHECK(cuMemAlloc_v2(&dy, sizeof x));
    CHECK(cuMemAlloc_v2(&dz, sizeof x));
    tally_alloc(&t, 4 * sizeof x);
    int n = N;
    void *first[] = {&dx, &dx, &dw, &n};
    void *second[] = {&dw, &dy, &n};
    void *third[] = {&dy, &dw, &dz, &n};
    CUstream stream = NULL;
    CUgraphExec exec = NULL;
    if (sync == 3 || sync == 4)
        CHECK(cuStreamCreate(&stream, 0));
    CUstream side = NULL;
    if (sync == 11)
        CHECK(cuStreamCreate(&side, 0));
    CUgraphNode node0 = NULL;
    CUDA_KERNEL_NODE_PARAMS params0;
    if (sync == 2 || (sync >= 7 && sync <= 12)) {
        CUgraph graph;
        CHECK(cuStreamCreate(&stream, 0));
        CHECK(cuStreamBeginCapture_v2(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
        for (int layer = 0; layer < (sync == 12 ? LAYERS : 1); layer++) {
            CHECK(cuLaunchKernel(add, N / 128, 1, 1, 128, 1, 1, 0, stream, first, NULL));
            CHECK(cuLaunchKernel(square, N / 128, 1, 1, 128, 1, 1, 0, stream, second, NULL));
            CHECK(cuLaunchKernel(add, N / 128, 1, 1, 128, 1, 1, 0, stream, third, NULL));
        }
        CHECK(cuStreamEndCapture(stream, &graph));
        CHECK(cuGraphInstantiateWithFlags(&exec, graph, 0));
        if (sync == 9) {
            CUgraphNode nodes[3];
            size_t count = 3;
            CHECK(cuGraphGetNodes(graph, nodes, &count));
            for (size_t i = 0; i < count && !node0; i++) {
                CUgraphNode *deps = NULL;
                size_t ndeps = 0;
                CHECK(cuGraphNodeGetDependencies(nodes[i], deps, &ndeps));
                if (!ndeps)
                    node0 = nodes[i]; /* the first kernel: w = x + x */
            }
            CHECK(cuGraphKernelNodeGetParams_v2(node0, &params0));
        }
        if (sync == 10) {
            CUgraphNode nodes[3];
            size_t count = 3;
            CHECK(cuGraphGetNodes(graph, nodes, &count));
            for (size_t i = 0; i < count && !node0; i++) {
                size_t ndependents = 0;
                CHECK(cuGraphNodeGetDependentNodes(nodes[i], NULL, &ndependents));
                if (!ndependents)
                    node0 = nodes[i]; /* the last kernel: z = y + w */
            }
        }
    }
    CUcontext main_ctx = NULL, other = NULL;
    CUfunction add2 = NULL;
    CUdeviceptr dx2 = 0, dw2 = 0;
    if (sync == 5) {
        CUmodule mod2;
        CHECK(cuCtxGetCurrent(&main_ctx));
        CHECK(cuCtxCreate_v4(&other, NULL, 0, 0));
        CHECK(cuModuleLoadData(&mod2, prog_image));
        CHECK(cuModuleGetFunction(&add2, mod2, "_Z6vecAddPKfS0_Pfi"));
        CHECK(cuMemAlloc_v2(&dx2, sizeof x));
        CHECK(cuMemAlloc_v2(&dw2, sizeof x));
        CHECK(cuMemcpyHtoD_v2(dx2, x, sizeof x));
        CHECK(cuCtxSetCurrent(main_ctx));
    }
    void *fourth[] = {&dx2, &dx2, &dw2, &n};
    pthread_t syncer;
    bool reused = true;
    if (sync == 6) {
        CUcontext ctx;
        CHECK(cuCtxGetCurrent(&ctx));
        if (pthread_create(&syncer, NULL, sync_when_paused, ctx))
            FAIL("pthread_create");
    }
    if (sync == 7) {
        CUcontext ctx;
        CUstream mine;
        CUgraph captured;
        size_t nodes = 0;
        pthread_t replayer;
        CHECK(cuCtxGetCurrent(&ctx));
        CHECK(cuStreamCreate(&mine, 0));
        CHECK(cuStreamBeginCapture_v2(mine, CU_STREAM_CAPTURE_MODE_RELAXED));
        CHECK(cuLaunchKernel(add, N / 128, 1, 1, 128, 1, 1, 0, mine, first, NULL));
        struct replays r = {ctx, exec, stream, dx, x, steps, index, argc, argv};
        if (pthread_create(&replayer, NULL, replay_steps, &r))
            FAIL("pthread_create");
        pthread_join(replayer, NULL);
        CUresult end = cuStreamEndCapture(mine, &captured);
        if (end != CUDA_SUCCESS) {
            printf("capture invalidated (cuStreamEndCapture -> %d)\n", (int)end);
            return 3;
        }
        CHECK(cuGraphGetNodes(captured, NULL, &nodes));
        printf("graph nodes %zu\n", nodes);
    }
    /* (SYNC 7's steps were the second thread's) */
    for (int k = 1; sync != 7 && k <= steps; k++) {
        bool poison = false;
        for (int p = 4; p < argc; p++)
            poison = poison || atoi(argv[p]) == k;
        prog_floats(x, N, 0.001f * (float)k, 0.0001f);
        if (poison)
            x[index] = 3e38f;
        if (sync == 2 || (sync >= 8 && sync <= 12)) {
            /* Ordered on the graph's stream, as a framework's input copy is. */
            CHECK(cuMemcpyHtoDAsync_v2(dx, x, sizeof x, stream));
            CHECK(cuStreamSynchronize(stream)); /* x is the host's again next step */
            if (sync == 8) {
                CUdeviceptr scratch;
                CHECK(cuMemAlloc_v2(&scratch, 4096));
                CHECK(cuMemFree_v2(scratch));
            }
            if (sync == 9)
                CHECK(cuGraphExecKernelNodeSetParams_v2(exec, node0, &params0));
            if (sync == 10 && k == 3)
                CHECK(cuGraphNodeSetEnabled(exec, node0, 0));
            CHECK(cuGraphLaunch(exec, stream));
            if (sync == 11)
                CHECK(cuStreamSynchronize(side));
            continue;
        }
        if (k == 2)
            wait_to_go();
        CHECK(cuMemcpyHtoD_v2(dx, x, sizeof x));
        CHECK(cuLaunchKernel(add, N / 128, 1, 1, 128, 1, 1, 0, stream, first, NULL));
        if (sync == 1)
            CHECK(cuCtxSynchronize());
        CHECK(cuLaunchKernel(square, N / 128, 1, 1, 128, 1, 1, 0, stream, second, NULL));
        if (sync == 1)
            CHECK(cuCtxSynchronize());
        CHECK(cuLaunchKernel(add, N / 128, 1, 1, 128, 1, 1, 0, stream, third, NULL));
        if (sync == 1)
            CHECK(cuCtxSynchronize());
        if (sync == 13 && argc > 4 && k == atoi(argv[4])) {
            CUdeviceptr old = dw;
            CHECK(cuMemFree_v2(dw));
            CHECK(cuMemAlloc_v2(&dw, sizeof x));
            reused = reused && dw == old;
        }
        if (sync == 5) {
            CHECK(cuCtxSetCurrent(other));
            CHECK(cuLaunchKernel(add2, N / 128, 1, 1, 128, 1, 1, 0, NULL, fourth, NULL));
            CHECK(cuCtxSetCurrent(main_ctx));
        }
    }
    if (sync == 3) {
        CUstream other;
        CUgraph graph;
        size_t nodes = 0;
        CHECK(cuStreamCreate(&other, 0));
        CHECK(cuStreamBeginCapture_v2(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
        CHECK(cuLaunchKernel(add, N / 128, 1, 1, 128, 1, 1, 0, stream, first, NULL));
        CHECK(cuLaunchKernel(add, N / 128, 1, 1, 128, 1, 1, 0, other, first, NULL));
        CHECK(cuLaunchKernel(square, N / 128, 1, 1, 128, 1, 1, 0, stream, second, NULL));
        CHECK(cuLaunchKernel(add, N / 128, 1, 1, 128, 1, 1, 0, stream, third, NULL));
        CUresult end = cuStreamEndCapture(stream, &graph);
        if (end != CUDA_SUCCESS) {
            printf("capture invalidated (cuStreamEndCapture -> %d)\n", (int)end);
            return 3;
        }
        CHECK(cuGraphGetNodes(graph, NULL, &nodes));
        printf("graph nodes %zu\n", nodes);
        CHECK(cuGraphInstantiateWithFlags(&exec, graph, 0));
        CHECK(cuGraphLaunch(exec, stream));
        CHECK(cuStreamSynchronize(other));
    }
    if (sync == 6)
        pthread_join(syncer, NULL);
    if (sync == 4) {
        CHECK(cuStreamDestroy_v2(stream));
        stream = NULL;
    }
    if (stream)
        CHECK(cuStreamSynchronize(stream));
    CHECK(cuMemcpyDtoH_v2(z, dz, sizeof z));
    if (sync == 13 && reused)
        printf("w reused\n");
    double sum = 0;
    for (int j = 0; j < N; j++)
        sum += isfinite(z[j]) ? z[j] : 0;
    printf("sum %.6g\n", sum);
    tally_launch(&t, "vecAdd", (sync == 5 ? 3ul : 2ul) * (unsigned long)steps);
    tally_launch(&t, "square", (unsigned long)steps);
    tally_print(&t);
    return 0;
}
