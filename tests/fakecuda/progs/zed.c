/*
 * The ZED camera pipeline stand-in: a side-by-side stereo NV12 frame goes
 * through nv12_to_uyvy and device::FrP0k5607tPV<(sl::YUV_CONVENTION)2> into
 * pitched left and right RGBA images. The synthesis and the integer colour
 * math are specified exactly (tests/zedref.py is the numpy reference).
 *
 * Usage: zed [FRAMES] [--size WxH] [--out DIR]
 * Prints "frame F gain G left SUM right SUM", where SUM is the samples'
 * checksum of the tightly packed RGBA bytes (sum of (index + 1) * byte,
 * modulo 2^64); --out also writes left_F.rgba and right_F.rgba.
 */
#include "progcommon.h"

#include <stdint.h>

static int W = 640, H = 360;

static bool disc(int xs, int yy, int f)
{
    int cx = W / 2 + 8 * f, cy = H / 2, r = H / 4;
    return (xs - cx) * (xs - cx) + (yy - cy) * (yy - cy) < r * r;
}

/* Tightly packed NV12: TW x H luma rows, then TW x H/2 interleaved U,V. */
static void synth_nv12(unsigned char *nv12, int f)
{
    int tw = 2 * W;
    for (int y = 0; y < H; y++) {
        for (int X = 0; X < tw; X++) {
            int xs = X % W + 16 * (X / W);
            nv12[(size_t)y * tw + X] =
                (unsigned char)(disc(xs, y, f) ? 210 : 16 + (3 * xs + 2 * y) % 200);
        }
    }
    unsigned char *uv = nv12 + (size_t)H * tw;
    for (int y2 = 0; y2 < H / 2; y2++) {
        for (int X = 0; X < tw; X += 2) {
            int xs = X % W + 16 * (X / W);
            bool in = disc(xs, 2 * y2, f);
            uv[(size_t)y2 * tw + X] = (unsigned char)(in ? 90 : 64 + xs % 128);
            uv[(size_t)y2 * tw + X + 1] = (unsigned char)(in ? 200 : 64 + (2 * y2) % 128);
        }
    }
}

static int clamp255(int v)
{
    return v < 0 ? 0 : v > 255 ? 255 : v;
}

/* The expected RGBA of one pixel, straight from NV12. */
static void expect_pixel(const unsigned char *nv12, int X, int y, float gain, unsigned char *px)
{
    int tw = 2 * W, even = X & ~1;
    const unsigned char *uv = nv12 + (size_t)H * tw + (size_t)(y / 2) * tw;
    int c = nv12[(size_t)y * tw + X] - 16, d = uv[even] - 128, e = uv[even + 1] - 128;
    int g = (int)(gain * 256.0f);
    int rgb[3] = {clamp255((298 * c + 459 * e + 128) >> 8),
                  clamp255((298 * c - 55 * d - 136 * e + 128) >> 8),
                  clamp255((298 * c + 541 * d + 128) >> 8)};
    for (int k = 0; k < 3; k++)
        px[k] = (unsigned char)clamp255((rgb[k] * g + 128) >> 8);
    px[3] = 255;
}

static uint64_t checksum(const unsigned char *p, size_t n)
{
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += (uint64_t)(i + 1) * p[i];
    return sum;
}

static void write_file(const char *dir, const char *what, int f, const void *p, size_t n)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s_%d.rgba", dir, what, f);
    FILE *out = fopen(path, "wb");
    if (!out || fwrite(p, 1, n, out) != n || fclose(out) != 0)
        FAIL("cannot write %s", path);
}

static CUDA_MEMCPY2D copy_up(const void *host, size_t host_pitch, CUdeviceptr dev, size_t pitch,
                             size_t width, size_t rows)
{
    return (CUDA_MEMCPY2D){.srcMemoryType = CU_MEMORYTYPE_HOST, .srcHost = host,
                           .srcPitch = host_pitch, .dstMemoryType = CU_MEMORYTYPE_DEVICE,
                           .dstDevice = dev, .dstPitch = pitch, .WidthInBytes = width,
                           .Height = rows};
}

static CUDA_MEMCPY2D copy_down(CUdeviceptr dev, size_t pitch, void *host, size_t width,
                               size_t rows)
{
    return (CUDA_MEMCPY2D){.srcMemoryType = CU_MEMORYTYPE_DEVICE, .srcDevice = dev,
                           .srcPitch = pitch, .dstMemoryType = CU_MEMORYTYPE_HOST,
                           .dstHost = host, .dstPitch = width, .WidthInBytes = width,
                           .Height = rows};
}

int main(int argc, char **argv)
{
    int frames = 2;
    const char *out_dir = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--size") == 0 && i + 1 < argc) {
            if (sscanf(argv[++i], "%dx%d", &W, &H) != 2 || W <= 0 || H <= 0 || W % 2 || H % 2)
                FAIL("--size wants WxH, both even");
        } else if (strcmp(argv[i], "--out") == 0 && i + 1 < argc) {
            out_dir = argv[++i];
        } else if ((frames = atoi(argv[i])) <= 0) {
            FAIL("usage: %s [FRAMES] [--size WxH] [--out DIR]", argv[0]);
        }
    }
    struct tally t = {0};
    CUcontext ctx;
    CUmodule mod;
    CUfunction to_uyvy, to_rgba;
    CHECK(cuInit(0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
    CHECK(cuCtxSetCurrent(ctx));
    CHECK(cuModuleLoadData(&mod, prog_image));
    CHECK(cuModuleGetFunction(&to_uyvy, mod, "_Z12nv12_to_uyvyPKhjPhjjj"));
    CHECK(cuModuleGetFunction(
        &to_rgba, mod,
        "_ZN6device12FrP0k5607tPVILN2sl14YUV_CONVENTIONE2EEEvP6uchar4iPNS_6uchar8ES6_iiif"));

    size_t tw = 2 * (size_t)W, eye_bytes = (size_t)W * H * 4;
    CUdeviceptr d_nv12, d_uyvy, d_left, d_right;
    size_t nv12_pitch, uyvy_pitch, dst_pitch, right_pitch;
    CHECK(cuMemAllocPitch_v2(&d_nv12, &nv12_pitch, tw, (size_t)H * 3 / 2, 4));
    CHECK(cuMemAllocPitch_v2(&d_uyvy, &uyvy_pitch, 2 * tw, (size_t)H, 4));
    CHECK(cuMemAllocPitch_v2(&d_left, &dst_pitch, (size_t)W * 4, (size_t)H, 4));
    CHECK(cuMemAllocPitch_v2(&d_right, &right_pitch, (size_t)W * 4, (size_t)H, 4));
    if (right_pitch != dst_pitch)
        FAIL("left and right pitches differ");
    tally_alloc(&t, nv12_pitch * H * 3 / 2);
    tally_alloc(&t, uyvy_pitch * H);
    tally_alloc(&t, dst_pitch * H);
    tally_alloc(&t, right_pitch * H);

    unsigned char *nv12 = malloc(tw * H * 3 / 2);
    unsigned char *left = malloc(eye_bytes), *right = malloc(eye_bytes);
    if (!nv12 || !left || !right)
        FAIL("out of memory");
    for (int f = 0; f < frames; f++) {
        float gain = f % 2 ? 1.25f : 1.0f;
        synth_nv12(nv12, f);
        CUDA_MEMCPY2D up = copy_up(nv12, tw, d_nv12, nv12_pitch, tw, (size_t)H * 3 / 2);
        CHECK(cuMemcpy2D_v2(&up));

        unsigned int np = (unsigned int)nv12_pitch, up_ = (unsigned int)uyvy_pitch;
        unsigned int width = (unsigned int)tw, height = (unsigned int)H;
        void *a1[] = {&d_nv12, &np, &d_uyvy, &up_, &width, &height};
        CHECK(cuLaunchKernel(to_uyvy, (unsigned int)(W + 31) / 32, (unsigned int)(H + 7) / 8, 1,
                             32, 8, 1, 0, NULL, a1, NULL));
        int src_pitch = (int)uyvy_pitch, dp = (int)dst_pitch, w = W, h = H;
        void *a2[] = {&d_uyvy, &src_pitch, &d_left, &d_right, &dp, &w, &h, &gain};
        CHECK(cuLaunchKernel(to_rgba, (unsigned int)(W + 31) / 32, (unsigned int)(H + 7) / 8, 1,
                             32, 8, 1, 0, NULL, a2, NULL));
        tally_launch(&t, "nv12_to_uyvy", 1);
        tally_launch(&t, "FrP0k5607tPV", 1);

        CUDA_MEMCPY2D dl = copy_down(d_left, dst_pitch, left, (size_t)W * 4, (size_t)H);
        CUDA_MEMCPY2D dr = copy_down(d_right, dst_pitch, right, (size_t)W * 4, (size_t)H);
        CHECK(cuMemcpy2D_v2(&dl));
        CHECK(cuMemcpy2D_v2(&dr));
        for (int y = 0; y < H; y++) {
            for (int X = 0; X < (int)tw; X++) {
                unsigned char want[4];
                expect_pixel(nv12, X, y, gain, want);
                const unsigned char *got =
                    (X < W ? left : right) + ((size_t)y * W + (size_t)(X % W)) * 4;
                if (memcmp(got, want, 4) != 0)
                    FAIL("frame %d pixel (%d, %d) differs", f, X, y);
            }
        }
        printf("frame %d gain %.2f left %llu right %llu\n", f, gain,
               (unsigned long long)checksum(left, eye_bytes),
               (unsigned long long)checksum(right, eye_bytes));
        if (out_dir) {
            write_file(out_dir, "left", f, left, eye_bytes);
            write_file(out_dir, "right", f, right, eye_bytes);
        }
    }
    printf("verified %d frames of %dx%d per eye\n", frames, W, H);
    CHECK(cuMemFree_v2(d_nv12));
    CHECK(cuMemFree_v2(d_uyvy));
    CHECK(cuMemFree_v2(d_left));
    CHECK(cuMemFree_v2(d_right));
    free(nv12);
    free(left);
    free(right);
    tally_print(&t);
    return 0;
}
