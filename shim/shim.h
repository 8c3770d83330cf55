/* Internal interfaces of libcudump.so. */
#ifndef CUDUMP_SHIM_H
#define CUDUMP_SHIM_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cudecl.h"
#include "api.h"

#define SHIM_EXPORT __attribute__((visibility("default")))
#define SHIM_TLS __thread __attribute__((tls_model("initial-exec")))

/* ---- real driver entry points (interpose.c) ---------------------------- */

#define DECLARE_FAMILY_TYPE(name) typedef CUresult(*name##_fn) CUDUMP_P_##name;
CUDUMP_FAMILIES(DECLARE_FAMILY_TYPE)
#undef DECLARE_FAMILY_TYPE

#define DECLARE_SERVICE(sym, params) \
    typedef CUresult(*sym##_fn) params; \
    extern sym##_fn real_##sym;
CUDUMP_SERVICES(DECLARE_SERVICE)
#undef DECLARE_SERVICE

/* Resolves every real pointer once libcuda.so.1 is loaded. Returns false
 * (and may be called again later) while it is not. */
bool shim_resolve_real(void);

/* ---- hooks (hooks.c): one per family ---------------------------------- */

#define DECLARE_HOOK(name) \
    CUresult hook_##name(name##_fn real, int ptsz, CUDUMP_APPLY(CUDUMP_UNPAREN, CUDUMP_P_##name));
CUDUMP_FAMILIES(DECLARE_HOOK)
#undef DECLARE_HOOK

/* Maps a real driver pointer to the shim's wrapper for the same variant,
 * or returns it unchanged. */
void *shim_wrap_pointer(void *real);

/* Thread-local re-entrancy guard: set while the shim does its own work, so
 * that a driver call it makes never re-enters a hook. */
extern SHIM_TLS int shim_busy;

/* ---- kernel functions (functab.c) -------------------------------------- */

enum { FN_EMPTY = 0, FN_NAMED = 1, FN_PENDING = 2, FN_READY = 3 };

/* What the controller wants of a function, decided once per function. */
enum { WANT_TRACE = 1, WANT_SNAPSHOT = 2 };

struct func_entry {
    _Atomic(uintptr_t) key;     /* CUfunction or CUkernel handle */
    _Atomic int state;
    _Atomic unsigned wants;
    _Atomic unsigned long long launches;
    unsigned id;                /* per-process id sent to the controller */
    bool is_kernel;             /* handle is a CUkernel (library API) */
    char *name;                 /* mangled name, owned */
    int nparams;                /* -1 when the driver cannot say */
    uint32_t *param_offset;
    uint32_t *param_size;
};

/* Returns the entry for a handle, creating it if needed; NULL if the table
 * is full (the launch then passes through untouched). */
struct func_entry *functab_get(uintptr_t key);
/* Looks a handle up without creating it. */
struct func_entry *functab_find(uintptr_t key);
/* Records a name learned from cuModuleGetFunction/cuLibraryGetKernel. */
void functab_name(uintptr_t key, const char *name, bool is_kernel);
/* Makes an entry FN_READY: learns name and layout, asks the controller. */
void functab_register(struct func_entry *e);
/* Calls fn for every entry that has launched. */
void functab_each(void (*fn)(struct func_entry *, void *), void *ctx);
void functab_reset_after_fork(void);

/* ---- allocations (alloctab.c) ----------------------------------------- */

enum alloc_kind { AK_LINEAR, AK_PITCHED, AK_MANAGED, AK_ASYNC, AK_VMM, AK_HOST };

struct alloc_info {
    CUdeviceptr base;
    size_t size;
    enum alloc_kind kind;
    size_t pitch, width, height;
    unsigned elem_size;
};

void alloctab_add(const struct alloc_info *a);
/* Removes the allocation that starts at base; returns false if unknown. */
bool alloctab_remove(CUdeviceptr base, struct alloc_info *out);
/* Finds the allocation containing ptr. */
bool alloctab_find(CUdeviceptr ptr, struct alloc_info *out);
const char *alloc_kind_name(enum alloc_kind k);
void alloctab_reset_after_fork(void);

/* ---- controller connection (channel.c) --------------------------------- */

/* Connects if CUDUMP_SOCKET names a controller (once per process). */
void channel_connect(void);
bool channel_up(void);
/* Options the controller sent in its greeting (CHANNEL_* bits). */
unsigned channel_options(void);
enum { CHANNEL_TRACE_GRAPHS = 1 };
/* The staging file for snapshot bytes the controller named in its greeting
 * (NULL and 0 when it wants no snapshots). */
const char *channel_staging_path(void);
size_t channel_staging_size(void);
/* Sends one JSON line; no reply. */
void channel_send(const char *line, size_t len);
/* Sends one JSON line and reads one reply line into reply (NUL-terminated).
 * Returns false if the controller is gone. */
bool channel_request(const char *line, size_t len, char *reply, size_t cap);
void channel_reset_after_fork(void);

/* ---- small helpers (util.c) -------------------------------------------- */

struct strbuf {
    char *data;
    size_t len, cap;
    bool heap; /* data was malloc'ed by the buffer */
    bool oom;
};
void sb_init(struct strbuf *sb, char *stack, size_t cap);
void sb_printf(struct strbuf *sb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sb_json_string(struct strbuf *sb, const char *s);
void sb_free(struct strbuf *sb);

/* Process-wide counters, reported to the controller at exit. */
struct shim_stats {
    _Atomic unsigned long long seq;        /* launch sequence number: every launch */
    _Atomic unsigned long long captured;   /* launches recorded into a graph */
    _Atomic unsigned long long graph_launches;
    _Atomic int captures_active;           /* streams being captured now */
};
extern struct shim_stats shim_stats;

#endif
