/*
 * Device memory lent to deferred snapshot copies (drain.c).
 *
 * Each deferred launch takes scratch memory on its stream and gives it back
 * on the drain's stream once the bytes have left it. Taken from the device's
 * default pool, that cost the program twice a launch: the pool gives its
 * memory back to the device at the next synchronisation (its release
 * threshold is 0), so each launch mapped it again (0.8 ms for 512 MiB on an
 * H200) and the drain's clean-up unmapped it (1.1 ms) while the next launch
 * waited for the drain. Changing that pool's threshold would change the
 * program's own allocations, so the memory comes from a pool of cudump's own
 * per device, which keeps it from one launch to the next.
 *
 * Kept memory is memory the program cannot have, so it goes back to the
 * device (a trim):
 *   - after a launch, at once, where less than a quarter of the device is
 *     free (scratch_spare): a program that fills the device never finds it
 *     short because of cudump, whatever call needs the memory;
 *   - when the drain has had nothing to do for a while (drain.c);
 *   - when an allocation of the program's fails for want of memory; the
 *     allocation is then made again once (hooks.c);
 *   - when the program asks how much memory is free (cuMemGetInfo), so that
 *     a program that sizes itself by it sees what it would see bare.
 * Never while a stream of the process is being captured: the driver counts a
 * trim among the calls a capture forbids (seen on an H200: the capture is
 * invalidated), so the memory stays kept until the capture has ended.
 * `kept` says the pools may keep memory; it is cleared only by a trim that
 * found none left reserved, so memory still on its way back to a pool (a free
 * not yet reached on its stream) is trimmed the next time.
 */
#include <pthread.h>
#include <string.h>

#include "interpose.h"
#include "scratch.h"
#include "stream.h"

enum { SCRATCH_DEVICES = 64 };

/* Process-wide, as the device's memory is: the pools outlive every launch. */
static struct {
    pthread_mutex_t lock;                  /* making pools, trimming them */
    CUmemoryPool pools[SCRATCH_DEVICES];
    bool failed[SCRATCH_DEVICES];          /* no pool of cudump's on that device */
    atomic_bool kept;                      /* a pool may keep memory since the last trim */
    atomic_ulong trims;                    /* trims made, counted under lock */
} sc = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* cudump's pool of `device`, made at its first use; NULL where none can be. */
static CUmemoryPool pool_of(int device)
{
    if (device < 0 || device >= SCRATCH_DEVICES || !real_cuMemPoolCreate ||
        !real_cuMemPoolSetAttribute || !real_cuMemPoolDestroy)
        return NULL;
    pthread_mutex_lock(&sc.lock);
    CUmemoryPool pool = sc.pools[device];
    if (!pool && !sc.failed[device]) {
        CUmemPoolProps props;
        memset(&props, 0, sizeof props);
        props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
        props.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
        props.location = (CUmemLocation){CU_MEM_LOCATION_TYPE_DEVICE, device};
        cuuint64_t keep_all = UINT64_MAX;
        if (real_cuMemPoolCreate(&pool, &props) != CUDA_SUCCESS) {
            pool = NULL;
        } else if (real_cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                                              &keep_all) != CUDA_SUCCESS) {
            real_cuMemPoolDestroy(pool);
            pool = NULL;
        }
        sc.pools[device] = pool;
        sc.failed[device] = pool == NULL;
    }
    pthread_mutex_unlock(&sc.lock);
    return pool;
}

bool scratch_take(const struct launch_info *li, CUcontext ctx, size_t bytes, CUdeviceptr *out)
{
    /* li->device is the current context's: the pool of the stream's device only
     * where that is the stream's context (a pool of another device would lend
     * memory there without complaint). */
    CUcontext current = NULL;
    bool same = real_cuCtxGetCurrent && real_cuCtxGetCurrent(&current) == CUDA_SUCCESS &&
                current == ctx;
    CUmemoryPool pool = same ? pool_of(li->device) : NULL;
    cuMemAllocFromPoolAsync_fn from = li->ptsz ? shim_real_cuMemAllocFromPoolAsync_ptsz()
                                               : shim_real_cuMemAllocFromPoolAsync();
    if (pool && from && from(out, bytes, pool, li->stream) == CUDA_SUCCESS) {
        /* Marked after the memory is the pool's: a trim meanwhile cannot have taken it. */
        atomic_store(&sc.kept, true);
        return true;
    }
    cuMemAllocAsync_fn alloc =
        li->ptsz ? shim_real_cuMemAllocAsync_ptsz() : shim_real_cuMemAllocAsync();
    return alloc && alloc(out, bytes, li->stream) == CUDA_SUCCESS;
}

void scratch_give(CUdeviceptr p, CUstream stream)
{
    cuMemFreeAsync_fn release = shim_real_cuMemFreeAsync();
    if (release)
        release(p, stream);
    atomic_store(&sc.kept, true);
}

void scratch_spare(void)
{
    cuMemGetInfo_fn info = shim_real_cuMemGetInfo_v2();
    size_t free_bytes = 0, total_bytes = 0;
    if (scratch_kept() && (!info || info(&free_bytes, &total_bytes) != CUDA_SUCCESS ||
                           free_bytes < total_bytes / 4))
        scratch_trim();
}

bool scratch_kept(void)
{
    return atomic_load_explicit(&sc.kept, memory_order_relaxed);
}

bool scratch_trim(void)
{
    /* `kept` stays set while a trim runs: a caller that finds it set waits on
     * the lock for the trim under way, and then retries what failed. */
    if (!atomic_load(&sc.kept) || !real_cuMemPoolTrimTo || !real_cuMemPoolGetAttribute ||
        atomic_load(&shim_stats.captures_active) > 0)
        return false;
    pthread_mutex_lock(&sc.lock);
    /* Again under the lock: a capture counted since did not wait for this trim (scratch_fence). */
    if (atomic_load(&shim_stats.captures_active) > 0) {
        pthread_mutex_unlock(&sc.lock);
        return false;
    }
    /* On a thread of the program: in the relaxed mode, like every call of the
     * shim's own, should a capture begin meanwhile. */
    CUstreamCaptureMode mode = capture_relax();
    bool left = false;
    for (int d = 0; d < SCRATCH_DEVICES; d++) {
        cuuint64_t reserved = 0;
        if (sc.pools[d] &&
            (real_cuMemPoolTrimTo(sc.pools[d], 0) != CUDA_SUCCESS ||
             real_cuMemPoolGetAttribute(sc.pools[d], CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT,
                                        &reserved) != CUDA_SUCCESS ||
             reserved > 0))
            left = true;
    }
    capture_restore(mode);
    /* Memory still lent, or not back in its pool yet, is trimmed next time. A
     * launch that takes memory meanwhile sets `kept` again when it gives it back. */
    atomic_store(&sc.kept, left);
    atomic_fetch_add(&sc.trims, 1);
    pthread_mutex_unlock(&sc.lock);
    return true;
}

unsigned long scratch_trims(void)
{
    return atomic_load(&sc.trims);
}

void scratch_fence(void)
{
    /* A trim holds the lock from its look at the count to its end. */
    pthread_mutex_lock(&sc.lock);
    pthread_mutex_unlock(&sc.lock);
}

void scratch_reset_after_fork(void)
{
    /* The parent's pools are not this process's: its CUDA state starts afresh. */
    pthread_mutex_init(&sc.lock, NULL);
    memset(sc.pools, 0, sizeof sc.pools);
    memset(sc.failed, 0, sizeof sc.failed);
    atomic_store(&sc.kept, false);
}
