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
#include "staging.h"

/* Held from MSG_BEGIN to MSG_END (and across a stop). */
static pthread_mutex_t snap_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t pin_lock = PTHREAD_MUTEX_INITIALIZER;
static bool staging_pinned, results_pinned;

void staging_reset_after_fork(void)
{
    pthread_mutex_init(&snap_lock, NULL);
    pthread_mutex_init(&pin_lock, NULL);
    staging_pinned = results_pinned = false;
}

bool staging_locked(unsigned ms, void (*fn)(void *), void *arg)
{
    if (ms == 0) {
        pthread_mutex_lock(&snap_lock);
    } else {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += ms / 1000;
        until.tv_nsec += (long)(ms % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        if (pthread_mutex_timedlock(&snap_lock, &until) != 0)
            return false;
    }
    fn(arg);
    pthread_mutex_unlock(&snap_lock);
    return true;
}

/* Pins an area of the shared memory on first use: copies into it are then real
 * async DMAs, and cudump's kernel can write its results into it (mapped). If
 * pinning fails copies still work, through the driver's bounce buffers, and
 * the kernel's results are refused. */
static void pin_once(void *area, size_t size, bool *pinned)
{
    pthread_mutex_lock(&pin_lock);
    if (area && size && !*pinned) {
        *pinned = true;
        if (real_cuMemHostRegister_v2)
            real_cuMemHostRegister_v2(area, size,
                                      CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP);
    }
    pthread_mutex_unlock(&pin_lock);
}

char *staging_area(size_t *size)
{
    char *area = channel_staging();
    *size = area ? channel_staging_size() : 0;
    pin_once(area, *size, &staging_pinned);
    return area;
}

struct proto_result_slot *results_ring(uint32_t *slots)
{
    struct proto_result_slot *ring = channel_results(slots);
    pin_once(ring, (size_t)*slots * sizeof *ring, &results_pinned);
    return ring;
}
