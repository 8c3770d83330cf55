/*
 * One launch, then an exit with the given status or death by the given
 * signal: how a tool behaves when its target ends abruptly.
 * Usage: exitcode STATUS | exitcode sig SIGNAL | exitcode abort
 *   abort: fill<int> over a 4 KiB buffer (every int 7), cuCtxSynchronize, then
 *   abort(): what a debugger took of a synchronised launch must survive it.
 */
#include "progcommon.h"

#include <signal.h>

int main(int argc, char **argv)
{
    bool by_signal = argc == 3 && strcmp(argv[1], "sig") == 0;
    bool aborts = argc == 2 && strcmp(argv[1], "abort") == 0;
    if (argc != 2 && !by_signal)
        FAIL("usage: %s STATUS | %s sig SIGNAL | %s abort", argv[0], argv[0], argv[0]);
    int value = atoi(argv[by_signal ? 2 : 1]);
    struct tally t = {0};
    CUfunction empty;
    CUmodule mod = prog_start();
    CHECK(cuModuleGetFunction(&empty, mod, "_Z5emptyv"));
    CHECK(cuLaunchKernel(empty, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL));
    tally_launch(&t, "empty", 1);
    if (aborts) {
        CUfunction fill;
        CUdeviceptr buf;
        int value7 = 7, n = 1024;
        CHECK(cuModuleGetFunction(&fill, mod, "_Z4fillIiEvPT_S0_i"));
        CHECK(cuMemAlloc_v2(&buf, n * sizeof(int)));
        void *args[] = {&buf, &value7, &n};
        CHECK(cuLaunchKernel(fill, 8, 1, 1, 128, 1, 1, 0, NULL, args, NULL));
        tally_launch(&t, "fill", 1);
    }
    CHECK(cuCtxSynchronize());
    if (aborts) {
        tally_print(&t);
        printf("aborting\n");
        fflush(stdout);
        abort();
    }
    tally_print(&t);
    if (by_signal) {
        printf("raising signal %d\n", value);
        fflush(stdout);
        signal(value, SIG_DFL);
        raise(value);
        FAIL("signal %d did not end the process", value);
    }
    printf("exiting with %d\n", value);
    fflush(stdout);
    return value;
}
