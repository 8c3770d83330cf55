// Runtime-API sample (static cudart, nvcc's default). Kernel names carry
// templates and namespaces so that demangling is exercised:
//   void ns::detail::fill<float>(float*, float, int)
//   void ns::saxpy<float>(float, float const*, float*, int)
//   void ns::img::brighten<unsigned char>(unsigned char*, unsigned long, int, int, int)
//
// Built three ways (see Makefile): default, --default-stream per-thread, and
// -DUSE_LAUNCH_EX (every launch through cudaLaunchKernelEx).
//
// usage: runtime_app [--pitch] [--dump DIR] [--n N]
//   --pitch     also run the 2-D kernel on a cudaMallocPitch image (2 launches)
//   --dump DIR  write x.npy, y0.npy (y before the first saxpy) and yK.npy
//               (y after the K-th saxpy) into DIR
// Prints `launches fill=2 saxpy=3 brighten=B` (B = 2 with --pitch, else 0).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "check.h"
#include "npy.h"

namespace ns {

namespace detail {
template <typename T>
__global__ void fill(T* p, T value, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        p[i] = value + (T)i;
}
}  // namespace detail

template <typename T>
__global__ void saxpy(T a, const T* x, T* y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    // fma explicitly, so that the host can check the result bit for bit.
    if (i < n)
        y[i] = fma(a, x[i], y[i]);
}

namespace img {
template <typename T>
__global__ void brighten(T* image, unsigned long pitch, int width, int height, int delta)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < width && y < height) {
        T* row = (T*)((char*)image + (unsigned long)y * pitch);
        row[x] = (T)(row[x] + delta);
    }
}
}  // namespace img

}  // namespace ns

// One launch path per build, so the same program drives <<<>>> or
// cudaLaunchKernelEx (which reaches the driver as cuLaunchKernelEx).
template <typename... Params, typename... Args>
static void launch(void (*kernel)(Params...), dim3 grid, dim3 block, Args... args)
{
#ifdef USE_LAUNCH_EX
    cudaLaunchConfig_t config = {};
    config.gridDim = grid;
    config.blockDim = block;
    config.dynamicSmemBytes = 0;
    config.stream = 0;
    CHECK_RT(cudaLaunchKernelEx(&config, kernel, static_cast<Params>(args)...));
#else
    kernel<<<grid, block>>>(static_cast<Params>(args)...);
    CHECK_LAUNCH();
#endif
}

struct Options {
    bool pitch = false;
    const char* dump = nullptr;
    int n = 10000;
};

static Options parse(int argc, char** argv)
{
    Options o;
    for (int i = 1; i < argc; i++) {
        if (!std::strcmp(argv[i], "--pitch")) {
            o.pitch = true;
        } else if (!std::strcmp(argv[i], "--dump") && i + 1 < argc) {
            o.dump = argv[++i];
        } else if (!std::strcmp(argv[i], "--n") && i + 1 < argc) {
            o.n = std::atoi(argv[++i]);
        } else {
            std::fprintf(stderr, "usage: runtime_app [--pitch] [--dump DIR] [--n N]\n");
            std::exit(2);
        }
    }
    FAIL_IF(o.n < 8, "--n must be at least 8");
    return o;
}

static void dump(const Options& o, const char* name, const std::vector<float>& v)
{
    if (!o.dump)
        return;
    std::string path = std::string(o.dump) + "/" + name + ".npy";
    FAIL_IF(!write_npy_f32(path, v.data(), v.size()), "cannot write %s", path.c_str());
}

static int run_saxpy(const Options& o, int* fills)
{
    const int n = o.n;
    const int saxpy_launches = 3;
    const float a = 1.5f;
    float *dx, *dy;
    CHECK_RT(cudaMalloc(&dx, n * sizeof(float)));
    CHECK_RT(cudaMalloc(&dy, n * sizeof(float)));
    dim3 grid((n + 255) / 256), block(256);
    launch(ns::detail::fill<float>, grid, block, dx, 0.25f, n);
    launch(ns::detail::fill<float>, grid, block, dy, -1000.0f, n);
    *fills = 2;

    // Awkward values overwrite a few elements so that a bit-exact comparison
    // means something: signed zero, subnormals, huge and non-round numbers.
    std::vector<float> x(n), y(n);
    CHECK_RT(cudaMemcpy(x.data(), dx, n * sizeof(float), cudaMemcpyDeviceToHost));
    CHECK_RT(cudaMemcpy(y.data(), dy, n * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++)
        FAIL_IF(x[i] != 0.25f + (float)i || y[i] != -1000.0f + (float)i, "fill: wrong at %d", i);
    const float special[] = {-0.0f, 1e-40f, -3e-39f, 3.0e38f, 1.0f / 3.0f, -7.1e-8f, 6.02e23f};
    for (int k = 0; k < (int)(sizeof special / sizeof special[0]); k++) {
        x[k] = special[k];
        y[n - 1 - k] = special[k];
    }
    for (int i = 7; i < n; i += 97)
        x[i] = std::sin((float)i) * 1e3f;
    CHECK_RT(cudaMemcpy(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    CHECK_RT(cudaMemcpy(dy, y.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    dump(o, "x", x);
    dump(o, "y0", y);

    std::vector<float> got(n), want = y;
    for (int k = 1; k <= saxpy_launches; k++) {
        launch(ns::saxpy<float>, grid, block, a, (const float*)dx, dy, n);
        CHECK_RT(cudaDeviceSynchronize());
        CHECK_RT(cudaMemcpy(got.data(), dy, n * sizeof(float), cudaMemcpyDeviceToHost));
        for (int i = 0; i < n; i++)
            want[i] = std::fma(a, x[i], want[i]);
        FAIL_IF(std::memcmp(got.data(), want.data(), n * sizeof(float)) != 0,
                "saxpy %d: result differs from the host's fma", k);
        dump(o, ("y" + std::to_string(k)).c_str(), got);
    }
    CHECK_RT(cudaFree(dx));
    CHECK_RT(cudaFree(dy));
    return saxpy_launches;
}

static int run_brighten()
{
    const int w = 333, h = 41, delta = 7, launches = 2;
    std::vector<unsigned char> image(w * h), back(w * h);
    for (int i = 0; i < w * h; i++)
        image[i] = (unsigned char)(i * 31 % 256);
    unsigned char* d;
    size_t pitch;
    CHECK_RT(cudaMallocPitch(&d, &pitch, w, h));
    CHECK_RT(cudaMemcpy2D(d, pitch, image.data(), w, w, h, cudaMemcpyHostToDevice));
    dim3 block(32, 8), grid((w + 31) / 32, (h + 7) / 8);
    for (int k = 0; k < launches; k++)
        launch(ns::img::brighten<unsigned char>, grid, block, d, (unsigned long)pitch, w, h,
               delta);
    CHECK_RT(cudaMemcpy2D(back.data(), w, d, pitch, w, h, cudaMemcpyDeviceToHost));
    for (int i = 0; i < w * h; i++)
        FAIL_IF(back[i] != (unsigned char)(image[i] + launches * delta), "brighten: wrong at %d",
                i);
    CHECK_RT(cudaFree(d));
    return launches;
}

int main(int argc, char** argv)
{
    Options o = parse(argc, argv);
    int fills = 0;
    int saxpys = run_saxpy(o, &fills);
    int brightens = o.pitch ? run_brighten() : 0;
    CHECK_RT(cudaDeviceSynchronize());
    std::printf("launches fill=%d saxpy=%d brighten=%d\n", fills, saxpys, brightens);
    return 0;
}
