/*
 * The flight recorder (--flight): when a program crashes, hits a sticky CUDA
 * error or aborts, which launch was the last to complete and which were still
 * in flight, with their arguments.
 *
 * Every launch (and graph launch) takes the next slot of the flight ring in
 * shared memory, which the controller reads at the end of the run, after the
 * process may have died: one atomic add, the slot's words and up to
 * PROTO_FLIGHT_PARAM_BYTES of its parameter bytes, no system call, no lock,
 * and nobody drains it (the oldest slot is written over). After the launch
 * call, one stream memory write (cuStreamWriteValue64) on the launch's stream
 * puts the slot's position + 1 into its `done` word when the GPU gets there,
 * that is once the launch has completed. For that the ring is registered as
 * mapped pinned memory, once, by the first launch that needs it.
 *
 * Never on a capturing stream (the write would become a node of the
 * program's graph, or break the capture): such a launch is recorded without a
 * marker, and says so. A driver without the write, memory the device cannot
 * map, or a write the driver refuses leave the launch without a marker too;
 * the write's result never reaches the program, whose errors are its own.
 * The program's first error (from a launch, a synchronisation or a copy) is
 * kept on the control page, so that the controller can say what the program
 * failed with.
 */
#include <stddef.h>
#include <string.h>

#include "ctxlife.h"
#include "flight.h"
#include "interpose.h"
#include "functab.h"
#include "stream.h"

_Static_assert(sizeof(struct proto_flight_slot) == PROTO_FLIGHT_SLOT_SIZE, "flight slot size");
_Static_assert(offsetof(struct proto_flight_slot, done) % 8 == 0, "the marker's word is aligned");

/* Whether the device writes into the ring (ring_mapped), and the context
 * epoch (ctxlife.h) the registration was last seen to hold in. */
enum { MAP_NEW, MAP_BUSY, MAP_OK, MAP_NONE };
static _Atomic int mapped = MAP_NEW;
static atomic_uint mapped_epoch;

void flight_reset_after_fork(void)
{
    /* The parent's registration is not the child's, nor is its ring. */
    atomic_store(&mapped, MAP_NEW);
}

void flight_error(CUresult rc)
{
    volatile struct proto_control *ctl = channel_control_rw();
    int32_t none = 0;
    /* CUDA_ERROR_DEINITIALIZED is the driver shutting down under a program's exit handlers
     * (a runtime's destructors), not a failure of its work. */
    if (ctl && rc != CUDA_SUCCESS && rc != CUDA_ERROR_DEINITIALIZED)
        __atomic_compare_exchange_n(&ctl->first_error, &none, (int32_t)rc, false,
                                    __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}

/* The launch's parameter bytes, one after the other as MSG_BEGIN sends them,
 * as many as the slot keeps; a parameter the launch gave no bytes for reads
 * as zeros. */
static void keep_params(struct proto_flight_slot *s, const struct launch_info *li)
{
    const struct func_entry *e = li->e;
    uint32_t total = 0, kept = 0;
    bool have = e && e->nparams > 0 && (li->params || li->extra);
    for (int i = 0; have && i < e->nparams; i++) {
        uint32_t size = e->param_size[i];
        uint32_t take = size < PROTO_FLIGHT_PARAM_BYTES - kept ? size
                                                               : PROTO_FLIGHT_PARAM_BYTES - kept;
        const unsigned char *p = take ? func_param_bytes(e, li->params, li->extra, i) : NULL;
        if (p)
            memcpy(s->params + kept, p, take);
        else
            memset(s->params + kept, 0, take);
        kept += take;
        total += size;
    }
    s->nbytes = total;
    s->kept = kept;
}

void flight_begin(struct launch_info *li)
{
    uint32_t n;
    struct proto_flight_slot *ring = channel_flight(&n);
    volatile struct proto_control *ctl = channel_control_rw();
    li->flight = 0;
    if (!ring || !ctl || !n)
        return;
    uint64_t pos = __atomic_fetch_add(&ctl->flight_head, 1, __ATOMIC_RELAXED);
    struct proto_flight_slot *s = &ring[pos % n];
    /* A reader that sees `ready` unchanged around its copy of the slot read one launch. */
    __atomic_store_n(&s->ready, 0, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    s->done = 0;
    s->seq = li->seq;
    s->stream = (uint64_t)(uintptr_t)li->stream;
    s->tid = li->tid;
    s->graph = li->e ? 0 : li->graph;
    s->id = li->e ? li->e->id : 0;
    s->api = li->api;
    for (int i = 0; i < 3; i++) {
        s->grid[i] = li->grid[i];
        s->block[i] = li->block[i];
    }
    s->smem = li->smem;
    s->flags = (li->captured ? FLIGHT_CAPTURED : 0u) | (li->e ? 0u : FLIGHT_GRAPH);
    s->rc = 0;
    s->scope = li->scope;
    s->step = li->step;
    s->source = li->source;
    keep_params(s, li);
    __atomic_store_n(&s->ready, pos + 1, __ATOMIC_RELEASE);
    li->flight = pos + 1;
}

/* The ring as the device sees it: registered as mapped pinned memory by the
 * first launch that needs it, whose thread has the launch's context current.
 * It is used only where the device's address of it is its host address
 * (unified addressing, as on every platform CUDA 13 runs on): that address
 * then holds in every context, the registration being portable. A launch that
 * finds another thread registering it goes without a marker. */
static bool ring_mapped(struct proto_flight_slot *ring, uint32_t slots)
{
    int state = atomic_load_explicit(&mapped, memory_order_acquire);
    unsigned now = ctxlife_epoch();
    if (state == MAP_OK && atomic_load_explicit(&mapped_epoch, memory_order_acquire) == now)
        return true;
    /* Registered, but a context ended since: the registration may have gone
     * with it (staging.c), and a marker written there would fault the GPU. */
    bool again = state == MAP_OK;
    if ((state != MAP_NEW && !again) ||
        !atomic_compare_exchange_strong(&mapped, &state, MAP_BUSY))
        return false;
    bool ok = false;
    if (real_cuMemHostRegister_v2 && real_cuMemHostGetDevicePointer_v2 &&
        real_cuMemHostUnregister) {
        /* Relaxed: a registration must not break another thread's global capture. */
        CUstreamCaptureMode mode = capture_relax();
        CUdeviceptr dev = 0;
        bool still = again && real_cuMemHostGetDevicePointer_v2(&dev, ring, 0) == CUDA_SUCCESS;
        CUresult rc = still ? CUDA_SUCCESS
                            : real_cuMemHostRegister_v2(
                                  ring, (size_t)slots * sizeof *ring,
                                  CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP);
        if (rc == CUDA_SUCCESS)
            ok = (still || real_cuMemHostGetDevicePointer_v2(&dev, ring, 0) == CUDA_SUCCESS) &&
                 dev == (CUdeviceptr)(uintptr_t)ring;
        if (rc == CUDA_SUCCESS && !ok && !still)
            real_cuMemHostUnregister(ring);
        capture_restore(mode);
    }
    atomic_store_explicit(&mapped_epoch, now, memory_order_release);
    atomic_store_explicit(&mapped, ok ? MAP_OK : MAP_NONE, memory_order_release);
    return ok;
}

/* Whether the ring was mapped and the driver no longer maps it: its
 * registration went with a context that ended (counted, so that it and the
 * other registrations are looked at again). One driver call where a marker
 * was refused for another reason. */
static bool ring_lost(struct proto_flight_slot *ring)
{
    CUdeviceptr dev = 0;
    if (atomic_load_explicit(&mapped, memory_order_acquire) != MAP_OK ||
        !real_cuMemHostGetDevicePointer_v2 ||
        real_cuMemHostGetDevicePointer_v2(&dev, ring, 0) == CUDA_SUCCESS)
        return false;
    ctxlife_ended();
    return true;
}

/* Enqueues the write of `value` into the slot's `done` after the launch, on
 * its stream (stream 0 named as the launch meant it). */
static bool mark(const struct launch_info *li, struct proto_flight_slot *ring, uint32_t slots,
                 struct proto_flight_slot *s, uint64_t value)
{
    cuStreamWriteValue64_fn write = shim_real_cuStreamWriteValue64_v2();
    if (!write)
        write = shim_real_cuStreamWriteValue64();
    if (!write || !ring_mapped(ring, slots))
        return false;
    CUstream stream = li->stream ? li->stream : li->ptsz ? CU_STREAM_PER_THREAD : CU_STREAM_LEGACY;
    /* While something captures, the shim's call must not count as the program's. */
    bool relax = atomic_load_explicit(&shim_stats.captures_active, memory_order_relaxed) > 0;
    CUstreamCaptureMode mode = relax ? capture_relax() : CU_STREAM_CAPTURE_MODE_RELAXED;
    shim_busy++;
    CUresult rc = write(stream, (CUdeviceptr)(uintptr_t)&s->done, value, 0);
    /* Refused as memory the device does not map (seen on an H200 once the
     * context that registered the ring ended, cudaDeviceReset included, which
     * no wrapped call tells): the registration is looked at again, made anew
     * where it went, and the marker written once more. */
    if (rc == CUDA_ERROR_INVALID_VALUE && ring_lost(ring) && ring_mapped(ring, slots))
        rc = write(stream, (CUdeviceptr)(uintptr_t)&s->done, value, 0);
    shim_busy--;
    if (relax)
        capture_restore(mode);
    return rc == CUDA_SUCCESS;
}

void flight_end(const struct launch_info *li, CUresult rc)
{
    uint32_t n;
    struct proto_flight_slot *ring = channel_flight(&n);
    if (!li->flight || !ring || !n)
        return;
    struct proto_flight_slot *s = &ring[(li->flight - 1) % n];
    if (__atomic_load_n(&s->ready, __ATOMIC_ACQUIRE) != li->flight)
        return; /* written over by a newer launch already */
    s->rc = rc;
    __atomic_fetch_or(&s->flags, FLIGHT_RETURNED, __ATOMIC_RELEASE);
    if (rc != CUDA_SUCCESS) {
        flight_error(rc);
        return;
    }
    if (!li->captured && mark(li, ring, n, s, li->flight))
        __atomic_fetch_or(&s->flags, FLIGHT_MARKED, __ATOMIC_RELEASE);
}
