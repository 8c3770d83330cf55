/* Launch events for --trace, and the shared-memory rings' reservation (trace.c). */
#ifndef CUDUMP_TRACE_H
#define CUDUMP_TRACE_H

#include "launchinfo.h"

/* Reserves the next position of a shared-memory ring (trace or result ring):
 * many producers, by compare-and-swap on `head`, never more than `slots` past
 * the controller's `tail`. Waits up to `patience` rounds (about 50 us each)
 * while the ring is full and the controller alive; false if it stays full. */
bool ring_reserve(volatile uint64_t *head, volatile uint64_t *tail, uint32_t slots,
                  int patience, uint64_t *pos);
/* Reports a launch that has been made (or captured), with its result. */
void trace_launch(const struct launch_info *li, CUresult rc);
/* Reports one kernel node of a graph launch. */
void trace_graph_kernel(const struct launch_info *li, uint64_t graph, uint32_t replay,
                        uint32_t node);
/* Reports a graph launch (MSG_GRAPH). */
void trace_graph(CUgraphExec exec, CUstream stream, int ptsz, unsigned long long seq);

#endif
