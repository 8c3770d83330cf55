/* How calls reach the shim (interpose.c). */
#ifndef CUDUMP_INTERPOSE_H
#define CUDUMP_INTERPOSE_H

#include "shim.h"

/* The real pointer of a wrapped variant, for the shim's own calls. */
#define DECLARE_GETTER(sym, family, ptsz) family##_fn shim_real_##sym(void);
CUDUMP_VARIANTS(DECLARE_GETTER)
#undef DECLARE_GETTER

/* Resolves every real pointer once libcuda.so.1 is loaded. Returns false
 * (and may be called again later) while it is not. */
bool shim_resolve_real(void);

/* Maps a real driver pointer to the shim's wrapper for the same variant,
 * or returns it unchanged. */
void *shim_wrap_pointer(void *real);

#endif
