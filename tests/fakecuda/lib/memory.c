/*
 * Device memory backed by host memory. A device pointer is a host address,
 * so kernels and copies use it directly; a table of allocations lets
 * cuMemGetAddressRange_v2 resolve interior pointers and lets copies reject
 * ranges that leave an allocation, as a GPU would fault on them.
 *
 * VMM uses real address-space operations: a reservation is an inaccessible
 * mapping, a physical allocation is a memfd, cuMemMap maps it (shared, so two
 * mappings of one handle alias), and cuMemSetAccess makes it accessible.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "internal.h"

enum fc_mem_kind {
    MEM_DEVICE,
    MEM_MANAGED,
    MEM_POOL,
    MEM_MAPPED,   /* a piece of a reservation mapped with cuMemMap */
    MEM_RESERVED, /* address range from cuMemAddressReserve */
    MEM_HOST,     /* cuMemAllocHost / cuMemHostAlloc */
    MEM_REGISTERED,
};

struct fc_alloc {
    uintptr_t base;
    size_t size;
    enum fc_mem_kind kind;
    unsigned long long ctx; /* a registration: the id of the context it was made in */
};

struct fc_physical {
    int fd;
    size_t size;
};

static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static struct fc_alloc *table;
static size_t table_count, table_cap;

static bool is_device_kind(enum fc_mem_kind k)
{
    return k == MEM_DEVICE || k == MEM_MANAGED || k == MEM_POOL || k == MEM_MAPPED;
}

static CUresult table_add(uintptr_t base, size_t size, enum fc_mem_kind kind)
{
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&table_lock);
    if (table_count == table_cap) {
        size_t cap = table_cap ? 2 * table_cap : 64;
        struct fc_alloc *t = realloc(table, cap * sizeof *t);
        if (t) {
            table = t;
            table_cap = cap;
        }
    }
    if (table_count < table_cap)
        table[table_count++] =
            (struct fc_alloc){base, size, kind,
                              kind == MEM_REGISTERED || kind == MEM_DEVICE ? fc_context_id() : 0};
    else
        r = CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_unlock(&table_lock);
    return r;
}

/* Removes the record that starts exactly at base and whose kind matches. */
static bool table_remove(uintptr_t base, bool (*match)(enum fc_mem_kind), struct fc_alloc *out)
{
    bool found = false;
    pthread_mutex_lock(&table_lock);
    for (size_t i = 0; i < table_count && !found; i++) {
        if (table[i].base == base && match(table[i].kind)) {
            if (out)
                *out = table[i];
            table[i] = table[--table_count];
            found = true;
        }
    }
    pthread_mutex_unlock(&table_lock);
    return found;
}

/* The record of the given class that contains [p, p + n). */
static bool table_find(uintptr_t p, size_t n, bool (*match)(enum fc_mem_kind),
                       struct fc_alloc *out)
{
    bool found = false;
    pthread_mutex_lock(&table_lock);
    for (size_t i = 0; i < table_count && !found; i++) {
        const struct fc_alloc *a = &table[i];
        if (match(a->kind) && p >= a->base && p - a->base < a->size && n <= a->size - (p - a->base)) {
            if (out)
                *out = *a;
            found = true;
        }
    }
    pthread_mutex_unlock(&table_lock);
    return found;
}

static bool match_device(enum fc_mem_kind k)
{
    return is_device_kind(k);
}

static bool match_freeable(enum fc_mem_kind k)
{
    return k == MEM_DEVICE || k == MEM_MANAGED || k == MEM_POOL;
}

static bool match_host(enum fc_mem_kind k)
{
    return k == MEM_HOST;
}

static bool match_registered(enum fc_mem_kind k)
{
    return k == MEM_REGISTERED;
}

static bool match_host_any(enum fc_mem_kind k)
{
    return k == MEM_HOST || k == MEM_REGISTERED;
}

static bool match_reserved(enum fc_mem_kind k)
{
    return k == MEM_RESERVED;
}

static bool match_mapped(enum fc_mem_kind k)
{
    return k == MEM_MAPPED;
}

/* A device range a copy touches must lie inside one allocation. n == 0 is
 * accepted anywhere, as by the real driver. */
static CUresult check_device(CUdeviceptr p, size_t n)
{
    if (n == 0)
        return CUDA_SUCCESS;
    return table_find((uintptr_t)p, n, match_device, NULL) ? CUDA_SUCCESS
                                                           : CUDA_ERROR_INVALID_VALUE;
}

static bool match_linear(enum fc_mem_kind k)
{
    return k == MEM_DEVICE;
}

FC_HIDDEN unsigned long long fc_device_context(CUdeviceptr p)
{
    struct fc_alloc a;
    return table_find((uintptr_t)p, 1, match_linear, &a) ? a.ctx : 0;
}

FC_HIDDEN CUresult fc_check_device(CUdeviceptr p, size_t n)
{
    return check_device(p, n);
}

FC_HIDDEN CUresult fc_check_mapped(CUdeviceptr p, size_t n)
{
    if (check_device(p, n) == CUDA_SUCCESS ||
        table_find((uintptr_t)p, n, match_registered, NULL))
        return CUDA_SUCCESS;
    return CUDA_ERROR_INVALID_VALUE;
}

/* Device memory counts against the device's size (pools.c), but for what a pool of the
 * program's own lends: the pool has counted it. */
/* FAKECUDA_REUSE_FREED=1: the last device allocation freed is kept, and the next one of
 * its size gets its address, as a real driver often gives (a buffer made again where one
 * was freed). */
static pthread_mutex_t freed_lock = PTHREAD_MUTEX_INITIALIZER;
static void *freed_block;
static size_t freed_size;

static bool reuse_freed(void)
{
    const char *on = getenv("FAKECUDA_REUSE_FREED");
    return on && *on == '1';
}

static void *take_freed(size_t rounded)
{
    void *p = NULL;
    pthread_mutex_lock(&freed_lock);
    if (freed_block && freed_size == rounded) {
        p = freed_block;
        freed_block = NULL;
    }
    pthread_mutex_unlock(&freed_lock);
    return p;
}

static void keep_freed(void *p, size_t rounded)
{
    pthread_mutex_lock(&freed_lock);
    free(freed_block);
    freed_block = p;
    freed_size = rounded;
    pthread_mutex_unlock(&freed_lock);
}

static CUresult allocate(CUdeviceptr *dptr, size_t bytesize, enum fc_mem_kind kind, bool unsafe,
                         bool counted)
{
    CUresult r = fc_require_context();
    if (r != CUDA_SUCCESS)
        return r;
    if (!dptr || bytesize == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (unsafe && (r = fc_capture_check_unsafe()) != CUDA_SUCCESS)
        return r;
    if (!counted && (r = fc_capacity_take(bytesize)) != CUDA_SUCCESS)
        return r;
    /* 256-byte alignment, like cudaMalloc's guarantee. */
    size_t rounded = (bytesize + 255) / 256 * 256;
    void *p = kind == MEM_DEVICE && reuse_freed() ? take_freed(rounded) : NULL;
    if (!p)
        p = aligned_alloc(256, rounded);
    if (!p)
        r = CUDA_ERROR_OUT_OF_MEMORY;
    else
        memset(p, 0, rounded);
    if (p && (r = table_add((uintptr_t)p, bytesize, kind)) != CUDA_SUCCESS)
        free(p);
    if (r != CUDA_SUCCESS) {
        if (!counted)
            fc_capacity_give(bytesize);
        return r;
    }
    *dptr = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}

_Atomic unsigned long fc_mem_allocs, fc_host_registrations;

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    CUresult r = allocate(dptr, bytesize, MEM_DEVICE, true, false);
    if (r == CUDA_SUCCESS)
        atomic_fetch_add(&fc_mem_allocs, 1);
    return r;
}

CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,
                            unsigned int ElementSizeBytes)
{
    if (!pPitch || WidthInBytes == 0 || Height == 0 ||
        (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16))
        return CUDA_ERROR_INVALID_VALUE;
    size_t pitch = (WidthInBytes + 511) / 512 * 512;
    CUresult r = allocate(dptr, pitch * Height, MEM_DEVICE, true, false);
    if (r == CUDA_SUCCESS)
        *pPitch = pitch;
    return r;
}

CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    (void)flags;
    return allocate(dptr, bytesize, MEM_MANAGED, true, false);
}

/* Stream-ordered allocation is legal during capture (the real driver
 * records an allocation node); here the memory simply exists at once. */
static CUresult allocate_async(CUdeviceptr *dptr, size_t bytesize, CUstream hStream,
                               bool per_thread, CUmemoryPool pool)
{
    struct fc_stream *s;
    CUresult r = fc_resolve_stream(hStream, per_thread, &s);
    if (r != CUDA_SUCCESS)
        return r;
    fc_stream_enqueued(s, FC_TAIL_OTHER);
    fc_stats_at_exit();
    atomic_fetch_add(&fc_async_allocations, 1);
    bool own = fc_is_own_pool(pool);
    if (own && (r = fc_pool_take(pool, bytesize)) != CUDA_SUCCESS)
        return r;
    r = allocate(dptr, bytesize, MEM_POOL, false, own);
    if (own && r == CUDA_SUCCESS)
        fc_pool_lent(pool, (uintptr_t)*dptr, bytesize);
    else if (own)
        fc_pool_unreserve(pool, bytesize);
    return r;
}

CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    return allocate_async(dptr, bytesize, hStream, false, NULL);
}

CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    return allocate_async(dptr, bytesize, hStream, true, NULL);
}

CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                 CUstream hStream)
{
    return allocate_async(dptr, bytesize, hStream, false, pool);
}

CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                      CUstream hStream)
{
    return allocate_async(dptr, bytesize, hStream, true, pool);
}

static CUresult release(CUdeviceptr dptr, bool unsafe)
{
    if (dptr == 0)
        return CUDA_SUCCESS;
    CUresult r;
    if (unsafe && (r = fc_capture_check_unsafe()) != CUDA_SUCCESS)
        return r;
    struct fc_alloc a;
    if (!table_remove((uintptr_t)dptr, match_freeable, &a))
        return CUDA_ERROR_INVALID_VALUE;
    bool pooled = fc_pool_give(a.base);
    if (!pooled)
        fc_capacity_give(a.size);
    if (!pooled && a.kind == MEM_DEVICE && reuse_freed())
        keep_freed((void *)(uintptr_t)dptr, (a.size + 255) / 256 * 256);
    else
        free((void *)(uintptr_t)dptr);
    return CUDA_SUCCESS;
}

CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    return release(dptr, true);
}

static CUresult free_async(CUdeviceptr dptr, CUstream hStream, bool per_thread)
{
    struct fc_stream *s;
    CUresult r = fc_resolve_stream(hStream, per_thread, &s);
    if (r != CUDA_SUCCESS)
        return r;
    fc_stream_enqueued(s, FC_TAIL_OTHER);
    return release(dptr, false);
}

CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
    return free_async(dptr, hStream, false);
}

CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
    return free_async(dptr, hStream, true);
}

CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
    struct fc_alloc a;
    if (!table_find((uintptr_t)dptr, 1, match_device, &a))
        return CUDA_ERROR_NOT_FOUND;
    if (pbase)
        *pbase = (CUdeviceptr)a.base;
    if (psize)
        *psize = a.size;
    return CUDA_SUCCESS;
}

/* ---- copies ---- */

/* The real driver keeps a lock of its own while a synchronous copy waits for
 * the legacy stream, and an asynchronous copy made meanwhile on another thread
 * waits for that lock (seen on an H200: cuMemcpy2DAsync_v2 in
 * pthread_rwlock_rdlock while the program's cuMemcpyHtoD_v2 waited behind a
 * stream held by cudump's kernel). The stand-in does the same, so a tool that
 * copies on another thread while the program waits in a synchronous copy
 * deadlocks here as it would there. */
static pthread_rwlock_t copy_lock = PTHREAD_RWLOCK_INITIALIZER;

FC_HIDDEN void fc_wait_held_locked(void)
{
    pthread_rwlock_wrlock(&copy_lock);
    fc_wait_held(NULL);
    pthread_rwlock_unlock(&copy_lock);
}

static CUresult copy_sync(void *dst, const void *src, size_t n)
{
    CUresult r = fc_capture_check_unsafe();
    if (r != CUDA_SUCCESS)
        return r;
    pthread_rwlock_wrlock(&copy_lock);
    fc_wait_held(NULL); /* a synchronous copy goes on the legacy stream */
    r = fc_fault_noticed(); /* and waits for the work before it: a lost context says so */
    if (r == CUDA_SUCCESS)
        memmove(dst, src, n);
    pthread_rwlock_unlock(&copy_lock);
    return r;
}

static CUresult htod(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
    CUresult r = check_device(dstDevice, ByteCount);
    return r != CUDA_SUCCESS ? r : copy_sync((void *)(uintptr_t)dstDevice, srcHost, ByteCount);
}

/* The synchronous copies and memsets without _ptds go on the legacy stream, which waits for
 * every blocking stream: where one captures, the driver refuses and the capture is lost. */
CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
    CUresult r = fc_legacy_conflict();
    return r != CUDA_SUCCESS ? r : htod(dstDevice, srcHost, ByteCount);
}

CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
    return htod(dstDevice, srcHost, ByteCount);
}

static CUresult dtoh(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
    CUresult r = check_device(srcDevice, ByteCount);
    return r != CUDA_SUCCESS ? r : copy_sync(dstHost, (void *)(uintptr_t)srcDevice, ByteCount);
}

CUresult cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
    CUresult r = fc_legacy_conflict();
    return r != CUDA_SUCCESS ? r : dtoh(dstHost, srcDevice, ByteCount);
}

CUresult cuMemcpyDtoH_v2_ptds(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
    return dtoh(dstHost, srcDevice, ByteCount);
}

static CUresult dtod(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)
{
    CUresult r = check_device(dstDevice, ByteCount);
    if (r == CUDA_SUCCESS)
        r = check_device(srcDevice, ByteCount);
    return r != CUDA_SUCCESS ? r
                             : copy_sync((void *)(uintptr_t)dstDevice,
                                         (void *)(uintptr_t)srcDevice, ByteCount);
}

CUresult cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)
{
    CUresult r = fc_legacy_conflict();
    return r != CUDA_SUCCESS ? r : dtod(dstDevice, srcDevice, ByteCount);
}

CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)
{
    return dtod(dstDevice, srcDevice, ByteCount);
}

/* Host memory that begins or ends inside a registration must lie wholly in it.
 * The driver refuses a copy spanning two registrations (CUDA_ERROR_INVALID_VALUE,
 * seen on an H200 with CUDA 13); the stand-in refuses one running off the end
 * of a registration as well, which the shim must never make either. */
static CUresult check_host_span(uintptr_t start, size_t extent)
{
    struct fc_alloc first, last;
    bool in_first = table_find(start, 1, match_registered, &first);
    bool in_last = table_find(start + extent - 1, 1, match_registered, &last);
    if (!in_first && !in_last)
        return CUDA_SUCCESS;
    return in_first && in_last && first.base == last.base ? CUDA_SUCCESS
                                                          : CUDA_ERROR_INVALID_VALUE;
}

/* Start address and byte extent of one side of a 2D copy. */
static CUresult side(CUmemorytype type, const void *host, CUdeviceptr dev, size_t x, size_t y,
                     size_t pitch, const CUDA_MEMCPY2D *c, uintptr_t *start)
{
    size_t extent = c->Height ? (c->Height - 1) * pitch + c->WidthInBytes : 0;
    uintptr_t base;
    switch (type) {
    case CU_MEMORYTYPE_HOST:
        base = (uintptr_t)host;
        break;
    case CU_MEMORYTYPE_DEVICE:
    case CU_MEMORYTYPE_UNIFIED:
        base = (uintptr_t)dev;
        break;
    default:
        return CUDA_ERROR_NOT_SUPPORTED; /* arrays are not modelled */
    }
    *start = base + y * pitch + x;
    if (type == CU_MEMORYTYPE_DEVICE)
        return check_device((CUdeviceptr)*start, extent);
    if (type == CU_MEMORYTYPE_HOST && extent)
        return check_host_span(*start, extent);
    return CUDA_SUCCESS;
}

FC_HIDDEN CUresult fc_copy2d_check(const CUDA_MEMCPY2D *c)
{
    if (!c)
        return CUDA_ERROR_INVALID_VALUE;
    size_t sp = c->srcPitch ? c->srcPitch : c->WidthInBytes;
    size_t dp = c->dstPitch ? c->dstPitch : c->WidthInBytes;
    if ((c->Height > 1 && (sp < c->WidthInBytes || dp < c->WidthInBytes)))
        return CUDA_ERROR_INVALID_VALUE;
    uintptr_t s, d;
    CUresult r = side(c->srcMemoryType, c->srcHost, c->srcDevice, c->srcXInBytes, c->srcY, sp, c, &s);
    if (r == CUDA_SUCCESS)
        r = side(c->dstMemoryType, c->dstHost, c->dstDevice, c->dstXInBytes, c->dstY, dp, c, &d);
    return r;
}

FC_HIDDEN CUresult fc_copy2d(const CUDA_MEMCPY2D *c, bool unaligned)
{
    (void)unaligned; /* host memory has no alignment rules */
    CUresult r = fc_copy2d_check(c);
    if (r != CUDA_SUCCESS)
        return r;
    size_t sp = c->srcPitch ? c->srcPitch : c->WidthInBytes;
    size_t dp = c->dstPitch ? c->dstPitch : c->WidthInBytes;
    uintptr_t s, d;
    side(c->srcMemoryType, c->srcHost, c->srcDevice, c->srcXInBytes, c->srcY, sp, c, &s);
    side(c->dstMemoryType, c->dstHost, c->dstDevice, c->dstXInBytes, c->dstY, dp, c, &d);
    for (size_t row = 0; row < c->Height; row++)
        memmove((void *)(d + row * dp), (const void *)(s + row * sp), c->WidthInBytes);
    return CUDA_SUCCESS;
}

CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D *pCopy)
{
    CUresult r = fc_copy2d_check(pCopy);
    if (r == CUDA_SUCCESS)
        r = fc_capture_check_unsafe();
    if (r != CUDA_SUCCESS)
        return r;
    pthread_rwlock_wrlock(&copy_lock);
    fc_wait_held(NULL);
    r = fc_copy2d(pCopy, false);
    pthread_rwlock_unlock(&copy_lock);
    return r;
}

CUresult cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D *pCopy)
{
    return cuMemcpy2D_v2(pCopy);
}

CUresult cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D *pCopy)
{
    return cuMemcpy2D_v2(pCopy);
}

CUresult cuMemcpy2DUnaligned_v2_ptds(const CUDA_MEMCPY2D *pCopy)
{
    return cuMemcpy2D_v2(pCopy);
}

static CUresult copy2d_async(const CUDA_MEMCPY2D *c, CUstream hStream, bool per_thread)
{
    struct fc_stream *s;
    CUresult r = fc_copy2d_check(c);
    if (r == CUDA_SUCCESS)
        r = fc_resolve_stream(hStream, per_thread, &s);
    if (r != CUDA_SUCCESS)
        return r;
    struct fc_op op = {.kind = FC_OP_MEMCPY};
    fc_copy2d_to_3d(c, &op.copy);
    pthread_rwlock_rdlock(&copy_lock);
    r = fc_submit(s, &op);
    pthread_rwlock_unlock(&copy_lock);
    return r;
}

CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *pCopy, CUstream hStream)
{
    return copy2d_async(pCopy, hStream, false);
}

CUresult cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D *pCopy, CUstream hStream)
{
    return copy2d_async(pCopy, hStream, true);
}

/* A 1-D copy as the CUDA_MEMCPY3D a graph's memcpy node holds (what the
 * real driver records when it captures one: Height and Depth 1, no pitch). */
static void linear_copy(CUmemorytype dst_type, void *dst, CUmemorytype src_type, const void *src,
                        size_t n, CUDA_MEMCPY3D *c)
{
    memset(c, 0, sizeof *c);
    c->srcMemoryType = src_type;
    if (src_type == CU_MEMORYTYPE_HOST)
        c->srcHost = src;
    else
        c->srcDevice = (CUdeviceptr)(uintptr_t)src;
    c->dstMemoryType = dst_type;
    if (dst_type == CU_MEMORYTYPE_HOST)
        c->dstHost = dst;
    else
        c->dstDevice = (CUdeviceptr)(uintptr_t)dst;
    c->WidthInBytes = n;
    c->Height = 1;
    c->Depth = 1;
}

static CUresult copy_async(CUmemorytype dst_type, void *dst, CUmemorytype src_type,
                           const void *src, size_t n, CUstream hStream, bool per_thread)
{
    struct fc_stream *s;
    struct fc_op op = {.kind = FC_OP_MEMCPY};
    linear_copy(dst_type, dst, src_type, src, n, &op.copy);
    CUresult r = fc_copy3d_check(&op.copy);
    if (r == CUDA_SUCCESS)
        r = fc_resolve_stream(hStream, per_thread, &s);
    if (r != CUDA_SUCCESS)
        return r;
    pthread_rwlock_rdlock(&copy_lock);
    r = fc_submit(s, &op);
    pthread_rwlock_unlock(&copy_lock);
    return r;
}

#define HOST CU_MEMORYTYPE_HOST
#define DEVICE CU_MEMORYTYPE_DEVICE

CUresult cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                              CUstream hStream)
{
    return copy_async(HOST, dstHost, DEVICE, (void *)(uintptr_t)srcDevice, ByteCount, hStream,
                      false);
}

CUresult cuMemcpyDtoHAsync_v2_ptsz(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                                   CUstream hStream)
{
    return copy_async(HOST, dstHost, DEVICE, (void *)(uintptr_t)srcDevice, ByteCount, hStream,
                      true);
}

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,
                              CUstream hStream)
{
    return copy_async(DEVICE, (void *)(uintptr_t)dstDevice, HOST, srcHost, ByteCount, hStream,
                      false);
}

CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,
                                   CUstream hStream)
{
    return copy_async(DEVICE, (void *)(uintptr_t)dstDevice, HOST, srcHost, ByteCount, hStream,
                      true);
}

#undef HOST
#undef DEVICE

/* One side of a 3-D copy: where it starts, and the strides of a row and of
 * a slice. A zero pitch means packed rows, a zero height packed slices. */
struct copy_side {
    uintptr_t start;
    size_t pitch, slice;
};

static CUresult side3d(CUmemorytype type, const void *host, CUdeviceptr dev, const void *reserved,
                       size_t x, size_t y, size_t z, size_t lod, size_t pitch, size_t height,
                       const CUDA_MEMCPY3D *c, struct copy_side *out)
{
    if (reserved || lod)
        return CUDA_ERROR_INVALID_VALUE;
    size_t p = pitch ? pitch : c->WidthInBytes;
    size_t h = height ? height : c->Height;
    if ((c->Height > 1 || c->Depth > 1) && p < c->WidthInBytes)
        return CUDA_ERROR_INVALID_VALUE;
    if (c->Depth > 1 && h < c->Height)
        return CUDA_ERROR_INVALID_VALUE;
    uintptr_t base;
    switch (type) {
    case CU_MEMORYTYPE_HOST:
        base = (uintptr_t)host;
        break;
    case CU_MEMORYTYPE_DEVICE:
    case CU_MEMORYTYPE_UNIFIED:
        base = (uintptr_t)dev;
        break;
    default:
        return CUDA_ERROR_NOT_SUPPORTED; /* arrays are not modelled */
    }
    bool empty = !c->WidthInBytes || !c->Height || !c->Depth;
    if (!base && !empty)
        return CUDA_ERROR_INVALID_VALUE;
    out->pitch = p;
    out->slice = p * h;
    out->start = base + z * out->slice + y * p + x;
    size_t extent = empty ? 0 : ((c->Depth - 1) * h + (c->Height - 1)) * p + c->WidthInBytes;
    if (type == CU_MEMORYTYPE_DEVICE)
        return check_device((CUdeviceptr)out->start, extent);
    return CUDA_SUCCESS;
}

static CUresult sides3d(const CUDA_MEMCPY3D *c, struct copy_side *src, struct copy_side *dst)
{
    if (!c)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = side3d(c->srcMemoryType, c->srcHost, c->srcDevice, c->reserved0, c->srcXInBytes,
                        c->srcY, c->srcZ, c->srcLOD, c->srcPitch, c->srcHeight, c, src);
    if (r == CUDA_SUCCESS)
        r = side3d(c->dstMemoryType, c->dstHost, c->dstDevice, c->reserved1, c->dstXInBytes,
                   c->dstY, c->dstZ, c->dstLOD, c->dstPitch, c->dstHeight, c, dst);
    return r;
}

FC_HIDDEN CUresult fc_copy3d_check(const CUDA_MEMCPY3D *c)
{
    struct copy_side src, dst;
    return sides3d(c, &src, &dst);
}

FC_HIDDEN CUresult fc_copy3d(const CUDA_MEMCPY3D *c)
{
    struct copy_side src, dst;
    CUresult r = sides3d(c, &src, &dst);
    if (r != CUDA_SUCCESS)
        return r;
    for (size_t z = 0; z < c->Depth; z++)
        for (size_t y = 0; y < c->Height; y++)
            memmove((void *)(dst.start + z * dst.slice + y * dst.pitch),
                    (const void *)(src.start + z * src.slice + y * src.pitch), c->WidthInBytes);
    return CUDA_SUCCESS;
}

static CUresult copy3d_async(const CUDA_MEMCPY3D *c, CUstream hStream, bool per_thread)
{
    struct fc_stream *s;
    CUresult r = fc_copy3d_check(c);
    if (r == CUDA_SUCCESS)
        r = fc_resolve_stream(hStream, per_thread, &s);
    if (r != CUDA_SUCCESS)
        return r;
    struct fc_op op = {.kind = FC_OP_MEMCPY, .copy = *c};
    pthread_rwlock_rdlock(&copy_lock);
    r = fc_submit(s, &op);
    pthread_rwlock_unlock(&copy_lock);
    return r;
}

CUresult cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D *pCopy, CUstream hStream)
{
    return copy3d_async(pCopy, hStream, false);
}

CUresult cuMemcpy3DAsync_v2_ptsz(const CUDA_MEMCPY3D *pCopy, CUstream hStream)
{
    return copy3d_async(pCopy, hStream, true);
}

FC_HIDDEN void fc_copy2d_to_3d(const CUDA_MEMCPY2D *c, CUDA_MEMCPY3D *out)
{
    memset(out, 0, sizeof *out);
    out->srcXInBytes = c->srcXInBytes;
    out->srcY = c->srcY;
    out->srcMemoryType = c->srcMemoryType;
    out->srcHost = c->srcHost;
    out->srcDevice = c->srcDevice;
    out->srcArray = c->srcArray;
    out->srcPitch = c->srcPitch;
    out->dstXInBytes = c->dstXInBytes;
    out->dstY = c->dstY;
    out->dstMemoryType = c->dstMemoryType;
    out->dstHost = c->dstHost;
    out->dstDevice = c->dstDevice;
    out->dstArray = c->dstArray;
    out->dstPitch = c->dstPitch;
    out->WidthInBytes = c->WidthInBytes;
    out->Height = c->Height;
    out->Depth = 1;
}

/* ---- memsets (CUDA_MEMSET_NODE_PARAMS: rows of 1-, 2- or 4-byte elements) ---- */

FC_HIDDEN CUresult fc_memset_check(const struct fc_memset_node_params *m)
{
    if (!m)
        return CUDA_ERROR_INVALID_VALUE;
    unsigned int es = m->elementSize;
    if (es != 1 && es != 2 && es != 4)
        return CUDA_ERROR_INVALID_VALUE;
    if (m->dst % es)
        return CUDA_ERROR_INVALID_VALUE;
    size_t row = m->width * es;
    if (m->height > 1 && m->pitch < row)
        return CUDA_ERROR_INVALID_VALUE;
    size_t extent = m->width && m->height ? (m->height - 1) * m->pitch + row : 0;
    return check_device(m->dst, extent);
}

FC_HIDDEN CUresult fc_memset(const struct fc_memset_node_params *m)
{
    CUresult r = fc_memset_check(m);
    if (r != CUDA_SUCCESS)
        return r;
    unsigned char *base = (unsigned char *)(uintptr_t)m->dst;
    for (size_t y = 0; y < m->height; y++) {
        unsigned char *row = base + y * m->pitch;
        for (size_t x = 0; x < m->width; x++) {
            if (m->elementSize == 1) {
                row[x] = (unsigned char)m->value;
            } else if (m->elementSize == 2) {
                unsigned short v = (unsigned short)m->value;
                memcpy(row + 2 * x, &v, 2);
            } else {
                memcpy(row + 4 * x, &m->value, 4);
            }
        }
    }
    return CUDA_SUCCESS;
}

static CUresult memset_async(CUdeviceptr dst, unsigned int value, unsigned int element_size,
                             size_t n, CUstream hStream, bool per_thread)
{
    struct fc_stream *s;
    struct fc_op op = {.kind = FC_OP_MEMSET,
                       .set = {.dst = dst, .value = value, .elementSize = element_size,
                               .width = n, .height = 1}};
    CUresult r = fc_memset_check(&op.set);
    if (r == CUDA_SUCCESS)
        r = fc_resolve_stream(hStream, per_thread, &s);
    if (r != CUDA_SUCCESS)
        return r;
    return fc_submit(s, &op);
}

CUresult cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream)
{
    return memset_async(dstDevice, uc, 1, N, hStream, false);
}

CUresult cuMemsetD8Async_ptsz(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream)
{
    return memset_async(dstDevice, uc, 1, N, hStream, true);
}

CUresult cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream)
{
    return memset_async(dstDevice, ui, 4, N, hStream, false);
}

CUresult cuMemsetD32Async_ptsz(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream)
{
    return memset_async(dstDevice, ui, 4, N, hStream, true);
}

static CUresult memset8(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{
    CUresult r = check_device(dstDevice, N);
    if (r == CUDA_SUCCESS)
        r = fc_capture_check_unsafe();
    if (r == CUDA_SUCCESS)
        memset((void *)(uintptr_t)dstDevice, uc, N);
    return r;
}

CUresult cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{
    CUresult r = fc_legacy_conflict();
    return r != CUDA_SUCCESS ? r : memset8(dstDevice, uc, N);
}

CUresult cuMemsetD8_v2_ptds(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{
    return memset8(dstDevice, uc, N);
}

/* The other synchronous memsets: made at once, as cuMemsetD8_v2 is. */
static CUresult memset_now(CUdeviceptr dst, size_t pitch, unsigned int value,
                           unsigned int element_size, size_t width, size_t height)
{
    struct fc_memset_node_params m = {.dst = dst, .pitch = pitch, .value = value,
                                      .elementSize = element_size, .width = width,
                                      .height = height};
    CUresult r = fc_memset_check(&m);
    if (r == CUDA_SUCCESS)
        r = fc_capture_check_unsafe();
    return r == CUDA_SUCCESS ? fc_memset(&m) : r;
}

CUresult cuMemsetD16_v2(CUdeviceptr dstDevice, unsigned short us, size_t N)
{
    return memset_now(dstDevice, 2 * N, us, 2, N, 1);
}

CUresult cuMemsetD16_v2_ptds(CUdeviceptr dstDevice, unsigned short us, size_t N)
{
    return cuMemsetD16_v2(dstDevice, us, N);
}

CUresult cuMemsetD32_v2(CUdeviceptr dstDevice, unsigned int ui, size_t N)
{
    return memset_now(dstDevice, 4 * N, ui, 4, N, 1);
}

CUresult cuMemsetD32_v2_ptds(CUdeviceptr dstDevice, unsigned int ui, size_t N)
{
    return cuMemsetD32_v2(dstDevice, ui, N);
}

CUresult cuMemsetD2D8_v2(CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc, size_t Width,
                         size_t Height)
{
    return memset_now(dstDevice, dstPitch, uc, 1, Width, Height);
}

CUresult cuMemsetD2D8_v2_ptds(CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc,
                              size_t Width, size_t Height)
{
    return cuMemsetD2D8_v2(dstDevice, dstPitch, uc, Width, Height);
}

CUresult cuMemsetD2D16_v2(CUdeviceptr dstDevice, size_t dstPitch, unsigned short us,
                          size_t Width, size_t Height)
{
    return memset_now(dstDevice, dstPitch, us, 2, Width, Height);
}

CUresult cuMemsetD2D16_v2_ptds(CUdeviceptr dstDevice, size_t dstPitch, unsigned short us,
                               size_t Width, size_t Height)
{
    return cuMemsetD2D16_v2(dstDevice, dstPitch, us, Width, Height);
}

CUresult cuMemsetD2D32_v2(CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui, size_t Width,
                          size_t Height)
{
    return memset_now(dstDevice, dstPitch, ui, 4, Width, Height);
}

CUresult cuMemsetD2D32_v2_ptds(CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui,
                               size_t Width, size_t Height)
{
    return cuMemsetD2D32_v2(dstDevice, dstPitch, ui, Width, Height);
}

CUresult cuMemsetD16Async(CUdeviceptr dstDevice, unsigned short us, size_t N, CUstream hStream)
{
    return memset_async(dstDevice, us, 2, N, hStream, false);
}

CUresult cuMemsetD16Async_ptsz(CUdeviceptr dstDevice, unsigned short us, size_t N,
                               CUstream hStream)
{
    return memset_async(dstDevice, us, 2, N, hStream, true);
}

/* A 2D memset on a stream: rows `pitch` apart. */
static CUresult memset2d_async(CUdeviceptr dst, size_t pitch, unsigned int value,
                               unsigned int element_size, size_t width, size_t height,
                               CUstream hStream, bool per_thread)
{
    struct fc_stream *s;
    struct fc_op op = {.kind = FC_OP_MEMSET,
                       .set = {.dst = dst, .pitch = pitch, .value = value,
                               .elementSize = element_size, .width = width, .height = height}};
    CUresult r = fc_memset_check(&op.set);
    if (r == CUDA_SUCCESS)
        r = fc_resolve_stream(hStream, per_thread, &s);
    if (r != CUDA_SUCCESS)
        return r;
    return fc_submit(s, &op);
}

CUresult cuMemsetD2D8Async(CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc,
                           size_t Width, size_t Height, CUstream hStream)
{
    return memset2d_async(dstDevice, dstPitch, uc, 1, Width, Height, hStream, false);
}

CUresult cuMemsetD2D8Async_ptsz(CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc,
                                size_t Width, size_t Height, CUstream hStream)
{
    return memset2d_async(dstDevice, dstPitch, uc, 1, Width, Height, hStream, true);
}

CUresult cuMemsetD2D16Async(CUdeviceptr dstDevice, size_t dstPitch, unsigned short us,
                            size_t Width, size_t Height, CUstream hStream)
{
    return memset2d_async(dstDevice, dstPitch, us, 2, Width, Height, hStream, false);
}

CUresult cuMemsetD2D16Async_ptsz(CUdeviceptr dstDevice, size_t dstPitch, unsigned short us,
                                 size_t Width, size_t Height, CUstream hStream)
{
    return memset2d_async(dstDevice, dstPitch, us, 2, Width, Height, hStream, true);
}

CUresult cuMemsetD2D32Async(CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui,
                            size_t Width, size_t Height, CUstream hStream)
{
    return memset2d_async(dstDevice, dstPitch, ui, 4, Width, Height, hStream, false);
}

CUresult cuMemsetD2D32Async_ptsz(CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui,
                                 size_t Width, size_t Height, CUstream hStream)
{
    return memset2d_async(dstDevice, dstPitch, ui, 4, Width, Height, hStream, true);
}

/* ---- host memory ---- */

static CUresult host_alloc(void **pp, size_t bytesize)
{
    CUresult r = fc_require_context();
    if (r != CUDA_SUCCESS)
        return r;
    if (!pp || bytesize == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = fc_capture_check_unsafe()) != CUDA_SUCCESS)
        return r;
    size_t rounded = (bytesize + 4095) / 4096 * 4096;
    void *p = aligned_alloc(4096, rounded);
    if (!p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if ((r = table_add((uintptr_t)p, bytesize, MEM_HOST)) != CUDA_SUCCESS) {
        free(p);
        return r;
    }
    *pp = p;
    return CUDA_SUCCESS;
}

CUresult cuMemAllocHost_v2(void **pp, size_t bytesize)
{
    return host_alloc(pp, bytesize);
}

CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
    (void)Flags;
    return host_alloc(pp, bytesize);
}

CUresult cuMemFreeHost(void *p)
{
    if (!table_remove((uintptr_t)p, match_host, NULL))
        return CUDA_ERROR_INVALID_VALUE;
    free(p);
    return CUDA_SUCCESS;
}

CUresult cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags)
{
    (void)Flags;
    CUresult r = fc_require_context();
    if (r != CUDA_SUCCESS)
        return r;
    if (!p || bytesize == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = fc_capture_check_unsafe()) != CUDA_SUCCESS)
        return r;
    if (table_find((uintptr_t)p, 1, match_host_any, NULL) ||
        table_find((uintptr_t)p + bytesize - 1, 1, match_host_any, NULL))
        return FC_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    r = table_add((uintptr_t)p, bytesize, MEM_REGISTERED);
    if (r == CUDA_SUCCESS)
        atomic_fetch_add(&fc_host_registrations, 1);
    return r;
}

/* As on an H200 after a reset: a registration ends with the context it was made
 * in, though it is portable (the memory stays the program's). */
FC_HIDDEN void fc_registrations_end(unsigned long long ctx)
{
    pthread_mutex_lock(&table_lock);
    for (size_t i = 0; i < table_count;) {
        if (table[i].kind == MEM_REGISTERED && table[i].ctx == ctx)
            table[i] = table[--table_count];
        else
            i++;
    }
    pthread_mutex_unlock(&table_lock);
}

CUresult cuMemHostRegister(void *p, size_t bytesize, unsigned int Flags)
{
    return cuMemHostRegister_v2(p, bytesize, Flags);
}

/* Registered host memory is mapped, at the same address (unified addressing). */
CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p, unsigned int Flags)
{
    CUresult r = fc_require_context();
    if (r != CUDA_SUCCESS)
        return r;
    if (!pdptr || Flags != 0 || !table_find((uintptr_t)p, 1, match_host_any, NULL))
        return CUDA_ERROR_INVALID_VALUE;
    *pdptr = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}

CUresult cuMemHostUnregister(void *p)
{
    return table_remove((uintptr_t)p, match_registered, NULL)
               ? CUDA_SUCCESS
               : FC_ERROR_HOST_MEMORY_NOT_REGISTERED;
}

CUresult cuPointerGetAttribute(void *data, int attribute, CUdeviceptr ptr)
{
    struct fc_alloc a;
    if (!data)
        return CUDA_ERROR_INVALID_VALUE;
    bool device = table_find((uintptr_t)ptr, 1, match_device, &a);
    if (!device && !table_find((uintptr_t)ptr, 1, match_host_any, &a))
        return CUDA_ERROR_INVALID_VALUE;
    switch (attribute) {
    case FC_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *(unsigned int *)data = device ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
        return CUDA_SUCCESS;
    case FC_POINTER_ATTRIBUTE_DEVICE_POINTER:
        *(CUdeviceptr *)data = ptr;
        return CUDA_SUCCESS;
    case FC_POINTER_ATTRIBUTE_IS_MANAGED:
        *(unsigned int *)data = a.kind == MEM_MANAGED;
        return CUDA_SUCCESS;
    case FC_POINTER_ATTRIBUTE_RANGE_START_ADDR:
        *(CUdeviceptr *)data = (CUdeviceptr)a.base;
        return CUDA_SUCCESS;
    case FC_POINTER_ATTRIBUTE_RANGE_SIZE:
        *(size_t *)data = a.size;
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_NOT_SUPPORTED;
    }
}

/* ---- virtual memory management ---- */

CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                             unsigned long long flags)
{
    (void)addr; /* a hint only */
    (void)flags;
    long page = sysconf(_SC_PAGESIZE);
    if (!ptr || size == 0 || size % (size_t)page)
        return CUDA_ERROR_INVALID_VALUE;
    if (alignment < (size_t)page)
        alignment = (size_t)page;
    /* Over-reserve, then trim to the requested alignment. */
    size_t span = size + alignment;
    unsigned char *p = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                            -1, 0);
    if (p == MAP_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    uintptr_t start = ((uintptr_t)p + alignment - 1) / alignment * alignment;
    if (start > (uintptr_t)p)
        munmap(p, start - (uintptr_t)p);
    if ((uintptr_t)p + span > start + size)
        munmap((void *)(start + size), (uintptr_t)p + span - (start + size));
    CUresult r = table_add(start, size, MEM_RESERVED);
    if (r != CUDA_SUCCESS) {
        munmap((void *)start, size);
        return r;
    }
    *ptr = (CUdeviceptr)start;
    return CUDA_SUCCESS;
}

CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    struct fc_alloc a;
    if (!table_find((uintptr_t)ptr, size, match_reserved, &a) || a.base != (uintptr_t)ptr ||
        a.size != size)
        return CUDA_ERROR_INVALID_VALUE;
    table_remove(a.base, match_reserved, NULL);
    munmap((void *)a.base, a.size);
    return CUDA_SUCCESS;
}

CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                     const CUmemAllocationProp *prop, unsigned long long flags)
{
    (void)flags;
    CUresult r = fc_require_context();
    if (r != CUDA_SUCCESS)
        return r;
    const struct fc_mem_allocation_prop *pr = (const struct fc_mem_allocation_prop *)prop;
    if (!handle || !pr || size == 0 || size % (size_t)sysconf(_SC_PAGESIZE) ||
        pr->type != FC_MEM_ALLOCATION_TYPE_PINNED || pr->location.type != FC_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    if (pr->location.id != 0)
        return FC_ERROR_INVALID_DEVICE;
    struct fc_physical *ph = malloc(sizeof *ph);
    if (!ph)
        return CUDA_ERROR_OUT_OF_MEMORY;
    ph->fd = memfd_create("fakecuda-physical", MFD_CLOEXEC);
    if (ph->fd < 0 || ftruncate(ph->fd, (off_t)size) != 0) {
        if (ph->fd >= 0)
            close(ph->fd);
        free(ph);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    ph->size = size;
    *handle = (CUmemGenericAllocationHandle)(uintptr_t)ph;
    return CUDA_SUCCESS;
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    struct fc_physical *ph = (struct fc_physical *)(uintptr_t)handle;
    if (!ph)
        return CUDA_ERROR_INVALID_VALUE;
    /* Mappings keep the memfd's pages alive, as the real driver keeps a
     * released allocation until its last mapping goes. */
    close(ph->fd);
    free(ph);
    return CUDA_SUCCESS;
}

CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                  unsigned long long flags)
{
    struct fc_physical *ph = (struct fc_physical *)(uintptr_t)handle;
    if (!ph || flags != 0 || size == 0 || offset > ph->size || size > ph->size - offset)
        return CUDA_ERROR_INVALID_VALUE;
    if (!table_find((uintptr_t)ptr, size, match_reserved, NULL) ||
        table_find((uintptr_t)ptr, 1, match_mapped, NULL))
        return CUDA_ERROR_INVALID_VALUE;
    /* Inaccessible until cuMemSetAccess, as on the GPU. */
    void *p = mmap((void *)(uintptr_t)ptr, size, PROT_NONE, MAP_SHARED | MAP_FIXED, ph->fd,
                   (off_t)offset);
    if (p == MAP_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    return table_add((uintptr_t)ptr, size, MEM_MAPPED);
}

CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    struct fc_alloc a;
    if (!table_find((uintptr_t)ptr, size, match_mapped, &a) || a.base != (uintptr_t)ptr ||
        a.size != size)
        return CUDA_ERROR_INVALID_VALUE;
    table_remove(a.base, match_mapped, NULL);
    /* Back to a hole in the reservation. */
    mmap((void *)a.base, a.size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED,
         -1, 0);
    return CUDA_SUCCESS;
}

CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const struct fc_mem_access_desc *desc,
                        size_t count)
{
    if (!desc || count == 0 || size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    int prot = PROT_NONE;
    for (size_t i = 0; i < count; i++) {
        if (desc[i].location.type != FC_MEM_LOCATION_TYPE_DEVICE || desc[i].location.id != 0)
            return FC_ERROR_INVALID_DEVICE;
        if (desc[i].flags == FC_MEM_ACCESS_FLAGS_PROT_READWRITE)
            prot = PROT_READ | PROT_WRITE;
        else if (desc[i].flags == 1)
            prot = PROT_READ;
    }
    /* Every page of the range must be mapped. */
    for (uintptr_t p = (uintptr_t)ptr; p < (uintptr_t)ptr + size;) {
        struct fc_alloc a;
        if (!table_find(p, 1, match_mapped, &a))
            return CUDA_ERROR_INVALID_VALUE;
        p = a.base + a.size;
    }
    return mprotect((void *)(uintptr_t)ptr, size, prot) == 0 ? CUDA_SUCCESS
                                                             : CUDA_ERROR_INVALID_VALUE;
}

/* Host memory has no fixed size: report a device of FAKECUDA_DEVICE_MIB (default 16 GiB),
 * all of it free, so that a caller's "a quarter of what is free" can be set by a test. */
CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes)
{
    if (!atomic_load(&fc_initialized))
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!free_bytes || !total_bytes)
        return CUDA_ERROR_INVALID_VALUE;
    if (fc_capacity_left(free_bytes, total_bytes))
        return CUDA_SUCCESS;
    const char *mib = getenv("FAKECUDA_DEVICE_MIB");
    size_t size = (mib && *mib ? (size_t)strtoull(mib, NULL, 10) : 16384) << 20;
    *free_bytes = *total_bytes = size;
    return CUDA_SUCCESS;
}
