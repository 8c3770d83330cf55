/* What every layer of the launch path knows of one launch: its arguments as
 * the program gave them and its numbering. What a way of copying needs for
 * itself (a ring slot, scratch) is that strategy's own state, not here. */
#ifndef CUDUMP_LAUNCHINFO_H
#define CUDUMP_LAUNCHINFO_H

#include "shim.h"

struct func_entry;

struct launch_info {
    struct func_entry *e;
    unsigned wants;
    unsigned grid[3];
    unsigned block[3];
    unsigned smem;
    CUstream stream;
    void **params;
    void **extra;
    int ptsz;
    enum proto_api api;
    bool programmatic;          /* made with programmatic stream serialization or a
                                 * programmatic event: it may run while the kernel before it
                                 * ends, so cudump's kernel after it is launched plainly */
    bool interrupted;           /* this launch took the controller's interrupt */
    /* numbered by the pipeline (launch.c) or the graph launch (graph.c) */
    unsigned long long seq;
    unsigned long long occurrence;
    int device;
    uint64_t tid;
    bool captured;
    /* where it came from (scope.h): the innermost scope, the step, a source line */
    uint32_t scope, step, source;
    /* a kernel node of a graph launch */
    uint64_t graph;
    uint32_t replay, node;
    uint32_t begin_flags;       /* LAUNCH_STOP_ONLY, LAUNCH_UNSAFE_GRAPH: for MSG_BEGIN */
    uint64_t flight;            /* its flight ring slot's position + 1 (flight.c); 0: none */
    /* the n-th launch of each counted rule it counts for (plan_select) */
    unsigned ncounted;
    struct proto_counted counted[PROTO_MAX_SELECTORS];
};

#endif
