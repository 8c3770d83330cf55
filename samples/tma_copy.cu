// A kernel that reaches its memory only through TMA tensor maps, as Hopper's
// cuBLAS, cuDNN and CUTLASS kernels do: tma_copy(src, dst, scale) takes two
// CUtensorMap by value (__grid_constant__) and no pointer. Each block loads a
// 32 x 32 tile of src into shared memory with one TMA load
// (cp.async.bulk.tensor, completed on an mbarrier), multiplies it by scale
// and stores it into dst with one TMA store.
//
// src is a W x H float tensor, rows PITCH bytes apart, LEAD bytes into its
// allocation, which holds TAIL more bytes after it; everything around and
// between its rows is NaN (bytes 0xff), so a copy that strays outside what the
// map describes shows. Element (y, x) holds y * 1000 + x. dst is W x H, tight,
// zero before the first launch. The maps are made with cuTensorMapEncodeTiled,
// found through the runtime (cudaGetDriverEntryPointByVersion), as libraries
// find it.
//
// usage: tma_copy [LAUNCHES [NAN [graph]]]   (defaults 2 and 0; NAN 1: src's
//        element (3, 5) is NaN, so dst's is NaN after the first launch; graph:
//        the launch is captured once into a CUDA graph, whose kernel node then
//        holds the maps' bytes, and the graph is launched LAUNCHES times)
// Prints `tma_copy: WxH floats at pitch PITCH, N NaN in dst`, then
// `launches tma_copy=LAUNCHES` (and ` graph=LAUNCHES`). Needs sm_90 (Hopper).
#include <cuda.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "check.h"

namespace {

constexpr int W = 256, H = 128, TILE = 32, THREADS = 128;
constexpr size_t PITCH = 1280, LEAD = 512, TAIL = 4096;
constexpr size_t SRC_BYTES = LEAD + (H - 1) * PITCH + W * sizeof(float) + TAIL;
constexpr unsigned TILE_BYTES = TILE * TILE * sizeof(float);
constexpr float SCALE = 2.0f;

}  // namespace

__device__ static inline uint32_t shared_address(const void* p)
{
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__global__ void __launch_bounds__(THREADS)
    tma_copy(const __grid_constant__ CUtensorMap src, const __grid_constant__ CUtensorMap dst,
             float scale)
{
    __shared__ alignas(128) float tile[TILE * TILE];
    __shared__ alignas(8) unsigned long long bar;
    const uint32_t tile_at = shared_address(tile), bar_at = shared_address(&bar);
    const int x = blockIdx.x * TILE, y = blockIdx.y * TILE;
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar_at) : "memory");
        // The barrier is completed by the TMA unit (the async proxy): it must see the init.
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar_at),
                     "r"(TILE_BYTES)
                     : "memory");
        asm volatile(
            "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
            " [%0], [%1, {%2, %3}], [%4];" ::"r"(tile_at),
            "l"(reinterpret_cast<uint64_t>(&src)), "r"(x), "r"(y), "r"(bar_at)
            : "memory");
    }
    // Phase 0 of the barrier completes once the tile's bytes have all landed.
    uint32_t landed = 0;
    while (!landed)
        asm volatile(
            "{\n\t.reg .pred p;\n\t"
            "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\n\t"
            "selp.u32 %0, 1, 0, p;\n\t}"
            : "=r"(landed)
            : "r"(bar_at)
            : "memory");
    for (int i = threadIdx.x; i < TILE * TILE; i += blockDim.x)
        tile[i] *= scale;
    // The threads' writes must be visible to the TMA unit before it reads the tile.
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    if (threadIdx.x == 0) {
        asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];"
                     ::"l"(reinterpret_cast<uint64_t>(&dst)), "r"(tile_at), "r"(x), "r"(y)
                     : "memory");
        asm volatile("cp.async.bulk.commit_group;" ::: "memory");
        // Done, writes included, before the block (and its shared memory) goes.
        asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
    }
}

using EncodeTiled = decltype(&cuTensorMapEncodeTiled);

static EncodeTiled encode_tiled()
{
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found;
    CHECK_RT(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000,
                                              cudaEnableDefault, &found));
    FAIL_IF(found != cudaDriverEntryPointSuccess || !fn,
            "cuTensorMapEncodeTiled: not in this driver");
    return reinterpret_cast<EncodeTiled>(fn);
}

// A map of a W x H float tensor at `at`, rows `pitch` bytes apart, read in TILE x TILE boxes.
static void make_map(EncodeTiled encode, CUtensorMap* map, void* at, size_t pitch)
{
    cuuint64_t dims[2] = {W, H};
    cuuint64_t strides[1] = {pitch};
    cuuint32_t box[2] = {TILE, TILE};
    cuuint32_t steps[2] = {1, 1};
    CUresult rc = encode(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, at, dims, strides, box, steps,
                         CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                         CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    FAIL_IF(rc != CUDA_SUCCESS, "cuTensorMapEncodeTiled failed: %d", (int)rc);
}

int main(int argc, char** argv)
{
    int launches = argc > 1 ? std::atoi(argv[1]) : 2;
    int nan = argc > 2 ? std::atoi(argv[2]) : 0;
    bool graph = argc > 3 && std::strcmp(argv[3], "graph") == 0;
    FAIL_IF(launches <= 0 || (nan != 0 && nan != 1) || (argc > 3 && !graph) || argc > 4,
            "usage: tma_copy [LAUNCHES [NAN [graph]]]");
    int major = 0;
    CHECK_RT(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
    FAIL_IF(major < 9, "tma_copy needs a GPU with TMA (sm_90 or later)");
    EncodeTiled encode = encode_tiled();

    unsigned char* src_alloc;
    float* dst;
    CHECK_RT(cudaMalloc(&src_alloc, SRC_BYTES));
    CHECK_RT(cudaMemset(src_alloc, 0xff, SRC_BYTES));
    CHECK_RT(cudaMalloc(&dst, W * H * sizeof(float)));
    CHECK_RT(cudaMemset(dst, 0, W * H * sizeof(float)));
    float* src = reinterpret_cast<float*>(src_alloc + LEAD);
    std::vector<float> host((size_t)W * H);
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++)
            host[(size_t)y * W + x] = (float)(y * 1000 + x);
    if (nan)
        host[3 * W + 5] = NAN;
    CHECK_RT(cudaMemcpy2D(src, PITCH, host.data(), W * sizeof(float), W * sizeof(float), H,
                          cudaMemcpyHostToDevice));
    // The graph's stream does not wait for the legacy stream the uploads went on.
    CHECK_RT(cudaDeviceSynchronize());

    CUtensorMap src_map, dst_map;
    make_map(encode, &src_map, src, PITCH);
    make_map(encode, &dst_map, dst, W * sizeof(float));
    if (graph) {
        cudaStream_t stream;
        cudaGraph_t g;
        cudaGraphExec_t exec;
        CHECK_RT(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
        CHECK_RT(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
        tma_copy<<<dim3(W / TILE, H / TILE), THREADS, 0, stream>>>(src_map, dst_map, SCALE);
        CHECK_LAUNCH();
        CHECK_RT(cudaStreamEndCapture(stream, &g));
        CHECK_RT(cudaGraphInstantiate(&exec, g, 0));
        for (int k = 0; k < launches; k++)
            CHECK_RT(cudaGraphLaunch(exec, stream));
        CHECK_RT(cudaStreamSynchronize(stream));
        CHECK_RT(cudaGraphExecDestroy(exec));
        CHECK_RT(cudaGraphDestroy(g));
        CHECK_RT(cudaStreamDestroy(stream));
    } else {
        for (int k = 0; k < launches; k++) {
            tma_copy<<<dim3(W / TILE, H / TILE), THREADS>>>(src_map, dst_map, SCALE);
            CHECK_LAUNCH();
        }
    }
    CHECK_RT(cudaDeviceSynchronize());

    std::vector<float> back(host.size());
    CHECK_RT(cudaMemcpy(back.data(), dst, back.size() * sizeof(float), cudaMemcpyDeviceToHost));
    int nans = 0;
    for (size_t i = 0; i < back.size(); i++) {
        float want = host[i] * SCALE;
        bool ok = std::isnan(want) ? std::isnan(back[i]) : back[i] == want;
        FAIL_IF(!ok, "dst[%zu] = %g, expected %g", i, (double)back[i], (double)want);
        nans += std::isnan(back[i]);
    }
    std::printf("tma_copy: %dx%d floats at pitch %zu, %d NaN in dst\n", W, H, PITCH, nans);
    if (graph)
        std::printf("launches tma_copy=%d graph=%d\n", launches, launches);
    else
        std::printf("launches tma_copy=%d\n", launches);
    CHECK_RT(cudaFree(src_alloc));
    CHECK_RT(cudaFree(dst));
    return 0;
}
