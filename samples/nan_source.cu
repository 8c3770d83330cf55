// A small float pipeline whose result turns NaN at one step: the sample of the
// README's `cudump --check-nan` tutorial step. Each step s (from 1) makes a
// W x H image on the host, every value at least 1 except at step BAD, where
// row H/2 is all zeros, and launches
//   sim::row_sums(img, sums, w, h)         sums[y] = the sum of row y
//   sim::normalize(out, img, sums, w, h)   out = img / sums[row]: each row sums to 1
//   sim::accumulate(acc, out, n)           acc += out
// At step BAD, normalize divides 0 by 0 along that row and leaves NaN there;
// accumulate carries it into acc, where it stays: the result is NaN, and the
// kernel that made it is neither the last one nor the one that reads acc.
//
// usage: nan_source [STEPS [BAD]]   (defaults 6 and 4; BAD 0: no zero row)
// Prints `accumulator: N of W*H values are NaN`, then
// `launches row_sums=STEPS normalize=STEPS accumulate=STEPS`.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "check.h"

namespace sim {

__global__ void row_sums(const float* img, float* sums, int w, int h)
{
    int y = blockIdx.x * blockDim.x + threadIdx.x;
    if (y >= h)
        return;
    float sum = 0.0f;
    for (int x = 0; x < w; x++)
        sum += img[(size_t)y * w + x];
    sums[y] = sum;
}

__global__ void normalize(float* out, const float* img, const float* sums, int w, int h)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= w * h)
        return;
    out[i] = img[i] / sums[i / w];
}

__global__ void accumulate(float* acc, const float* out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        acc[i] += out[i];
}

}  // namespace sim

int main(int argc, char** argv)
{
    const int w = 64, h = 64, n = w * h;
    int steps = argc > 1 ? std::atoi(argv[1]) : 6;
    int bad = argc > 2 ? std::atoi(argv[2]) : 4;
    FAIL_IF(steps <= 0 || bad < 0, "usage: nan_source [STEPS [BAD]] (BAD 0: no zero row)");

    float *img, *sums, *out, *acc;
    CHECK_RT(cudaMalloc(&img, n * sizeof(float)));
    CHECK_RT(cudaMalloc(&sums, h * sizeof(float)));
    CHECK_RT(cudaMalloc(&out, n * sizeof(float)));
    CHECK_RT(cudaMalloc(&acc, n * sizeof(float)));
    CHECK_RT(cudaMemset(sums, 0, h * sizeof(float)));
    CHECK_RT(cudaMemset(out, 0, n * sizeof(float)));
    CHECK_RT(cudaMemset(acc, 0, n * sizeof(float)));

    std::vector<float> host(n);
    for (int s = 1; s <= steps; s++) {
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++)
                host[(size_t)y * w + x] =
                    s == bad && y == h / 2 ? 0.0f : (float)(1 + (x + 2 * y + s) % 7);
        CHECK_RT(cudaMemcpy(img, host.data(), n * sizeof(float), cudaMemcpyHostToDevice));
        sim::row_sums<<<(h + 63) / 64, 64>>>(img, sums, w, h);
        CHECK_LAUNCH();
        sim::normalize<<<(n + 255) / 256, 256>>>(out, img, sums, w, h);
        CHECK_LAUNCH();
        sim::accumulate<<<(n + 255) / 256, 256>>>(acc, out, n);
        CHECK_LAUNCH();
    }
    CHECK_RT(cudaMemcpy(host.data(), acc, n * sizeof(float), cudaMemcpyDeviceToHost));
    int nans = 0;
    for (float v : host)
        nans += std::isnan(v) ? 1 : 0;
    int want = bad >= 1 && bad <= steps ? w : 0;
    FAIL_IF(nans != want, "accumulator: %d NaN, expected %d", nans, want);
    std::printf("accumulator: %d of %d values are NaN\n", nans, n);
    CHECK_RT(cudaFree(img));
    CHECK_RT(cudaFree(sums));
    CHECK_RT(cudaFree(out));
    CHECK_RT(cudaFree(acc));
    std::printf("launches row_sums=%d normalize=%d accumulate=%d\n", steps, steps, steps);
    return 0;
}
