/*
 * Many live allocations, freed in a scrambled order and made again, then one
 * launch of vecAdd on three of them: a tool's allocation table must resolve
 * each pointer to exactly its allocation however large the table has grown.
 * Usage: allocs [N]   (default 20000)
 * Prints the sizes of the three buffers vecAdd gets and `launches vecAdd=1`.
 */
#include "progcommon.h"

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 20000;
    if (n < 16)
        FAIL("usage: %s [N >= 16]", argv[0]);
    struct tally t = {0};
    CUfunction vec_add;
    CUmodule mod = prog_start();
    CHECK(cuModuleGetFunction(&vec_add, mod, "_Z6vecAddPKfS0_Pfi"));
    CUdeviceptr *p = calloc((size_t)n, sizeof *p);
    size_t *size = calloc((size_t)n, sizeof *size);
    for (int i = 0; i < n; i++) {
        size[i] = 64 + (size_t)(i % 7) * 32;
        CHECK(cuMemAlloc_v2(&p[i], size[i]));
    }
    /* Free every third one, in a scrambled order, and make them again, larger. */
    for (int k = 0; k < n; k++) {
        int i = (int)(((long long)k * 7919) % n);
        if (i % 3 == 0) {
            CHECK(cuMemFree_v2(p[i]));
            size[i] = 256 + (size_t)(i % 5) * 64;
            CHECK(cuMemAlloc_v2(&p[i], size[i]));
        }
    }
    int a = 1, b = 3 * (n / 6), c = n - 2; /* an old one, a remade one, a late one */
    int len = 16;
    /* c = a + b on the first 16 floats: all three hold at least 64 bytes. */
    void *args[] = {&p[a], &p[b], &p[c], &len};
    CHECK(cuLaunchKernel(vec_add, 1, 1, 1, 16, 1, 1, 0, NULL, args, NULL));
    tally_launch(&t, "vecAdd", 1);
    CHECK(cuCtxSynchronize());
    printf("sizes %zu %zu %zu\n", size[a], size[b], size[c]);
    tally_print(&t);
    for (int i = 0; i < n; i++)
        CHECK(cuMemFree_v2(p[i]));
    free(p);
    free(size);
    return 0;
}
