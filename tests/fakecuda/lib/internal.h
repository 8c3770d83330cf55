/*
 * State shared between the modules of the stand-in libcuda.so.1. Nothing
 * here is exported: the library is linked with -fvisibility=hidden for
 * these helpers and only the cu* entry points carry default visibility.
 */
#ifndef FAKECUDA_INTERNAL_H
#define FAKECUDA_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fakecuda.h"

#define FC_EXPORT __attribute__((visibility("default")))
#define FC_HIDDEN __attribute__((visibility("hidden")))

/* Magic words let an entry point reject a handle it did not hand out
 * instead of crashing on it, as the real driver does. */
enum {
    FC_MAGIC_STREAM = 0x5354524du,
    FC_MAGIC_EVENT = 0x45564e54u,
    FC_MAGIC_GRAPH = 0x47524150u,
    FC_MAGIC_EXEC = 0x47455845u,
    FC_MAGIC_MODULE = 0x4d4f444cu,
    FC_MAGIC_LIBRARY = 0x4c494252u,
    FC_MAGIC_CONTEXT = 0x43545854u,
    FC_MAGIC_NODE = 0x4e4f4445u,
    FC_MAGIC_EMBEDDED = 0x454d4244u, /* a child graph inside an executable graph */
};

/* ---- init.c ---- */
extern atomic_bool fc_initialized;
/* Counters written at exit to the file FAKECUDA_STATS names (graph.c). */
extern _Atomic unsigned long fc_async_allocations;
/* cuMemAlloc_v2 calls and host registrations that succeeded (FAKECUDA_STATS) */
extern _Atomic unsigned long fc_mem_allocs, fc_host_registrations;
void fc_stats_at_exit(void);
/* Requires an initialised driver and a current context, and answers the sticky
 * error of a kernel that faulted (fc_fault) once one has. */
FC_HIDDEN CUresult fc_require_context(void);
/* The sticky error of the context. A kernel that reaches memory it may not sets it
 * pending (fc_set_fault: CUDA_ERROR_ILLEGAL_ADDRESS), as a real GPU ends the context: from
 * then on nothing submitted to any stream runs (launches, copies and stream writes are
 * accepted and dropped). The next wait (a synchronize) notices it (fc_fault_noticed) and
 * returns it; from then on so does every call that needs the context (fc_fault), and every
 * submission. */
FC_HIDDEN extern atomic_int fc_fault;
FC_HIDDEN extern atomic_int fc_fault_pending;
FC_HIDDEN void fc_set_fault(CUresult error);
FC_HIDDEN CUresult fc_fault_noticed(void);
FC_HIDDEN CUcontext fc_current_context(void);
/* Whether a context (NULL: none) has not been destroyed. */
FC_HIDDEN bool fc_context_alive(CUcontext ctx);
/* The current context's id (cuCtxGetId), 0 where none is current. A primary context
 * reset, or released for the last time, comes back under its handle with a new id. */
FC_HIDDEN unsigned long long fc_context_id(void);
/* A context's id (0: none). */
FC_HIDDEN unsigned long long fc_context_id_of(CUcontext ctx);
/* The context of the launch a thread executes now (stream.c's fc_op_execute). */
FC_HIDDEN extern _Thread_local CUcontext fc_executing_ctx;
/* The id of the context device memory at p was allocated in (cuMemAlloc); 0: other. */
FC_HIDDEN unsigned long long fc_device_context(CUdeviceptr p);
/* A context ended: the registrations of host memory made in it end too (memory.c). */
FC_HIDDEN void fc_registrations_end(unsigned long long ctx);
/* How many built-in kernels there may be (code.c's handle tables). */
#define FC_MAX_BUILTINS 16
/* The built-in functions (by index) got in the current context (cuModuleGetFunction,
 * cuKernelGetFunction); they go with it when it ends (init.c). */
FC_HIDDEN void fc_context_got_function(size_t index);
FC_HIDDEN bool fc_context_has_function(size_t index);
/* Whether function f was got in the current context (code.c): one of a module of another
 * context, or of one that ended, is not launchable, as on the real driver. */
FC_HIDDEN bool fc_function_in_context(CUfunction f);

/* ---- pools.c: the device's size, and pools of one's own ---- */
/* Allocations that failed for want of device memory (written at exit, graph.c). */
extern _Atomic unsigned long fc_out_of_memory;
/* Bytes cudump's kernel read, job by job (kernels.c), for FAKECUDA_STATS. */
extern _Atomic unsigned long fc_tool_bytes;
/* Grids of cudump_tools run (graph nodes too) and of the batched scan, cudump_scan_list
 * (kernels.c), for FAKECUDA_STATS. */
extern _Atomic unsigned long fc_tools_runs;
extern _Atomic unsigned long fc_scan_list_launches;
/* Launches of cudump's kernel with programmatic stream serialization (launch.c), for
 * FAKECUDA_STATS. */
extern _Atomic unsigned long fc_tool_waiting;
/* Launches of cudump's kernels (cudump_*) the stand-in took from the host, however made
 * (launch.c), for FAKECUDA_STATS. */
extern _Atomic unsigned long fc_tool_launches;
/* The device's compute capability, major (FAKECUDA_CC_MAJOR; 9, a Hopper, by default). */
FC_HIDDEN int fc_cc_major(void);
/* Whether the last PTX loaded with cudump's kernel in it waits for the kernel before it
 * (griddepcontrol.wait: code.c), which a launch with programmatic stream serialization
 * needs. */
FC_HIDDEN bool fc_tools_ptx_waits(void);
FC_HIDDEN CUresult fc_capacity_take(size_t n);
FC_HIDDEN void fc_capacity_give(size_t n);
/* With FAKECUDA_CAPACITY_MIB set: what is left of it. False where it is not set. */
FC_HIDDEN bool fc_capacity_left(size_t *free_bytes, size_t *total_bytes);
FC_HIDDEN bool fc_is_own_pool(CUmemoryPool handle);
/* n bytes lent by a pool of the program's own: from what it keeps, else the device. */
FC_HIDDEN CUresult fc_pool_take(CUmemoryPool handle, size_t n);
FC_HIDDEN void fc_pool_lent(CUmemoryPool handle, uintptr_t base, size_t n);
FC_HIDDEN void fc_pool_unreserve(CUmemoryPool handle, size_t n);
/* Whether base was lent by a pool of the program's own (then it is the pool's again). */
FC_HIDDEN bool fc_pool_give(uintptr_t base);

/* ---- kernels.c: the built-in kernels ---- */
#define FC_MAX_PARAMS 12

struct fc_dim3 {
    unsigned int x, y, z;
};

/* One thread of a kernel: reads its parameters from the packed buffer. */
typedef void (*fc_thread_fn)(const unsigned char *args, struct fc_dim3 block_idx,
                             struct fc_dim3 thread_idx, struct fc_dim3 block_dim,
                             struct fc_dim3 grid_dim);

struct fc_builtin {
    const char *mangled;
    const char *short_name;
    unsigned int nparams;
    size_t sizes[FC_MAX_PARAMS];
    size_t offsets[FC_MAX_PARAMS];
    size_t args_size;
    fc_thread_fn thread; /* NULL: the kernel does nothing */
    size_t aligns[FC_MAX_PARAMS]; /* 0: natural (size, capped at 8); a CUtensorMap: 64 */
};

FC_HIDDEN extern const size_t fc_builtin_count;
FC_HIDDEN const struct fc_builtin *fc_builtin_at(size_t i);
FC_HIDDEN const struct fc_builtin *fc_builtin_find(const char *mangled);
FC_HIDDEN void fc_builtin_run(const struct fc_builtin *k, const unsigned char *args,
                              struct fc_dim3 grid, struct fc_dim3 block);

/* ---- code.c: function and kernel handles ---- */
/* What a launch accepts: a CUfunction, or a CUkernel passed as one. */
FC_HIDDEN const struct fc_builtin *fc_launchable(CUfunction f);
/* A CUfunction only / a CUkernel only: NULL for anything else. */
FC_HIDDEN const struct fc_builtin *fc_function_builtin(CUfunction f);
FC_HIDDEN const struct fc_builtin *fc_kernel_builtin(CUkernel k);
/* The CUfunction handle of a built-in kernel. */
FC_HIDDEN CUfunction fc_function_handle(const struct fc_builtin *k);

/* ---- stream.c: streams, events, capture ---- */
struct fc_graph;
struct fc_node;

struct fc_stream {
    unsigned int magic;
    unsigned int flags;
    bool legacy;
    /* Capture state, guarded by the capture lock. */
    CUstreamCaptureStatus status;
    CUstreamCaptureMode mode;
    pthread_t owner;
    struct fc_graph *graph;
    bool own_graph;          /* made by the capture (not cuStreamBeginCaptureToGraph) */
    unsigned long long capture_id;
    /* The nodes the next captured operation will depend on. */
    struct fc_node **deps;
    struct fc_graph_edge_data *dep_edges; /* as many zeroed entries as deps can hold */
    size_t ndeps, deps_cap;
    /* What was last put on it (outside a capture): FC_TAIL_*. A kernel launched with
     * programmatic stream serialization may overlap only what it follows. */
    _Atomic int tail;
};

enum { FC_TAIL_OTHER, FC_TAIL_PLAIN_KERNEL, FC_TAIL_PROGRAMMATIC_KERNEL };
/* Work of kind `tail` (FC_TAIL_*) put on s: every stream-ordered call says so,
 * whatever it puts there (stream.c). Returns what was there last. */
FC_HIDDEN int fc_stream_enqueued(struct fc_stream *s, int tail);

/* A kernel launch with its parameters packed by the kernel's layout. */
struct fc_launch {
    const struct fc_builtin *kernel;
    CUfunction func; /* the function handle launched, NULL if launched by kern */
    CUkernel kern;   /* the kernel handle launched, if it was one */
    CUcontext ctx;
    struct fc_dim3 grid, block;
    unsigned int smem;
    bool programmatic; /* launched with programmatic stream serialization */
    const unsigned char *args; /* kernel->args_size bytes */
};

/* An operation submitted to a stream: run now, or recorded into a graph
 * as a node while the stream captures. */
enum fc_op_kind { FC_OP_LAUNCH, FC_OP_MEMCPY, FC_OP_MEMSET };

struct fc_op {
    enum fc_op_kind kind;
    struct fc_launch launch;          /* FC_OP_LAUNCH */
    CUDA_MEMCPY3D copy;          /* FC_OP_MEMCPY: 1-D and 2-D copies too */
    struct fc_memset_node_params set; /* FC_OP_MEMSET */
};

FC_HIDDEN CUresult fc_resolve_stream(CUstream h, bool per_thread, struct fc_stream **out);
/* Waits on the calling thread for holds (cudump's kernel on its gate) that
 * work on s would wait behind on a GPU; NULL: every hold (a context-wide sync). */
FC_HIDDEN void fc_wait_held(const struct fc_stream *s);
/* Waits for every held stream the way a synchronous copy does, holding the
 * lock the other threads' copies take (memory.c): the real driver's lazy
 * loading, which waits for the context when a function is first got. */
FC_HIDDEN void fc_wait_held_locked(void);
/* The stream waits while the gate reads GATE_HELD, GATE_SERVING or GATE_COPY
 * (cudump's kernel holding it), the copies its mailbox (NULL: none) asks for
 * made meanwhile; still GATE_HELD after give_up_after_ns, the gate gets
 * give_up_value. */
FC_HIDDEN void fc_hold_gate(struct fc_stream *s, volatile uint32_t *gate, volatile uint64_t *mail,
                            uint64_t give_up_after_ns, uint32_t give_up_value);
/* Copies made through a held gate's mailbox (FAKECUDA_STATS). */
extern _Atomic unsigned long fc_mail_copies;
#define FC_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT 17
#define FC_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR 75
/* Whether the device has a display's watchdog (FAKECUDA_WATCHDOG=1): a kernel
 * that holds its stream there would be ended with an error. */
FC_HIDDEN int fc_watchdog(void);
/* The gate cudump's kernel holds its stream at once this launch ran, or NULL;
 * and (*mail) the slot's mailbox it takes copies from while it holds. */
FC_HIDDEN volatile uint32_t *fc_tools_hold(const struct fc_builtin *k, const unsigned char *args,
                                           volatile uint64_t **mail);
/* FAKECUDA_TOOLS_DELAY_US: a launch of cudump's kernel made by a thread other than the
 * process's first takes that long on that thread before it runs (a real launch takes
 * microseconds), so that a test sees what else reaches the device meanwhile. */
FC_HIDDEN void fc_tools_delay(const struct fc_builtin *k);
/* FAKECUDA_PAUSE_LAUNCH=N: the program's N-th launch (cudump's not counted) waits, before
 * it is put on its stream, until another thread's cuCtxSynchronize has returned (10 s at
 * most); fakecuda_launch_paused() tells a program's thread when it is waiting. */
FC_HIDDEN void fc_pause_launch(const struct fc_builtin *k);
FC_HIDDEN extern _Atomic unsigned long fc_ctx_syncs;
/* How long cudump's kernel holds a stream nobody begins to serve before it opens
 * the gate itself: TOOL_HOLD_NS, or FAKECUDA_TOOLS_HOLD_NS (0: it gives up at once,
 * as the real kernel does when the shim never comes). */
FC_HIDDEN uint64_t fc_tools_hold_ns(void);
FC_HIDDEN CUresult fc_submit(struct fc_stream *s, const struct fc_op *op);
FC_HIDDEN CUresult fc_op_execute(const struct fc_op *op);
/* A program's stream synchronize: graph scan nodes' records held back (FAKECUDA_RECORD_LAG)
 * land at the second after their node ran. */
FC_HIDDEN void fc_records_land(void);
/* Work that a capture cannot record (a graph launch) is refused on a
 * capturing stream, whose capture it invalidates, and on the legacy stream
 * while a blocking stream captures. */
FC_HIDDEN CUresult fc_uncapturable_work(struct fc_stream *s);
/* The check a potentially unsafe call makes while a capture may be active:
 * returns CUDA_SUCCESS or CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED (and then has
 * invalidated the captures the call interfered with). */
FC_HIDDEN CUresult fc_capture_check_unsafe(void);
/* Work on the legacy stream while a blocking stream captures: refused
 * (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT) and the capture lost. */
FC_HIDDEN CUresult fc_legacy_conflict(void);
FC_HIDDEN extern atomic_int fc_active_captures;

/* ---- graph.c ---- */
FC_HIDDEN struct fc_graph *fc_graph_new(void);
FC_HIDDEN void fc_graph_free(struct fc_graph *g);
/* Empties g and makes its handle invalid, keeping the object itself (never
 * freed) so that the program's stale handle stays safe to check. */
FC_HIDDEN void fc_graph_discard(struct fc_graph *g);
/* A graph handle a program may use (not executable, not freed). */
FC_HIDDEN struct fc_graph *fc_graph_from_handle(CUgraph h);
/* Whether node is a live node of g. */
FC_HIDDEN bool fc_graph_has_node(const struct fc_graph *g, const struct fc_node *node);
/* Records op as a new node of g that depends on deps (capture). */
FC_HIDDEN CUresult fc_graph_record(struct fc_graph *g, struct fc_node *const *deps, size_t ndeps,
                                   const struct fc_op *op, struct fc_node **out);

/* ---- memory.c ---- */
FC_HIDDEN CUresult fc_check_device(CUdeviceptr p, size_t n);
/* Memory the device may write: device memory, or registered (mapped) host memory. */
FC_HIDDEN CUresult fc_check_mapped(CUdeviceptr p, size_t n);
FC_HIDDEN CUresult fc_copy2d(const CUDA_MEMCPY2D *c, bool unaligned);
FC_HIDDEN CUresult fc_copy2d_check(const CUDA_MEMCPY2D *c);
FC_HIDDEN void fc_copy2d_to_3d(const CUDA_MEMCPY2D *c, CUDA_MEMCPY3D *out);
FC_HIDDEN CUresult fc_copy3d_check(const CUDA_MEMCPY3D *c);
FC_HIDDEN CUresult fc_copy3d(const CUDA_MEMCPY3D *c);
FC_HIDDEN CUresult fc_memset_check(const struct fc_memset_node_params *m);
FC_HIDDEN CUresult fc_memset(const struct fc_memset_node_params *m);

#endif
