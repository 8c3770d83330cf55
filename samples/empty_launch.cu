// The launch-overhead benchmark program: an empty kernel launched N times.
// It reports launches per second over the timed launches, from the first
// launch to the end of the final synchronisation, after a warm-up.
//
// usage: empty_launch [N] [WARMUP]   (defaults 200000 and 2000)
// Prints `launches_per_second R` and then `launches empty_kernel=N+WARMUP`.
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "check.h"

__global__ void empty_kernel() {}

int main(int argc, char** argv)
{
    long n = argc > 1 ? std::atol(argv[1]) : 200000;
    long warmup = argc > 2 ? std::atol(argv[2]) : 2000;
    FAIL_IF(n <= 0 || warmup < 0, "usage: empty_launch [N] [WARMUP]");

    for (long i = 0; i < warmup; i++) {
        empty_kernel<<<1, 1>>>();
        CHECK_LAUNCH();
    }
    CHECK_RT(cudaDeviceSynchronize());

    auto start = std::chrono::steady_clock::now();
    for (long i = 0; i < n; i++) {
        // Checking every launch is part of what a real program pays, and it
        // keeps the loop from being anything but launches.
        empty_kernel<<<1, 1>>>();
        CHECK_LAUNCH();
    }
    CHECK_RT(cudaDeviceSynchronize());
    auto stop = std::chrono::steady_clock::now();

    double seconds = std::chrono::duration<double>(stop - start).count();
    std::printf("launches_per_second %.0f\n", (double)n / seconds);
    std::printf("launches empty_kernel=%ld\n", n + warmup);
    return 0;
}
