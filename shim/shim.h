/* What every file of libcudump.so shares: the driver's types and the real
 * driver pointers (interpose.c fills them in), the protocol, and the
 * process-wide counters. Functions are declared by the header of the file
 * that defines them (x.h for x.c). */
#ifndef CUDUMP_SHIM_H
#define CUDUMP_SHIM_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cudecl.h"
#include "api.h"
#include "protocol.h"

#define SHIM_EXPORT __attribute__((visibility("default")))
#define SHIM_TLS __thread __attribute__((tls_model("initial-exec")))

/* ---- real driver entry points (interpose.c) ---------------------------- */

#define DECLARE_FAMILY_TYPE(c, family, counts, waits, does, params, ...) \
    typedef CUresult(*family##_fn) params;
CUDUMP_API(DECLARE_FAMILY_TYPE, ~)
#undef DECLARE_FAMILY_TYPE

#define DECLARE_SERVICE(sym, params) \
    typedef CUresult(*sym##_fn) params; \
    extern sym##_fn real_##sym;
CUDUMP_SERVICES(DECLARE_SERVICE)
#undef DECLARE_SERVICE

/* Thread-local re-entrancy guard (interpose.c): set while the shim does its
 * own work, so that a driver call it makes never re-enters a hook. */
extern SHIM_TLS int shim_busy;

/* Process-wide counters, reported to the controller at exit. */
struct shim_stats {
    _Atomic unsigned long long seq;        /* launch sequence number: every launch */
    _Atomic unsigned long long captured;   /* launches recorded into a graph */
    _Atomic unsigned long long graph_launches;
    _Atomic int captures_active;           /* streams being captured now */
};
extern struct shim_stats shim_stats;

#endif
