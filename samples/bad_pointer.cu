// Good launches, then a kernel that writes through a bad pointer, then a synchronize: what
// the flight recorder (cudump --flight) must name, with its bad argument.
//
// usage: bad_pointer
// Runs scale<<<4, 256>>> three times on a float buffer, synchronises and prints `good ok`,
// then poke<<<1, 32>>> through the pointer 0xdead0000 (no allocation is there) and
// cudaDeviceSynchronize; prints `sync: <error name>` and exits 2 when that failed with an
// illegal address (1 otherwise).
#include <cstdio>

#include "check.h"

__global__ void scale(float* p, int n, float s)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        p[i] *= s;
}

__global__ void poke(int* p, int v)
{
    p[threadIdx.x] = v;
}

int main()
{
    const int n = 1024;
    float* d = nullptr;
    CHECK_RT(cudaMalloc(&d, n * sizeof(float)));
    CHECK_RT(cudaMemset(d, 0, n * sizeof(float)));
    for (int i = 0; i < 3; i++) {
        scale<<<n / 256, 256>>>(d, n, 2.0f);
        CHECK_LAUNCH();
    }
    CHECK_RT(cudaDeviceSynchronize());
    std::printf("good ok\n");
    std::fflush(stdout);
    poke<<<1, 32>>>(reinterpret_cast<int*>(0xdead0000ull), 7);
    cudaError_t err = cudaDeviceSynchronize();
    std::printf("sync: %s\n", cudaGetErrorName(err));
    return err == cudaErrorIllegalAddress ? 2 : 1;
}
