/* What the shim does around each wrapped driver call (hooks.c): one hook per family of api.h. */
#ifndef CUDUMP_HOOKS_H
#define CUDUMP_HOOKS_H

#include "shim.h"

#define DECLARE_HOOK(name) \
    CUresult hook_##name(name##_fn real, int ptsz CUDUMP_TAIL(CUDUMP_APPLY(CUDUMP_UNPAREN, CUDUMP_P_##name)));
CUDUMP_FAMILIES(DECLARE_HOOK)
#undef DECLARE_HOOK

#endif
