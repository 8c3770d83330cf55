// cudump's own kernels: content digests and non-finite scans of a buffer, run
// on the launch's stream instead of copying the bytes to the host.
//
// The shim does not need a CUDA toolkit: shim/gpu/tools.ptx holds this file
// compiled to PTX (shim/gpu/make_ptx.sh), which shim/build.py embeds and the shim loads with
// cuModuleLoadData in each context that needs it. cudump/digest.py holds the
// same definitions in numpy; the tests check one against the other.
//
// A buffer is `height` rows of `width` bytes, `pitch` bytes apart.
//
// One launch serves up to TOOL_JOBS buffers (shim/tooljob.h says how); each
// result is written straight into host memory the device can reach, its
// `done` word last.
//
// mode 0, digest: each row is cut into 32-bit little-endian words, the last
// one zero-padded; word i of the buffer (rows one after the other) adds
// mix(word + i * GOLDEN) to a 64-bit sum. The sum is the digest. With an
// element format in bits 8-15 of the mode (a scan mode below), result[1] is
// also the sum of |x| over the buffer's elements of that format (whole
// elements of each row), as a float64: the digest's tolerant companion, equal
// within a tolerance when the elements are (cudump/policy/digest.py). Its
// order of addition is the GPU's, so its last bits may differ from run to run.
//
// modes 1-4, scan for NaN/Inf in float32, float64, float16, bfloat16
// elements: result[0] = how many, result[1] = max(~index) over those found (so
// the first index is ~result[1]; 0 means none).
//
// The shim only runs it over bytes inside one allocation it knows, with
// scans aligned to their element size; the kernel still reads misaligned
// digest words byte by byte rather than trust that.
#include <stdint.h>

#include "../tooljob.h"

#define GOLDEN 0x9E3779B97F4A7C15ull

__device__ __forceinline__ unsigned long long mix(unsigned long long x)
{
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBull;
    x ^= x >> 31;
    return x;
}

__device__ __forceinline__ unsigned int word_at(const unsigned char *row, unsigned long long width,
                                                unsigned long long c)
{
    unsigned long long b = c * 4;
    if (b + 4 <= width && ((uintptr_t)(row + b) & 3) == 0)
        return *(const unsigned int *)(row + b);
    unsigned int w = 0;
    for (int k = 0; k < 4; k++)
        if (b + k < width)
            w |= (unsigned int)row[b + k] << (8 * k);
    return w;
}

// |x| of a float16 (its bits), as numpy converts it.
__device__ __forceinline__ double half_abs(unsigned int h)
{
    const unsigned int e = (h >> 10) & 31, m = h & 1023;
    if (e == 31)
        return m ? __longlong_as_double(0x7ff8000000000000ll)
                 : __longlong_as_double(0x7ff0000000000000ll);
    if (e == 0)
        return m * 5.9604644775390625e-8;   // 2**-24
    return __int_as_float(((e + 112) << 23) | (m << 13));
}

// |x| of the element at p, of format `fmt` (a scan mode).
__device__ __forceinline__ double abs_at(const unsigned char *p, unsigned int fmt)
{
    switch (fmt) {
    case 1: return fabs((double)*(const float *)p);
    case 2: return fabs(*(const double *)p);
    case 3: return half_abs(*(const unsigned short *)p);
    default: return fabs((double)__int_as_float((unsigned int)(*(const unsigned short *)p & 0x7fffu) << 16));
    }
}

// The sum of |x| over the elements of format `fmt` in 16 bytes.
__device__ __forceinline__ double abs16(uint4 x, unsigned int fmt)
{
    const unsigned int w[4] = {x.x, x.y, x.z, x.w};
    double s = 0;
    if (fmt == 1) {
        for (int l = 0; l < 4; l++)
            s += fabs((double)__int_as_float(w[l]));
    } else if (fmt == 2) {
        s = fabs(__longlong_as_double(((long long)w[1] << 32) | w[0])) +
            fabs(__longlong_as_double(((long long)w[3] << 32) | w[2]));
    } else {
        for (int l = 0; l < 8; l++) {
            const unsigned int h = (w[l / 2] >> (16 * (l & 1))) & 0xffffu;
            s += fmt == 3 ? half_abs(h) : fabs((double)__int_as_float((h & 0x7fffu) << 16));
        }
    }
    return s;
}

__device__ __forceinline__ bool nonfinite(const unsigned char *p, unsigned int mode)
{
    switch (mode) {
    case 1: return (*(const unsigned int *)p & 0x7f800000u) == 0x7f800000u;
    case 2: return (*(const unsigned long long *)p & 0x7ff0000000000000ull) == 0x7ff0000000000000ull;
    case 3: return (*(const unsigned short *)p & 0x7c00u) == 0x7c00u;
    default: return (*(const unsigned short *)p & 0x7f80u) == 0x7f80u;
    }
}

// Scans 16 bytes at element index `first` (0: none is non-finite): adds how
// many of its elements are NaN or Inf to `a` and keeps max(~index) of them in `b`.
__device__ __forceinline__ void scan16(uint4 x, unsigned int mode, unsigned long long first,
                                       unsigned long long &a, unsigned long long &b)
{
    const unsigned int w[4] = {x.x, x.y, x.z, x.w};
    if (mode == 1) {
        bool any = false;
        for (int l = 0; l < 4; l++)
            any |= (w[l] & 0x7f800000u) == 0x7f800000u;
        if (!any)
            return;
        for (int l = 3; l >= 0; l--)
            if ((w[l] & 0x7f800000u) == 0x7f800000u) {
                a += 1;
                b = max(b, ~(first + l));
            }
    } else if (mode == 2) {
        for (int l = 1; l >= 0; l--)
            if ((w[2 * l + 1] & 0x7ff00000u) == 0x7ff00000u) {
                a += 1;
                b = max(b, ~(first + l));
            }
    } else {
        const unsigned int m = mode == 3 ? 0x7c00u : 0x7f80u;   // the exponent's bits
        bool any = false;
        for (int l = 0; l < 4; l++)
            any |= (w[l] & m) == m || ((w[l] >> 16) & m) == m;
        if (!any)
            return;
        for (int l = 7; l >= 0; l--)
            if (((w[l / 2] >> (16 * (l & 1))) & m) == m) {
                a += 1;
                b = max(b, ~(first + l));
            }
    }
}

// The digest's terms of the four words of 16 bytes, the first of them word n.
__device__ __forceinline__ unsigned long long digest16(uint4 x, unsigned long long n)
{
    return mix(x.x + n * GOLDEN) + mix(x.y + (n + 1) * GOLDEN) + mix(x.z + (n + 2) * GOLDEN) +
           mix(x.w + (n + 3) * GOLDEN);
}

// 16-byte loads a thread has in flight at once in the loops below.
#define UNROLL 4

__device__ __forceinline__ unsigned int element_size(unsigned int fmt)
{
    return fmt == 2 ? 8 : fmt >= 3 ? 2 : 4;
}

// What one block finds in its share of one job's buffer: a digest sum (and the
// sum of |x| in `s` where the mode asks for it), or a count of non-finite
// elements and max(~index) of them. A buffer in one piece that starts on 16
// bytes is read 16 bytes at a time (the rest element by element); the others,
// element by element.
__device__ void accumulate(const struct tool_job &j, unsigned long long first,
                           unsigned long long stride, unsigned long long &a,
                           unsigned long long &b, double &s)
{
    const unsigned char *base = (const unsigned char *)j.src;
    const unsigned long long width = j.width, height = j.height, pitch = j.pitch;
    const bool packed = height == 1 || pitch == width;
    const bool vector = packed && ((uintptr_t)base & 15) == 0;
    const unsigned int mode = j.mode & 0xffu;
    if (mode == 0) {
        const unsigned int fmt = (j.mode >> 8) & 0xffu, esize = element_size(fmt);
        // Elements only where each is aligned (the shim asks for no other), and in the
        // 16-byte loop only where they run on from row to row.
        const bool sums = fmt >= 1 && fmt <= 4 && ((uintptr_t)base | pitch) % esize == 0;
        const unsigned long long wpr = (width + 3) / 4, total = wpr * height;
        const unsigned long long epr = width / esize, elements = epr * height;
        unsigned long long done = 0, summed = 0;
        if (vector && width % 4 == 0) {
            const uint4 *v = (const uint4 *)base;
            const unsigned long long quads = total / 4;
            const bool sum16 = sums && (height == 1 || width % esize == 0);
            // UNROLL loads in flight per thread before any is used: one at a time,
            // each waits out the memory's latency alone.
            unsigned long long q = first;
            for (; q + (UNROLL - 1) * stride < quads; q += UNROLL * stride) {
                uint4 x[UNROLL];
#pragma unroll
                for (int u = 0; u < UNROLL; u++)
                    x[u] = v[q + u * stride];
#pragma unroll
                for (int u = 0; u < UNROLL; u++) {
                    a += digest16(x[u], (q + u * stride) * 4);
                    if (sum16)
                        s += abs16(x[u], fmt);
                }
            }
            for (; q < quads; q += stride) {
                a += digest16(v[q], q * 4);
                if (sum16)
                    s += abs16(v[q], fmt);
            }
            done = quads * 4;
            summed = sum16 ? quads * 16 / esize : 0;
        }
        for (unsigned long long i = done + first; i < total; i += stride) {
            unsigned long long r = i / wpr, c = i - r * wpr;
            a += mix(word_at(base + r * pitch, width, c) + i * GOLDEN);
        }
        for (unsigned long long i = summed + first; sums && i < elements; i += stride) {
            unsigned long long r = i / epr, c = i - r * epr;
            s += abs_at(base + r * pitch + c * esize, fmt);
        }
    } else if (mode <= 4) {
        const unsigned int esize = element_size(mode);
        if (((uintptr_t)base | pitch) % esize)
            return;
        const unsigned long long epr = width / esize, total = epr * height;
        unsigned long long done = 0;
        if (vector) {
            const uint4 *v = (const uint4 *)base;
            const unsigned int per = 16 / esize;
            const unsigned long long quads = total / per;
            unsigned long long q = first;
            for (; q + (UNROLL - 1) * stride < quads; q += UNROLL * stride) {
                uint4 x[UNROLL];
#pragma unroll
                for (int u = 0; u < UNROLL; u++)
                    x[u] = v[q + u * stride];
#pragma unroll
                for (int u = 0; u < UNROLL; u++)
                    scan16(x[u], mode, (q + u * stride) * per, a, b);
            }
            for (; q < quads; q += stride)
                scan16(v[q], mode, q * per, a, b);
            done = quads * per;
        }
        for (unsigned long long i = done + first; i < total; i += stride) {
            unsigned long long r = packed ? 0 : i / epr, c = packed ? i : i - r * epr;
            if (nonfinite(base + r * pitch + c * esize, mode)) {
                a += 1;
                b = max(b, ~i);
            }
        }
    }
}

// The fences of the kernel's closing steps. Each orders what a thread wrote before
// it against what it writes after it (release) and what it read before against what it
// reads after (acquire), which is all that the counts and `done` words below ask for;
// __threadfence() and __threadfence_system() are sequentially consistent fences, which
// cost more, on the path that the program's next kernel waits behind.
__device__ __forceinline__ void fence_gpu()
{
    asm volatile("fence.acq_rel.gpu;" ::: "memory");
}

__device__ __forceinline__ void fence_sys()
{
    asm volatile("fence.acq_rel.sys;" ::: "memory");
}

__device__ __forceinline__ unsigned long long globaltimer()
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// The gate's states the kernel reads and writes (protocol.h's proto_gate).
enum { GATE_HELD = 1, GATE_RELEASED = 4, GATE_SERVING = 5, GATE_COPY = 6 };

// Called by the last block of each job of a launch with `hold`, after its
// result and before its `done`: the job that finishes last zeroes the hold's
// words and, if any job of the phase marked a new NaN or Inf, writes GATE_HELD
// (every result is in by then); its block then holds the stream (hold_stream).
// Returns whether this block holds.
__device__ bool hold_begins(const struct tool_jobs &jobs)
{
    volatile unsigned long long *words = (volatile unsigned long long *)jobs.hold_acc;
    if (atomicAdd((unsigned long long *)words, 1ull) != jobs.hold_jobs - 1)
        return false;
    fence_gpu();   // every other job's result and mark are seen from here on
    const bool marked = words[1] != 0;
    words[0] = 0;
    words[1] = 0;
    fence_gpu();   // zeroed before this job's `done`: the slot may be reused after it
    if (!marked)
        return false;
    *(volatile unsigned int *)jobs.hold = GATE_HELD;
    fence_sys();
    return true;
}

// One copy the shim asks for through the mailbox (tooljob.h).
struct mail_copy {
    unsigned long long seq, src, dst, width, height, pitch;
};

// Thread 0 of the holding block: waits while the gate reads GATE_HELD (TOOL_HOLD_NS at
// most) or GATE_SERVING or GATE_COPY (TOOL_SERVE_NS at most from the first of those), and
// returns true with a copy the mailbox asks for that was not made yet, or false once the
// gate is open (by the shim, or by the kernel giving up: GATE_RELEASED).
__device__ bool next_copy(const struct tool_jobs &jobs, unsigned long long start,
                          unsigned long long &serving, unsigned long long &last,
                          struct mail_copy &req)
{
    volatile unsigned int *gate = (volatile unsigned int *)jobs.hold;
    volatile unsigned long long *mail = (volatile unsigned long long *)jobs.hold_mail;
    for (;;) {
        const unsigned int g = *gate;
        if (g != GATE_HELD && g != GATE_SERVING && g != GATE_COPY)
            return false;
        const unsigned long long now = globaltimer();
        if (g != GATE_HELD && !serving)
            serving = now;
        // Given up only if the gate still reads what timed out; else look again. (The
        // shim does not begin to serve a gate this close to TOOL_HOLD_NS: watch.c.)
        if (g == GATE_HELD ? now - start > TOOL_HOLD_NS : now - serving > TOOL_SERVE_NS) {
            if (*gate == g) {
                *gate = GATE_RELEASED;   // nobody came, or nobody finished
                fence_sys();
                return false;
            }
            continue;
        }
        if (g == GATE_COPY && mail) {
            fence_sys();   // the mailbox is read after the gate that says it is filled
            const unsigned long long seq = mail[TOOL_MAIL_SEQ];
            if (seq != last) {
                req.seq = seq;
                req.src = mail[TOOL_MAIL_SRC];
                req.dst = mail[TOOL_MAIL_DST];
                req.width = mail[TOOL_MAIL_WIDTH];
                req.height = mail[TOOL_MAIL_HEIGHT];
                req.pitch = mail[TOOL_MAIL_PITCH];
                last = seq;
                return true;
            }
        }
        __nanosleep(2000);
    }
}

// `n` units of sizeof(T) bytes from src to dst, unit `first` and every `stride`-th after
// it by this thread. Kept small on purpose: the registers a kernel is given are the most
// any of its paths needs, and every launch of the kernel pays for them.
template <typename T>
__device__ __forceinline__ void copy_line(const unsigned char *__restrict__ src,
                                          unsigned char *__restrict__ dst, unsigned int n,
                                          unsigned int first, unsigned int stride)
{
    const T *__restrict__ s = (const T *)src;
    T *__restrict__ d = (T *)dst;
#pragma unroll 2
    for (unsigned int k = first; k < n; k += stride)
        d[k] = s[k];
}

// `n` bytes in units of `unit` bytes (n a multiple of it).
__device__ __forceinline__ void copy_some(unsigned int unit, const unsigned char *src,
                                          unsigned char *dst, unsigned int n,
                                          unsigned int first, unsigned int stride)
{
    if (unit == 16)
        copy_line<uint4>(src, dst, n / 16, first, stride);
    else if (unit == 4)
        copy_line<unsigned int>(src, dst, n / 4, first, stride);
    else
        copy_line<unsigned char>(src, dst, n, first, stride);
}

// Whether the shim still waits for the copy (the gate reads GATE_COPY), asked by thread 0
// and told to every thread.
__device__ bool still_wanted(const struct tool_jobs &jobs)
{
    __shared__ int wanted;
    __syncthreads();   // every thread read `wanted` before it is written again
    if (threadIdx.x == 0)
        wanted = *(volatile unsigned int *)jobs.hold == GATE_COPY;
    __syncthreads();
    return wanted;
}

// Bytes copied between two looks at the gate (copy_rows).
#define COPY_CHUNK (1u << 20)

// Makes the copy `req` with every thread of the block: `height` rows of `width`
// bytes, `pitch` apart, packed at `dst`; 16 bytes at a time where every address and
// length allows it, else 4, else single bytes. One row (or rows without padding) is
// shared by every thread; rows at a pitch go to the warps in turn, each row's units
// to the warp's lanes. Between chunks of about COPY_CHUNK bytes thread 0 looks at the
// gate: where the shim stopped waiting (it opened the gate), the copy ends there, so
// that nothing is written into staging long after the shim went on. Returns whether
// all of it was made. The shim asks for less than 4 GB (tools_mail_target), which the
// kernel counts in 32 bits.
__device__ bool copy_rows(const struct tool_jobs &jobs, const struct mail_copy &req)
{
    const bool one_row = req.height == 1 || req.pitch == req.width;
    const unsigned long long width = one_row ? req.width * req.height : req.width;
    const unsigned long long bits = req.src | req.dst | width | (one_row ? 0ull : req.pitch);
    const unsigned int unit = bits % 16 == 0 ? 16 : bits % 4 == 0 ? 4 : 1;
    if (!width || width >= 1ull << 32 || req.width * req.height >= 1ull << 32)
        return false;
    const unsigned char *src = (const unsigned char *)req.src;
    unsigned char *dst = (unsigned char *)req.dst;
    if (one_row) {
        for (unsigned int c = 0; c < width; c += COPY_CHUNK) {
            if (c && !still_wanted(jobs))
                return false;
            copy_some(unit, src + c, dst + c, min(COPY_CHUNK, (unsigned int)width - c),
                      threadIdx.x, blockDim.x);
        }
        return true;
    }
    const unsigned int w = (unsigned int)width, rows = (unsigned int)req.height;
    const unsigned int warp = threadIdx.x / 32, warps = blockDim.x / 32;
    const unsigned int step = max(1u, COPY_CHUNK / w);   // rows between two looks
    for (unsigned int r0 = 0; r0 < rows; r0 += step) {
        if (r0 && !still_wanted(jobs))
            return false;
        const unsigned int end = min(rows, r0 + step);
        for (unsigned int r = r0 + warp; r < end; r += warps)
            copy_some(unit, src + r * req.pitch, dst + (unsigned long long)r * w, w,
                      threadIdx.x % 32, 32);
    }
    return true;
}

// The holding block holds the stream: thread 0 waits on the gate (next_copy) and hands
// each copy the mailbox asks for to every thread through shared memory; once all of
// them made it (each fenced at system scope), thread 0 writes its number into the
// mailbox's `done`. Returns when the gate is open.
__device__ void hold_stream(const struct tool_jobs &jobs)
{
    __shared__ struct mail_copy req;
    __shared__ int go;
    unsigned long long start = threadIdx.x == 0 ? globaltimer() : 0, serving = 0, last = 0;
    for (;;) {
        if (threadIdx.x == 0)
            go = next_copy(jobs, start, serving, last, req);
        __syncthreads();
        if (!go)
            return;
        const bool made = copy_rows(jobs, req);
        fence_sys();   // this thread's bytes are in staging before the block says so
        __syncthreads();   // and every thread read `req` and `go` before they change
        if (threadIdx.x == 0 && made) {
            ((volatile unsigned long long *)jobs.hold_mail)[TOOL_MAIL_DONE] = req.seq;
            fence_sys();
        }
    }
}

// Thread 0 of each block, once the block's warps have summed: the block's sums, and
// for the job's last block the job's result and its mark, fenced. Returns whether this
// block was the job's last (its `done` is then the caller's to write).
__device__ __forceinline__ bool job_result(const struct tool_job &j, unsigned long long a,
                                           unsigned long long b, double s,
                                           const unsigned long long *wa,
                                           const unsigned long long *wb)
{
    const bool digest = (j.mode & 0xffu) == 0, sums = digest && (j.mode & 0xff00u) != 0;
    for (unsigned int w = 1; w < blockDim.x / 32; w++) {
        a += wa[w];
        if (sums)
            s += __longlong_as_double(wb[w]);
        else
            b = max(b, wb[w]);
    }
    if (sums)
        b = __double_as_longlong(s);
    unsigned long long found = a, first = b;
    if (j.blocks > 1) {
        // Sums meet in the job's accumulator; the block that counts last has them all.
        unsigned long long *acc = (unsigned long long *)j.acc;
        if (a)
            atomicAdd(acc, a);
        if (sums && s != 0)
            atomicAdd((double *)(acc + 1), s);
        else if (!digest && a)
            atomicMax(acc + 1, b);
        // This block's sums are in the accumulator before it counts as done. A block that
        // found nothing added nothing, and has nothing to wait for: each wait is a round
        // trip to memory on the path every launch of the program's next kernel waits behind.
        if (a || (sums && s != 0))
            fence_gpu();
        if (atomicAdd(acc + 2, 1ull) != j.blocks - 1)
            return false;
        fence_gpu();
        // Every other block's sums are in: read them at once (two loads in flight, where
        // two atomic exchanges wait one after the other) and zero the accumulator for the
        // next use; the fence before `done` below orders the zeroes too.
        volatile unsigned long long *sum = acc;
        found = sum[0];
        first = sum[1];
        sum[0] = 0;
        sum[1] = 0;
        sum[2] = 0;
    }
    volatile unsigned long long *result = (volatile unsigned long long *)j.result;
    volatile unsigned long long *twin = (volatile unsigned long long *)j.twin;
    result[0] = found;
    result[1] = first;
    if (twin) {
        twin[0] = found;
        twin[1] = first;
    }
    // A new NaN or Inf: the stream is to be held for the shim (hold_begins).
    if (j.mark && found && (!j.before || ((volatile unsigned long long *)j.before)[0] == 0))
        atomicOr((unsigned long long *)j.mark, 1ull);
    fence_sys();   // the result and the mark are in before this job counts
    return true;
}

// Thread 0 of each block of cudump_tools: job_result, then for the job's last block the
// hold's count and `done`. Returns whether this block holds the stream (hold_begins).
__device__ bool close_job(const struct tool_jobs &jobs, const struct tool_job &j,
                          unsigned long long a, unsigned long long b, double s,
                          const unsigned long long *wa, const unsigned long long *wb)
{
    if (!job_result(j, a, b, s, wa, wb))
        return false;
    volatile unsigned long long *result = (volatile unsigned long long *)j.result;
    volatile unsigned long long *twin = (volatile unsigned long long *)j.twin;
    const bool holds = jobs.hold && (j.mode & TOOL_HOLDS) && hold_begins(jobs);
    result[2] = j.tag;        // `done`, after the count: see tooljob.h
    if (twin)
        twin[2] = j.twin_tag;
    return holds;
}

// Registers: at most as many as let five blocks share a multiprocessor (48 on Hopper),
// what the scans alone need; the copies of a hold (hold_stream) would take more
// without the bound, and every launch of the kernel would pay for them in occupancy.
extern "C" __global__ void __launch_bounds__(TOOL_THREADS, 5) cudump_tools(const struct tool_jobs jobs)
{
    // Which job this block works on, and which of that job's blocks it is.
    unsigned int n = 0, block = blockIdx.x;
    while (n + 1 < jobs.njobs && block >= jobs.job[n].blocks)
        block -= jobs.job[n++].blocks;
    const struct tool_job &j = jobs.job[n];
    // Launched with programmatic stream serialization (shim/toollaunch.h: on Hopper and
    // later), the blocks may start while the kernel before this one on the stream ends:
    // they wait here, before reading any memory, until it is done and its writes are
    // seen. Launched without, the wait returns at once. One PTX (compute_75) is kept: it
    // holds this marker, and shim/gpu/ptx.py makes the compute_90 build from it by putting
    // the wait in the marker's place, so both builds are the same code around it.
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#else
    asm volatile("// cudump: the grid dependency wait, on compute_90 and later" ::: "memory");
#endif
    unsigned long long a = 0, b = 0;
    double s = 0;
    accumulate(j, block * (unsigned long long)blockDim.x + threadIdx.x,
               (unsigned long long)j.blocks * blockDim.x, a, b, s);
    // A digest's sum of |x| travels in b, as a float64's bits.
    const bool digest = (j.mode & 0xffu) == 0, sums = digest && (j.mode & 0xff00u) != 0;
    // The block's sums: warp by warp, then the warps' in shared memory.
    for (int o = 16; o > 0; o >>= 1) {
        a += __shfl_down_sync(0xffffffffu, a, o);
        if (sums)
            s += __shfl_down_sync(0xffffffffu, s, o);
        else
            b = max(b, __shfl_down_sync(0xffffffffu, b, o));
    }
    __shared__ unsigned long long wa[TOOL_THREADS / 32], wb[TOOL_THREADS / 32];
    if ((threadIdx.x & 31) == 0) {
        wa[threadIdx.x / 32] = a;
        wb[threadIdx.x / 32] = sums ? __double_as_longlong(s) : b;
    }
    __syncthreads();
    // Only a block of one of the held launch's own jobs, in the launch of the kernel that
    // holds, can come to hold the stream: its threads stay until thread 0 knows whether
    // it does, to make the copies that serve the hold (hold_stream). Every other block's
    // threads leave here, as they always did. A block that may hold and does not pays
    // one barrier more: its threads wait for thread 0's closing steps, which the block
    // as a whole waited for anyway (it ends with its last thread).
    const bool may_hold = jobs.hold && (j.mode & TOOL_HOLDS);
    if (threadIdx.x != 0 && !may_hold)
        return;
    __shared__ int holds;
    if (threadIdx.x == 0) {
        const bool h = close_job(jobs, j, a, b, s, wa, wb);
        if (!may_hold)
            return;
        holds = h;
    }
    __syncthreads();
    if (holds)
        hold_stream(jobs);
}

// The block's sums of one job, warp by warp, then the warps' in shared memory (as in
// cudump_tools); thread 0 then closes the job (job_result) and writes `done`.
__device__ __forceinline__ void list_block(struct tool_job j, unsigned int block)
{
    // `twin` is the running record here, not a second result (job_result's).
    volatile unsigned long long *record = (volatile unsigned long long *)j.twin;
    j.twin = 0;
    unsigned long long a = 0, b = 0;
    double s = 0;
    accumulate(j, block * (unsigned long long)blockDim.x + threadIdx.x,
               (unsigned long long)j.blocks * blockDim.x, a, b, s);
    for (int o = 16; o > 0; o >>= 1) {
        a += __shfl_down_sync(0xffffffffu, a, o);
        b = max(b, __shfl_down_sync(0xffffffffu, b, o));
    }
    __shared__ unsigned long long wa[TOOL_THREADS / 32], wb[TOOL_THREADS / 32];
    if ((threadIdx.x & 31) == 0) {
        wa[threadIdx.x / 32] = a;
        wb[threadIdx.x / 32] = b;
    }
    __syncthreads();
    if (threadIdx.x != 0 || !job_result(j, a, b, s, wa, wb))
        return;
    volatile unsigned long long *result = (volatile unsigned long long *)j.result;
    // A graph's scan node keeps a running record in `twin` (tooljob.h's struct
    // tool_list): scans that found the buffer non-finite, scans that found it finite,
    // and the first index and count the last finding saw. One launch of a graph runs at
    // a time, so this thread is the record's only writer. Its sequence word is odd while
    // the others are written: the host, reading while the GPU goes on, takes the words
    // of one scan only.
    if (record) {
        const unsigned long long found = result[0], first = result[1];
        const unsigned long long seq = record[TOOL_RECORD_SEQ];
        record[TOOL_RECORD_SEQ] = seq + 1;
        fence_sys();
        if (found) {
            record[TOOL_RECORD_FIRST] = first;
            record[TOOL_RECORD_COUNT] = found;
            record[TOOL_RECORD_BAD] = record[TOOL_RECORD_BAD] + 1;
        } else {
            record[TOOL_RECORD_GOOD] = record[TOOL_RECORD_GOOD] + 1;
        }
        fence_sys();
        record[TOOL_RECORD_SEQ] = seq + 2;
        fence_sys();
    }
    result[2] = j.tag;
}

// cudump's batched scan (tooljob.h's struct tool_list): NaN/Inf scans of every buffer
// a window of the program's launches touched, or a graph's kernel nodes point into, in
// one launch. The list lies in memory the device reads (staging-like pinned memory, or
// device memory for a graph's node); `starts` gives each job's first block, so a block
// finds its job by a binary search rather than by walking the list. Scans only: it
// neither marks nor holds, and it never waits for the kernel before it (it is launched
// plainly, or is a graph node).
extern "C" __global__ void __launch_bounds__(TOOL_THREADS, 5) cudump_scan_list(const struct tool_list list)
{
    const struct tool_job *jobs = (const struct tool_job *)list.jobs;
    const unsigned int *starts = (const unsigned int *)list.starts;
    unsigned int lo = 0, hi = list.njobs;
    while (hi - lo > 1) {
        const unsigned int mid = (lo + hi) / 2;
        if (starts[mid] <= blockIdx.x)
            lo = mid;
        else
            hi = mid;
    }
    const struct tool_job j = jobs[lo];
    list_block(j, blockIdx.x - starts[lo]);
}
