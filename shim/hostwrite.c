/*
 * The program's writes into device memory from the host: host-to-device
 * copies and memsets. A NaN or Inf the host writes is read by the next
 * launch as an input already non-finite, and without these records no launch
 * would be named as where it began. Under NaN/Inf scans the controller asks
 * for them with a host-write ring (protocol.h); each goes there the way
 * launch events go into the trace ring (no system call, no lock), carrying
 * the process's launch count, which orders it among the launches. The bytes
 * written are never read: their type is the controller's to judge, from the
 * scans of the launches that read them.
 */
#include "channel.h"
#include "hostwrite.h"
#include "stream.h"
#include "trace.h"

void hostwrite_record(const struct host_write *w, uint64_t launches)
{
    uint32_t slots;
    struct proto_host_write *ring = channel_host_ring(&slots);
    volatile struct proto_control *ctl = channel_control_rw();
    if (!ring || !ctl)
        return;
    if (atomic_load_explicit(&shim_stats.captures_active, memory_order_relaxed) > 0) {
        shim_busy++;
        bool captured = stream_capturing(w->stream, w->ptsz);
        shim_busy--;
        if (captured)
            return;
    }
    uint64_t pos;
    if (!ring_reserve(&ctl->host_head, &ctl->host_tail, slots, 20000, &pos)) {
        __atomic_fetch_add(&ctl->host_dropped, 1, __ATOMIC_RELAXED); /* about 1 s waited */
        return;
    }
    struct proto_host_write *slot = &ring[pos & (slots - 1)];
    /* Every field but `ready`, which publishes them. */
    slot->launches = launches;
    slot->dst = w->dst;
    slot->width = w->width;
    slot->height = w->height;
    slot->pitch = w->pitch;
    slot->depth = w->depth;
    slot->slice = w->slice;
    slot->stream = (uint64_t)(uintptr_t)w->stream;
    slot->tid = stream_tid();
    slot->value = w->value;
    slot->elem = w->elem;
    slot->api = (uint32_t)w->api;
    slot->reserved = 0;
    __atomic_store_n(&slot->ready, pos + 1, __ATOMIC_RELEASE);
}

bool hostwrite_of_2d(const CUDA_MEMCPY2D *c, struct host_write *w)
{
    /* UNIFIED on either side could be host or device memory: telling which would
     * take a driver call per copy, and such copies are left out. */
    if (!c || c->srcMemoryType != CU_MEMORYTYPE_HOST || c->dstMemoryType != CU_MEMORYTYPE_DEVICE)
        return false;
    size_t pitch = c->dstPitch ? c->dstPitch : c->WidthInBytes;
    w->dst = c->dstDevice + c->dstY * pitch + c->dstXInBytes;
    w->width = c->WidthInBytes;
    w->height = c->Height;
    w->pitch = pitch;
    w->depth = 1;
    w->slice = pitch * c->Height;
    w->value = w->elem = 0;
    return true;
}

bool hostwrite_of_3d(const CUDA_MEMCPY3D *c, struct host_write *w)
{
    if (!c || c->srcMemoryType != CU_MEMORYTYPE_HOST || c->dstMemoryType != CU_MEMORYTYPE_DEVICE)
        return false;
    /* A zero pitch means packed rows, a zero height packed slices (as the driver reads them). */
    size_t pitch = c->dstPitch ? c->dstPitch : c->WidthInBytes;
    size_t rows = c->dstHeight ? c->dstHeight : c->Height;
    w->dst = c->dstDevice + (c->dstZ * rows + c->dstY) * pitch + c->dstXInBytes;
    w->width = c->WidthInBytes;
    w->height = c->Height;
    w->pitch = pitch;
    w->depth = c->Depth;
    w->slice = pitch * rows;
    w->value = w->elem = 0;
    return true;
}
