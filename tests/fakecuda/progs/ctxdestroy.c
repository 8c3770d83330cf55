/*
 * A context the program makes, a kernel launched in it STEPS times, and the context
 * destroyed right after the last launch, with no other call between: square(x, y) over N
 * floats, then cuCtxDestroy_v2.
 * Usage: ctxdestroy STEPS
 * Prints `destroyed after STEPS launches`.
 */
#include "progcommon.h"

#define N 1024

int main(int argc, char **argv)
{
    if (argc < 2)
        FAIL("usage: ctxdestroy STEPS");
    int steps = atoi(argv[1]);
    CUcontext ctx;
    CUmodule mod;
    CUfunction square;
    CHECK(cuInit(0));
    CHECK(cuCtxCreate_v2(&ctx, 0, 0));
    CHECK(cuModuleLoadData(&mod, prog_image));
    CHECK(cuModuleGetFunction(&square, mod, "_Z6squarePKfPfi"));
    static float x[N];
    prog_floats(x, N, 1.0f, 1.0f);
    CUdeviceptr dx, dy;
    CHECK(cuMemAlloc_v2(&dx, sizeof x));
    CHECK(cuMemAlloc_v2(&dy, sizeof x));
    CHECK(cuMemcpyHtoD_v2(dx, x, sizeof x));
    int n = N;
    void *args[] = {&dx, &dy, &n};
    for (int k = 0; k < steps; k++)
        CHECK(cuLaunchKernel(square, N / 128, 1, 1, 128, 1, 1, 0, NULL, args, NULL));
    CHECK(cuCtxDestroy_v2(ctx));
    printf("destroyed after %d launches\n", steps);
    return 0;
}
