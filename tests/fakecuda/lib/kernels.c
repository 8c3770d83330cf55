/*
 * The built-in kernels: host implementations of what a test program's
 * "image" contains, with the parameter layouts the real compiler gives them.
 * Each thread function is written the way the CUDA kernel would be, from its
 * global index, so that grid and block sizes matter as they do on a GPU.
 */
#define _GNU_SOURCE
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "tooljob.h"

#define ARG(type, args, k, i, name)                                                                \
    type name;                                                                                     \
    memcpy(&name, (args) + (k)->offsets[i], sizeof name)

static unsigned int gx(struct fc_dim3 b, struct fc_dim3 t, struct fc_dim3 d)
{
    return b.x * d.x + t.x;
}

static unsigned int gy(struct fc_dim3 b, struct fc_dim3 t, struct fc_dim3 d)
{
    return b.y * d.y + t.y;
}

static const struct fc_builtin *self(size_t i)
{
    return fc_builtin_at(i);
}

enum {
    K_VECADD,
    K_SCALE,
    K_EMPTY,
    K_FILL,
    K_NV12,
    K_FRP0K,
    K_ADD3,
    K_SUM24,
    K_SQUARE,
    K_TOOLS,
    K_TMA_COPY,
    K_POKE,
    K_ALLREDUCE,
    K_XLA_LOG,
    K_SCAN_LIST,
    K_FILL_HALF,
    K_COUNT
};

/* vecAdd(float const* a, float const* b, float* c, int n) */
static void vec_add(const unsigned char *args, struct fc_dim3 b, struct fc_dim3 t,
                    struct fc_dim3 d, struct fc_dim3 g)
{
    (void)g;
    const struct fc_builtin *k = self(K_VECADD);
    ARG(const float *, args, k, 0, a);
    ARG(const float *, args, k, 1, bb);
    ARG(float *, args, k, 2, c);
    ARG(int, args, k, 3, n);
    unsigned int i = gx(b, t, d);
    if ((long long)i < n)
        c[i] = a[i] + bb[i];
}

/* scale(float* x, float s, int n) */
static void scale(const unsigned char *args, struct fc_dim3 b, struct fc_dim3 t, struct fc_dim3 d,
                  struct fc_dim3 g)
{
    (void)g;
    const struct fc_builtin *k = self(K_SCALE);
    ARG(float *, args, k, 0, x);
    ARG(float, args, k, 1, s);
    ARG(int, args, k, 2, n);
    unsigned int i = gx(b, t, d);
    if ((long long)i < n)
        x[i] *= s;
}

/* square(float const* x, float* y, int n): y = x * x (overflows to +inf past ~1.8e19) */
static void square(const unsigned char *args, struct fc_dim3 b, struct fc_dim3 t,
                   struct fc_dim3 d, struct fc_dim3 g)
{
    (void)g;
    const struct fc_builtin *k = self(K_SQUARE);
    ARG(const float *, args, k, 0, x);
    ARG(float *, args, k, 1, y);
    ARG(int, args, k, 2, n);
    unsigned int i = gx(b, t, d);
    if ((long long)i < n)
        y[i] = x[i] * x[i];
}

/* An XLA fusion as XLA emits one: an extern "C" name and untyped pointers, the sizes known
 * to the kernel, not passed: (f32 x[n], s32 index[n], f32 y[n]) with n = the grid's
 * threads. y = log's NaN where x is negative, else x (no libm here); index is not read,
 * there to be an operand that is not floating point. */
static void xla_log(const unsigned char *args, struct fc_dim3 b, struct fc_dim3 t,
                    struct fc_dim3 d, struct fc_dim3 g)
{
    (void)g;
    const struct fc_builtin *k = self(K_XLA_LOG);
    ARG(const float *, args, k, 0, x);
    ARG(float *, args, k, 2, y);
    unsigned int i = gx(b, t, d);
    y[i] = x[i] < 0.0f ? __builtin_nanf("") : x[i];
}

/* poke(int* p, int v): *p = v, from thread 0 of block 0. A pointer outside device memory is
 * what a real GPU answers with CUDA_ERROR_ILLEGAL_ADDRESS: the kernel stops and the context
 * is lost (fc_fault), so that nothing later on any stream runs. */
static void poke(const unsigned char *args, struct fc_dim3 b, struct fc_dim3 t, struct fc_dim3 d,
                 struct fc_dim3 g)
{
    (void)d;
    (void)g;
    const struct fc_builtin *k = self(K_POKE);
    ARG(int *, args, k, 0, p);
    ARG(int, args, k, 1, v);
    if (b.x || b.y || b.z || t.x || t.y || t.z)
        return;
    if (fc_check_device((CUdeviceptr)(uintptr_t)p, sizeof *p) != CUDA_SUCCESS) {
        fc_set_fault(FC_ERROR_ILLEGAL_ADDRESS);
        return;
    }
    *p = v;
}

/* fill<int>(int* p, int v, int n) */
static void fill_int(const unsigned char *args, struct fc_dim3 b, struct fc_dim3 t,
                     struct fc_dim3 d, struct fc_dim3 g)
{
    (void)g;
    const struct fc_builtin *k = self(K_FILL);
    ARG(int *, args, k, 0, p);
    ARG(int, args, k, 1, v);
    ARG(int, args, k, 2, n);
    unsigned int i = gx(b, t, d);
    if ((long long)i < n)
        p[i] = v;
}

/* fillHalf(__half* p, unsigned short v, int n): p[i] = v, v an fp16 element's bits */
static void fill_half(const unsigned char *args, struct fc_dim3 b, struct fc_dim3 t,
                      struct fc_dim3 d, struct fc_dim3 g)
{
    (void)g;
    const struct fc_builtin *k = self(K_FILL_HALF);
    ARG(uint16_t *, args, k, 0, p);
    ARG(uint16_t, args, k, 1, v);
    ARG(int, args, k, 2, n);
    unsigned int i = gx(b, t, d);
    if ((long long)i < n)
        p[i] = v;
}

/* nv12_to_uyvy(uchar const* nv12, uint nv12_pitch, uchar* uyvy, uint uyvy_pitch,
 *              uint width, uint height): one thread per pixel pair. */
static void nv12_to_uyvy(const unsigned char *args, struct fc_dim3 b, struct fc_dim3 t,
                         struct fc_dim3 d, struct fc_dim3 g)
{
    (void)g;
    const struct fc_builtin *k = self(K_NV12);
    ARG(const unsigned char *, args, k, 0, nv12);
    ARG(unsigned int, args, k, 1, nv12_pitch);
    ARG(unsigned char *, args, k, 2, uyvy);
    ARG(unsigned int, args, k, 3, uyvy_pitch);
    ARG(unsigned int, args, k, 4, width);
    ARG(unsigned int, args, k, 5, height);
    unsigned int x = 2 * gx(b, t, d), y = gy(b, t, d);
    if (x >= width || y >= height)
        return;
    const unsigned char *yrow = nv12 + (size_t)y * nv12_pitch;
    const unsigned char *uvrow = nv12 + (size_t)(height + y / 2) * nv12_pitch;
    unsigned char *out = uyvy + (size_t)y * uyvy_pitch + 2 * (size_t)x;
    out[0] = uvrow[x];
    out[1] = yrow[x];
    out[2] = uvrow[x + 1];
    out[3] = yrow[x + 1];
}

static int clamp255(int v)
{
    return v < 0 ? 0 : v > 255 ? 255 : v;
}

static void yuv_to_rgba(int yv, int u, int v, int g, unsigned char *px)
{
    int c = yv - 16, dd = u - 128, e = v - 128;
    int r = clamp255((298 * c + 459 * e + 128) >> 8);
    int gr = clamp255((298 * c - 55 * dd - 136 * e + 128) >> 8);
    int bl = clamp255((298 * c + 541 * dd + 128) >> 8);
    px[0] = (unsigned char)clamp255((r * g + 128) >> 8);
    px[1] = (unsigned char)clamp255((gr * g + 128) >> 8);
    px[2] = (unsigned char)clamp255((bl * g + 128) >> 8);
    px[3] = 255;
}

/* device::FrP0k5607tPV<(sl::YUV_CONVENTION)2>(uchar4* src, int src_pitch,
 *     uchar8* left, uchar8* right, int dst_pitch, int width, int height, float gain):
 * one thread per macro-pixel (two pixels sharing U and V) of the side-by-side
 * UYVY frame; width is one eye's width. */
static void frp0k(const unsigned char *args, struct fc_dim3 b, struct fc_dim3 t, struct fc_dim3 d,
                  struct fc_dim3 g)
{
    (void)g;
    const struct fc_builtin *k = self(K_FRP0K);
    ARG(const unsigned char *, args, k, 0, src);
    ARG(int, args, k, 1, src_pitch);
    ARG(unsigned char *, args, k, 2, left);
    ARG(unsigned char *, args, k, 3, right);
    ARG(int, args, k, 4, dst_pitch);
    ARG(int, args, k, 5, width);
    ARG(int, args, k, 6, height);
    ARG(float, args, k, 7, gain);
    int m = (int)gx(b, t, d), y = (int)gy(b, t, d);
    if (m >= width || y >= height)
        return;
    int gi = (int)(gain * 256.0f);
    const unsigned char *q = src + (size_t)y * (size_t)src_pitch + 4 * (size_t)m;
    int u = q[0], y0 = q[1], v = q[2], y1 = q[3];
    int x0 = 2 * m;
    unsigned char *eye = x0 < width ? left : right;
    int cx = x0 % width;
    unsigned char *row = eye + (size_t)y * (size_t)dst_pitch;
    yuv_to_rgba(y0, u, v, gi, row + 4 * (size_t)cx);
    yuv_to_rgba(y1, u, v, gi, row + 4 * (size_t)(cx + 1));
}

/* p[0][i] = p[1][i] + ... + p[count - 1][i] over a by-value std::array<float*, count> p
 * followed by int n: PyTorch's way of passing an output and its inputs in one struct. */
static void sum_into_first(size_t kernel, unsigned count, const unsigned char *args,
                           struct fc_dim3 b, struct fc_dim3 t, struct fc_dim3 d)
{
    const struct fc_builtin *k = self(kernel);
    float *p[24]; /* count is 3 or 24 */
    memcpy(p, args + k->offsets[0], count * sizeof p[0]);
    ARG(int, args, k, 1, n);
    unsigned int i = gx(b, t, d);
    if ((long long)i >= n)
        return;
    float s = 0;
    for (unsigned j = 1; j < count; j++)
        s += p[j][i];
    p[0][i] = s;
}

/* add3(std::array<float*, 3ul> p, int n): p[0][i] = p[1][i] + p[2][i]. */
static void add3(const unsigned char *args, struct fc_dim3 b, struct fc_dim3 t, struct fc_dim3 d,
                 struct fc_dim3 g)
{
    (void)g;
    sum_into_first(K_ADD3, 3, args, b, t, d);
}

/* sum24(std::array<float*, 24ul> p, int n): p[0][i] = p[1][i] + ... + p[23][i], a kernel
 * with as many buffers as a multi-tensor optimizer kernel passes in one struct. */
static void sum24(const unsigned char *args, struct fc_dim3 b, struct fc_dim3 t, struct fc_dim3 d,
                  struct fc_dim3 g)
{
    (void)g;
    sum_into_first(K_SUM24, 24, args, b, t, d);
}

/* tma_copy(float* out, CUtensorMap src) (src a __grid_constant__ parameter, at
 * offset 64): out[i] = the i-th element of the tensor the map describes, in
 * order, innermost dimension first, as a TMA load would read it. The map's
 * words say where the tensor is (fakecuda.h's FC_TMAP_*); the kernel has no
 * pointer to it otherwise. Elements are copied as bytes of their size. */
static void tma_copy(const unsigned char *args, struct fc_dim3 b, struct fc_dim3 t,
                     struct fc_dim3 d, struct fc_dim3 g)
{
    (void)g;
    static const unsigned char sizes[16] = {1, 2, 4, 4, 8, 8, 2, 4, 8, 2, 4, 4, 4, 1, 1, 1};
    const struct fc_builtin *k = self(K_TMA_COPY);
    ARG(unsigned char *, args, k, 0, out);
    uint64_t map[CU_TENSOR_MAP_NUM_QWORDS];
    memcpy(map, args + k->offsets[1], sizeof map);
    uint64_t tag = map[FC_TMAP_TAG];
    if ((uint32_t)tag != FC_TMAP_MAGIC)
        return;
    unsigned esize = sizes[(tag >> 32) & 15], rank = (tag >> 40) & 0xff;
    uint64_t total = 1;
    for (unsigned r = 0; r < rank; r++)
        total *= map[FC_TMAP_DIMS + r];
    uint64_t i = gx(b, t, d);
    if (i >= total)
        return;
    uint64_t rest = i / map[FC_TMAP_DIMS], at = i % map[FC_TMAP_DIMS] * esize;
    for (unsigned r = 1; r < rank; r++) {
        at += rest % map[FC_TMAP_DIMS + r] * map[FC_TMAP_STRIDES + r - 1];
        rest /= map[FC_TMAP_DIMS + r];
    }
    memcpy(out + i * esize, (const unsigned char *)(uintptr_t)map[FC_TMAP_ADDRESS] + at, esize);
}

_Atomic unsigned long fc_tool_bytes;
/* cudump_tools kernels run (graph nodes too), beside the host's launches of any
 * kernel of cudump's (fc_tool_launches, launch.c). */
_Atomic unsigned long fc_tools_runs;

/* cudump_tools(struct tool_jobs): the kernel the shim loads as PTX
 * (shim/gpu/tools.cu), thread by thread the same way: each block works on its
 * job with a grid-stride loop per thread and adds what it found to the job's
 * accumulator; the last block of the job to finish moves the accumulator into
 * the result, then writes `done`. Blocks and threads run one after the other
 * here, so a block is done when its last thread is. */
static uint64_t tool_mix(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBull;
    x ^= x >> 31;
    return x;
}

static uint32_t tool_word(const unsigned char *row, uint64_t width, uint64_t c)
{
    uint32_t w = 0;
    for (unsigned k = 0; k < 4; k++)
        if (c * 4 + k < width)
            w |= (uint32_t)row[c * 4 + k] << (8 * k);
    return w;
}

static int tool_nonfinite(const unsigned char *p, unsigned mode)
{
    uint64_t v = 0;
    memcpy(&v, p, mode == 2 ? 8 : mode >= 3 ? 2 : 4);
    switch (mode) {
    case 1: return (v & 0x7f800000u) == 0x7f800000u;
    case 2: return (v & 0x7ff0000000000000ull) == 0x7ff0000000000000ull;
    case 3: return (v & 0x7c00u) == 0x7c00u;
    default: return (v & 0x7f80u) == 0x7f80u;
    }
}

/* |x| of a float element of format fmt (a scan mode), as numpy converts it. */
static double tool_abs(const unsigned char *p, unsigned fmt)
{
    uint64_t v = 0;
    memcpy(&v, p, fmt == 2 ? 8 : fmt >= 3 ? 2 : 4);
    if (fmt == 1) {
        float f;
        uint32_t w = (uint32_t)v & 0x7fffffffu;
        memcpy(&f, &w, sizeof f);
        return f;
    }
    if (fmt == 2) {
        double d;
        v &= 0x7fffffffffffffffull;
        memcpy(&d, &v, sizeof d);
        return d;
    }
    if (fmt == 4) {
        float f;
        uint32_t w = ((uint32_t)v & 0x7fffu) << 16;
        memcpy(&f, &w, sizeof f);
        return f;
    }
    uint32_t e = (v >> 10) & 31, m = v & 1023, w = 0x7f800000u | (m ? 1u << 22 : 0);
    float f;
    if (e == 0)
        return m * 5.9604644775390625e-8; /* 2**-24 */
    if (e != 31)
        w = (e + 112) << 23 | m << 13;
    memcpy(&f, &w, sizeof f);
    return f;
}

/* One thread's share of job j (its block-th block): what it finds goes into the job's
 * accumulator; the job's last thread writes the result (and the mark). Returns whether
 * this thread was that one: its `done` (and a hold's count) is then the caller's. */
static bool tool_thread(const struct tool_job *j, unsigned block, struct fc_dim3 t,
                        struct fc_dim3 d)
{
    const unsigned char *base = (const unsigned char *)(uintptr_t)j->src;
    uint64_t width = j->width, height = j->height, pitch = j->pitch;
    uint64_t first = (uint64_t)block * d.x + t.x, stride = (uint64_t)j->blocks * d.x;
    uint64_t a = 0, mark = 0;
    double s = 0;
    unsigned fmt = (j->mode >> 8) & 0xff;
    if ((j->mode & 0xff) == 0) {
        uint64_t wpr = (width + 3) / 4;
        for (uint64_t i = first; i < wpr * height; i += stride)
            a += tool_mix(tool_word(base + i / wpr * pitch, width, i % wpr) +
                          i * 0x9E3779B97F4A7C15ull);
        /* The sum of |x| of elements of format fmt (a scan mode), if asked. */
        unsigned esize = fmt == 2 ? 8 : fmt >= 3 ? 2 : 4;
        uint64_t epr = width / esize;
        for (uint64_t i = first;
             fmt && ((uintptr_t)base | pitch) % esize == 0 && i < epr * height; i += stride)
            s += tool_abs(base + i / epr * pitch + i % epr * esize, fmt);
    } else if ((j->mode & 0xff) <= 4) {
        unsigned mode = j->mode & 0xff, esize = mode == 2 ? 8 : mode >= 3 ? 2 : 4;
        uint64_t epr = width / esize;
        for (uint64_t i = first; ((uintptr_t)base | pitch) % esize == 0 && i < epr * height;
             i += stride)
            if (tool_nonfinite(base + i / epr * pitch + i % epr * esize, mode)) {
                a++;
                mark = ~i > mark ? ~i : mark;
            }
    }
    uint64_t *acc = (uint64_t *)(uintptr_t)j->acc;
    acc[0] += a;
    if (fmt) {   /* a float64 in the second word */
        double sum;
        memcpy(&sum, &acc[1], sizeof sum);
        sum += s;
        memcpy(&acc[1], &sum, sizeof sum);
    } else if (mark > acc[1]) {
        acc[1] = mark;
    }
    if (t.x != d.x - 1 || ++acc[2] != j->blocks)
        return false;
    /* As on a GPU: results written where the device maps nothing (host memory whose
     * registration ended with its context) fault the context. */
    if (fc_check_mapped(j->acc, 3 * sizeof *acc) != CUDA_SUCCESS ||
        fc_check_mapped(j->result, 3 * sizeof(uint64_t)) != CUDA_SUCCESS ||
        (j->twin && fc_check_mapped(j->twin, 3 * sizeof(uint64_t)) != CUDA_SUCCESS)) {
        fc_set_fault(FC_ERROR_ILLEGAL_ADDRESS);
        return false;
    }
    volatile uint64_t *result = (volatile uint64_t *)(uintptr_t)j->result;
    volatile uint64_t *twin = (volatile uint64_t *)(uintptr_t)j->twin;
    result[0] = acc[0];
    result[1] = acc[1];
    if (twin) {
        twin[0] = acc[0];
        twin[1] = acc[1];
    }
    fc_stats_at_exit();
    atomic_fetch_add(&fc_tool_bytes, width * height);
    if (j->mark && acc[0] && (!j->before || ((volatile uint64_t *)(uintptr_t)j->before)[0] == 0))
        *(uint64_t *)(uintptr_t)j->mark |= 1; /* a new NaN or Inf */
    acc[0] = acc[1] = acc[2] = 0;
    return true;
}

static void tools(const unsigned char *args, struct fc_dim3 b, struct fc_dim3 t,
                  struct fc_dim3 d, struct fc_dim3 g)
{
    (void)g;
    const struct fc_builtin *k = self(K_TOOLS);
    if (b.x == 0 && t.x == 0)
        atomic_fetch_add(&fc_tools_runs, 1);
    /* Called once per thread: only the job's own bytes are copied out. */
    const unsigned char *param = args + k->offsets[0];
    unsigned njobs, n = 0, block = b.x;
    memcpy(&njobs, param + offsetof(struct tool_jobs, njobs), sizeof njobs);
    struct tool_job job;
    for (;;) {
        memcpy(&job, param + offsetof(struct tool_jobs, job) + n * sizeof job, sizeof job);
        if (n + 1 >= njobs || block < job.blocks)
            break;
        block -= job.blocks;
        n++;
    }
    const struct tool_job *j = &job;
    if (!tool_thread(j, block, t, d))
        return;
    volatile uint64_t *result = (volatile uint64_t *)(uintptr_t)j->result;
    volatile uint64_t *twin = (volatile uint64_t *)(uintptr_t)j->twin;
    /* With `hold`, each of the held launch's jobs (TOOL_HOLDS) counts itself before
     * `done`; the last one zeroes the words and, if anything was marked, holds the
     * stream (fc_tools_hold). */
    uint64_t hold, words;
    unsigned hold_jobs;
    memcpy(&hold, param + offsetof(struct tool_jobs, hold), sizeof hold);
    memcpy(&words, param + offsetof(struct tool_jobs, hold_acc), sizeof words);
    memcpy(&hold_jobs, param + offsetof(struct tool_jobs, hold_jobs), sizeof hold_jobs);
    uint64_t *w = (uint64_t *)(uintptr_t)words;
    if (hold && (j->mode & TOOL_HOLDS) && ++w[0] == hold_jobs) {
        w[0] = 0;
        if (w[1])
            *(volatile uint32_t *)(uintptr_t)hold = 1; /* GATE_HELD */
        w[1] = 0;
    }
    __atomic_thread_fence(__ATOMIC_RELEASE);
    result[2] = j->tag;
    if (twin)
        twin[2] = j->twin_tag;
}

/* A graph scan node's running record (shim/tooljob.h): the sequence word odd while the
 * others are written, as the kernel does. */
static void write_record(volatile uint64_t *record, uint64_t found, uint64_t first)
{
    uint64_t seq = record[TOOL_RECORD_SEQ];
    record[TOOL_RECORD_SEQ] = seq + 1;
    __atomic_thread_fence(__ATOMIC_RELEASE);
    if (found) {
        record[TOOL_RECORD_FIRST] = first;
        record[TOOL_RECORD_COUNT] = found;
        record[TOOL_RECORD_BAD] = record[TOOL_RECORD_BAD] + 1;
    } else {
        record[TOOL_RECORD_GOOD] = record[TOOL_RECORD_GOOD] + 1;
    }
    __atomic_thread_fence(__ATOMIC_RELEASE);
    record[TOOL_RECORD_SEQ] = seq + 2;
}

/* FAKECUDA_RECORD_LAG=1: a scan node's jobs after its first write their records only at
 * the second cuStreamSynchronize after the node ran (fc_records_land), as on a GPU where
 * the host looks while the node is half done: a look in between sees the first job's
 * record of the latest replay and the others' of the replay before. */
static bool record_lag(void)
{
    const char *on = getenv("FAKECUDA_RECORD_LAG");
    return on && *on == '1';
}

enum { LAGGED_MAX = 4096 };
static struct lagged {
    volatile uint64_t *record;
    uint64_t found, first, due;
} lagged[LAGGED_MAX];
static unsigned nlagged;
static uint64_t stream_syncs;
static pthread_mutex_t lag_lock = PTHREAD_MUTEX_INITIALIZER;

static void lag_record(volatile uint64_t *record, uint64_t found, uint64_t first)
{
    pthread_mutex_lock(&lag_lock);
    if (nlagged < LAGGED_MAX)
        lagged[nlagged++] = (struct lagged){record, found, first, stream_syncs + 2};
    else
        write_record(record, found, first);
    pthread_mutex_unlock(&lag_lock);
}

FC_HIDDEN void fc_records_land(void)
{
    pthread_mutex_lock(&lag_lock);
    stream_syncs++;
    unsigned kept = 0;
    for (unsigned i = 0; i < nlagged; i++) {
        if (lagged[i].due <= stream_syncs)
            write_record(lagged[i].record, lagged[i].found, lagged[i].first);
        else
            lagged[kept++] = lagged[i];
    }
    nlagged = kept;
    pthread_mutex_unlock(&lag_lock);
}

_Atomic unsigned long fc_scan_list_launches;

/* cudump_scan_list(struct tool_list): the batched scan (shim/gpu/tools.cu), the same
 * way: a block finds its job by the list's `starts`, in device-readable memory. */
static void scan_list(const unsigned char *args, struct fc_dim3 b, struct fc_dim3 t,
                      struct fc_dim3 d, struct fc_dim3 g)
{
    (void)g;
    const struct fc_builtin *k = self(K_SCAN_LIST);
    struct tool_list list;
    memcpy(&list, args + k->offsets[0], sizeof list);
    if (b.x == 0 && t.x == 0) {
        atomic_fetch_add(&fc_scan_list_launches, 1);
        fc_stats_at_exit();
    }
    if (!list.njobs || fc_check_mapped(list.jobs, list.njobs * sizeof(struct tool_job)) ||
        fc_check_mapped(list.starts, list.njobs * sizeof(unsigned))) {
        fc_set_fault(FC_ERROR_ILLEGAL_ADDRESS);
        return;
    }
    const struct tool_job *jobs = (const struct tool_job *)(uintptr_t)list.jobs;
    const unsigned *starts = (const unsigned *)(uintptr_t)list.starts;
    unsigned lo = 0, hi = list.njobs;
    while (hi - lo > 1) {
        unsigned mid = (lo + hi) / 2;
        if (starts[mid] <= b.x)
            lo = mid;
        else
            hi = mid;
    }
    struct tool_job job = jobs[lo];
    /* As a GPU without peer access: another context's memory is not mapped in this one. */
    unsigned long long owner = t.x == 0 ? fc_device_context(job.src) : 0;
    if (owner && fc_executing_ctx && owner != fc_context_id_of(fc_executing_ctx)) {
        fc_set_fault(FC_ERROR_ILLEGAL_ADDRESS);
        return;
    }
    /* A graph's scan node: the running record in `twin` (shim/tooljob.h), not a second
     * result. */
    volatile uint64_t *record = (volatile uint64_t *)(uintptr_t)job.twin;
    uint64_t record_at = job.twin;
    job.twin = 0;
    if (!tool_thread(&job, b.x - starts[lo], t, d))
        return;
    if (record) {
        if (fc_check_mapped(record_at, TOOL_RECORD_WORDS * sizeof(uint64_t)) != CUDA_SUCCESS) {
            fc_set_fault(FC_ERROR_ILLEGAL_ADDRESS);
            return;
        }
        const volatile uint64_t *result = (const volatile uint64_t *)(uintptr_t)job.result;
        if (lo && record_lag())
            lag_record(record, result[0], result[1]);
        else
            write_record(record, result[0], result[1]);
    }
    __atomic_thread_fence(__ATOMIC_RELEASE);
    ((volatile uint64_t *)(uintptr_t)job.result)[2] = job.tag;
}

FC_HIDDEN void fc_tools_delay(const struct fc_builtin *k)
{
    /* Not on the program's first thread: its own launches run at once, as ever. */
    const char *us = k == self(K_TOOLS) && syscall(SYS_gettid) != getpid()
                         ? getenv("FAKECUDA_TOOLS_DELAY_US")
                         : NULL;
    long n = us ? atol(us) : 0;
    struct timespec nap = {n / 1000000, n % 1000000 * 1000};
    if (n > 0)
        nanosleep(&nap, NULL);
}

static _Atomic long program_launches;
static atomic_int launch_paused;

int fakecuda_launch_paused(void)
{
    return atomic_load(&launch_paused);
}

FC_HIDDEN void fc_pause_launch(const struct fc_builtin *k)
{
    if (strncmp(k->short_name, "cudump_", 7) == 0)
        return;
    const char *at = getenv("FAKECUDA_PAUSE_LAUNCH");
    long n = atomic_fetch_add(&program_launches, 1) + 1;
    if (!at || atol(at) != n)
        return;
    unsigned long syncs = atomic_load(&fc_ctx_syncs);
    atomic_store(&launch_paused, 1);
    for (int i = 0; i < 100000 && atomic_load(&fc_ctx_syncs) == syncs; i++)
        usleep(100);
}

FC_HIDDEN uint64_t fc_tools_hold_ns(void)
{
    const char *ns = getenv("FAKECUDA_TOOLS_HOLD_NS");
    return ns ? strtoull(ns, NULL, 10) : TOOL_HOLD_NS;
}

/* A launch that wrote GATE_HELD holds its stream while the gate reads GATE_HELD,
 * GATE_SERVING or GATE_COPY (shim/tooljob.h): here, where a launch runs at once, the
 * stream then waits (fc_hold_gate). */
FC_HIDDEN volatile uint32_t *fc_tools_hold(const struct fc_builtin *k, const unsigned char *args,
                                           volatile uint64_t **mail)
{
    *mail = NULL;
    if (k != self(K_TOOLS))
        return NULL;
    uint64_t gate, box;
    memcpy(&gate, args + k->offsets[0] + offsetof(struct tool_jobs, hold), sizeof gate);
    memcpy(&box, args + k->offsets[0] + offsetof(struct tool_jobs, hold_mail), sizeof box);
    *mail = (volatile uint64_t *)(uintptr_t)box;
    volatile uint32_t *word = (volatile uint32_t *)(uintptr_t)gate;
    return word && *word == 1 ? word : NULL; /* GATE_HELD */
}

/* Sizes listed per parameter; offsets are filled in by natural alignment (a struct's
 * alignment is its size's, capped at 8), or the alignment a parameter lists (a
 * CUtensorMap's is 64, as the compiler lays one out). */
static struct fc_builtin builtins[K_COUNT] = {
    [K_VECADD] = {"_Z6vecAddPKfS0_Pfi", "vecAdd", 4, {8, 8, 8, 4}, {0}, 0, vec_add},
    [K_SCALE] = {"scale", "scale", 3, {8, 4, 4}, {0}, 0, scale},
    [K_EMPTY] = {"_Z5emptyv", "empty", 0, {0}, {0}, 0, NULL},
    [K_FILL] = {"_Z4fillIiEvPT_S0_i", "fill", 3, {8, 4, 4}, {0}, 0, fill_int},
    [K_NV12] = {"_Z12nv12_to_uyvyPKhjPhjjj", "nv12_to_uyvy", 6, {8, 4, 8, 4, 4, 4}, {0}, 0,
                nv12_to_uyvy},
    [K_FRP0K] = {"_ZN6device12FrP0k5607tPVILN2sl14YUV_CONVENTIONE2EEEvP6uchar4iPNS_6uchar8ES6_iiif",
                 "FrP0k5607tPV", 8, {8, 4, 8, 8, 4, 4, 4, 4}, {0}, 0, frp0k},
    [K_ADD3] = {"_Z4add3St5arrayIPfLm3EEi", "add3", 2, {24, 4}, {0}, 0, add3},
    [K_SUM24] = {"_Z5sum24St5arrayIPfLm24EEi", "sum24", 2, {192, 4}, {0}, 0, sum24},
    [K_SQUARE] = {"_Z6squarePKfPfi", "square", 3, {8, 8, 4}, {0}, 0, square},
    [K_TOOLS] = {"cudump_tools", "cudump_tools", 1, {sizeof(struct tool_jobs)}, {0}, 0, tools},
    [K_TMA_COPY] = {"_Z8tma_copyPf14CUtensorMap_st", "tma_copy", 2, {8, sizeof(CUtensorMap)},
                    {0}, 0, tma_copy, {0, _Alignof(CUtensorMap)}},
    [K_POKE] = {"_Z4pokePii", "poke", 2, {8, 4}, {0}, 0, poke},
    /* NCCL's all-reduce kernel, by its name and argument (a collective: it does nothing
     * here, there being one rank per process and no network). */
    [K_ALLREDUCE] = {"_Z39ncclDevKernel_AllReduce_Sum_f32_RING_LL24ncclDevKernelArgsStorageILm4096EE",
                     "ncclDevKernel_AllReduce_Sum_f32_RING_LL", 1, {4096}, {0}, 0, NULL},
    [K_XLA_LOG] = {"loop_log_fusion", "loop_log_fusion", 3, {8, 8, 8}, {0}, 0, xla_log},
    [K_SCAN_LIST] = {"cudump_scan_list", "cudump_scan_list", 1, {sizeof(struct tool_list)},
                     {0}, 0, scan_list},
    [K_FILL_HALF] = {"_Z8fillHalfP6__halfti", "fillHalf", 3, {8, 2, 4}, {0}, 0, fill_half},
};

FC_HIDDEN const size_t fc_builtin_count = K_COUNT;

/* Layouts are computed once, before main, so no lookup ever races with it. */
__attribute__((constructor)) static void compute_layouts(void)
{
    for (size_t i = 0; i < K_COUNT; i++) {
        struct fc_builtin *k = &builtins[i];
        size_t end = 0;
        for (unsigned int p = 0; p < k->nparams; p++) {
            size_t align = k->aligns[p] ? k->aligns[p] : k->sizes[p] > 8 ? 8 : k->sizes[p];
            end = (end + align - 1) / align * align;
            k->offsets[p] = end;
            end += k->sizes[p];
        }
        k->args_size = end;
    }
}

FC_HIDDEN const struct fc_builtin *fc_builtin_at(size_t i)
{
    return i < K_COUNT ? &builtins[i] : NULL;
}

FC_HIDDEN const struct fc_builtin *fc_builtin_find(const char *mangled)
{
    for (size_t i = 0; mangled && i < K_COUNT; i++)
        if (strcmp(builtins[i].mangled, mangled) == 0)
            return &builtins[i];
    return NULL;
}

FC_HIDDEN void fc_builtin_run(const struct fc_builtin *k, const unsigned char *args,
                              struct fc_dim3 grid, struct fc_dim3 block)
{
    if (!k->thread)
        return;
    struct fc_dim3 b, t;
    for (b.z = 0; b.z < grid.z; b.z++)
        for (b.y = 0; b.y < grid.y; b.y++)
            for (b.x = 0; b.x < grid.x; b.x++)
                for (t.z = 0; t.z < block.z; t.z++)
                    for (t.y = 0; t.y < block.y; t.y++)
                        for (t.x = 0; t.x < block.x; t.x++)
                            k->thread(args, b, t, block, grid);
}
