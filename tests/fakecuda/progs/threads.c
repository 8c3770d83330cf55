/*
 * Eight threads, each with its own stream and buffers, each launching
 * vecAdd N times (c += b) on its stream: launches from many threads at once.
 * Usage: threads [N [sig SIGNAL]]
 *   sig: once every launch is made and checked, die by SIGNAL (no exit handlers run).
 */
#include "progcommon.h"

#include <pthread.h>
#include <signal.h>

#define THREADS 8
#define LEN 4096

struct worker {
    int index;
    int repeats;
    CUcontext ctx;
    CUfunction vec_add;
    int failed;
};

static void *work(void *arg)
{
    struct worker *w = arg;
    static _Thread_local float a[LEN], b[LEN], c[LEN];
    CUstream stream;
    CUdeviceptr da, db, dc;
    CHECK(cuCtxSetCurrent(w->ctx));
    CHECK(cuStreamCreate(&stream, FC_STREAM_NON_BLOCKING));
    for (int i = 0; i < LEN; i++) {
        a[i] = (float)(i + w->index);
        b[i] = (float)((i + w->index) % 5);
    }
    CHECK(cuMemAlloc_v2(&da, sizeof a));
    CHECK(cuMemAlloc_v2(&db, sizeof b));
    CHECK(cuMemAlloc_v2(&dc, sizeof c));
    CHECK(cuMemcpyHtoDAsync_v2(da, a, sizeof a, stream));
    CHECK(cuMemcpyHtoDAsync_v2(db, b, sizeof b, stream));
    CHECK(cuMemcpyDtoD_v2(dc, da, sizeof a));
    int n = LEN;
    void *args[] = {&dc, &db, &dc, &n};
    for (int r = 0; r < w->repeats; r++)
        CHECK(cuLaunchKernel(w->vec_add, LEN / 256, 1, 1, 256, 1, 1, 0, stream, args, NULL));
    CHECK(cuMemcpyDtoHAsync_v2(c, dc, sizeof c, stream));
    CHECK(cuStreamSynchronize(stream));
    for (int i = 0; i < LEN; i++) {
        if (c[i] != a[i] + (float)w->repeats * b[i]) {
            fprintf(stderr, "thread %d: c[%d] = %g\n", w->index, i, c[i]);
            w->failed = 1;
            break;
        }
    }
    CHECK(cuMemFree_v2(da));
    CHECK(cuMemFree_v2(db));
    CHECK(cuMemFree_v2(dc));
    CHECK(cuStreamDestroy_v2(stream));
    return NULL;
}

int main(int argc, char **argv)
{
    int repeats = argc > 1 ? atoi(argv[1]) : 100;
    bool by_signal = argc == 4 && strcmp(argv[2], "sig") == 0;
    if (repeats <= 0 || (argc > 2 && !by_signal))
        FAIL("usage: %s [N > 0 [sig SIGNAL]]", argv[0]);
    struct tally t = {0};
    CUcontext ctx;
    CUfunction vec_add;
    CUmodule mod = prog_start();
    CHECK(cuCtxGetCurrent(&ctx)); /* the primary context, for the workers */
    CHECK(cuModuleGetFunction(&vec_add, mod, "_Z6vecAddPKfS0_Pfi"));
    struct worker workers[THREADS];
    pthread_t ids[THREADS];
    for (int i = 0; i < THREADS; i++) {
        workers[i] = (struct worker){i, repeats, ctx, vec_add, 0};
        if (pthread_create(&ids[i], NULL, work, &workers[i]) != 0)
            FAIL("pthread_create failed");
    }
    int failed = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(ids[i], NULL);
        failed |= workers[i].failed;
        tally_launch(&t, "vecAdd", (unsigned long)repeats);
        for (int k = 0; k < 3; k++)
            tally_alloc(&t, LEN * sizeof(float));
    }
    if (failed)
        return 1;
    printf("verified %d threads x %d launches\n", THREADS, repeats);
    tally_print(&t);
    if (by_signal) {
        int value = atoi(argv[3]);
        printf("raising signal %d\n", value);
        fflush(stdout);
        signal(value, SIG_DFL);
        raise(value);
        FAIL("signal %d did not end the process", value);
    }
    return 0;
}
