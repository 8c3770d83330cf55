// A CUDA graph of 20 empty kernels, captured once and replayed N times: what
// a graph replay loop costs, bare and under a debugger.
//
// usage: graph_replay [N] [--buffer]   (default 20000)
// With --buffer the first kernel adds 1 to each of 1024 ints instead (a buffer for a rule
// to snapshot). Prints `replays_per_second R` and then `launches graph=N`.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "check.h"

__global__ void step_kernel() {}

__global__ void touch_kernel(int* p, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        p[i] += 1;
}

int main(int argc, char** argv)
{
    long n = argc > 1 ? std::atol(argv[1]) : 20000;
    bool buffer = argc > 2 && std::string(argv[2]) == "--buffer";
    FAIL_IF(n <= 0, "usage: graph_replay [N] [--buffer]");
    cudaStream_t stream;
    CHECK_RT(cudaStreamCreate(&stream));
    int* counts = nullptr;
    CHECK_RT(cudaMalloc(&counts, 1024 * sizeof(int)));
    CHECK_RT(cudaMemset(counts, 0, 1024 * sizeof(int)));
    cudaGraph_t graph;
    CHECK_RT(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    for (int k = 0; k < 20; k++) {
        if (k == 0 && buffer)
            touch_kernel<<<8, 128, 0, stream>>>(counts, 1024);
        else
            step_kernel<<<1, 1, 0, stream>>>();
    }
    CHECK_RT(cudaStreamEndCapture(stream, &graph));
    cudaGraphExec_t exec;
    CHECK_RT(cudaGraphInstantiate(&exec, graph, 0));
    for (int r = 0; r < 100; r++)  // warm-up
        CHECK_RT(cudaGraphLaunch(exec, stream));
    CHECK_RT(cudaStreamSynchronize(stream));
    auto start = std::chrono::steady_clock::now();
    for (long r = 0; r < n; r++)
        CHECK_RT(cudaGraphLaunch(exec, stream));
    CHECK_RT(cudaStreamSynchronize(stream));
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("replays_per_second %.0f\n", n / s);
    std::printf("launches graph=%ld\n", n + 100);
    if (buffer) {
        int first = 0;
        CHECK_RT(cudaMemcpy(&first, counts, sizeof first, cudaMemcpyDeviceToHost));
        FAIL_IF(first != n + 100, "the buffer was not touched once per replay");
    }
    CHECK_RT(cudaFree(counts));
    CHECK_RT(cudaGraphExecDestroy(exec));
    CHECK_RT(cudaGraphDestroy(graph));
    return 0;
}
