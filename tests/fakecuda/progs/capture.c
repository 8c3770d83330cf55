/*
 * Stream capture: begin a capture on a stream, launch three kernels (and
 * optionally an async copy), end it, instantiate the graph and launch it ten
 * times. The result must equal ten applications of the captured work.
 * Exits 3 with a message if the capture was invalidated.
 *
 * Options, to provoke what a tool inside the process must not do:
 *   --mode global|thread_local|relaxed   capture mode (default global)
 *   --copy            also capture an async host-to-device copy
 *   --alloc           call cuMemAlloc on this thread during the capture
 *   --alloc-thread    call cuMemAlloc from another thread during the capture
 *   --relaxed-thread  as --alloc-thread, that thread in RELAXED mode
 *   --sync-thread     call cuCtxSynchronize from another thread
 *   --legacy-query    ask cuStreamIsCapturing about the legacy stream
 */
#include "progcommon.h"

#include <pthread.h>

#define N 256
#define REPLAYS 10

struct options {
    CUstreamCaptureMode mode;
    bool copy, alloc, alloc_thread, relaxed_thread, sync_thread, legacy_query;
};

static CUcontext ctx;
static struct tally t;

static void *interfere(void *arg)
{
    const struct options *o = arg;
    CHECK(cuCtxSetCurrent(ctx));
    if (o->relaxed_thread) {
        CUstreamCaptureMode m = CU_STREAM_CAPTURE_MODE_RELAXED;
        CHECK(cuThreadExchangeStreamCaptureMode(&m));
    }
    CUresult r;
    if (o->sync_thread) {
        r = cuCtxSynchronize();
        printf("other thread: cuCtxSynchronize -> %d\n", (int)r);
    } else {
        CUdeviceptr p = 0;
        r = cuMemAlloc_v2(&p, 4096);
        printf("other thread: cuMemAlloc_v2 -> %d\n", (int)r);
        if (r == CUDA_SUCCESS) {
            CHECK(cuMemFree_v2(p));
            tally_alloc(&t, 4096);
        }
    }
    return NULL;
}

static struct options parse(int argc, char **argv)
{
    struct options o = {.mode = CU_STREAM_CAPTURE_MODE_GLOBAL};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--mode") == 0 && i + 1 < argc) {
            const char *m = argv[++i];
            if (strcmp(m, "global") == 0)
                o.mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
            else if (strcmp(m, "thread_local") == 0)
                o.mode = CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
            else if (strcmp(m, "relaxed") == 0)
                o.mode = CU_STREAM_CAPTURE_MODE_RELAXED;
            else
                FAIL("unknown mode %s", m);
        } else if (strcmp(a, "--copy") == 0) {
            o.copy = true;
        } else if (strcmp(a, "--alloc") == 0) {
            o.alloc = true;
        } else if (strcmp(a, "--alloc-thread") == 0) {
            o.alloc_thread = true;
        } else if (strcmp(a, "--relaxed-thread") == 0) {
            o.alloc_thread = o.relaxed_thread = true;
        } else if (strcmp(a, "--sync-thread") == 0) {
            o.alloc_thread = o.sync_thread = true;
        } else if (strcmp(a, "--legacy-query") == 0) {
            o.legacy_query = true;
        } else {
            FAIL("unknown option %s", a);
        }
    }
    return o;
}

int main(int argc, char **argv)
{
    struct options o = parse(argc, argv);
    CUmodule mod;
    CUfunction vec_add, scale;
    CUstream stream;
    CHECK(cuInit(0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
    CHECK(cuCtxSetCurrent(ctx));
    CHECK(cuModuleLoadData(&mod, prog_image));
    CHECK(cuModuleGetFunction(&vec_add, mod, "_Z6vecAddPKfS0_Pfi"));
    CHECK(cuModuleGetFunction(&scale, mod, "scale"));
    /* A blocking stream, as the legacy stream must wait for it. */
    CHECK(cuStreamCreate(&stream, 0));

    static float x[N], y[N], z_host[N], out[N], z_out[N];
    for (int i = 0; i < N; i++) {
        x[i] = (float)i;
        y[i] = (float)(2 * (i % 7));
        z_host[i] = (float)(1000 + i);
    }
    CUdeviceptr dx, dy, dz;
    CHECK(cuMemAlloc_v2(&dx, sizeof x));
    CHECK(cuMemAlloc_v2(&dy, sizeof y));
    CHECK(cuMemAlloc_v2(&dz, sizeof z_host));
    for (int i = 0; i < 3; i++)
        tally_alloc(&t, sizeof x);
    CHECK(cuMemcpyHtoD_v2(dx, x, sizeof x));
    CHECK(cuMemcpyHtoD_v2(dy, y, sizeof y));
    CHECK(cuMemsetD8_v2(dz, 0, sizeof z_host));

    CHECK(cuStreamBeginCapture_v2(stream, o.mode));
    CUstreamCaptureStatus status;
    CHECK(cuStreamIsCapturing(stream, &status));
    printf("capturing: status %d\n", (int)status);
    int n = N;
    float two = 2.0f, half = 0.5f;
    void *s1[] = {&dx, &two, &n};
    void *v1[] = {&dx, &dy, &dx, &n};
    void *s2[] = {&dx, &half, &n};
    /* x = (2x + y) / 2 = x + y/2 per replay */
    CHECK(cuLaunchKernel(scale, N / 64, 1, 1, 64, 1, 1, 0, stream, s1, NULL));
    CHECK(cuLaunchKernel(vec_add, N / 64, 1, 1, 64, 1, 1, 0, stream, v1, NULL));
    CHECK(cuLaunchKernel(scale, N / 64, 1, 1, 64, 1, 1, 0, stream, s2, NULL));
    tally_launch(&t, "scale", 2);
    tally_launch(&t, "vecAdd", 1);
    if (o.copy)
        CHECK(cuMemcpyHtoDAsync_v2(dz, z_host, sizeof z_host, stream));
    if (o.legacy_query) {
        CUresult r = cuStreamIsCapturing(NULL, &status);
        printf("legacy stream query -> %d\n", (int)r);
    }
    if (o.alloc) {
        CUdeviceptr p = 0;
        CUresult r = cuMemAlloc_v2(&p, 4096);
        printf("this thread: cuMemAlloc_v2 -> %d\n", (int)r);
        if (r == CUDA_SUCCESS) {
            CHECK(cuMemFree_v2(p));
            tally_alloc(&t, 4096);
        }
    }
    if (o.alloc_thread) {
        pthread_t id;
        if (pthread_create(&id, NULL, interfere, &o) != 0)
            FAIL("pthread_create failed");
        pthread_join(id, NULL);
    }
    /* Nothing has run yet: captured work is only recorded. */
    CUgraph graph = NULL;
    CUresult end = cuStreamEndCapture(stream, &graph);
    if (end == FC_ERROR_STREAM_CAPTURE_INVALIDATED) {
        printf("capture invalidated (cuStreamEndCapture -> %d)\n", (int)end);
        tally_print(&t);
        fprintf(stderr, "capture was invalidated\n");
        return 3;
    }
    CHECK(end);
    CHECK(cuMemcpyDtoH_v2(out, dx, sizeof out));
    for (int i = 0; i < N; i++)
        if (out[i] != x[i])
            FAIL("captured work ran during the capture (x[%d] = %g)", i, out[i]);

    CUgraphExec exec;
    CHECK(cuGraphInstantiateWithFlags(&exec, graph, 0));
    CHECK(cuGraphDestroy(graph));
    for (int r = 0; r < REPLAYS; r++)
        CHECK(cuGraphLaunch(exec, stream));
    tally_launch(&t, "graph", REPLAYS);
    CHECK(cuStreamSynchronize(stream));
    CHECK(cuMemcpyDtoH_v2(out, dx, sizeof out));
    CHECK(cuMemcpyDtoH_v2(z_out, dz, sizeof z_out));
    for (int i = 0; i < N; i++) {
        float want = x[i] + (float)REPLAYS * y[i] / 2.0f;
        if (out[i] != want)
            FAIL("x[%d] = %g after %d replays, expected %g", i, out[i], REPLAYS, want);
        if (z_out[i] != (o.copy ? z_host[i] : 0.0f))
            FAIL("z[%d] = %g: the captured copy %s", i, z_out[i],
                 o.copy ? "did not replay" : "ran without being captured");
    }
    printf("verified %d graph replays%s\n", REPLAYS, o.copy ? " with a captured copy" : "");
    CHECK(cuGraphExecDestroy(exec));
    CHECK(cuMemFree_v2(dx));
    CHECK(cuMemFree_v2(dy));
    CHECK(cuMemFree_v2(dz));
    CHECK(cuStreamDestroy_v2(stream));
    tally_print(&t);
    return 0;
}
