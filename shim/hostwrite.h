/* The program's writes into device memory from the host, for NaN/Inf scans
 * (hostwrite.c). */
#ifndef CUDUMP_HOSTWRITE_H
#define CUDUMP_HOSTWRITE_H

#include "shim.h"

/* What one call wrote: `depth` slices `slice` bytes apart of `height` rows
 * `pitch` bytes apart of `width` bytes from `dst` on; for a memset, `elem`
 * bytes per element of the pattern `value` (0 for a copy). */
struct host_write {
    enum proto_host_api api;
    int ptsz;
    CUstream stream;
    CUdeviceptr dst;
    size_t width, height, pitch, depth, slice;
    uint32_t value, elem;
};

/* The process's launches so far, read before the call is made: the write
 * comes after them. */
static inline uint64_t hostwrite_launches(void)
{
    return atomic_load_explicit(&shim_stats.seq, memory_order_relaxed);
}

/* Puts a write the driver accepted into the host-write ring (none on a
 * capturing stream: it is recorded into a graph, not made). Callers check
 * channel_host_on() first. */
void hostwrite_record(const struct host_write *w, uint64_t launches);

/* A host-to-device 2D or 3D copy's write, or false when the descriptor says
 * another direction (device to device, to the host, an array). */
bool hostwrite_of_2d(const CUDA_MEMCPY2D *copy, struct host_write *w);
bool hostwrite_of_3d(const CUDA_MEMCPY3D *copy, struct host_write *w);

#endif
