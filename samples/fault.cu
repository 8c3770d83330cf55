// A kernel that fills a buffer, then one that writes through a bad pointer:
// how a debugger behaves when its target hits a CUDA error in a kernel.
//
// usage: fault
// Prints `first ok` after the good kernel, then `fault: <error name>`, and
// exits 3 when the second kernel failed with an illegal address (1 otherwise).
#include <cstdio>

#include "check.h"

__global__ void fill(float* p, int n, float v)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        p[i] = v;
}

__global__ void smash(float* p)
{
    p[threadIdx.x] = 1.0f;
}

int main()
{
    const int n = 1024;
    float* d = nullptr;
    CHECK_RT(cudaMalloc(&d, n * sizeof(float)));
    fill<<<n / 256, 256>>>(d, n, 2.0f);
    CHECK_RT(cudaDeviceSynchronize());
    std::printf("first ok\n");
    std::fflush(stdout);
    smash<<<1, 32>>>(reinterpret_cast<float*>(0x10));
    cudaError_t err = cudaDeviceSynchronize();
    std::printf("fault: %s\n", cudaGetErrorName(err));
    return err == cudaErrorIllegalAddress ? 3 : 1;
}
