/*
 * Device allocations the process made through hooked calls, so that any
 * interior pointer resolves to its allocation. Allocations are rare next to
 * launches, and lookups happen only for launches someone wants, so one mutex
 * is enough; but a program may hold a million allocations, so no operation
 * may cost a pass over all of them:
 *
 * - `items` is sorted by base; a free only marks its entry dead (size 0), and
 *   dead entries are squeezed out at the next merge.
 * - New allocations go to `recent`, unsorted, and are merged into `items`
 *   (one pass) only when it is full: adding costs O(n / RECENT) amortised.
 *
 * Allocations never overlap, so the live entry just below a pointer in
 * `items`, or the one in `recent` that contains it, is its allocation.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "alloctab.h"

#define RECENT 4096

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct alloc_info *items;
static size_t count, capacity, dead;
static struct alloc_info recent[RECENT];
static size_t nrecent;
/* Move on with every change, and with every removal: what was worked out
 * from the table (a repeated plan's extents) can tell it may be out of date.
 * A caching allocator adds segments for a while and then never frees them. */
static _Atomic unsigned long long epoch = 1, removals = 1;
/* Every allocation ever added lies in [span_lo, span_hi): most words of a
 * kernel's parameters (sizes, counts, flags) are rejected by two compares,
 * without the lock; a multi-tensor kernel's metadata has hundreds of them. */
static _Atomic CUdeviceptr span_lo = ~(CUdeviceptr)0, span_hi;

unsigned long long alloctab_epoch(void)
{
    return atomic_load_explicit(&epoch, memory_order_acquire);
}

unsigned long long alloctab_removals(void)
{
    return atomic_load_explicit(&removals, memory_order_acquire);
}

/* Index of the first entry of `items` whose base is > ptr. */
static size_t upper_bound(CUdeviceptr ptr)
{
    size_t lo = 0, hi = count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (items[mid].base <= ptr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static int by_base(const void *a, const void *b)
{
    CUdeviceptr x = ((const struct alloc_info *)a)->base, y = ((const struct alloc_info *)b)->base;
    return (x > y) - (x < y);
}

/* Sorts `recent` into `items`, dropping dead entries. False without memory
 * (then `recent` stays as it is). */
static bool merge_locked(void)
{
    size_t want = count - dead + nrecent;
    struct alloc_info *out = malloc((want ? want : 1) * sizeof *out);
    if (!out)
        return false;
    qsort(recent, nrecent, sizeof recent[0], by_base);
    size_t i = 0, j = 0, n = 0;
    while (i < count || j < nrecent) {
        if (i < count && !items[i].size) {
            i++;
            continue;
        }
        if (j >= nrecent || (i < count && items[i].base < recent[j].base))
            out[n++] = items[i++];
        else
            out[n++] = recent[j++];
    }
    free(items);
    items = out;
    count = capacity = n;
    dead = 0;
    nrecent = 0;
    return true;
}

static struct alloc_info *find_exact_locked(CUdeviceptr base)
{
    size_t at = upper_bound(base);
    if (at > 0 && items[at - 1].base == base && items[at - 1].size)
        return &items[at - 1];
    for (size_t k = 0; k < nrecent; k++)
        if (recent[k].base == base)
            return &recent[k];
    return NULL;
}

void alloctab_add(const struct alloc_info *a)
{
    pthread_mutex_lock(&lock);
    struct alloc_info *same = find_exact_locked(a->base);
    if (same) {
        *same = *a; /* the driver reused an address we never saw freed */
        atomic_fetch_add_explicit(&removals, 1, memory_order_release);
    } else if (nrecent < RECENT || merge_locked()) {
        recent[nrecent++] = *a;
    }
    if (a->base < atomic_load_explicit(&span_lo, memory_order_relaxed))
        atomic_store_explicit(&span_lo, a->base, memory_order_relaxed);
    if (a->base + a->size > atomic_load_explicit(&span_hi, memory_order_relaxed))
        atomic_store_explicit(&span_hi, a->base + a->size, memory_order_relaxed);
    atomic_fetch_add_explicit(&epoch, 1, memory_order_release);
    pthread_mutex_unlock(&lock);
}

bool alloctab_remove(CUdeviceptr base, struct alloc_info *out)
{
    bool found = false;
    pthread_mutex_lock(&lock);
    size_t at = upper_bound(base);
    if (at > 0 && items[at - 1].base == base && items[at - 1].size) {
        if (out)
            *out = items[at - 1];
        items[at - 1].size = 0;
        dead++;
        found = true;
    } else {
        for (size_t k = 0; k < nrecent; k++) {
            if (recent[k].base == base) {
                if (out)
                    *out = recent[k];
                recent[k] = recent[--nrecent];
                found = true;
                break;
            }
        }
    }
    if (found) {
        atomic_fetch_add_explicit(&removals, 1, memory_order_release);
        atomic_fetch_add_explicit(&epoch, 1, memory_order_release);
    }
    pthread_mutex_unlock(&lock);
    return found;
}

bool alloctab_find(CUdeviceptr ptr, struct alloc_info *out)
{
    bool found = false;
    /* The bounds grow under the lock as entries are added: a lookup racing
     * an allocation may miss it, as it could without them. */
    if (ptr < atomic_load_explicit(&span_lo, memory_order_relaxed) ||
        ptr >= atomic_load_explicit(&span_hi, memory_order_relaxed))
        return false;
    pthread_mutex_lock(&lock);
    size_t at = upper_bound(ptr);
    if (at > 0 && items[at - 1].size && ptr < items[at - 1].base + items[at - 1].size) {
        *out = items[at - 1];
        found = true;
    }
    for (size_t k = 0; !found && k < nrecent; k++) {
        if (recent[k].base <= ptr && ptr < recent[k].base + recent[k].size) {
            *out = recent[k];
            found = true;
        }
    }
    pthread_mutex_unlock(&lock);
    return found;
}

bool alloc_resolve(CUdeviceptr ptr, bool ask_driver, struct alloc_info *out)
{
    if (alloctab_find(ptr, out))
        return true;
    if (!ask_driver || !ptr || !real_cuMemGetAddressRange_v2)
        return false;
    /* Memory allocated before the shim was loaded or through a path it does
     * not hook: the driver still knows the range. */
    CUdeviceptr base = 0;
    size_t size = 0;
    if (real_cuMemGetAddressRange_v2(&base, &size, ptr) != CUDA_SUCCESS)
        return false;
    *out = (struct alloc_info){.base = base, .size = size, .kind = AK_RANGE};
    return true;
}

void alloctab_reset_after_fork(void)
{
    /* The lock may have been held by a thread that does not exist in the
     * child; the table itself stays valid (the child shares nothing with
     * the parent's GPU context, but its memory map is a copy). */
    pthread_mutex_init(&lock, NULL);
}
