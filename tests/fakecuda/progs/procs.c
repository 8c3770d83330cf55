/*
 * Two processes that wait for each other, as the ranks of a collective do:
 * each child launches vecAdd N times (c += b) and meets the other at a barrier
 * before every launch, so their launches arrive together, and neither gets
 * past a launch of the other that is held.
 * Usage: procs [N]
 */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#include "progcommon.h"

#include <pthread.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define PROCS 2
#define LEN 1024

static int child(pthread_barrier_t *meet, int index, int repeats)
{
    static float a[LEN], b[LEN], c[LEN];
    CUcontext ctx;
    CUmodule mod;
    CUfunction vec_add;
    CUdeviceptr da, db;
    CHECK(cuInit(0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
    CHECK(cuCtxSetCurrent(ctx));
    CHECK(cuModuleLoadData(&mod, prog_image));
    CHECK(cuModuleGetFunction(&vec_add, mod, "_Z6vecAddPKfS0_Pfi"));
    for (int i = 0; i < LEN; i++) {
        a[i] = (float)(i + index);
        b[i] = (float)((i + index) % 3);
    }
    CHECK(cuMemAlloc_v2(&da, sizeof a));
    CHECK(cuMemAlloc_v2(&db, sizeof b));
    CHECK(cuMemcpyHtoD_v2(da, a, sizeof a));
    CHECK(cuMemcpyHtoD_v2(db, b, sizeof b));
    int n = LEN;
    void *args[] = {&da, &db, &da, &n};
    for (int r = 0; r < repeats; r++) {
        pthread_barrier_wait(meet);
        CHECK(cuLaunchKernel(vec_add, LEN / 256, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
    }
    CHECK(cuMemcpyDtoH_v2(c, da, sizeof c));
    for (int i = 0; i < LEN; i++)
        if (c[i] != a[i] + (float)repeats * b[i]) {
            fprintf(stderr, "process %d: c[%d] = %g\n", index, i, c[i]);
            return 1;
        }
    return 0;
}

int main(int argc, char **argv)
{
    int repeats = argc > 1 ? atoi(argv[1]) : 4;
    if (repeats <= 0)
        FAIL("usage: %s [N > 0]", argv[0]);
    pthread_barrier_t *meet = mmap(NULL, sizeof *meet, PROT_READ | PROT_WRITE,
                                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    pthread_barrierattr_t attr;
    if (meet == MAP_FAILED || pthread_barrierattr_init(&attr) != 0 ||
        pthread_barrierattr_setpshared(&attr, PTHREAD_PROCESS_SHARED) != 0 ||
        pthread_barrier_init(meet, &attr, PROCS) != 0)
        FAIL("cannot make a barrier shared by the processes");
    fflush(stdout);
    pid_t pids[PROCS];
    for (int i = 0; i < PROCS; i++) {
        pids[i] = fork();
        if (pids[i] < 0)
            FAIL("fork failed");
        if (pids[i] == 0)
            _exit(child(meet, i, repeats));
    }
    int failed = 0;
    for (int i = 0; i < PROCS; i++) {
        int status = 0;
        waitpid(pids[i], &status, 0);
        failed |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    }
    if (failed)
        return 1;
    printf("verified %d processes x %d launches\n", PROCS, repeats);
    return 0;
}
