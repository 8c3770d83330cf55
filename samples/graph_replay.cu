// A CUDA graph of 20 empty kernels, captured once and replayed N times: what
// a graph replay loop costs, bare and under a debugger.
//
// usage: graph_replay [N]   (default 20000)
// Prints `replays_per_second R` and then `launches graph=N`.
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "check.h"

__global__ void step_kernel() {}

int main(int argc, char** argv)
{
    long n = argc > 1 ? std::atol(argv[1]) : 20000;
    FAIL_IF(n <= 0, "usage: graph_replay [N]");
    cudaStream_t stream;
    CHECK_RT(cudaStreamCreate(&stream));
    cudaGraph_t graph;
    CHECK_RT(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    for (int k = 0; k < 20; k++)
        step_kernel<<<1, 1, 0, stream>>>();
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
    CHECK_RT(cudaGraphExecDestroy(exec));
    CHECK_RT(cudaGraphDestroy(graph));
    return 0;
}
