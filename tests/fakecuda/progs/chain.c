/*
 * Two kernels, one after the other, STEPS times: square(x, y) then vecAdd(y, b, z). Before
 * each step listed in OVERFLOW..., x[INDEX] = 1e20, whose square overflows to +inf: square
 * makes the Inf from finite inputs (it produces it), and vecAdd carries it on into z (it
 * propagates it, from its arg 0). The step after puts x[INDEX] back, and both buffers are
 * finite again. A step given as hK instead has the host write into y between the two
 * launches of step K, so that vecAdd carries on what no launch made:
 *   hK  +inf into y[INDEX] with cuMemcpyHtoD_v2;
 *   aK  NaN into y[INDEX] with cuMemcpyHtoDAsync_v2 on the legacy stream;
 *   pK  NaN into y[INDEX] with cuMemcpy2D_v2 (host to device, one row);
 *   mK  NaN (0x7fc00000) into y[INDEX..INDEX+15] with cuMemsetD32Async;
 *   gK  0x7fc0, NaN as float16 and as bfloat16, into the same 64 bytes with cuMemsetD16Async;
 *   fK  1.0f (finite) into the same elements with cuMemsetD32Async.
 * Usage: chain STEPS INDEX [OVERFLOW | {h,a,p,m,g,f}STEP...]
 * Prints `launches square=STEPS vecAdd=STEPS`.
 */
#include "progcommon.h"

#include <math.h>

#define N 1024

int main(int argc, char **argv)
{
    if (argc < 3)
        FAIL("usage: chain STEPS INDEX [OVERFLOW | {h,a,p,m,g,f}STEP...]");
    int steps = atoi(argv[1]), index = atoi(argv[2]);
    if (index < 0 || index > N - 16)
        FAIL("INDEX must be at most %d", N - 16);
    struct tally t = {0};
    CUfunction square, add;
    CUmodule mod = prog_start();
    CHECK(cuModuleGetFunction(&square, mod, "_Z6squarePKfPfi"));
    CHECK(cuModuleGetFunction(&add, mod, "_Z6vecAddPKfS0_Pfi"));
    static float x[N], b[N];
    for (int i = 0; i < N; i++) {
        x[i] = 2.0f;
        b[i] = 1.0f;
    }
    CUdeviceptr dx, db, dy, dz;
    CHECK(cuMemAlloc_v2(&dx, sizeof x));
    CHECK(cuMemAlloc_v2(&db, sizeof b));
    CHECK(cuMemAlloc_v2(&dy, sizeof x));
    CHECK(cuMemAlloc_v2(&dz, sizeof x));
    CHECK(cuMemsetD8_v2(dy, 0, sizeof x));
    CHECK(cuMemsetD8_v2(dz, 0, sizeof x));
    CHECK(cuMemcpyHtoD_v2(db, b, sizeof b));
    tally_alloc(&t, 4 * sizeof x);
    int n = N;
    void *square_args[] = {&dx, &dy, &n};
    void *add_args[] = {&dy, &db, &dz, &n};
    /* Static: an asynchronous copy reads its source when the stream gets to it. */
    static const float inf = INFINITY, nan = NAN;
    CUdeviceptr at = dy + (CUdeviceptr)index * sizeof(float);
    for (int k = 1; k <= steps; k++) {
        bool overflow = false;
        char host = 0;
        for (int p = 3; p < argc; p++) {
            if (strchr("hapmgf", argv[p][0]) && atoi(argv[p] + 1) == k)
                host = argv[p][0];
            else if (argv[p][0] >= '0' && argv[p][0] <= '9')
                overflow = overflow || atoi(argv[p]) == k;
        }
        x[index] = overflow ? 1e20f : 2.0f;
        CHECK(cuMemcpyHtoD_v2(dx, x, sizeof x));
        CHECK(cuLaunchKernel(square, N / 128, 1, 1, 128, 1, 1, 0, NULL, square_args, NULL));
        if (host == 'h')
            CHECK(cuMemcpyHtoD_v2(at, &inf, sizeof inf));
        if (host == 'a')
            CHECK(cuMemcpyHtoDAsync_v2(at, &nan, sizeof nan, NULL));
        if (host == 'p') {
            CUDA_MEMCPY2D row = {.srcMemoryType = CU_MEMORYTYPE_HOST, .srcHost = &nan,
                                 .srcPitch = sizeof nan, .dstMemoryType = CU_MEMORYTYPE_DEVICE,
                                 .dstDevice = dy, .dstXInBytes = (size_t)index * sizeof nan,
                                 .dstPitch = sizeof x, .WidthInBytes = sizeof nan, .Height = 1};
            CHECK(cuMemcpy2D_v2(&row));
        }
        if (host == 'm')
            CHECK(cuMemsetD32Async(at, 0x7fc00000u, 16, NULL));
        if (host == 'g')
            CHECK(cuMemsetD16Async(at, 0x7fc0u, 32, NULL));
        if (host == 'f')
            CHECK(cuMemsetD32Async(at, 0x3f800000u, 16, NULL));
        CHECK(cuLaunchKernel(add, N / 128, 1, 1, 128, 1, 1, 0, NULL, add_args, NULL));
    }
    tally_launch(&t, "square", (unsigned long)steps);
    tally_launch(&t, "vecAdd", (unsigned long)steps);
    tally_print(&t);
    return 0;
}
