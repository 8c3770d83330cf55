// Kernels nested in child graphs, and a graph made for device launch: the graph
// shapes a debugger must find its way through on a real driver.
//
// usage: graph_nodes
//
// The main graph, built node by node and instantiated with
// cudaGraphInstantiateWithParams:
//
//   bump(counter) -> child graph { fill(z, counter, n) -> child graph { scale(z, 3, n) } }
//                 -> offset(z, 1, n)
//
// replayed 4 times: in replay r, fill writes z[i] = 0.5 i + r, scale triples it and
// offset adds 1 -- 5 in replay 4, after cudaGraphExecKernelNodeSetParams. Each replay is
// checked on the host and printed as `replay R z[1]=V sum S`.
// Then a graph of one kernel, setv(w, 2, n), is instantiated for device launch and
// launched twice from the host (`device: replays 2 w[0]=2`). Exits 1 on any mismatch.
#include <cstdio>
#include <vector>

#include "check.h"

constexpr int N = 1024;
constexpr int THREADS = 128;

__global__ void bump(int* counter) { counter[0] += 1; }

__global__ void fill(float* z, const int* counter, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        z[i] = 0.5f * i + counter[0];
}

__global__ void scale(float* z, float s, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        z[i] *= s;
}

__global__ void offset(float* z, float d, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        z[i] += d;
}

__global__ void setv(float* w, float v, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        w[i] = v;
}

static cudaKernelNodeParams node_params(void* func, void** args)
{
    cudaKernelNodeParams p = {};
    p.func = func;
    p.gridDim = dim3((N + THREADS - 1) / THREADS);
    p.blockDim = dim3(THREADS);
    p.kernelParams = args;
    return p;
}

int main()
{
    int* counter = nullptr;
    float *z = nullptr, *w = nullptr;
    CHECK_RT(cudaMalloc(&counter, sizeof(int)));
    CHECK_RT(cudaMalloc(&z, N * sizeof(float)));
    CHECK_RT(cudaMalloc(&w, N * sizeof(float)));
    CHECK_RT(cudaMemset(counter, 0, sizeof(int)));
    int n = N;
    float three = 3.0f, one = 1.0f, two = 2.0f;

    // The innermost graph: scale(z, 3).
    cudaGraph_t inner, middle, top;
    CHECK_RT(cudaGraphCreate(&inner, 0));
    void* scale_args[] = {&z, &three, &n};
    cudaKernelNodeParams sp = node_params(reinterpret_cast<void*>(scale), scale_args);
    cudaGraphNode_t scale_node;
    CHECK_RT(cudaGraphAddKernelNode(&scale_node, inner, nullptr, 0, &sp));

    // The middle graph: fill(z, counter) -> inner.
    CHECK_RT(cudaGraphCreate(&middle, 0));
    void* fill_args[] = {&z, &counter, &n};
    cudaKernelNodeParams fp = node_params(reinterpret_cast<void*>(fill), fill_args);
    cudaGraphNode_t fill_node, inner_node;
    CHECK_RT(cudaGraphAddKernelNode(&fill_node, middle, nullptr, 0, &fp));
    CHECK_RT(cudaGraphAddChildGraphNode(&inner_node, middle, &fill_node, 1, inner));

    // The main graph: bump -> middle -> offset.
    CHECK_RT(cudaGraphCreate(&top, 0));
    void* bump_args[] = {&counter};
    cudaKernelNodeParams bp = node_params(reinterpret_cast<void*>(bump), bump_args);
    bp.gridDim = dim3(1);
    bp.blockDim = dim3(1);
    void* offset_args[] = {&z, &one, &n};
    cudaKernelNodeParams op = node_params(reinterpret_cast<void*>(offset), offset_args);
    cudaGraphNode_t bump_node, middle_node, offset_node;
    CHECK_RT(cudaGraphAddKernelNode(&bump_node, top, nullptr, 0, &bp));
    CHECK_RT(cudaGraphAddChildGraphNode(&middle_node, top, &bump_node, 1, middle));
    CHECK_RT(cudaGraphAddKernelNode(&offset_node, top, &middle_node, 1, &op));

    cudaGraphExec_t exec;
    cudaGraphInstantiateParams ip = {};
    CHECK_RT(cudaGraphInstantiateWithParams(&exec, top, &ip));
    cudaStream_t stream;
    CHECK_RT(cudaStreamCreate(&stream));
    std::vector<float> got(N);
    float five = 5.0f;
    for (int r = 1; r <= 4; r++) {
        float d = r < 4 ? 1.0f : 5.0f;
        if (r == 4) {
            void* new_args[] = {&z, &five, &n};
            cudaKernelNodeParams np = node_params(reinterpret_cast<void*>(offset), new_args);
            CHECK_RT(cudaGraphExecKernelNodeSetParams(exec, offset_node, &np));
        }
        CHECK_RT(cudaGraphLaunch(exec, stream));
        CHECK_RT(cudaStreamSynchronize(stream));
        CHECK_RT(cudaMemcpy(got.data(), z, N * sizeof(float), cudaMemcpyDeviceToHost));
        double sum = 0;
        for (int i = 0; i < N; i++) {
            float want = 3.0f * (0.5f * i + r) + d;
            FAIL_IF(got[i] != want, "replay %d: z[%d] = %g, expected %g", r, i, got[i], want);
            sum += got[i];
        }
        std::printf("replay %d z[1]=%g sum %.1f\n", r, got[1], sum);
    }

    // A graph for device launch, launched from the host.
    cudaGraph_t dg;
    CHECK_RT(cudaGraphCreate(&dg, 0));
    void* setv_args[] = {&w, &two, &n};
    cudaKernelNodeParams vp = node_params(reinterpret_cast<void*>(setv), setv_args);
    cudaGraphNode_t setv_node;
    CHECK_RT(cudaGraphAddKernelNode(&setv_node, dg, nullptr, 0, &vp));
    cudaGraphExec_t dexec;
    CHECK_RT(cudaGraphInstantiateWithFlags(&dexec, dg, cudaGraphInstantiateFlagDeviceLaunch));
    CHECK_RT(cudaGraphUpload(dexec, stream));
    for (int r = 0; r < 2; r++)
        CHECK_RT(cudaGraphLaunch(dexec, stream));
    CHECK_RT(cudaStreamSynchronize(stream));
    CHECK_RT(cudaMemcpy(got.data(), w, N * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < N; i++)
        FAIL_IF(got[i] != 2.0f, "device graph: w[%d] = %g", i, got[i]);
    std::printf("device: replays 2 w[0]=%g\n", got[0]);
    std::printf("launches bump=4 fill=4 scale=4 offset=4 setv=2 graph=6\n");

    CHECK_RT(cudaGraphExecDestroy(dexec));
    CHECK_RT(cudaGraphExecDestroy(exec));
    CHECK_RT(cudaGraphDestroy(dg));
    CHECK_RT(cudaGraphDestroy(top));
    CHECK_RT(cudaGraphDestroy(middle));
    CHECK_RT(cudaGraphDestroy(inner));
    CHECK_RT(cudaStreamDestroy(stream));
    CHECK_RT(cudaFree(counter));
    CHECK_RT(cudaFree(z));
    CHECK_RT(cudaFree(w));
    return 0;
}
