/* Scopes: the ranges, modules and operations open on each host thread, the
 * tree of distinct scopes the process announces, and the training step
 * (scope.c). */
#ifndef CUDUMP_SCOPE_H
#define CUDUMP_SCOPE_H

#include "shim.h"

/* The innermost scope open on this thread (a node id; 0: none). Written by the
 * thread itself only: a launch reads this one word. */
extern SHIM_TLS uint32_t scope_here;
/* Steps completed + 1 (proto_launch.step); 0 while the process counts none. */
extern _Atomic uint32_t scope_step_now;
/* Nodes interned, and of them announced to the controller (MSG_SCOPE). */
extern _Atomic uint32_t scope_nodes, scope_sent;

/* Sends the nodes not yet announced, when the controller is there. Never call it
 * holding the channel's lock. */
void scope_announce(void);

/* What a launch carries: its thread's innermost scope and the step; the nodes
 * not yet announced go first (a launch is reported after them). */
static inline void scope_stamp(uint32_t *scope, uint32_t *step)
{
    *scope = scope_here;
    *step = atomic_load_explicit(&scope_step_now, memory_order_relaxed);
    if (__builtin_expect(atomic_load_explicit(&scope_nodes, memory_order_relaxed) !=
                         atomic_load_explicit(&scope_sent, memory_order_relaxed), 0))
        scope_announce();
}

/* The node (parent, kind, name): found, or made and announced. Names longer
 * than PROTO_MAX_SCOPE_NAME bytes are cut (at a character). 0 when the table is
 * full or the kind unknown. */
uint32_t scope_intern(uint32_t parent, unsigned kind, const char *name, size_t len);
/* A node's kind and name (NULL for an unknown id). */
const char *scope_name(uint32_t id, unsigned *kind, size_t *len);

/* Opens a scope on this thread, pushed by `owner` (an NVTX domain; 0: the
 * default domain and the program's Python hooks): each owner pushes and pops
 * its own stack, as NVTX's domains do, while the scopes nest in the order
 * they were opened. Returns the level it opens at (0: outermost), or -1 when
 * it could not be named (a full table: the thread's innermost scope stays what
 * it was, and the matching pop still balances). */
int scope_push(unsigned kind, const char *name, size_t len, uintptr_t owner);
/* Closes this thread's innermost scope pushed by `owner` (start/end ranges
 * stay). Returns the level it was at, or -1 when none was open. */
int scope_pop(uintptr_t owner);
/* A start/end range: open on this thread until scope_end(id), from any thread.
 * Returns its id (never 0). */
uint64_t scope_start(unsigned kind, const char *name, size_t len);
void scope_end(uint64_t id);
/* The wire step from now on (steps completed + 1; 0: none). */
void scope_set_step(uint32_t wire_step);
/* In the child of a fork: its connection is new, so every node goes again. */
void scope_reset_after_fork(void);

#endif
