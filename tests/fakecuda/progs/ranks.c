/*
 * Two ranks, as torchrun starts them: the parent starts this program twice
 * more (fork and exec) with RANK=0 and RANK=1 (and LOCAL_RANK) in their
 * environment. Each rank launches vecAdd(a, b, c, n) LAUNCHES times; rank 1
 * sets a[INDEX] = +inf and b[INDEX] = -inf before its launch POISON (from 1),
 * so that launch leaves NaN at c[INDEX]; rank 0 never does.
 * a[i] = i + rank, so the ranks' buffers differ. The ranks run one after the
 * other, rank 0 first (RANKS_REVERSE=1: rank 1 first).
 * RANKS_SQUARE=1: rank 0 gets the infinities instead (at its launch POISON), by
 * a device-to-device copy from a buffer the host filled (a write cudump does not
 * follow: nothing it saw left them there), and rank 1 makes one itself: before
 * its launch POISON it sets
 * a[INDEX] = 1e20 (finite) and launches square(a, b), whose 1e20 * 1e20
 * overflows to +inf in b[INDEX] (square produces it), and vecAdd then carries
 * it on into c (it propagates it, from its arg 1). So the run's first NaN/Inf
 * is rank 0's, and its first producer rank 1's.
 * Usage: ranks [LAUNCHES [INDEX [POISON]]]   (default 3 5 2; POISON 0: none)
 * Each rank prints `rank R: launches vecAdd=LAUNCHES` (and ` square=1` where
 * it launched square).
 */
#define _DEFAULT_SOURCE
#include "progcommon.h"

#include <math.h>
#include <sys/wait.h>
#include <unistd.h>

#define PROCS 2
#define N 1024

extern char **environ;

static int rank_main(int rank, int launches, int index, int poison, int square)
{
    CUcontext ctx;
    CUmodule mod;
    CUfunction add, sq;
    CHECK(cuInit(0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
    CHECK(cuCtxSetCurrent(ctx));
    CHECK(cuModuleLoadData(&mod, prog_image));
    CHECK(cuModuleGetFunction(&add, mod, "_Z6vecAddPKfS0_Pfi"));
    CHECK(cuModuleGetFunction(&sq, mod, "_Z6squarePKfPfi"));
    static float a[N], b[N];
    for (int i = 0; i < N; i++) {
        a[i] = (float)(i + rank);
        b[i] = 1.0f;
    }
    CUdeviceptr da, db, dc;
    CHECK(cuMemAlloc_v2(&da, sizeof a));
    CHECK(cuMemAlloc_v2(&db, sizeof b));
    CHECK(cuMemAlloc_v2(&dc, sizeof a));
    CHECK(cuMemsetD8_v2(dc, 0, sizeof a));
    int n = N;
    void *args[] = {&da, &db, &dc, &n};
    void *square_args[] = {&da, &db, &n};
    int squares = 0;
    for (int l = 1; l <= launches; l++) {
        int host = l == poison && rank == (square ? 0 : 1);
        int made = l == poison && square && rank == 1;
        a[index] = host ? INFINITY : made ? 1e20f : (float)(index + rank);
        b[index] = host ? -INFINITY : 1.0f;
        if (host && square) {
            CUdeviceptr dt;
            CHECK(cuMemAlloc_v2(&dt, 2 * sizeof a));
            CHECK(cuMemcpyHtoD_v2(dt, a, sizeof a));
            CHECK(cuMemcpyHtoD_v2(dt + sizeof a, b, sizeof b));
            CHECK(cuMemcpyDtoD_v2(da, dt, sizeof a));
            CHECK(cuMemcpyDtoD_v2(db, dt + sizeof a, sizeof b));
            CHECK(cuMemFree_v2(dt));
        } else {
            CHECK(cuMemcpyHtoD_v2(da, a, sizeof a));
            CHECK(cuMemcpyHtoD_v2(db, b, sizeof b));
        }
        if (made) {
            CHECK(cuLaunchKernel(sq, N / 256, 1, 1, 256, 1, 1, 0, NULL, square_args, NULL));
            squares++;
        }
        CHECK(cuLaunchKernel(add, N / 256, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
        CHECK(cuCtxSynchronize());
    }
    printf("rank %d: launches vecAdd=%d", rank, launches);
    if (squares)
        printf(" square=%d", squares);
    printf("\n");
    return 0;
}

int main(int argc, char **argv)
{
    int launches = argc > 1 ? atoi(argv[1]) : 3;
    int index = argc > 2 ? atoi(argv[2]) : 5;
    int poison = argc > 3 ? atoi(argv[3]) : 2;
    if (launches <= 0 || index < 0 || index >= N)
        FAIL("usage: ranks [LAUNCHES > 0 [INDEX < %d [POISON]]]", N);
    const char *rank = getenv("RANK");
    const char *square = getenv("RANKS_SQUARE");
    if (rank && *rank)
        return rank_main(atoi(rank), launches, index, poison, square && *square == '1');
    int count = 0;
    while (environ[count])
        count++;
    fflush(stdout);
    pid_t pids[PROCS];
    const char *reverse = getenv("RANKS_REVERSE");
    for (int i = 0; i < PROCS; i++) {
        int r = reverse && *reverse == '1' ? PROCS - 1 - i : i;
        pids[r] = fork();
        if (pids[r] < 0)
            FAIL("fork failed");
        if (pids[r] == 0) {
            char **env = calloc((size_t)count + 3, sizeof *env);
            static char rank_var[32], local_var[32];
            if (!env)
                _exit(1);
            memcpy(env, environ, (size_t)count * sizeof *env);
            snprintf(rank_var, sizeof rank_var, "RANK=%d", r);
            snprintf(local_var, sizeof local_var, "LOCAL_RANK=%d", r);
            env[count] = rank_var;
            env[count + 1] = local_var;
            execve("/proc/self/exe", argv, env);
            _exit(127);
        }
        /* One rank at a time, so that the order of the processes is known. */
        int status = 0;
        waitpid(pids[r], &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            return 1;
    }
    return 0;
}
