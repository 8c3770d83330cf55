/*
 * A program that launches some of its kernels with programmatic stream
 * serialization (Hopper's programmatic dependent launch), as CUTLASS-based
 * libraries do: each of STEPS steps runs
 *   vecAdd(w, act, tmp, N)   launched plainly (cuLaunchKernelEx, no attribute)
 *   square(tmp, act, N)      launched with the attribute (where the device has it)
 * Usage: programmatic STEPS
 * Prints `sum S` (act's sum at the end), then `launches vecAdd=STEPS square=STEPS`.
 */
#include "progcommon.h"

#define N 1024

static CUresult launch(CUfunction f, void **args, bool programmatic)
{
    CUlaunchAttribute attr;
    memset(&attr, 0, sizeof attr);
    attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    const int allowed = 1;
    memcpy(attr.value, &allowed, sizeof allowed);
    CUlaunchConfig config = {.gridDimX = N / 128, .gridDimY = 1, .gridDimZ = 1,
                             .blockDimX = 128, .blockDimY = 1, .blockDimZ = 1,
                             .sharedMemBytes = 0, .hStream = NULL,
                             .attrs = programmatic ? &attr : NULL,
                             .numAttrs = programmatic ? 1 : 0};
    return cuLaunchKernelEx(&config, f, args, NULL);
}

int main(int argc, char **argv)
{
    if (argc != 2)
        FAIL("usage: programmatic STEPS");
    int steps = atoi(argv[1]);
    if (steps < 1)
        FAIL("STEPS at least 1");
    struct tally t = {0};
    CUfunction add, square;
    CUmodule mod = prog_start();
    CHECK(cuModuleGetFunction(&add, mod, "_Z6vecAddPKfS0_Pfi"));
    CHECK(cuModuleGetFunction(&square, mod, "_Z6squarePKfPfi"));
    int major = 0;
    CHECK(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0));
    static float host[N];
    prog_floats(host, N, -0.5f, 0.25f / N);
    CUdeviceptr w, act, tmp;
    CHECK(cuMemAlloc_v2(&w, sizeof host));
    CHECK(cuMemAlloc_v2(&act, sizeof host));
    CHECK(cuMemAlloc_v2(&tmp, sizeof host));
    tally_alloc(&t, 3 * sizeof host);
    CHECK(cuMemcpyHtoD_v2(w, host, sizeof host));
    CHECK(cuMemsetD8_v2(act, 0, sizeof host));
    int n = N;
    void *add_args[] = {&w, &act, &tmp, &n};
    void *square_args[] = {&tmp, &act, &n};
    for (int k = 0; k < steps; k++) {
        CHECK(launch(add, add_args, false));
        CHECK(launch(square, square_args, major >= 9));
    }
    prog_print_sum(act, host, N);
    tally_launch(&t, "vecAdd", (unsigned long)steps);
    tally_launch(&t, "square", (unsigned long)steps);
    tally_print(&t);
    return 0;
}
