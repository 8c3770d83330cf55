/* Copies of argument buffers around a wanted launch. */
#ifndef CUDUMP_SNAPSHOT_H
#define CUDUMP_SNAPSHOT_H

#include "launch.h"

/* Asks the controller what to copy and enqueues the "before" copies on the
 * launch stream. Returns true if there is anything to finish after it. */
bool snapshot_before(struct launch_info *li);
/* Enqueues the "after" copies, waits for them, and hands the bytes over. */
void snapshot_after(struct launch_info *li, CUresult rc);

#endif
