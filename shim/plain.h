/* The plain way of copying: the plan's copies into the staging area on the
 * launch stream (plain.c). */
#ifndef CUDUMP_PLAIN_H
#define CUDUMP_PLAIN_H

#include "launchinfo.h"

/* The plan's "before" copies, ahead of the launch on its stream. */
void plain_before(const struct launch_info *li);
/* From round `round` on, while `more`: makes the plan's "after" copies (if
 * the launch succeeded), waits for the stream and reports them (MSG_END); the
 * answer's follow-up copies make the next round. The controller asks once per
 * finding; the bound only keeps a confused one from holding the launch.
 * Returns whether an answer asked to hold the launch (PLAN_HALT). */
bool plain_after(const struct launch_info *li, CUresult launch_rc, bool more, int round);
/* Copies rows of device memory into staging on the launch's stream and waits. */
CUresult plain_copy_wait(const struct launch_info *li, CUdeviceptr src, size_t width,
                         size_t height, size_t pitch, size_t offset);
/* Copies `size` staging bytes from `offset` to device memory at `dst` on the launch's
 * stream and waits. */
CUresult plain_write_wait(const struct launch_info *li, CUdeviceptr dst, size_t size,
                          size_t offset);

#endif
