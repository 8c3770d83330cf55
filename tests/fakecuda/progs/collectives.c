/*
 * One rank of a data-parallel job in miniature: STEPS steps of COLLS layers,
 * each layer a vecAdd(a, b, c, N) inside the module scope "layers.L" (forward),
 * followed by NCCL's all-reduce kernel (ncclDevKernel_AllReduce_Sum_f32_RING_LL).
 * The step and the scopes are told to cudump's shim through its exported calls
 * (cudump_scope_step, cudump_scope_push/pop), where it is loaded.
 * With NAN_STEP and NAN_LAYER (from 0), that layer's vecAdd of that step
 * overflows: a[INDEX] = b[INDEX] = 3e38, so c[INDEX] = +inf (vecAdd produces it).
 * COLLECTIVES_HANG=K in the environment: the rank launches no all-reduce after
 * its K-th (as a rank stuck in a collective would), its vecAdds going on.
 * COLLECTIVES_PLAIN=1: no step and no scope is told (a program without them).
 * COLLECTIVES_HOST_NAN=1: the planted layer's a[INDEX] is a NaN copied from the
 * host instead (the copy produces it; vecAdd carries it on).
 * COLLECTIVES_GRAPH=1: as a program under CUDA graphs: one all-reduce of its own,
 * then a step's COLLS layers (vecAdd and all-reduce each) captured once on a
 * stream into a graph, replayed STEPS times (the step told before each replay),
 * then one vecAdd of its own. With NAN_STEP (NAN_LAYER any value), the inputs
 * of replay NAN_STEP overflow (its node 0, layer 0's vecAdd, produces the Inf),
 * and so do the last vecAdd's.
 * Usage: collectives STEPS COLLS [NAN_STEP NAN_LAYER]
 * Prints `launches vecAdd=STEPS*COLLS allreduce=A` (with COLLECTIVES_GRAPH, the
 * kernel nodes' runs and the launches of their own: vecAdd=STEPS*COLLS+1
 * allreduce=STEPS*COLLS+1).
 */
#define _GNU_SOURCE
#include "progcommon.h"

#include <dlfcn.h>
#include <math.h>

#define N 1024
#define INDEX 5
#define SCOPE_FORWARD 2

typedef void (*step_fn)(unsigned);
typedef int (*push_fn)(unsigned, const char *);
typedef void (*pop_fn)(void);

int main(int argc, char **argv)
{
    if (argc != 3 && argc != 5)
        FAIL("usage: collectives STEPS COLLS [NAN_STEP NAN_LAYER]");
    int steps = atoi(argv[1]), colls = atoi(argv[2]);
    int nan_step = argc == 5 ? atoi(argv[3]) : -1, nan_layer = argc == 5 ? atoi(argv[4]) : -1;
    const char *hang_env = getenv("COLLECTIVES_HANG");
    long hang = hang_env ? atol(hang_env) : -1;
    int plain = getenv("COLLECTIVES_PLAIN") != NULL;
    int host_nan = getenv("COLLECTIVES_HOST_NAN") != NULL;
    step_fn set_step = plain ? NULL : (step_fn)dlsym(RTLD_DEFAULT, "cudump_scope_step");
    push_fn push = plain ? NULL : (push_fn)dlsym(RTLD_DEFAULT, "cudump_scope_push");
    pop_fn pop = (pop_fn)dlsym(RTLD_DEFAULT, "cudump_scope_pop");
    CUfunction add, allreduce;
    CUmodule mod = prog_start();
    CHECK(cuModuleGetFunction(&add, mod, "_Z6vecAddPKfS0_Pfi"));
    CHECK(cuModuleGetFunction(
        &allreduce, mod,
        "_Z39ncclDevKernel_AllReduce_Sum_f32_RING_LL24ncclDevKernelArgsStorageILm4096EE"));
    static float a[N], b[N];
    static unsigned char storage[4096];
    prog_floats(a, N, 0.0f, 1.0f);
    prog_floats(b, N, 1.0f, 0.0f);
    CUdeviceptr da, db, dc;
    CHECK(cuMemAlloc_v2(&da, sizeof a));
    CHECK(cuMemAlloc_v2(&db, sizeof b));
    CHECK(cuMemAlloc_v2(&dc, sizeof a));
    CHECK(cuMemcpyHtoD_v2(da, a, sizeof a));
    CHECK(cuMemcpyHtoD_v2(db, b, sizeof b));
    int n = N;
    void *args[] = {&da, &db, &dc, &n};
    void *coll_args[] = {storage};
    long launched = 0;
    char name[32];
    if (getenv("COLLECTIVES_GRAPH")) {
        CUstream stream;
        CHECK(cuStreamCreate(&stream, 0));
        CHECK(cuLaunchKernel(allreduce, 1, 1, 1, 64, 1, 1, 0, NULL, coll_args, NULL));
        CHECK(cuStreamBeginCapture_v2(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
        for (int l = 0; l < colls; l++) {
            snprintf(name, sizeof name, "layers.%d", l);
            int pushed = push && push(SCOPE_FORWARD, name) == 0;
            CHECK(cuLaunchKernel(add, N / 256, 1, 1, 256, 1, 1, 0, stream, args, NULL));
            if (pushed)
                pop();
            CHECK(cuLaunchKernel(allreduce, 1, 1, 1, 64, 1, 1, 0, stream, coll_args, NULL));
        }
        CUgraph graph;
        CUgraphExec exec;
        CHECK(cuStreamEndCapture(stream, &graph));
        CHECK(cuGraphInstantiateWithFlags(&exec, graph, 0));
        float big = 3e38f;
        for (int k = 0; k < steps; k++) {
            if (set_step)
                set_step((unsigned)k + 1);
            if (k == nan_step) {
                CHECK(cuMemcpyHtoD_v2(da + INDEX * sizeof(float), &big, sizeof big));
                CHECK(cuMemcpyHtoD_v2(db + INDEX * sizeof(float), &big, sizeof big));
            }
            CHECK(cuGraphLaunch(exec, stream));
            CHECK(cuStreamSynchronize(stream));
            if (k == nan_step) {
                CHECK(cuMemcpyHtoD_v2(da, a, sizeof a));
                CHECK(cuMemcpyHtoD_v2(db, b, sizeof b));
            }
        }
        if (argc == 5) {
            CHECK(cuMemcpyHtoD_v2(da + INDEX * sizeof(float), &big, sizeof big));
            CHECK(cuMemcpyHtoD_v2(db + INDEX * sizeof(float), &big, sizeof big));
        }
        CHECK(cuLaunchKernel(add, N / 256, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
        CHECK(cuCtxSynchronize());
        printf("launches vecAdd=%d allreduce=%d\n", steps * colls + 1, steps * colls + 1);
        return 0;
    }
    for (int k = 0; k < steps; k++) {
        if (set_step)
            set_step((unsigned)k + 1);
        for (int l = 0; l < colls; l++) {
            int planted = k == nan_step && l == nan_layer;
            if (planted && host_nan) {
                float nan = NAN;
                CHECK(cuMemcpyHtoD_v2(da + INDEX * sizeof(float), &nan, sizeof nan));
            } else if (planted) {
                float big = 3e38f;
                CHECK(cuMemcpyHtoD_v2(da + INDEX * sizeof(float), &big, sizeof big));
                CHECK(cuMemcpyHtoD_v2(db + INDEX * sizeof(float), &big, sizeof big));
            }
            snprintf(name, sizeof name, "layers.%d", l);
            int pushed = push && push(SCOPE_FORWARD, name) == 0;
            CHECK(cuLaunchKernel(add, N / 256, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
            if (pushed)
                pop();
            if (planted) {
                CHECK(cuCtxSynchronize());
                CHECK(cuMemcpyHtoD_v2(da, a, sizeof a));
                CHECK(cuMemcpyHtoD_v2(db, b, sizeof b));
            }
            if (hang < 0 || launched < hang) {
                CHECK(cuLaunchKernel(allreduce, 1, 1, 1, 64, 1, 1, 0, NULL, coll_args, NULL));
                launched++;
            }
        }
    }
    CHECK(cuCtxSynchronize());
    printf("launches vecAdd=%d allreduce=%ld\n", steps * colls, launched);
    return 0;
}
