/*
 * Launch events: into the trace ring (no system call, no lock) where there is
 * one, else over the socket.
 */
#include <sched.h>
#include <unistd.h>

#include "channel.h"
#include "functab.h"
#include "stream.h"
#include "trace.h"

bool ring_reserve(volatile uint64_t *head, volatile uint64_t *tail, uint32_t slots,
                  int patience, uint64_t *pos_out)
{
    uint64_t pos = __atomic_load_n(head, __ATOMIC_RELAXED);
    int waited = 0;
    for (;;) {
        uint64_t done = __atomic_load_n(tail, __ATOMIC_ACQUIRE);
        if (pos - done < slots) {
            if (__atomic_compare_exchange_n(head, &pos, pos + 1, true, __ATOMIC_ACQ_REL,
                                            __ATOMIC_RELAXED))
                break;
            continue; /* another thread took `pos`: pos now holds the current head */
        }
        /* Full: the controller is behind. Wait for it a while (bounded, and not at
         * all once it is gone). */
        if (waited >= patience || !channel_controller_alive())
            return false;
        if (waited++ < 64)
            sched_yield();
        else
            usleep(50);
        pos = __atomic_load_n(head, __ATOMIC_RELAXED);
    }
    *pos_out = pos;
    return true;
}

/* Puts a launch event into the trace ring: no system call, no lock. Returns
 * false only when there is no ring (the event then goes over the socket). */
static bool ring_push(const struct proto_launch *ev)
{
    uint32_t slots;
    struct proto_ring_slot *ring = channel_ring(&slots);
    volatile struct proto_control *ctl = channel_control_rw();
    if (!ring || !ctl)
        return false;
    uint64_t pos;
    if (!ring_reserve(&ctl->ring_head, &ctl->ring_tail, slots, 20000, &pos)) {
        __atomic_fetch_add(&ctl->ring_dropped, 1, __ATOMIC_RELAXED); /* about 1 s waited */
        return true;
    }
    struct proto_ring_slot *slot = &ring[pos & (slots - 1)];
    slot->event = *ev;
    __atomic_store_n(&slot->ready, pos + 1, __ATOMIC_RELEASE);
    return true;
}

static void send_event(struct proto_launch *ev, uint64_t seq)
{
    if (ring_push(ev))
        return;
    channel_send_event(MSG_LAUNCH, seq, ev, sizeof *ev);
}

void trace_graph_kernel(const struct launch_info *li, uint64_t graph, uint32_t replay,
                        uint32_t node)
{
    struct proto_launch ev = {
        .seq = li->seq, .occurrence = li->occurrence, .stream = (uint64_t)(uintptr_t)li->stream,
        .tid = li->tid, .id = li->e->id, .device = li->device,
        .grid = {li->grid[0], li->grid[1], li->grid[2]},
        .block = {li->block[0], li->block[1], li->block[2]}, .smem = li->smem, .api = li->api,
        .flags = LAUNCH_GRAPH, .rc = 0, .nparams = -1, .nptrs = 0, .graph = graph,
        .replay = replay, .node = node, .scope = li->scope, .step = li->step,
        .source = li->source,
    };
    send_event(&ev, li->seq);
}

void trace_launch(const struct launch_info *li, CUresult rc)
{
    struct proto_launch ev = {
        .seq = li->seq, .occurrence = li->occurrence, .stream = (uint64_t)(uintptr_t)li->stream,
        .tid = li->tid, .id = li->e->id, .device = li->device,
        .grid = {li->grid[0], li->grid[1], li->grid[2]},
        .block = {li->block[0], li->block[1], li->block[2]}, .smem = li->smem, .api = li->api,
        .flags = (li->captured ? LAUNCH_CAPTURED : 0u), .rc = rc, .nparams = -1, .nptrs = 0,
        .scope = li->scope, .step = li->step, .source = li->source,
    };
    send_event(&ev, li->seq);
}

void trace_graph(CUgraphExec exec, CUstream stream, int ptsz, unsigned long long seq)
{
    struct proto_graph ev = {.seq = seq, .exec = (uint64_t)(uintptr_t)exec,
                             .stream = (uint64_t)(uintptr_t)stream,
                             .api = ptsz ? API_cuGraphLaunch_ptsz : API_cuGraphLaunch,
                             .device = stream_device()};
    channel_send_event(MSG_GRAPH, seq, &ev, sizeof ev);
}
