/* Device memory lent to deferred snapshot copies (scratch.c). */
#ifndef CUDUMP_SCRATCH_H
#define CUDUMP_SCRATCH_H

#include "launchinfo.h"

/* Takes `bytes` of scratch memory on the launch's stream, whose context is
 * `ctx`: from cudump's own pool of that context's device where it is the
 * thread's current one, else the device's default pool. False where neither
 * has them. */
bool scratch_take(const struct launch_info *li, CUcontext ctx, size_t bytes, CUdeviceptr *out);
/* Gives scratch memory back on `stream`, after its last use there. */
void scratch_give(CUdeviceptr p, CUstream stream);
/* In the context of a launch whose scratch is back: gives the kept memory back
 * at once where the device is short of free memory. */
void scratch_spare(void);
/* Whether cudump's pools may keep device memory nobody uses now. One load. */
bool scratch_kept(void);
/* Gives the memory cudump's pools keep back to the device, unless a stream of
 * the process is being captured. Returns whether they kept any (then a failed
 * allocation of the program's is worth a retry). */
bool scratch_trim(void);
/* How many trims have run: an allocation that failed while another thread's
 * trim was under way is worth a retry too (that trim may have freed what it
 * needed, and left nothing kept to trim again). */
unsigned long scratch_trims(void);
/* Returns once no trim is under way: a trim that starts later sees a capture
 * counted (shim_stats.captures_active) before this call, and does nothing. */
void scratch_fence(void);
void scratch_reset_after_fork(void);

#endif
