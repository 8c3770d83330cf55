/*
 * Whether the launcher thread (handoff.h) makes the program faster on this
 * host, found out by trying: the launches of cudump's kernel that could be
 * handed over are counted in stretches of HANDTUNE_STRETCH, and a trial runs
 * six stretches, the launcher on and off in turn (on, off, off, on, on, off:
 * each way early and late in the trial). The faster way is the one whose
 * fastest stretch took less wall time (a stretch slowed by the program's own
 * pauses decides nothing), by HANDTUNE_MARGIN at least for the launcher (it
 * costs a core); it is kept for HANDTUNE_KEEP stretches, and then tried again,
 * since the same host runs the same program at two speeds from one minute to
 * the next. The first HANDTUNE_WARMUP stretches are the launcher's, as they
 * were before there were trials: a program's first launches (planned one by
 * one by the controller, its caches warming) say little of its pace, and a
 * program that speeds up through a trial favours the way of the trial's last
 * stretch (the launching thread's) by what one stretch gains.
 *
 * Why: handing the launch over takes about 4 us of CPU off the program's
 * thread for each of its launches, and on some hosts it costs more than that.
 * On an H200 host, ResNet-18 under --check-nan ran at 3.08 ms a forward with
 * the launcher and 2.21 with the program's thread making the launches (bare:
 * 2.05), the program's thread taking 52% more CPU than bare with it and 9%
 * more without; a host the same morning ran the same at 1.09x bare with it
 * and 1.57x without (docs/performance.md).
 *
 * The state is the caller's (one per process, under the staging lock), and
 * the clock is asked only where a trial's stretch begins and where it ends.
 */
#ifndef CUDUMP_HANDTUNE_H
#define CUDUMP_HANDTUNE_H

#include <stdbool.h>
#include <stdint.h>

enum {
    HANDTUNE_STRETCH = 512,     /* launches a stretch: four forwards of ResNet-18 */
    HANDTUNE_WARMUP = 8,        /* stretches before the first trial, the launcher's */
    HANDTUNE_TRIAL = 6,         /* stretches a trial */
    HANDTUNE_KEEP = 128,        /* stretches the faster way is kept before the next trial:
                                 * a trial's slower way runs 2% of the time */
    HANDTUNE_MARGIN = 970,      /* the launcher is chosen where its fastest stretch took
                                 * less than this share of the other way's (per thousand) */
};

struct handtune {
    bool warm;                  /* the first HANDTUNE_WARMUP stretches are over */
    unsigned count;             /* launches in this stretch */
    unsigned stretch;           /* stretches since the warm-up, the trial or the keeping began */
    bool kept;                  /* the trial is over; `on` is its choice */
    bool on;                    /* this stretch's way */
    uint64_t start;             /* when this stretch of a trial began */
    uint64_t best[2];           /* the fastest stretch of each way in this trial (0: none) */
    uint64_t trials;            /* trials decided, and of them those the launcher won */
    uint64_t won;
};

/* Whether the next launch of cudump's kernel is to be handed over. A zeroed
 * struct handtune begins with the launcher's warm-up stretches. */
bool handtune_hand_off(struct handtune *t, uint64_t (*now_ns)(void));

#endif
