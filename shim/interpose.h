/* How calls reach the shim (interpose.c). */
#ifndef CUDUMP_INTERPOSE_H
#define CUDUMP_INTERPOSE_H

#include "shim.h"

/* The real pointer of a wrapped variant, for the shim's own calls. */
#define DECLARE_GETTER(sym, family, ptsz, ...) family##_fn shim_real_##sym(void);
CUDUMP_VARIANTS(DECLARE_GETTER)
#undef DECLARE_GETTER

/*
 * What a wrapper calls once it has its variant's real pointer and the shim is
 * not at work on this thread: its family's entry, which does what api.h's row
 * says around the call (the counting, the settling and the hook). The layer
 * above fills the table (hooks.c), so that interpose.c calls nothing above it.
 */
#define DECLARE_ENTRY(c, family, counts, waits, does, params, ...) \
    CUresult (*family)(family##_fn real, int ptsz CUDUMP_TAIL params);
struct shim_entries {
    CUDUMP_API(DECLARE_ENTRY, ~)
};
#undef DECLARE_ENTRY
extern const struct shim_entries shim_entries;

/* Resolves every real pointer once libcuda.so.1 is loaded. Returns false
 * (and may be called again later) while it is not. */
bool shim_resolve_real(void);

/* Maps a real driver pointer to the shim's wrapper for the same variant,
 * or returns it unchanged. */
void *shim_wrap_pointer(void *real);

/* cuGetProcAddress's hooks (api.h's HOOK rows): the real lookup, whose
 * pointer is then mapped to the wrapper of its variant. */
CUresult hook_cuGetProcAddress(cuGetProcAddress_fn real, const char *symbol, void **pfn,
                               int cudaVersion, cuuint64_t flags);
CUresult hook_cuGetProcAddress_v2(cuGetProcAddress_v2_fn real, const char *symbol, void **pfn,
                                  int cudaVersion, cuuint64_t flags,
                                  CUdriverProcAddressQueryResult *status);

#endif
