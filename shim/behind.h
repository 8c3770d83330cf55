/* The write-behind area: pinned shared memory where deferred launches' bytes
 * wait for the controller's file writes (behind.c, protocol.h). */
#ifndef CUDUMP_BEHIND_H
#define CUDUMP_BEHIND_H

#include "shim.h"

/* The process is connected: starts preparing the area, if it has one (once). */
void behind_start(void);
/* A context is current in this thread: the area is registered in it, if it is
 * waiting for one. One load otherwise. */
void behind_context(void);
/* Places a launch's n copies of sizes[i] bytes (0: a copy not made, placed
 * nowhere) in the area: offsets[i] from its start, and the launch's number.
 * Only the drain thread places. Waits, bounded, for pinned bytes the grower is
 * still making or the controller is still writing out; false (nothing taken)
 * if the launch cannot be placed. */
bool behind_place(const size_t *sizes, unsigned n, uint64_t *offsets, uint64_t *number);
/* The area's first byte (NULL without one). */
char *behind_area(void);
void behind_reset_after_fork(void);

#endif
