// The ZED stand-in: synthetic side-by-side NV12 frames go through the seed
// talk's two kernels (nv12_to_uyvy, then device::FrP0k5607tPV) into pitched
// left/right RGBA images. It writes nothing but a checksum line per frame,
//   frame F gain=G left=SUM right=SUM
// where SUM is the sum over the image's bytes (rows of width*4, no padding,
// in order) of (index + 1) * byte, and a last line
//   launches nv12_to_uyvy=F FrP0k5607tPV=F
//
// usage: zed_camera [FRAMES [WIDTH HEIGHT]]   (defaults 2, 640, 360; per eye)
//
// The gain of the second kernel is 1.0 on even frames and 1.25 on odd ones;
// ZED_GAIN_FROM=F:G (e.g. 1:1.5) makes it G from frame F on, so that two runs
// differ in that one parameter (tests/gpu/test_gpu_bisect.py).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "check.h"
#include "zed_kernels.cuh"

struct Geometry {
    int w;   // pixels per eye
    int h;
    int tw;  // pixels of the side-by-side frame, 2 * w
};

// The frame synthesis of the specification: a bright disc that moves 8
// pixels a frame over a gradient, the right eye shifted by 16 pixels.
static bool in_disc(const Geometry& g, int frame, int xs, int yy)
{
    int cx = g.w / 2 + 8 * frame, cy = g.h / 2, r = g.h / 4;
    return (xs - cx) * (xs - cx) + (yy - cy) * (yy - cy) < r * r;
}

static std::vector<unsigned char> synth_nv12(const Geometry& g, int frame)
{
    std::vector<unsigned char> nv12((size_t)g.tw * g.h * 3 / 2);
    for (int y = 0; y < g.h; y++)
        for (int X = 0; X < g.tw; X++) {
            int xs = X % g.w + 16 * (X / g.w);
            nv12[(size_t)y * g.tw + X] =
                (unsigned char)(in_disc(g, frame, xs, y) ? 210 : 16 + (3 * xs + 2 * y) % 200);
        }
    unsigned char* uv = nv12.data() + (size_t)g.tw * g.h;
    for (int y2 = 0; y2 < g.h / 2; y2++)
        for (int X = 0; X < g.tw; X += 2) {
            int xs = X % g.w + 16 * (X / g.w);
            bool disc = in_disc(g, frame, xs, 2 * y2);
            uv[(size_t)y2 * g.tw + X] = (unsigned char)(disc ? 90 : 64 + xs % 128);
            uv[(size_t)y2 * g.tw + X + 1] = (unsigned char)(disc ? 200 : 64 + (2 * y2) % 128);
        }
    return nv12;
}

static unsigned long long checksum(const std::vector<unsigned char>& bytes)
{
    unsigned long long sum = 0;
    for (size_t i = 0; i < bytes.size(); i++)
        sum += (unsigned long long)(i + 1) * bytes[i];
    return sum;
}

static std::vector<unsigned char> download(const void* dev, size_t pitch, size_t row_bytes, int rows)
{
    std::vector<unsigned char> host(row_bytes * rows);
    CHECK_RT(cudaMemcpy2D(host.data(), row_bytes, dev, pitch, row_bytes, rows,
                          cudaMemcpyDeviceToHost));
    return host;
}

int main(int argc, char** argv)
{
    int frames = argc > 1 ? std::atoi(argv[1]) : 2;
    Geometry g = {640, 360, 0};
    if (argc > 3) {
        g.w = std::atoi(argv[2]);
        g.h = std::atoi(argv[3]);
    }
    FAIL_IF(frames <= 0 || g.w <= 0 || g.h <= 0 || g.w % 2 || g.h % 2,
            "usage: zed_camera [FRAMES [WIDTH HEIGHT]] (WIDTH and HEIGHT even)");
    g.tw = 2 * g.w;
    int gain_from = frames;  // ZED_GAIN_FROM=F:G: gain_to from frame gain_from on
    float gain_to = 1.0f;
    if (const char* from = std::getenv("ZED_GAIN_FROM")) {
        char rest;
        FAIL_IF(std::sscanf(from, "%d:%f%c", &gain_from, &gain_to, &rest) != 2 || gain_from < 0,
                "ZED_GAIN_FROM=%s: expected FRAME:GAIN", from);
    }

    unsigned char *nv12, *uyvy;
    size_t nv12_pitch, uyvy_pitch, left_pitch, right_pitch;
    device::uchar8 *left, *right;
    CHECK_RT(cudaMallocPitch(&nv12, &nv12_pitch, g.tw, g.h * 3 / 2));
    CHECK_RT(cudaMallocPitch(&uyvy, &uyvy_pitch, (size_t)g.tw * 2, g.h));
    CHECK_RT(cudaMallocPitch(&left, &left_pitch, (size_t)g.w * 4, g.h));
    CHECK_RT(cudaMallocPitch(&right, &right_pitch, (size_t)g.w * 4, g.h));
    FAIL_IF(left_pitch != right_pitch, "left and right pitches differ");
    // The outputs start as zeros, so that the first frame's "before" is known.
    CHECK_RT(cudaMemset2D(left, left_pitch, 0, (size_t)g.w * 4, g.h));
    CHECK_RT(cudaMemset2D(right, right_pitch, 0, (size_t)g.w * 4, g.h));

    dim3 block(32, 8);
    dim3 grid((g.w + block.x - 1) / block.x, (g.h + block.y - 1) / block.y);
    for (int f = 0; f < frames; f++) {
        std::vector<unsigned char> frame = synth_nv12(g, f);
        CHECK_RT(cudaMemcpy2D(nv12, nv12_pitch, frame.data(), g.tw, g.tw, g.h * 3 / 2,
                              cudaMemcpyHostToDevice));
        float gain = f >= gain_from ? gain_to : (f % 2 ? 1.25f : 1.0f);
        nv12_to_uyvy<<<grid, block>>>(nv12, (unsigned int)nv12_pitch, uyvy,
                                      (unsigned int)uyvy_pitch, g.tw, g.h);
        CHECK_LAUNCH();
        device::FrP0k5607tPV<sl::YUV_FULL_RANGE><<<grid, block>>>(
            (uchar4*)uyvy, (int)uyvy_pitch, left, right, (int)left_pitch, g.w, g.h, gain);
        CHECK_LAUNCH();
        CHECK_RT(cudaDeviceSynchronize());

        // The first stage is a pure repacking, checked here; the colour math
        // is checked by the tests against tests/zedref.py through the sums.
        std::vector<unsigned char> packed = download(uyvy, uyvy_pitch, (size_t)g.tw * 2, g.h);
        const unsigned char* uv = frame.data() + (size_t)g.tw * g.h;
        for (int y = 0; y < g.h; y++)
            for (int x = 0; x < g.tw; x += 2) {
                const unsigned char* q = &packed[(size_t)y * g.tw * 2 + 2 * x];
                const unsigned char* yrow = &frame[(size_t)y * g.tw];
                const unsigned char* uvrow = uv + (size_t)(y / 2) * g.tw;
                FAIL_IF(q[0] != uvrow[x] || q[1] != yrow[x] || q[2] != uvrow[x + 1] ||
                            q[3] != yrow[x + 1],
                        "frame %d: UYVY wrong at (%d,%d)", f, x, y);
            }
        std::vector<unsigned char> l = download(left, left_pitch, (size_t)g.w * 4, g.h);
        std::vector<unsigned char> r = download(right, right_pitch, (size_t)g.w * 4, g.h);
        for (size_t i = 3; i < l.size(); i += 4)
            FAIL_IF(l[i] != 255 || r[i] != 255, "frame %d: alpha is not 255", f);
        std::printf("frame %d gain=%.2f left=%llu right=%llu\n", f, gain, checksum(l),
                    checksum(r));
    }
    CHECK_RT(cudaFree(nv12));
    CHECK_RT(cudaFree(uyvy));
    CHECK_RT(cudaFree(left));
    CHECK_RT(cudaFree(right));
    std::printf("launches nv12_to_uyvy=%d FrP0k5607tPV=%d\n", frames, frames);
    return 0;
}
