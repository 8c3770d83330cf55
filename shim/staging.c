/*
 * The staging area and the result ring: shared memory the controller created
 * for this process, registered as pinned (and mapped) memory on first use, so
 * that one DMA moves a snapshot to where the controller reads it and cudump's
 * kernel can write its results straight into it. Bulk data never goes through
 * the socket.
 *
 * One wanted launch at a time uses the staging area: staging_locked runs the
 * caller's work under the lock and releases it before returning, so the lock
 * never outlives a function.
 */
#include <pthread.h>
#include <time.h>

#include "channel.h"
#include "ctxlife.h"
#include "staging.h"
#include "util.h"

/* Held from MSG_BEGIN to MSG_END (and across a stop). */
static pthread_mutex_t snap_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t pin_lock = PTHREAD_MUTEX_INITIALIZER;
/* An area pinned (tried at least once), the context epoch it was last found
 * pinned in (ctxlife.h), and the context that registered it (under pin_lock;
 * ctx NULL: none known): the registration ends with that context. */
struct pin {
    atomic_bool tried;
    atomic_uint epoch;
    struct ctx_key owner;
};
static struct pin staging_pin, results_pin;

void staging_reset_after_fork(void)
{
    pthread_mutex_init(&snap_lock, NULL);
    pthread_mutex_init(&pin_lock, NULL);
    staging_pin = results_pin = (struct pin){0};
}

/* A timed wait for the lock is made of slices, each with its own deadline: a
 * machine that stalls (a virtual machine paused, the clock stepped) ends at
 * most one slice early, and the holder still gets the rest of the time to let
 * go, so the wait is for how long the holder keeps the lock, not for how long
 * the clock moved. */
enum { LOCK_SLICE_MS = 10 };

bool staging_locked(unsigned ms, void (*fn)(void *), void *arg)
{
    if (ms == 0) {
        pthread_mutex_lock(&snap_lock);
    } else {
        bool got = false;
        for (unsigned waited = 0; !got && waited < ms; waited += LOCK_SLICE_MS) {
            struct timespec until =
                realtime_after_ms(ms - waited < LOCK_SLICE_MS ? ms - waited : LOCK_SLICE_MS);
            got = pthread_mutex_timedlock(&snap_lock, &until) == 0;
        }
        if (!got)
            return false;
    }
    fn(arg);
    pthread_mutex_unlock(&snap_lock);
    return true;
}

/* Pins an area of the shared memory on first use: copies into it are then real
 * async DMAs, and cudump's kernel can write its results into it (mapped). If
 * pinning fails copies still work, through the driver's bounce buffers, and
 * the kernel's results are refused. The registration is the context's it was
 * made in (portable: every context sees it) and ends with it, as on an H200
 * after cudaDeviceReset: once a context ended, the area is pinned again where
 * the driver no longer maps it. */
static void pin_current(void *area, size_t size, struct pin *pin)
{
    unsigned now = ctxlife_epoch();
    if (!area || !size ||
        (atomic_load_explicit(&pin->tried, memory_order_acquire) &&
         atomic_load_explicit(&pin->epoch, memory_order_acquire) == now))
        return;
    pthread_mutex_lock(&pin_lock);
    CUdeviceptr dev = 0;
    bool again = !atomic_load(&pin->tried) ||
                 (atomic_load(&pin->epoch) != now &&
                  (!real_cuMemHostGetDevicePointer_v2 ||
                   real_cuMemHostGetDevicePointer_v2(&dev, area, 0) != CUDA_SUCCESS));
    CUcontext ctx = NULL;
    if (again && real_cuMemHostRegister_v2 &&
        real_cuMemHostRegister_v2(area, size,
                                  CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP) ==
            CUDA_SUCCESS) {
        pin->owner = (struct ctx_key){0};
        if (real_cuCtxGetCurrent && real_cuCtxGetCurrent(&ctx) == CUDA_SUCCESS && ctx)
            ctx_key_set(&pin->owner, ctx);
    }
    atomic_store_explicit(&pin->epoch, now, memory_order_release);
    atomic_store_explicit(&pin->tried, true, memory_order_release);
    pthread_mutex_unlock(&pin_lock);
}

/* Whether the context that registered the area ended (under pin_lock). Only a
 * primary context can end unseen (cudaDeviceReset), and its handle stays:
 * asking for its id is safe. A destroyed context was let go of before its
 * handle went (staging_context_ends). */
static bool owner_ended(struct pin *pin)
{
    if (!pin->owner.ctx || ctx_key_match(&pin->owner, pin->owner.ctx) == CTX_SAME)
        return false;
    pin->owner = (struct ctx_key){0}; /* the match counted the epoch */
    return true;
}

void staging_follow_contexts(void)
{
    /* Another context's end took the registration its kernel writes into:
     * pinned again at once, before that kernel is launched. */
    pthread_mutex_lock(&pin_lock);
    owner_ended(&staging_pin);
    owner_ended(&results_pin);
    pthread_mutex_unlock(&pin_lock);
    size_t size;
    uint32_t slots;
    staging_area(&size);
    results_ring(&slots);
}

void staging_context_ends(const struct ctx_key *gone)
{
    pthread_mutex_lock(&pin_lock);
    struct pin *pins[] = {&staging_pin, &results_pin};
    for (int i = 0; i < 2; i++)
        if (ctx_key_is(&pins[i]->owner, gone))
            pins[i]->owner = (struct ctx_key){0};
    pthread_mutex_unlock(&pin_lock);
}

char *staging_area(size_t *size)
{
    char *area = channel_staging();
    *size = area ? channel_staging_size() : 0;
    pin_current(area, *size, &staging_pin);
    return area;
}

struct proto_result_slot *results_ring(uint32_t *slots)
{
    struct proto_result_slot *ring = channel_results(slots);
    pin_current(ring, (size_t)*slots * sizeof *ring, &results_pin);
    return ring;
}
