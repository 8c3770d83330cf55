/*
 * Whether the launcher thread makes the program faster here, found out by
 * trying (handtune.h).
 */
#include "handtune.h"

/* The ways of a trial's stretches, the first in the lowest bit: on, off, off,
 * on, on, off. */
#define TRIAL_ORDER 0x19u

bool handtune_hand_off(struct handtune *t, uint64_t (*now_ns)(void))
{
    const bool trying = t->warm && !t->kept;
    if (t->count == 0) {
        if (!t->warm)
            t->on = true;
        else if (trying) {
            t->on = (TRIAL_ORDER >> t->stretch) & 1u;
            t->start = now_ns();
        }
    }
    const bool on = t->on;
    if (++t->count < HANDTUNE_STRETCH)
        return on;
    /* This launch ends the stretch. */
    t->count = 0;
    t->stretch++;
    if (!t->warm) {
        if (t->stretch >= HANDTUNE_WARMUP) {
            t->warm = true;
            t->stretch = 0;
        }
        return on;
    }
    if (t->kept) {
        if (t->stretch >= HANDTUNE_KEEP) {
            t->kept = false;
            t->stretch = 0;
            t->best[0] = t->best[1] = 0;
        }
        return on;
    }
    const uint64_t took = now_ns() - t->start;
    if (!t->best[on] || took < t->best[on])
        t->best[on] = took;
    if (t->stretch < HANDTUNE_TRIAL)
        return on;
    t->on = t->best[1] * 1000 < t->best[0] * HANDTUNE_MARGIN;
    t->kept = true;
    t->stretch = 0;
    t->trials++;
    t->won += t->on;
    return on;
}
