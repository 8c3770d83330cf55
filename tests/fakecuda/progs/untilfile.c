/*
 * A node of a job that runs on while another fails: vecAdd launched (and synchronised)
 * until FILE exists, at most LIMIT seconds; READY is created after the first launch, so
 * that a test knows the program runs. Usage: untilfile READY FILE [LIMIT]   (default 120)
 * Prints `launches vecAdd=N` and exits 0 once FILE is there, 1 when LIMIT passed first.
 */
#define _DEFAULT_SOURCE
#include "progcommon.h"

#include <time.h>
#include <unistd.h>

#define N 256

int main(int argc, char **argv)
{
    if (argc < 3 || argc > 4)
        FAIL("usage: untilfile READY FILE [LIMIT]");
    int limit = argc == 4 ? atoi(argv[3]) : 120;
    CUfunction add;
    CUmodule mod = prog_start();
    CHECK(cuModuleGetFunction(&add, mod, "_Z6vecAddPKfS0_Pfi"));
    CUdeviceptr a, b, c;
    CHECK(cuMemAlloc_v2(&a, N * sizeof(float)));
    CHECK(cuMemAlloc_v2(&b, N * sizeof(float)));
    CHECK(cuMemAlloc_v2(&c, N * sizeof(float)));
    int n = N;
    void *args[] = {&a, &b, &c, &n};
    time_t end = time(NULL) + limit;
    long launches = 0;
    do {
        CHECK(cuLaunchKernel(add, 1, 1, 1, N, 1, 1, 0, NULL, args, NULL));
        CHECK(cuCtxSynchronize());
        if (++launches == 1) {
            FILE *ready = fopen(argv[1], "w");
            if (!ready)
                FAIL("cannot create %s", argv[1]);
            fclose(ready);
        }
        if (access(argv[2], F_OK) == 0) {
            printf("launches vecAdd=%ld\n", launches);
            return 0;
        }
        usleep(2000);
    } while (time(NULL) < end);
    FAIL("%s did not appear in %d s", argv[2], limit);
}
