/* Internal interfaces of libcudump.so. */
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

#define DECLARE_FAMILY_TYPE(name) typedef CUresult(*name##_fn) CUDUMP_P_##name;
CUDUMP_FAMILIES(DECLARE_FAMILY_TYPE)
#undef DECLARE_FAMILY_TYPE

#define DECLARE_SERVICE(sym, params) \
    typedef CUresult(*sym##_fn) params; \
    extern sym##_fn real_##sym;
CUDUMP_SERVICES(DECLARE_SERVICE)
#undef DECLARE_SERVICE

/* The real pointer of a wrapped variant, for the shim's own calls. */
#define DECLARE_GETTER(sym, family, ptsz) family##_fn shim_real_##sym(void);
CUDUMP_VARIANTS(DECLARE_GETTER)
#undef DECLARE_GETTER

/* Resolves every real pointer once libcuda.so.1 is loaded. Returns false
 * (and may be called again later) while it is not. */
bool shim_resolve_real(void);

/* ---- hooks (hooks.c): one per family ---------------------------------- */

#define DECLARE_HOOK(name) \
    CUresult hook_##name(name##_fn real, int ptsz CUDUMP_TAIL(CUDUMP_APPLY(CUDUMP_UNPAREN, CUDUMP_P_##name)));
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

struct func_entry {
    _Atomic(uintptr_t) key;     /* CUfunction or CUkernel handle */
    _Atomic int state;
    _Atomic unsigned wants;     /* enum proto_want bits, valid for generation `gen` */
    _Atomic uint32_t gen;       /* the control generation the wants were given for */
    _Atomic unsigned long long launches;
    _Atomic unsigned long long graph_launches; /* runs as a kernel node of a graph launch */
    unsigned id;                /* per-process id sent to the controller */
    bool is_kernel;             /* handle is a CUkernel (library API) */
    char *name;                 /* mangled name, owned */
    int nparams;                /* -1 when the driver cannot say */
    uint32_t *param_offset;
    uint32_t *param_size;
    struct repeat_cache *repeats; /* plans the shim repeats on its own (snapshot.c) */
    /* The counted rules its launches count for, given with `wants` (a torn read
     * while the controller changes rules at the prompt miscounts one launch). */
    _Atomic unsigned nselectors;
    struct proto_selector sel[PROTO_MAX_SELECTORS];
    _Atomic(uintptr_t) module;  /* the CUmodule or CUlibrary it came from; 0: not seen */
    _Atomic bool image_sent;    /* its module image went to the controller (MSG_IMAGE) */
};

/* Returns the entry for a handle, creating it if needed; NULL if the table
 * is full (the launch then passes through untouched). */
struct func_entry *functab_get(uintptr_t key);
/* Looks a handle up without creating it. */
struct func_entry *functab_find(uintptr_t key);
/* Records a name learned from cuModuleGetFunction/cuLibraryGetKernel. */
void functab_name(uintptr_t key, const char *name, bool is_kernel);
/* Records the module (or library) a function or kernel handle came from. */
void functab_module(uintptr_t key, uintptr_t module);
/* Makes an entry FN_READY: learns name and layout, asks the controller. */
void functab_register(struct func_entry *e);
/* Asks the controller again what it wants of a registered function (the
 * control generation moved on). */
void functab_refresh(struct func_entry *e);
/* Calls fn for every entry that has launched. */
void functab_each(void (*fn)(struct func_entry *, void *), void *ctx);
void functab_reset_after_fork(void);

/* ---- module images (modules.c) ----------------------------------------- */

/* Keeps what a module load was given (OPTION_CAPTURE only). */
void modules_add(uintptr_t handle, const void *image, const char *path);
/* Sends the image of e's module to the controller (once per module; a header
 * alone for later functions of the same module). */
void modules_send(struct func_entry *e);
void modules_reset_after_fork(void);

/* ---- allocations (alloctab.c) ----------------------------------------- */

/* The protocol's allocation kinds (protocol.h). */
enum alloc_kind {
    AK_LINEAR = KIND_LINEAR, AK_PITCHED = KIND_PITCHED, AK_MANAGED = KIND_MANAGED,
    AK_ASYNC = KIND_ASYNC, AK_VMM = KIND_VMM, AK_HOST = KIND_HOST, AK_RANGE = KIND_RANGE
};

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
/* A number that changes whenever an allocation is added or removed. */
unsigned long long alloctab_epoch(void);
/* One that changes only when an allocation goes away (or its address is
 * reused unseen): what an allocation's extent was worked out to be holds
 * until then, however many allocations are added. */
unsigned long long alloctab_removals(void);
/* Finds the allocation containing ptr. */
bool alloctab_find(CUdeviceptr ptr, struct alloc_info *out);
/* alloctab_find, else the driver's cuMemGetAddressRange (kind AK_RANGE). */
bool alloc_resolve(CUdeviceptr ptr, bool ask_driver, struct alloc_info *out);
void alloctab_reset_after_fork(void);

/* ---- small helpers (util.c) -------------------------------------------- */

struct strbuf {
    char *data;
    size_t len, cap;
    bool heap; /* data was malloc'ed by the buffer */
    bool oom;
};
void sb_init(struct strbuf *sb, char *stack, size_t cap);
void sb_printf(struct strbuf *sb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sb_append(struct strbuf *sb, const void *data, size_t len);
void sb_free(struct strbuf *sb);

/* How long an exit handler of the shim waits at most for work still on the
 * GPU: the program's exit goes on regardless. */
enum { EXIT_WAIT_S = 5 };
/* Asks `done` every 100 us, for `seconds` at most; whether it said yes. */
bool poll_until(bool (*done)(void), unsigned seconds);

/* ---- controller connection (channel.c) --------------------------------- */

/* Connects if CUDUMP_SOCKET names a controller (once per process), after
 * checking that the peer is the controller this process was started by. */
void channel_connect(void);
/* The control page while connected; NULL when there is no controller (or it
 * went away): the launch fast path reads it once per launch. */
static inline const volatile struct proto_control *channel_control(void)
{
    extern _Atomic(const volatile struct proto_control *) channel_control_page;
    return atomic_load_explicit(&channel_control_page, memory_order_acquire);
}
static inline bool channel_up(void)
{
    return channel_control() != NULL;
}
/* The launch counts in shared memory (proto_counts), from the greeting on;
 * NULL before it. Each counter of the shim that MSG_STATS reports is added to
 * here too, as it is counted, so that the controller has them even when the
 * process ends without MSG_STATS. */
static inline struct proto_counts *channel_counts(void)
{
    extern _Atomic(struct proto_counts *) channel_counts_area;
    return atomic_load_explicit(&channel_counts_area, memory_order_acquire);
}
/* Adds to function `id`'s launches (graph: its graph kernel-node runs) there. */
static inline void counts_add_func(unsigned id, bool graph, uint64_t n)
{
    struct proto_counts *c = channel_counts();
    if (c && id - 1u < PROTO_MAX_FUNCS)
        __atomic_fetch_add(graph ? &c->funcs[id - 1].graph_launches : &c->funcs[id - 1].launches,
                           n, __ATOMIC_RELAXED);
}
/* Adds one to the process's captured launches (graph: its graph launches) there. */
static inline void counts_add_process(bool graph)
{
    struct proto_counts *c = channel_counts();
    if (c)
        __atomic_fetch_add(graph ? &c->graph_launches : &c->captured, 1, __ATOMIC_RELAXED);
}
/* The control page, writable: only for the `interrupt` handshake. */
volatile struct proto_control *channel_control_rw(void);
unsigned channel_options(void);
/* The staging area after the control page (mapped, not yet pinned), its size. */
char *channel_staging(void);
size_t channel_staging_size(void);
/* The trace ring's slots (NULL and 0 without --trace). */
struct proto_ring_slot *channel_ring(uint32_t *slots);
/* The result ring's slots (NULL and 0 without one). */
struct proto_result_slot *channel_results(uint32_t *slots);
/* Whether the controller process still exists (a held thread polls it). */
bool channel_controller_alive(void);

/* A message being built: header first, then payload appended. */
struct msg {
    struct strbuf sb;
};
void msg_init(struct msg *m, char *stack, size_t cap, enum proto_kind kind, uint64_t tag);
void msg_add(struct msg *m, const void *data, size_t len);
/* Sends a finished message; no reply. False if the controller is gone. */
bool channel_send(struct msg *m);
/* Sends an event of one struct (no reply). */
bool channel_send_event(enum proto_kind kind, uint64_t tag, const void *payload, size_t size);
/* Sends a message and reads the reply, which must be of kind `expect`, into
 * reply[cap]; *len is the payload size. False if the controller is gone or
 * broke the protocol (the shim then passes everything through). */
bool channel_request(struct msg *m, enum proto_kind expect, void *reply, size_t cap,
                     size_t *len);
/* While a launch is held its thread owns the connection: every other thread
 * that needs the controller waits, which is the all-stop the prompt wants. */
void channel_lock(void);
void channel_unlock(void);
bool channel_send_locked(struct msg *m);
/* Reads one message of any kind (header checked, payload bounded by cap). */
bool channel_recv_locked(uint16_t *kind, uint64_t *tag, void *payload, size_t cap, size_t *len);
void channel_reset_after_fork(void);
void msg_free(struct msg *m);

/* Process-wide counters, reported to the controller at exit. */
struct shim_stats {
    _Atomic unsigned long long seq;        /* launch sequence number: every launch */
    _Atomic unsigned long long captured;   /* launches recorded into a graph */
    _Atomic unsigned long long graph_launches;
    _Atomic int captures_active;           /* streams being captured now */
};
extern struct shim_stats shim_stats;

#endif
