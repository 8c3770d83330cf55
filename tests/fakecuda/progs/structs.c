/*
 * add3(std::array<float*, 3ul>, int): the buffers a kernel touches passed inside a by-value
 * struct, all three pieces of one allocation (as a caching allocator hands them out).
 * Usage: structs
 * Prints the three pieces' offsets in floats and `launches add3=1`.
 *
 * Usage: structs wide ROUNDS
 * sum24(std::array<float*, 24ul>, int) ROUNDS times over the same 24 allocations of N floats
 * (buffer j holds j + i, buffer 0 their sum); prints `launches sum24=ROUNDS`.
 *
 * Usage: structs null ROUNDS
 * vecAdd(a, NULL, c, 0) ROUNDS times: a typed pointer left null (an optional input), on
 * no elements; prints `launches vecAdd=ROUNDS`.
 *
 * Usage: structs host ROUNDS
 * The same with a host address in place of NULL (as cuBLAS passes alpha and beta).
 *
 * Usage: structs grow ROUNDS | structs churn ROUNDS
 * vecAdd(a, b, c, N) ROUNDS times over the same buffers, with a new allocation of 4 KiB
 * made between rounds (a caching allocator adding segments); `churn` frees it again before
 * the next round. Prints `launches vecAdd=ROUNDS`.
 *
 * Usage: structs pieces
 * add3 over the three pieces of one allocation, then vecAdd(p0, p0, p0, N) in place: a
 * launch whose only buffer begins where add3's did, and ends where add3's next one begins.
 * Prints `launches add3=1 vecAdd=1`.
 *
 * Usage: structs remade
 * add3 over three pieces of a mapping (cuMemMap), which is then unmapped and made again at
 * the same address and size before vecAdd(p0, p0, p0, 3N): nothing of add3's is left in
 * it, so the buffer runs to the mapping's end. Prints `launches add3=1 vecAdd=1`.
 */
#include "progcommon.h"

#define N 256

static CUdeviceptr alloc_tallied(struct tally *t, size_t bytes)
{
    CUdeviceptr p;
    CHECK(cuMemAlloc_v2(&p, bytes));
    tally_alloc(t, bytes);
    return p;
}

static CUfunction vec_add_of(CUmodule mod)
{
    CUfunction f;
    CHECK(cuModuleGetFunction(&f, mod, "_Z6vecAddPKfS0_Pfi"));
    return f;
}

/* add3 over the three pieces of N floats that begin at block. */
static void add3_on_pieces(CUfunction add3, CUdeviceptr block, struct tally *t)
{
    CUdeviceptr p[3] = {block, block + N * sizeof(float), block + 2 * N * sizeof(float)};
    int n = N;
    void *args[] = {p, &n};
    CHECK(cuLaunchKernel(add3, N / 64, 1, 1, 64, 1, 1, 0, NULL, args, NULL));
    tally_launch(t, "add3", 1);
}

/* vecAdd(p, p, p, n): p doubled in place. */
static void vec_add_in_place(CUmodule mod, CUdeviceptr p, int n, struct tally *t)
{
    void *same[] = {&p, &p, &p, &n};
    CHECK(cuLaunchKernel(vec_add_of(mod), (unsigned)n / 64, 1, 1, 64, 1, 1, 0, NULL, same, NULL));
    tally_launch(t, "vecAdd", 1);
}

static int wide(CUmodule mod, int rounds)
{
    struct tally t = {0};
    CUfunction sum24;
    CHECK(cuModuleGetFunction(&sum24, mod, "_Z5sum24St5arrayIPfLm24EEi"));
    CUdeviceptr p[24];
    static float host[N], out[N];
    for (int j = 0; j < 24; j++) {
        for (int i = 0; i < N; i++)
            host[i] = j ? (float)(j + i) : 0.0f;
        p[j] = alloc_tallied(&t, sizeof host);
        CHECK(cuMemcpyHtoD_v2(p[j], host, sizeof host));
    }
    int n = N;
    void *args[] = {p, &n};
    for (int r = 0; r < rounds; r++)
        CHECK(cuLaunchKernel(sum24, N / 64, 1, 1, 64, 1, 1, 0, NULL, args, NULL));
    tally_launch(&t, "sum24", (unsigned long)rounds);
    CHECK(cuMemcpyDtoH_v2(out, p[0], sizeof out));
    for (int i = 0; i < N && rounds > 0; i++)
        if (out[i] != (float)(276 + 23 * i))
            FAIL("out[%d] = %g", i, (double)out[i]);
    tally_print(&t);
    return 0;
}

static int odd_input(CUmodule mod, int rounds, CUdeviceptr b)
{
    struct tally t = {0};
    CUfunction vec_add = vec_add_of(mod);
    CUdeviceptr a = alloc_tallied(&t, N * sizeof(float)), c = alloc_tallied(&t, N * sizeof(float));
    int n = 0;
    void *args[] = {&a, &b, &c, &n};
    for (int r = 0; r < rounds; r++)
        CHECK(cuLaunchKernel(vec_add, 1, 1, 1, 64, 1, 1, 0, NULL, args, NULL));
    tally_launch(&t, "vecAdd", (unsigned long)rounds);
    tally_print(&t);
    return 0;
}

static int growing(CUmodule mod, int rounds, bool churn)
{
    struct tally t = {0};
    CUfunction vec_add = vec_add_of(mod);
    static float host[N];
    for (int i = 0; i < N; i++)
        host[i] = (float)i;
    CUdeviceptr a = alloc_tallied(&t, sizeof host), b = alloc_tallied(&t, sizeof host);
    CUdeviceptr c = alloc_tallied(&t, sizeof host);
    CHECK(cuMemcpyHtoD_v2(a, host, sizeof host));
    CHECK(cuMemcpyHtoD_v2(b, host, sizeof host));
    int n = N;
    void *args[] = {&a, &b, &c, &n};
    for (int r = 0; r < rounds; r++) {
        CHECK(cuLaunchKernel(vec_add, N / 64, 1, 1, 64, 1, 1, 0, NULL, args, NULL));
        CUdeviceptr extra = alloc_tallied(&t, 4096);
        if (churn)
            CHECK(cuMemFree_v2(extra));
    }
    tally_launch(&t, "vecAdd", (unsigned long)rounds);
    tally_print(&t);
    return 0;
}

#define CHUNK (2u << 20)

/* Maps a fresh CHUNK of physical memory at base, readable and writable. */
static CUmemGenericAllocationHandle map_fresh(CUdeviceptr base, struct tally *t)
{
    struct fc_mem_allocation_prop prop = {.type = FC_MEM_ALLOCATION_TYPE_PINNED,
                                          .location = {FC_MEM_LOCATION_TYPE_DEVICE, 0}};
    CUmemGenericAllocationHandle handle;
    CHECK(cuMemCreate(&handle, CHUNK, (const CUmemAllocationProp *)&prop, 0));
    tally_alloc(t, CHUNK);
    CHECK(cuMemMap(base, CHUNK, 0, handle, 0));
    struct fc_mem_access_desc access = {{FC_MEM_LOCATION_TYPE_DEVICE, 0},
                                        FC_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CHECK(cuMemSetAccess(base, CHUNK, &access, 1));
    return handle;
}

static int remade(CUmodule mod, CUfunction add3, struct tally *t)
{
    static float host[3 * N], out[3 * N];
    for (int i = 0; i < 3 * N; i++)
        host[i] = (float)i;
    CUdeviceptr base;
    CHECK(cuMemAddressReserve(&base, CHUNK, CHUNK, 0, 0));
    CUmemGenericAllocationHandle first = map_fresh(base, t);
    CHECK(cuMemcpyHtoD_v2(base, host, sizeof host));
    add3_on_pieces(add3, base, t);
    /* Gone, and made again at the same address and size. */
    CHECK(cuMemUnmap(base, CHUNK));
    CHECK(cuMemRelease(first));
    CUmemGenericAllocationHandle second = map_fresh(base, t);
    CHECK(cuMemcpyHtoD_v2(base, host, sizeof host));
    vec_add_in_place(mod, base, 3 * N, t);
    CHECK(cuMemcpyDtoH_v2(out, base, sizeof out));
    for (int i = 0; i < 3 * N; i++)
        if (out[i] != 2.0f * (float)i)
            FAIL("out[%d] = %g", i, (double)out[i]);
    CHECK(cuMemUnmap(base, CHUNK));
    CHECK(cuMemRelease(second));
    CHECK(cuMemAddressFree(base, CHUNK));
    tally_print(t);
    return 0;
}

int main(int argc, char **argv)
{
    struct tally t = {0};
    CUfunction add3;
    CUmodule mod = prog_start();
    if (argc > 2 && strcmp(argv[1], "wide") == 0)
        return wide(mod, atoi(argv[2]));
    if (argc > 2 && strcmp(argv[1], "null") == 0)
        return odd_input(mod, atoi(argv[2]), 0);
    static float on_host[N];
    if (argc > 2 && (strcmp(argv[1], "grow") == 0 || strcmp(argv[1], "churn") == 0))
        return growing(mod, atoi(argv[2]), argv[1][0] == 'c');
    if (argc > 2 && strcmp(argv[1], "host") == 0)
        return odd_input(mod, atoi(argv[2]), (CUdeviceptr)(uintptr_t)on_host);
    CHECK(cuModuleGetFunction(&add3, mod, "_Z4add3St5arrayIPfLm3EEi"));
    if (argc > 1 && strcmp(argv[1], "remade") == 0)
        return remade(mod, add3, &t);
    static float host[3 * N], out[N];
    for (int i = 0; i < N; i++) {
        host[N + i] = (float)i;          /* a */
        host[2 * N + i] = 0.5f * (float)i; /* b */
    }
    CUdeviceptr block = alloc_tallied(&t, sizeof host);
    CHECK(cuMemcpyHtoD_v2(block, host, sizeof host));
    add3_on_pieces(add3, block, &t);
    float expect = 1.5f;
    if (argc > 1 && strcmp(argv[1], "pieces") == 0) {
        vec_add_in_place(mod, block, N, &t);
        expect = 3.0f;
    }
    CHECK(cuMemcpyDtoH_v2(out, block, sizeof out));
    for (int i = 0; i < N; i++)
        if (out[i] != expect * (float)i)
            FAIL("out[%d] = %g", i, (double)out[i]);
    printf("pieces at 0 %d %d\n", N, 2 * N);
    tally_print(&t);
    return 0;
}
