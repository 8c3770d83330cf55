// A program that crashes right after a synchronised launch: what a debugger took
// of that launch must still reach the disk.
//
// usage: abort_after
//   Runs mark<<<1,32>>> on a float buffer (g[i] = i * 0.5), synchronises, prints
//   `marked`, then calls abort() (exit status 134 through a shell).
#include <cstdio>
#include <cstdlib>

#include "check.h"

__global__ void mark(float* g)
{
    g[threadIdx.x] = threadIdx.x * 0.5f;
}

int main()
{
    float* g = nullptr;
    CHECK_RT(cudaMalloc(&g, 32 * sizeof(float)));
    mark<<<1, 32>>>(g);
    CHECK_RT(cudaDeviceSynchronize());
    std::printf("marked\n");
    std::fflush(stdout);
    std::abort();
}
