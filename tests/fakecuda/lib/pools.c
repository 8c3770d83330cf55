/*
 * A device of fixed size, and memory pools of a program's own.
 *
 * With FAKECUDA_CAPACITY_MIB set, device memory (cuMemAlloc and its kin, the
 * default pool, pools of one's own) is counted against that many MiB: an
 * allocation that does not fit fails with CUDA_ERROR_OUT_OF_MEMORY, and
 * cuMemGetInfo reports what is left. Unset, memory is as large as the host's.
 *
 * A pool made with cuMemPoolCreate keeps the memory given back to it, up to
 * its release threshold (0 by default: nothing kept), and that memory counts
 * as used until the pool is trimmed (cuMemPoolTrimTo) or destroyed, as on a
 * real device. FAKECUDA_POOL_TRIM=main refuses trims from every thread but
 * the main one, so that a test can keep a tool's pool from trimming on a
 * thread of its own. A trim is among the calls a stream capture forbids.
 * fc_pools_kept() is the stand-in's own: what pools keep.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "internal.h"

enum { FC_MAGIC_POOL = 0x504f4f4cu, MAX_POOLS = 64, MAX_LENT = 1024 };

struct fc_pool {
    unsigned magic;
    uint64_t threshold;
    size_t reserved;   /* counted against the device: in use or kept */
    size_t in_use;
};

/* Under one lock: the device's count, the pools, and what each pool has lent. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static size_t used;
static struct fc_pool *pools[MAX_POOLS];
struct fc_lent {
    uintptr_t base;
    size_t size;
    struct fc_pool *pool;
};
static struct fc_lent lent[MAX_LENT];
static size_t nlent;

_Atomic unsigned long fc_out_of_memory;

static size_t capacity(void)
{
    const char *mib = getenv("FAKECUDA_CAPACITY_MIB");
    return mib && *mib ? (size_t)strtoull(mib, NULL, 10) << 20 : 0;
}

/* Under lock: whether n more bytes fit on the device; counted if they do. */
static bool fits(size_t n)
{
    size_t cap = capacity();
    if (cap && (n > cap || used > cap - n)) {
        atomic_fetch_add(&fc_out_of_memory, 1);
        return false;
    }
    used += n;
    return true;
}

FC_HIDDEN CUresult fc_capacity_take(size_t n)
{
    pthread_mutex_lock(&lock);
    bool ok = fits(n);
    pthread_mutex_unlock(&lock);
    return ok ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

FC_HIDDEN void fc_capacity_give(size_t n)
{
    pthread_mutex_lock(&lock);
    used -= n < used ? n : used;
    pthread_mutex_unlock(&lock);
}

FC_HIDDEN bool fc_capacity_left(size_t *free_bytes, size_t *total_bytes)
{
    size_t cap = capacity();
    if (!cap)
        return false;
    pthread_mutex_lock(&lock);
    *free_bytes = used < cap ? cap - used : 0;
    pthread_mutex_unlock(&lock);
    *total_bytes = cap;
    return true;
}

static struct fc_pool *pool_from_handle(CUmemoryPool handle)
{
    struct fc_pool *p = (struct fc_pool *)handle;
    return p && p->magic == FC_MAGIC_POOL ? p : NULL;
}

FC_HIDDEN bool fc_is_own_pool(CUmemoryPool handle)
{
    return pool_from_handle(handle) != NULL;
}

FC_HIDDEN CUresult fc_pool_take(CUmemoryPool handle, size_t n)
{
    struct fc_pool *p = pool_from_handle(handle);
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    size_t idle = p->reserved - p->in_use;
    bool ok = n <= idle || fits(n - idle);
    if (ok) {
        if (n > idle)
            p->reserved += n - idle;
        p->in_use += n;
    }
    pthread_mutex_unlock(&lock);
    return ok ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

/* Under lock: gives back what a pool keeps beyond `keep` (and beyond what it lends). */
static void shrink(struct fc_pool *p, size_t keep)
{
    size_t floor = p->in_use > keep ? p->in_use : keep;
    if (p->reserved > floor) {
        used -= p->reserved - floor;
        p->reserved = floor;
    }
}

FC_HIDDEN void fc_pool_lent(CUmemoryPool handle, uintptr_t base, size_t n)
{
    struct fc_pool *p = pool_from_handle(handle);
    pthread_mutex_lock(&lock);
    if (p && nlent < MAX_LENT)
        lent[nlent++] = (struct fc_lent){base, n, p};
    else if (p) {
        p->in_use -= n;   /* not recorded: as if given back at once */
        shrink(p, (size_t)p->threshold);
    }
    pthread_mutex_unlock(&lock);
}

FC_HIDDEN void fc_pool_unreserve(CUmemoryPool handle, size_t n)
{
    struct fc_pool *p = pool_from_handle(handle);
    if (!p)
        return;
    pthread_mutex_lock(&lock);
    p->in_use -= n;
    shrink(p, (size_t)p->threshold);
    pthread_mutex_unlock(&lock);
}

FC_HIDDEN bool fc_pool_give(uintptr_t base)
{
    bool found = false;
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < nlent && !found; i++) {
        if (lent[i].base != base)
            continue;
        struct fc_pool *p = lent[i].pool;
        p->in_use -= lent[i].size;
        shrink(p, (size_t)p->threshold);
        lent[i] = lent[--nlent];
        found = true;
    }
    pthread_mutex_unlock(&lock);
    return found;
}

CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props)
{
    if (!atomic_load(&fc_initialized))
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!pool || !props || props->location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
        props->location.id != 0)
        return CUDA_ERROR_INVALID_VALUE;
    struct fc_pool *p = calloc(1, sizeof *p);
    if (!p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    p->magic = FC_MAGIC_POOL;
    pthread_mutex_lock(&lock);
    int slot = -1;
    for (int i = 0; i < MAX_POOLS && slot < 0; i++)
        if (!pools[i])
            slot = i;
    if (slot >= 0)
        pools[slot] = p;
    pthread_mutex_unlock(&lock);
    if (slot < 0) {
        free(p);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *pool = (CUmemoryPool)p;
    return CUDA_SUCCESS;
}

CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
    struct fc_pool *p = pool_from_handle(pool);
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_POOLS; i++)
        if (pools[i] == p)
            pools[i] = NULL;
    /* Memory still lent stays counted until it is freed: only what is kept goes. */
    shrink(p, 0);
    p->threshold = 0;
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

CUresult cuMemPoolSetAttribute(CUmemoryPool pool, int attr, void *value)
{
    struct fc_pool *p = pool_from_handle(pool);
    if (!p || !value)
        return CUDA_ERROR_INVALID_VALUE;
    if (attr == CU_MEMPOOL_ATTR_RELEASE_THRESHOLD) {
        pthread_mutex_lock(&lock);
        p->threshold = *(const uint64_t *)value;
        shrink(p, (size_t)p->threshold);
        pthread_mutex_unlock(&lock);
    }
    return CUDA_SUCCESS;
}

CUresult cuMemPoolGetAttribute(CUmemoryPool pool, int attr, void *value)
{
    struct fc_pool *p = pool_from_handle(pool);
    if (!p || !value)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    uint64_t v = attr == CU_MEMPOOL_ATTR_RELEASE_THRESHOLD  ? p->threshold
                 : attr == CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT ? p->reserved
                                                                 : 0;
    pthread_mutex_unlock(&lock);
    *(uint64_t *)value = v;
    return CUDA_SUCCESS;
}

CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t keep)
{
    struct fc_pool *p = pool_from_handle(pool);
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    const char *only = getenv("FAKECUDA_POOL_TRIM");
    if (only && strcmp(only, "main") == 0 && syscall(SYS_gettid) != getpid())
        return CUDA_ERROR_NOT_SUPPORTED;
    /* Among the calls a capture forbids, as on a real driver (seen on an H200). */
    CUresult r = fc_capture_check_unsafe();
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&lock);
    shrink(p, keep);
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

size_t fc_pools_kept(void)
{
    size_t kept = 0;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_POOLS; i++)
        if (pools[i])
            kept += pools[i]->reserved - pools[i]->in_use;
    pthread_mutex_unlock(&lock);
    return kept;
}
