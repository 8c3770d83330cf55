// What a kernel launch costs by the size of its parameter: the CPU time of the launch call,
// and the GPU time a launch adds where the GPU bounds the loop. cudump's kernel takes its
// whole job list as one parameter (shim/tooljob.h's struct tool_jobs, 3,864 bytes) however
// few jobs a launch has; this says what that costs against a smaller one.
//
// CPU: batches of 256 launches of an empty kernel, a synchronize after each batch (so the
// launch queue never fills and the calls cost only the CPU), the launches alone timed; plain
// and with programmatic stream serialization (as shim/toollaunch.c launches cudump's kernel),
// and in pairs after a launch of a kernel with an 8-byte parameter (the program's kernel,
// then cudump's). GPU: 256 launches of a kernel that waits 5 us, between two events, less the
// 5 us.
//
// build: nvcc -O3 -arch=sm_90 -o param_launch bench/param_launch.cu
// usage: ./param_launch
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <cuda_runtime.h>

#define CHECK(x)                                                                       \
    do {                                                                               \
        cudaError_t rc_ = (x);                                                         \
        if (rc_ != cudaSuccess) {                                                      \
            std::fprintf(stderr, "%s failed: %s\n", #x, cudaGetErrorString(rc_));      \
            std::exit(1);                                                              \
        }                                                                              \
    } while (0)

template <int N> struct Param {
    unsigned long long w[N / 8];
};

template <int N> __global__ void empty(Param<N> p)
{
    if (p.w[0] == 1 && threadIdx.x == 0 && blockIdx.x == 0)
        asm volatile("trap;");
}

template <int N> __global__ void spin(Param<N> p, unsigned long long ns)
{
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    while (t - t0 < ns + (p.w[0] == 1));
}

enum { BATCH = 256, BATCHES = 80, GRID = 64 };

static double now_us()
{
    return std::chrono::duration<double, std::micro>(
               std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Median over batches of the µs per call of `launch` (a call may make more than one launch:
// the pair column's calls make two, and its figure is for both).
template <class F> static double cpu_us(cudaStream_t s, F launch)
{
    std::vector<double> v;
    for (int b = 0; b < BATCHES; b++) {
        double t0 = now_us();
        for (int i = 0; i < BATCH; i++)
            launch();
        double t1 = now_us();
        CHECK(cudaGetLastError());
        CHECK(cudaStreamSynchronize(s));
        if (b >= 5)
            v.push_back((t1 - t0) / BATCH);
    }
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

template <int N> static void row(cudaStream_t s, cudaEvent_t e0, cudaEvent_t e1)
{
    Param<N> p{};
    Param<8> small{};
    cudaLaunchAttribute attr{};
    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t pss{};
    pss.gridDim = dim3(GRID);
    pss.blockDim = dim3(256);
    pss.stream = s;
    pss.attrs = &attr;
    pss.numAttrs = 1;
    double plain = cpu_us(s, [&] { empty<N><<<GRID, 256, 0, s>>>(p); });
    double with_pss = cpu_us(s, [&] { CHECK(cudaLaunchKernelEx(&pss, empty<N>, p)); });
    double pair = cpu_us(s, [&] {
        empty<8><<<GRID, 256, 0, s>>>(small);
        CHECK(cudaLaunchKernelEx(&pss, empty<N>, p));
    });
    std::vector<double> g;
    for (int r = 0; r < 7; r++) {
        CHECK(cudaEventRecord(e0, s));
        for (int i = 0; i < BATCH; i++)
            spin<N><<<GRID, 256, 0, s>>>(p, 5000);
        CHECK(cudaGetLastError());
        CHECK(cudaEventRecord(e1, s));
        CHECK(cudaEventSynchronize(e1));
        float ms;
        CHECK(cudaEventElapsedTime(&ms, e0, e1));
        g.push_back(ms * 1e3 / BATCH - 5.0);
    }
    std::sort(g.begin(), g.end());
    std::printf("%6d %10.2f %10.2f %18.2f %14.2f\n", N, plain, with_pss, pair, g[g.size() / 2]);
}

int main()
{
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("device: %s\n", prop.name);
    cudaStream_t s;
    cudaEvent_t e0, e1;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CHECK(cudaEventCreate(&e0));
    CHECK(cudaEventCreate(&e1));
    std::printf("%6s %10s %10s %18s %14s\n", "bytes", "cpu us", "cpu us pss",
                "cpu us pair (both)", "gpu us extra");
    for (int round = 0; round < 2; round++) {
        row<8>(s, e0, e1);
        row<256>(s, e0, e1);
        row<1024>(s, e0, e1);
        row<2048>(s, e0, e1);
        row<3864>(s, e0, e1);
    }
    return 0;
}
