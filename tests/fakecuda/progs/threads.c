/*
 * Eight threads, each with its own stream and buffers, each launching
 * vecAdd N times (c += b) on its stream: launches from many threads at once.
 * Usage: threads [N [sig SIGNAL | turns K | shared]]
 *   sig: once every launch is made and checked, die by SIGNAL (no exit handlers run).
 *   shared: every thread launches on the legacy default stream, one stream for all.
 *   turns: the threads set up, then launch in turns, K launches at a time each
 *   (one lock held over the K), then check: while one thread launches, no other
 *   is inside a driver call.
 */
#include "progcommon.h"

#include <pthread.h>
#include <signal.h>

#define THREADS 8
#define LEN 4096

/* With `turns`: every thread set up (and every one done launching) before any goes on. */
static pthread_barrier_t ready, launched;
static pthread_mutex_t turn = PTHREAD_MUTEX_INITIALIZER;

struct worker {
    int index;
    int repeats;
    int turns; /* launches per turn, or 0: launch at will */
    bool shared; /* on the legacy default stream, as every thread */
    CUcontext ctx;
    CUfunction vec_add;
    int failed;
};

static void *work(void *arg)
{
    struct worker *w = arg;
    static _Thread_local float a[LEN], b[LEN], c[LEN];
    CUstream stream = NULL;
    CUdeviceptr da, db, dc;
    CHECK(cuCtxSetCurrent(w->ctx));
    if (!w->shared)
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
    if (w->turns) {
        CHECK(cuStreamSynchronize(stream));
        pthread_barrier_wait(&ready);
    }
    for (int r = 0; r < w->repeats; r++) {
        if (w->turns && r % w->turns == 0)
            pthread_mutex_lock(&turn);
        CHECK(cuLaunchKernel(w->vec_add, LEN / 256, 1, 1, 256, 1, 1, 0, stream, args, NULL));
        if (w->turns && (r % w->turns == w->turns - 1 || r == w->repeats - 1))
            pthread_mutex_unlock(&turn);
    }
    if (w->turns)
        pthread_barrier_wait(&launched);
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
    if (!w->shared)
        CHECK(cuStreamDestroy_v2(stream));
    return NULL;
}

int main(int argc, char **argv)
{
    int repeats = argc > 1 ? atoi(argv[1]) : 100;
    bool by_signal = argc == 4 && strcmp(argv[2], "sig") == 0;
    int turns = argc == 4 && strcmp(argv[2], "turns") == 0 ? atoi(argv[3]) : 0;
    bool shared = argc == 3 && strcmp(argv[2], "shared") == 0;
    if (repeats <= 0 || (argc > 2 && !by_signal && turns <= 0 && !shared))
        FAIL("usage: %s [N > 0 [sig SIGNAL | turns K > 0 | shared]]", argv[0]);
    if (turns) {
        pthread_barrier_init(&ready, NULL, THREADS);
        pthread_barrier_init(&launched, NULL, THREADS);
    }
    struct tally t = {0};
    CUcontext ctx;
    CUfunction vec_add;
    CUmodule mod = prog_start();
    CHECK(cuCtxGetCurrent(&ctx)); /* the primary context, for the workers */
    CHECK(cuModuleGetFunction(&vec_add, mod, "_Z6vecAddPKfS0_Pfi"));
    struct worker workers[THREADS];
    pthread_t ids[THREADS];
    for (int i = 0; i < THREADS; i++) {
        workers[i] = (struct worker){i, repeats, turns, shared, ctx, vec_add, 0};
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
