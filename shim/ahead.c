/* The pending scans ahead (ahead.h). */
#include <pthread.h>

#include "ahead.h"
#include "channel.h"

/* One per process, by design (ahead.h): guarded by its own lock, because it is
 * voided from any thread's wrapped call, outside the staging lock. */
static struct {
    pthread_mutex_t lock;
    _Atomic bool pending;
    struct ahead a;
    _Atomic bool missed;
    struct plan_ref miss;
} ah = {.lock = PTHREAD_MUTEX_INITIALIZER};

void ahead_put(const struct ahead *a)
{
    pthread_mutex_lock(&ah.lock);
    ah.a = *a;
    atomic_store_explicit(&ah.pending, true, memory_order_release);
    pthread_mutex_unlock(&ah.lock);
}

bool ahead_take(struct ahead *a)
{
    if (!atomic_load_explicit(&ah.pending, memory_order_acquire))
        return false;
    pthread_mutex_lock(&ah.lock);
    bool had = atomic_load_explicit(&ah.pending, memory_order_relaxed);
    if (had)
        *a = ah.a;
    atomic_store_explicit(&ah.pending, false, memory_order_relaxed);
    pthread_mutex_unlock(&ah.lock);
    return had;
}

void ahead_drop(const struct ahead *a)
{
    struct proto_result_slot *s = a->slot;
    /* The reader skips it, but only once every result the kernel will write
     * is in (ncopies stays): the slot is not reused while the GPU may still
     * write into it. */
    volatile struct proto_control *ctl = channel_control_rw();
    if (ctl)
        __atomic_fetch_add(&ctl->ahead_void, 1, __ATOMIC_RELAXED);
    s->flags |= RESULT_TAKEN;
    __atomic_store_n(&s->gate, GATE_NONE, __ATOMIC_RELAXED);
    __atomic_store_n(&s->ready, a->pos + 1, __ATOMIC_RELEASE);
}

void ahead_void(void)
{
    struct ahead a;
    if (!ahead_take(&a))
        return;
    ahead_drop(&a);
    pthread_mutex_lock(&ah.lock);
    ah.miss = a.predictor;
    atomic_store_explicit(&ah.missed, true, memory_order_release);
    pthread_mutex_unlock(&ah.lock);
}

bool ahead_missed(struct plan_ref *p)
{
    /* Asked after every launch made with scans ahead on: one load when none was missed. */
    if (!atomic_load_explicit(&ah.missed, memory_order_acquire))
        return false;
    pthread_mutex_lock(&ah.lock);
    bool was = atomic_load_explicit(&ah.missed, memory_order_relaxed);
    if (was)
        *p = ah.miss;
    atomic_store_explicit(&ah.missed, false, memory_order_relaxed);
    pthread_mutex_unlock(&ah.lock);
    return was;
}

void ahead_reset_after_fork(void)
{
    /* The parent's slot is in the parent's ring: the child neither uses nor voids it. */
    pthread_mutex_init(&ah.lock, NULL);
    atomic_store(&ah.pending, false);
    atomic_store(&ah.missed, false);
}
