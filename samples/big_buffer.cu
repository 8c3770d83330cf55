// A kernel over one large float buffer, for snapshot speed and size: how long
// the program is held per launch when a debugger copies the buffer before and
// after, against what a pinned device-to-host copy of the same bytes costs.
//
// usage: big_buffer MIB LAUNCHES [--dump DIR] [--gap MS] [--clock] [--room]
//   Each launch adds 1 to every float. Prints `launch K ms T` (launch and
//   synchronize, host time), `d2h_ms T` (median of 5 pinned copies of the
//   buffer) and last `launches add_one=LAUNCHES`.
//   --dump DIR writes DIR/before.npy (before the first launch) and
//   DIR/after.npy (after it).
//   --gap MS sleeps MS milliseconds between launches, outside the timed part:
//   a program with other work to do between the launches a debugger copies.
//   --clock also prints `first_launch_unix_ms T`: when the first launch began,
//   by the wall clock, to set against when a debugger's files were written.
//   --room sizes an allocation by the memory free before the first launch, as
//   frameworks size their caches: after the launches it allocates all of that
//   but 64 MiB (`room allocated`, or `room refused` where the device says no),
//   frees it, and prints `free_change_mib M`: how much less is free now
//   (cudaMemGetInfo) than before the first launch.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "check.h"
#include "npy.h"

__global__ void add_one(float* p, size_t n)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n)
        p[i] += 1.0f;
}

static double ms_since(std::chrono::steady_clock::time_point t)
{
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

int main(int argc, char** argv)
{
    FAIL_IF(argc < 3, "usage: big_buffer MIB LAUNCHES [--dump DIR] [--gap MS]");
    size_t mib = std::strtoull(argv[1], nullptr, 10);
    int launches = std::atoi(argv[2]);
    const char* dump = nullptr;
    int gap_ms = 0;
    bool clock = false, room = false;
    for (int a = 3; a < argc; a++) {
        if (!std::strcmp(argv[a], "--clock"))
            clock = true;
        else if (!std::strcmp(argv[a], "--room"))
            room = true;
        else if (!std::strcmp(argv[a], "--dump") && a + 1 < argc)
            dump = argv[++a];
        else if (!std::strcmp(argv[a], "--gap") && a + 1 < argc)
            gap_ms = std::atoi(argv[++a]);
        else
            FAIL_IF(true, "unknown option %s", argv[a]);
    }
    FAIL_IF(mib == 0 || launches <= 0, "MIB and LAUNCHES must be positive");
    size_t n = mib * (1u << 20) / sizeof(float);
    float* d = nullptr;
    CHECK_RT(cudaMalloc(&d, n * sizeof(float)));
    float* host = nullptr;
    CHECK_RT(cudaMallocHost(&host, n * sizeof(float)));
    for (size_t i = 0; i < n; i++)
        host[i] = (float)(i % 1000);
    CHECK_RT(cudaMemcpy(d, host, n * sizeof(float), cudaMemcpyHostToDevice));
    if (dump)
        FAIL_IF(!write_npy_f32(std::string(dump) + "/before.npy", host, n), "cannot write");
    size_t free_before = 0, total = 0;
    if (room)
        CHECK_RT(cudaMemGetInfo(&free_before, &total));
    unsigned blocks = (unsigned)((n + 255) / 256);
    double first_unix_ms = 0;
    for (int k = 1; k <= launches; k++) {
        if (k > 1 && gap_ms > 0)
            std::this_thread::sleep_for(std::chrono::milliseconds(gap_ms));
        if (k == 1)
            first_unix_ms = std::chrono::duration<double, std::milli>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count();
        auto t = std::chrono::steady_clock::now();
        add_one<<<blocks, 256>>>(d, n);
        CHECK_LAUNCH();
        CHECK_RT(cudaDeviceSynchronize());
        std::printf("launch %d ms %.3f\n", k, ms_since(t));
        if (k == 1 && dump) {
            CHECK_RT(cudaMemcpy(host, d, n * sizeof(float), cudaMemcpyDeviceToHost));
            FAIL_IF(!write_npy_f32(std::string(dump) + "/after.npy", host, n), "cannot write");
        }
    }
    if (room) {
        const size_t slack = size_t(64) << 20;
        void* all = nullptr;
        cudaError_t rc = cudaMalloc(&all, free_before - slack);
        std::printf("room %s\n", rc == cudaSuccess ? "allocated" : "refused");
        if (rc == cudaSuccess)
            CHECK_RT(cudaFree(all));
        else
            cudaGetLastError();   // the refusal is the answer, not an error to carry on
        size_t free_after = 0;
        CHECK_RT(cudaMemGetInfo(&free_after, &total));
        std::printf("free_change_mib %lld\n",
                    ((long long)free_before - (long long)free_after) / (1 << 20));
    }
    std::vector<double> d2h;
    for (int r = 0; r < 5; r++) {
        auto t = std::chrono::steady_clock::now();
        CHECK_RT(cudaMemcpy(host, d, n * sizeof(float), cudaMemcpyDeviceToHost));
        d2h.push_back(ms_since(t));
    }
    std::sort(d2h.begin(), d2h.end());
    std::printf("d2h_ms %.3f\n", d2h[2]);
    if (clock)
        std::printf("first_launch_unix_ms %.3f\n", first_unix_ms);
    std::printf("launches add_one=%d\n", launches);
    CHECK_RT(cudaFreeHost(host));
    CHECK_RT(cudaFree(d));
    return 0;
}
