/* The flight recorder (flight.c): the last launches of the process, kept in
 * the flight ring of shared memory (--flight), and whether the GPU got past
 * each of them. */
#ifndef CUDUMP_FLIGHT_H
#define CUDUMP_FLIGHT_H

#include "channel.h"
#include "launchinfo.h"

/* Whether launches are recorded: two loads, on every launch's fast path. */
static inline bool flight_on(void)
{
    uint32_t slots;
    return channel_flight(&slots) != NULL;
}

/* Records a launch about to be made into the next slot (li numbered: seq,
 * tid, captured; a graph launch has no function, and li->graph names its
 * graph) and keeps the slot's position + 1 in li->flight (0: not recorded). */
void flight_begin(struct launch_info *li);
/* The launch call returned rc: says so in its slot and, for a launch that was
 * made (not recorded into a graph by a capture), enqueues the stream memory
 * write that marks it done once the GPU gets past it. Whatever that write
 * does, the program never sees it. */
void flight_end(const struct launch_info *li, CUresult rc);
/* Keeps the first error a call of the program's returned (first_error). */
void flight_error(CUresult rc);
/* rc, after keeping it if it is the program's first error. */
static inline CUresult flight_seen(CUresult rc)
{
    if (__builtin_expect(rc != CUDA_SUCCESS, 0))
        flight_error(rc);
    return rc;
}
void flight_reset_after_fork(void);

#endif
