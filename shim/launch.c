/*
 * Launches of functions the controller wants: numbering, the trace event,
 * and (snapshot.c) copies of argument buffers around the launch.
 */
#include <stdio.h>

#include "launch.h"
#include "snapshot.h"

bool launch_stream_capturing(CUstream stream, int ptsz)
{
    cuStreamIsCapturing_fn is_capturing =
        ptsz ? real_cuStreamIsCapturing_ptsz : real_cuStreamIsCapturing;
    if (!is_capturing)
        return false;
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    CUresult rc = is_capturing(stream, &status);
    /* The legacy stream during another stream's global capture. */
    if (rc == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT)
        return true;
    return rc == CUDA_SUCCESS && status != CU_STREAM_CAPTURE_STATUS_NONE;
}

void launch_before(struct launch_info *li)
{
    shim_busy++;
    li->seq = atomic_fetch_add(&shim_stats.seq, 1) + 1;
    li->captured = launch_stream_capturing(li->stream, li->ptsz);
    if (li->captured)
        atomic_fetch_add(&shim_stats.captured, 1);
    else
        li->occurrence = atomic_fetch_add(&li->e->launches, 1) + 1;
    li->snapshot_armed = false;
    /* Copies would invalidate a capture or land in the graph: while a
     * stream captures, launches are only recorded. */
    if ((li->wants & WANT_SNAPSHOT) && !li->captured)
        li->snapshot_armed = snapshot_before(li);
    shim_busy--;
}

static void send_launch_event(const struct launch_info *li, CUresult rc)
{
    char line[512];
    int n = snprintf(line, sizeof line,
                     "{\"ev\":\"launch\",\"seq\":%llu,\"id\":%u,\"occ\":%llu,"
                     "\"grid\":[%u,%u,%u],\"block\":[%u,%u,%u],\"smem\":%u,"
                     "\"stream\":\"0x%llx\",\"api\":\"%s\",\"captured\":%s,\"rc\":%d}\n",
                     li->seq, li->e->id, li->occurrence, li->grid[0], li->grid[1], li->grid[2],
                     li->block[0], li->block[1], li->block[2], li->smem,
                     (unsigned long long)(uintptr_t)li->stream, li->api,
                     li->captured ? "true" : "false", rc);
    if (n > 0 && (size_t)n < sizeof line)
        channel_send(line, (size_t)n);
}

void launch_after(struct launch_info *li, CUresult rc)
{
    shim_busy++;
    if (rc != CUDA_SUCCESS && !li->captured)
        atomic_fetch_sub(&li->e->launches, 1);
    if (li->wants & WANT_TRACE)
        send_launch_event(li, rc);
    if (li->snapshot_armed)
        snapshot_after(li, rc);
    shim_busy--;
}

void launch_graph(CUgraphExec exec, CUstream stream, int ptsz)
{
    unsigned long long seq = atomic_fetch_add(&shim_stats.seq, 1) + 1;
    atomic_fetch_add(&shim_stats.graph_launches, 1);
    if (!channel_up() || !(channel_options() & CHANNEL_TRACE_GRAPHS))
        return;
    char line[256];
    int n = snprintf(line, sizeof line,
                     "{\"ev\":\"graph\",\"seq\":%llu,\"exec\":\"0x%llx\",\"stream\":\"0x%llx\","
                     "\"api\":\"%s\"}\n",
                     seq, (unsigned long long)(uintptr_t)exec,
                     (unsigned long long)(uintptr_t)stream,
                     ptsz ? "cuGraphLaunch_ptsz" : "cuGraphLaunch");
    if (n > 0 && (size_t)n < sizeof line)
        channel_send(line, (size_t)n);
}
