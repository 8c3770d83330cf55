/* Kernels inside CUDA graphs (graph.c): learnt when a graph is instantiated,
 * counted, traced, stopped at and snapshotted by copy nodes in a clone. */
#ifndef CUDUMP_GRAPH_H
#define CUDUMP_GRAPH_H

#include "ctxlife.h"
#include "shim.h"

/* cuGraphLaunch: counted, traced, and run instrumented where kernels inside
 * want snapshots. */
CUresult graph_launch(cuGraphLaunch_fn real, CUgraphExec exec, CUstream stream, int ptsz);
/* An executable graph was made from `graph`: learns its kernels. */
void graph_remember(CUgraphExec exec, CUgraph graph, unsigned long long flags);
/* An executable graph goes away. */
void graph_forget(CUgraphExec exec);
/* A context to be destroyed (its key): the graphs instantiated in it are let go
 * without the driver, which frees them with the context. */
void graph_forget_context(const struct ctx_key *gone);
/* An executable graph now runs `graph`'s parameters (cuGraphExecUpdate). */
void graph_updated(CUgraphExec exec, CUgraph graph);
/* Another node of the executable graph was changed there (its parameters, its event, whether
 * it is enabled): cudump's copies of the graph, made from the graph it was instantiated
 * from, would run what was there before. The graph is run unchanged from then on, its
 * kernels neither scanned nor snapshotted (until cuGraphExecUpdate gives it a graph
 * whose nodes are as set), and the controller is told once (NOTICE_GRAPH_SET). */
void graph_exec_set(CUgraphExec exec);
/* A kernel node's parameters were changed in the executable graph. */
void graph_node_params(CUgraphExec exec, CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS *params);
struct launch_info;
/* A kernel launch was captured into a graph while a scope was open on its
 * thread: its node keeps that scope (a launch of the graph reports it). */
void graph_captured(const struct launch_info *li);
/* Adds every graph's launches so far to its kernels' counts (at exit). */
void graph_fold_all(void);
void graph_reset_after_fork(void);

/* --watch-nan: reads what the scan nodes of graphs found so far (window.h), reporting
 * what turned non-finite since the last look; never waits. */
void graph_watch_check(void);

#endif
