/*
 * A kernel that reaches its input only through a TMA tensor map, as cuDNN's
 * and CUTLASS's Hopper kernels do: tma_copy(float* out, CUtensorMap src) is
 * launched LAUNCHES times with a map of a float32 tensor of dims [64, 16, 2]
 * (innermost first), rows 512 bytes apart and planes 8192 bytes apart, that
 * starts 256 bytes into its allocation and leaves 1024 bytes of it after its
 * last element: its exact span is 16128 bytes, the allocation's rest 17152.
 *
 * Usage: tensormaps LAUNCHES [POISON [REPLACE [ENCODING [WAY]]]]
 *   POISON    the launch before which element 5 of the tensor is set to NaN
 *             (0: none); the launch after it sets it back
 *   REPLACE   the launch from which the map points at a second tensor of the
 *             same shape (cuTensorMapReplaceAddress through cuGetProcAddress;
 *             0: never)
 *   ENCODING  tiled (default), im2col or im2col_wide: the encode function
 *   WAY       launch (default): cuLaunchKernel each time; encode: the same, the
 *             map encoded again before each launch, as cuDNN and cuBLASLt do
 *             (for the tensor of that launch); graph: the launch
 *             captured once on a stream into a graph (the map's bytes become
 *             the kernel node's), the graph launched LAUNCHES times, and at
 *             REPLACE the replaced map given to the executable graph's node
 *             (cuGraphExecKernelNodeSetParams), as a program must: the node
 *             keeps the bytes it was made with
 * Element k of the first tensor holds k, of the second 1000 + k. Prints the
 * tally and `out[5] = VALUE` after the last launch.
 */
#include "progcommon.h"

#include <math.h>

enum { W = 64, H = 16, D = 2, ROW = 512, PLANE = H * ROW, LEAD = 256, TAIL = 1024 };
enum { ELEMS = W * H * D, SPAN = (D - 1) * PLANE + (H - 1) * ROW + W * 4 };

static void fill(CUdeviceptr tensor, float first)
{
    static float rows[SPAN / 4];
    for (int z = 0; z < D; z++)
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++)
                rows[(z * PLANE + y * ROW) / 4 + x] = first + (float)(x + W * (y + H * z));
    CHECK(cuMemcpyHtoD_v2(tensor, rows, sizeof rows));
}

/* One launch of tma_copy captured on a new stream into an executable graph;
 * its one kernel node in *node. */
static CUgraphExec capture(CUfunction copy, void **args, CUstream *stream, CUgraphNode *node)
{
    CUgraph g;
    CUgraphExec exec;
    CHECK(cuStreamCreate(stream, 0));
    CHECK(cuStreamBeginCapture_v2(*stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CHECK(cuLaunchKernel(copy, ELEMS / 128, 1, 1, 128, 1, 1, 0, *stream, args, NULL));
    CHECK(cuStreamEndCapture(*stream, &g));
    size_t n = 1;
    CHECK(cuGraphGetNodes(g, node, &n));
    if (n != 1)
        FAIL("captured graph has %zu nodes", n);
    CHECK(cuGraphInstantiateWithFlags(&exec, g, 0));
    return exec;
}

/* The executable graph's node takes the map's bytes as they are now. */
static void set_node_map(CUgraphExec exec, CUgraphNode node, void **args)
{
    CUDA_KERNEL_NODE_PARAMS p;
    CHECK(cuGraphKernelNodeGetParams_v2(node, &p));
    p.kernelParams = args;
    CHECK(cuGraphExecKernelNodeSetParams_v2(exec, node, &p));
}

/* Makes *map describe the tensor at `at` with the encode function named. */
static void encode(CUtensorMap *map, const char *encoding, void *at)
{
    cuuint64_t dims[3] = {W, H, D}, strides[2] = {ROW, PLANE};
    cuuint32_t box[3] = {W, H, 1}, estrides[3] = {1, 1, 1};
    if (strcmp(encoding, "tiled") == 0) {
        CHECK(cuTensorMapEncodeTiled(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 3, at, dims, strides,
                                     box, estrides, 0, 0, 0, 0));
    } else if (strcmp(encoding, "im2col") == 0) {
        int lower[1] = {0}, upper[1] = {0};
        CHECK(cuTensorMapEncodeIm2col(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 3, at, dims, strides,
                                      lower, upper, W, H, estrides, 0, 0, 0, 0));
    } else if (strcmp(encoding, "im2col_wide") == 0) {
        CHECK(cuTensorMapEncodeIm2colWide(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 3, at, dims,
                                          strides, 0, 0, W, H, estrides, 0, 0, 0, 0, 0));
    } else {
        FAIL("unknown encoding %s", encoding);
    }
}

int main(int argc, char **argv)
{
    if (argc < 2)
        FAIL("usage: tensormaps LAUNCHES [POISON [REPLACE [ENCODING [WAY]]]]");
    int launches = atoi(argv[1]);
    int poison = argc > 2 ? atoi(argv[2]) : 0, replace = argc > 3 ? atoi(argv[3]) : 0;
    const char *encoding = argc > 4 ? argv[4] : "tiled";
    const char *way = argc > 5 ? argv[5] : "launch";
    bool graph = strcmp(way, "graph") == 0, again = strcmp(way, "encode") == 0;
    if (!graph && !again && strcmp(way, "launch") != 0)
        FAIL("unknown way %s", way);
    struct tally t = {0};
    CUfunction copy;
    CUmodule mod = prog_start();
    CHECK(cuModuleGetFunction(&copy, mod, "_Z8tma_copyPf14CUtensorMap_st"));
    CUdeviceptr first, second, out;
    CHECK(cuMemAlloc_v2(&first, LEAD + SPAN + TAIL));
    CHECK(cuMemAlloc_v2(&second, LEAD + SPAN + TAIL));
    CHECK(cuMemAlloc_v2(&out, ELEMS * 4));
    tally_alloc(&t, 2 * (LEAD + SPAN + TAIL) + ELEMS * 4);
    fill(first + LEAD, 0.0f);
    fill(second + LEAD, 1000.0f);

    CUtensorMap map;
    void *at = (void *)(uintptr_t)(first + LEAD);
    encode(&map, encoding, at);
    CUresult (*replace_address)(CUtensorMap *, void *) = NULL;
    CUdriverProcAddressQueryResult found;
    CHECK(cuGetProcAddress_v2("cuTensorMapReplaceAddress", (void **)&replace_address, 12000, 0,
                              &found));
    void *args[] = {&out, &map};
    CUstream stream = NULL;
    CUgraphExec exec = NULL;
    CUgraphNode node = NULL;
    if (graph)
        exec = capture(copy, args, &stream, &node);
    for (int k = 1; k <= launches; k++) {
        if (k == replace) {
            CHECK(replace_address(&map, (void *)(uintptr_t)(second + LEAD)));
            if (graph)
                set_node_map(exec, node, args);
        }
        CUdeviceptr tensor = k >= replace && replace ? second : first;
        if (k == poison || k == poison + 1) {
            float v = k == poison ? NAN : (tensor == second ? 1005.0f : 5.0f);
            CHECK(cuMemcpyHtoD_v2(tensor + LEAD + 5 * 4, &v, sizeof v));
        }
        if (graph) {
            CHECK(cuGraphLaunch(exec, stream));
            CHECK(cuStreamSynchronize(stream));
        } else {
            if (again)
                encode(&map, encoding, (void *)(uintptr_t)(tensor + LEAD));
            CHECK(cuLaunchKernel(copy, ELEMS / 128, 1, 1, 128, 1, 1, 0, NULL, args, NULL));
        }
    }
    float got;
    CHECK(cuMemcpyDtoH_v2(&got, out + 5 * 4, sizeof got));
    tally_launch(&t, "tma_copy", (unsigned long)launches);
    if (graph)
        tally_launch(&t, "graph", (unsigned long)launches);
    tally_print(&t);
    printf("out[5] = %g\n", (double)got);
    return 0;
}
