/* A launch held for the prompt (stop.c). */
#ifndef CUDUMP_STOP_H
#define CUDUMP_STOP_H

#include "launchinfo.h"

/* The kernel nodes of the graph whose launch is held (MSG_GRAPH_NODES), at
 * most cap; 0 if none. */
typedef size_t (*stop_graph_nodes_fn)(struct proto_graph_node *out, size_t cap);

/* Makes the device quiescent for the launch, reports the stop and serves the
 * controller's requests until it says how to go on. Returns the resume mode
 * (RESUME_KILL never returns). graph_nodes: for a kernel node of a graph
 * launch, its graph's nodes; NULL otherwise. */
enum proto_resume_mode stop_serve(struct launch_info *li, enum proto_phase phase,
                                  CUresult launch_rc, stop_graph_nodes_fn graph_nodes);

#endif
