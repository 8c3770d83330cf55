/* Contexts that end while the program runs (ctxlife.c). */
#ifndef CUDUMP_CTXLIFE_H
#define CUDUMP_CTXLIFE_H

#include "shim.h"

/* A number that changes whenever a context may have ended: one destroyed,
 * a primary context reset or released for the last time, or a key below
 * found its context gone. What cudump registered with the driver for every
 * context (the host memory its kernel writes into) is checked again then. */
unsigned ctxlife_epoch(void);
void ctxlife_ended(void);
void ctxlife_reset_after_fork(void);

/* What cudump keeps made in one context (its kernel, a stream) is kept under
 * this key: the handle, and the context's id, which tells a primary context
 * reset under the same handle from the one before. */
struct ctx_key {
    CUcontext ctx;
    unsigned long long id;  /* cuCtxGetId's; 0 where the driver has none */
};

enum ctx_match {
    CTX_OTHER,   /* the key is another handle's (or none) */
    CTX_SAME,    /* the context the key was made for */
    CTX_ENDED,   /* the same handle, but that context ended: what was kept is gone */
};

/* Whether two keys name the same context: the same handle and the same id
 * (a key taken before a context's end, against the tables' keys). */
static inline bool ctx_key_is(const struct ctx_key *a, const struct ctx_key *b)
{
    return a->ctx == b->ctx && a->id == b->id;
}

/* Sets k for ctx, a live context (the launching thread's). */
void ctx_key_set(struct ctx_key *k, CUcontext ctx);
/* Compares k with ctx, a live context: one driver call (15 ns on an H200)
 * where the handles are the same. CTX_ENDED counts as a context's end. */
enum ctx_match ctx_key_match(const struct ctx_key *k, CUcontext ctx);

#endif
