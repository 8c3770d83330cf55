/*
 * How cudump's kernel is launched in a context (toollaunch.c): by the thread
 * that makes the program's launch, or by the launcher thread (handoff.h).
 *
 * On Hopper and later the kernel is loaded from PTX that waits for the kernel
 * before it on the stream (griddepcontrol.wait, shim/gpu/tools.cu), and right
 * after a launch of the program's made plainly (shim/tools.h,
 * TOOLS_RIGHT_AFTER) it is launched with programmatic stream serialization:
 * its blocks may be started as the program's kernel ends, and wait there,
 * rather than after the GPU has seen that kernel finish and only then started
 * a grid. On an H200 (bench/kernel_pairs.cu), where the GPU bounds the loop,
 * cudump's kernel after each of a program's kernels cost 7.7 us of GPU a pair
 * launched plainly and 6.1 us so. Only there: the kernel it follows is then
 * one launched plainly, which began after everything before it on the stream
 * was done, so waiting for that kernel is waiting for all of it. After a
 * launch that may itself overlap what came before it (made with programmatic
 * serialization or a programmatic event), after anything else cudump put on
 * the stream (the flight recorder's mark, the zeroing of its scratch where the
 * kernel is loaded, an earlier launch of its own kernel), and before a launch,
 * it is launched plainly, and the wait returns at once. So it is too where
 * another call of the program's was in progress at the launch, or began after
 * it (another thread's work on the same stream could come between): the launch
 * is made so only if the count of calls begun, read before the program's launch
 * was made, has not moved since (with the launcher thread, until it makes the
 * launch). From that look until the launch is on the stream, a call that
 * begins is held back in calls_enter (calls_fence, calls.h): a thread preempted
 * on its way into the driver would otherwise let it reach the stream first.
 */
#ifndef CUDUMP_TOOLLAUNCH_H
#define CUDUMP_TOOLLAUNCH_H

#include "shim.h"
#include "tooljob.h"

struct tool_launcher {
    cuLaunchKernel_fn plain;    /* the real cuLaunchKernel (or its _ptsz) */
    cuLaunchKernelEx_fn ex;     /* the real cuLaunchKernelEx: launches with programmatic
                                 * stream serialization; NULL: plainly */
    unsigned long long begun;   /* with ex: so only while calls_begun() (calls.h) still
                                 * reads this, no call of the program's having begun since
                                 * the program's launch that the kernel is to follow */
};

/* Launches cudump's kernel `fn` over `jobs` (grid blocks of TOOL_THREADS) on
 * `stream`; a launch refused with the attribute is made again plainly, and so
 * are all after it. */
CUresult toollaunch(const struct tool_launcher *l, CUfunction fn, unsigned grid, CUstream stream,
                    struct tool_jobs *jobs);

/* Counts a launch of one of cudump's kernels made from the host (the control
 * page's tool_launches, summary.json's) where `rc` says the driver took it, and
 * returns `rc`. toollaunch counts its own; a kernel of cudump's launched any
 * other way is counted by passing its launch's result through this. */
CUresult toollaunch_counted(CUresult rc);

#endif
