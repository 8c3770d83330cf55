/*
 * Device allocations the process made through hooked calls, sorted by base
 * address so that any interior pointer resolves with a binary search.
 * Allocations are rare next to launches, and lookups happen only for
 * launches someone wants, so one mutex is enough.
 *
 * A free only marks its entry dead (size 0), so that freeing in any order
 * costs a binary search rather than moving the rest of the array; dead
 * entries are squeezed out once they outnumber the live ones. Allocations
 * never overlap, so a dead entry just below a pointer means no allocation
 * holds it.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "shim.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct alloc_info *items;
static size_t count, capacity, dead;

static void compact_locked(void)
{
    size_t kept = 0;
    for (size_t i = 0; i < count; i++)
        if (items[i].size)
            items[kept++] = items[i];
    count = kept;
    dead = 0;
}

/* Index of the first allocation whose base is > ptr. */
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

void alloctab_add(const struct alloc_info *a)
{
    pthread_mutex_lock(&lock);
    size_t at = upper_bound(a->base);
    if (at > 0 && items[at - 1].base == a->base) {
        /* The same base again (reused after a free, or never seen freed): replace. */
        if (!items[at - 1].size && dead)
            dead--;
        items[at - 1] = *a;
    } else {
        if (count == capacity) {
            size_t cap = capacity ? capacity * 2 : 256;
            struct alloc_info *grown = realloc(items, cap * sizeof *items);
            if (!grown) {
                pthread_mutex_unlock(&lock);
                return;
            }
            items = grown;
            capacity = cap;
        }
        memmove(&items[at + 1], &items[at], (count - at) * sizeof *items);
        items[at] = *a;
        count++;
    }
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
        found = true;
        if (++dead > 1024 && dead > count / 2)
            compact_locked();
    }
    pthread_mutex_unlock(&lock);
    return found;
}

bool alloctab_find(CUdeviceptr ptr, struct alloc_info *out)
{
    bool found = false;
    pthread_mutex_lock(&lock);
    size_t at = upper_bound(ptr);
    if (at > 0 && items[at - 1].size && ptr < items[at - 1].base + items[at - 1].size) {
        *out = items[at - 1];
        found = true;
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
