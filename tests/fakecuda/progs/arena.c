/*
 * Three buffers in one allocation, as a caching allocator hands them out, shown to
 * the debugger one launch at a time: each step runs
 *   square(a, b, N)     b = a * a
 *   square(b, c, N)     c = b * b
 * where a, b and c are N floats each, one after the other in one allocation. The
 * first launch shows where a and b begin, not c: until the second, b seems to run
 * to the allocation's end, over c.
 * Usage: arena STEPS
 * Prints `sum S` (c's sum at the end), then `launches square=2*STEPS`.
 */
#include "progcommon.h"

#define N 1024

int main(int argc, char **argv)
{
    if (argc != 2)
        FAIL("usage: arena STEPS");
    int steps = atoi(argv[1]);
    if (steps < 1)
        FAIL("STEPS at least 1");
    struct tally t = {0};
    CUfunction square;
    CUmodule mod = prog_start();
    CHECK(cuModuleGetFunction(&square, mod, "_Z6squarePKfPfi"));
    static float host[N];
    prog_floats(host, N, 0.5f, 1.0f / (2 * N));
    CUdeviceptr base;
    CHECK(cuMemAlloc_v2(&base, 3 * sizeof host));
    tally_alloc(&t, 3 * sizeof host);
    CUdeviceptr a = base, b = base + sizeof host, c = base + 2 * sizeof host;
    CHECK(cuMemcpyHtoD_v2(a, host, sizeof host));
    CHECK(cuMemsetD8_v2(b, 0, 2 * sizeof host));
    int n = N;
    void *first[] = {&a, &b, &n}, *second[] = {&b, &c, &n};
    for (int k = 0; k < steps; k++) {
        CHECK(cuLaunchKernel(square, N / 128, 1, 1, 128, 1, 1, 0, NULL, first, NULL));
        CHECK(cuLaunchKernel(square, N / 128, 1, 1, 128, 1, 1, 0, NULL, second, NULL));
    }
    prog_print_sum(c, host, N);
    tally_launch(&t, "square", (unsigned long)(2 * steps));
    tally_print(&t);
    return 0;
}
