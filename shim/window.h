/* Stay-on NaN/Inf detection (--watch-nan): windows of launches (window.c). */
#ifndef CUDUMP_WINDOW_H
#define CUDUMP_WINDOW_H

#include "launchinfo.h"

/* Whether launches made with a kept plan of scans are marked into windows rather than
 * scanned one by one: OPTION_WATCH_NAN, until a finding switched the process to exact
 * per-launch scans (WATCH_THEN_EXACT). One load. */
bool window_on(void);
/* Marks the buffers of launch li (about to be made, on the launching thread, under the
 * staging lock): the NaN/Inf scans after it of its kept plan, copies[0, n). Returns
 * false, marking nothing, where the plan is not one the window takes (a digest in it) or
 * the window has no room; the launch is then made with its plan as ever. A window on
 * another stream or context is closed first (its scan launched there, in its context).
 * window_after_launch must follow every launch marked. */
bool window_mark(const struct launch_info *li, const struct proto_copy *copies, unsigned n);
/* After a marked launch has been made (whatever its result): the window is closed (its
 * batched scan launched on the stream) once it holds the launches or buffers it may and
 * no launch marked in it is still to be made. */
void window_after_launch(void);
/* Before a call of the program's that waits for the GPU (a synchronize, a synchronous
 * copy): the open window is closed, so that the wait covers its scan. */
void window_sync_before(void);
/* After such a call: the windows whose scans are done are read, and what they found
 * is reported (MSG_WATCH). */
void window_sync_after(void);
/* The program wrote [dst, dst + bytes) of device memory from the host (a copy, a memset:
 * hooks.c, where NaN/Inf scans record such writes): a buffer there found non-finite at
 * the next window's end is not reported as a launch's. */
void window_host_wrote(CUdeviceptr dst, size_t bytes);
/* Before the program frees the allocation at `base` (cuMemFree, cuMemFreeAsync, ...): the
 * open window, if it holds memory there, is closed (its scan launched while the memory is
 * the buffer's) or else given up; what was known non-finite there is forgotten, so that a
 * buffer made there later is reported when it turns non-finite. */
void window_memory_frees(CUdeviceptr base);
/* Before cuStreamDestroy: the open window, if on that stream, is closed (its scan
 * launched while the handle is good) or else given up. */
void window_stream_ends(CUstream stream);
/* A context ended (ctx; NULL: device's primary one): the open window, if of it, is given
 * up, never scanned on a stream that went with it. */
void window_context_ends(CUcontext ctx, int device);
/* At exit: the open window closed, and every scan read (a few seconds at most). */
void window_at_exit(void);
void window_reset_after_fork(void);

/* A graph's scan node (--watch-nan), made from the NaN/Inf scans copies[0, n) planned
 * for a replay of the graph's kernel nodes (node_of[i]: the node copy i is of, in the
 * graph's order; func_of[i]: its function's id), each buffer once, in the context of
 * li's stream. `reuse` (or NULL): the same graph's earlier state, whose memory is used
 * again where it has room (once the launches made with its node are done; the host
 * waits for them): then that is returned. Returns its state, or NULL with *rc where it
 * cannot be had (reuse is then as it was). */
struct window_graph;
struct window_graph *window_graph_new(const struct launch_info *li,
                                      const struct proto_copy *copies, const uint32_t *node_of,
                                      const uint32_t *func_of, unsigned n,
                                      struct window_graph *reuse, CUresult *rc);
/* Adds the probe to `graph` (the instrumented copy of the replay that planned the
 * scans): a digest of every buffer before all its nodes and one after them all. */
CUresult window_graph_probe(struct window_graph *wg, CUgraph graph);
/* That replay has run and been waited for: bad_of[i] says whether its scans found
 * copies[i]'s buffer non-finite (reported already), and the probe which buffers the
 * graph wrote (only those are scanned by the node; all, without the probe). */
void window_graph_ran(struct window_graph *wg, const struct proto_copy *copies,
                      const bool *bad_of, unsigned n);
/* Adds the scan node to `graph` (a copy of the program's graph) after every node nothing
 * depends on; CUDA_ERROR_NOT_FOUND where the graph writes none of the buffers. */
CUresult window_graph_node(struct window_graph *wg, CUgraph graph);
/* A launch of the graph made with the node, on `stream`: its number. */
void window_graph_launched(struct window_graph *wg, uint64_t seq, CUstream stream, int ptsz);
/* Whether every buffer the node scans is still in memory the process holds (after a free
 * somewhere: a free of memory the graph does not use keeps the node). */
bool window_graph_readable(const struct window_graph *wg);
/* Reads what the node's scans found so far (never waits): a buffer that turned
 * non-finite since the last look is reported (MSG_WATCH, graph `id`), bounded to the
 * graph launches whose scans came in since. */
void window_graph_check(struct window_graph *wg, uint32_t id);
/* Forgets it (the memory the GPU writes is kept: a replay may still be in flight). */
void window_graph_drop(struct window_graph *wg);

#endif
