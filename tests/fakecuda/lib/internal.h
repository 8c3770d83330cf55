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
};

/* ---- init.c ---- */
extern atomic_bool fc_initialized;
FC_HIDDEN CUresult fc_require_context(void);

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
};

FC_HIDDEN extern const size_t fc_builtin_count;
FC_HIDDEN const struct fc_builtin *fc_builtin_at(size_t i);
FC_HIDDEN const struct fc_builtin *fc_builtin_find(const char *mangled);
FC_HIDDEN void fc_builtin_run(const struct fc_builtin *k, const unsigned char *args,
                              struct fc_dim3 grid, struct fc_dim3 block);

/* ---- code.c: function and kernel handles ---- */
FC_HIDDEN const struct fc_builtin *fc_launchable(CUfunction f);

/* ---- capture.c: streams, capture, graphs ---- */
struct fc_graph;

struct fc_stream {
    unsigned int magic;
    unsigned int flags;
    bool legacy;
    /* Capture state, guarded by the capture lock. */
    CUstreamCaptureStatus status;
    CUstreamCaptureMode mode;
    pthread_t owner;
    struct fc_graph *graph;
};

/* An operation submitted to a stream: run now, or recorded into a graph. */
enum fc_op_kind { FC_OP_LAUNCH, FC_OP_COPY, FC_OP_COPY2D, FC_OP_MEMSET };

struct fc_op {
    enum fc_op_kind kind;
    /* FC_OP_LAUNCH */
    const struct fc_builtin *kernel;
    struct fc_dim3 grid, block;
    unsigned char *args; /* owned copy of the packed parameters */
    /* FC_OP_COPY / FC_OP_MEMSET */
    void *dst;
    const void *src;
    size_t bytes;
    unsigned char value;
    /* FC_OP_COPY2D */
    CUDA_MEMCPY2D copy2d;
};

FC_HIDDEN CUresult fc_resolve_stream(CUstream h, bool per_thread, struct fc_stream **out);
FC_HIDDEN CUresult fc_submit(struct fc_stream *s, const struct fc_op *op);
FC_HIDDEN void fc_op_execute(const struct fc_op *op);
/* The check a potentially unsafe call makes while a capture may be active:
 * returns CUDA_SUCCESS or CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED (and then has
 * invalidated the captures the call interfered with). */
FC_HIDDEN CUresult fc_capture_check_unsafe(void);
FC_HIDDEN extern atomic_int fc_active_captures;

/* ---- memory.c ---- */
FC_HIDDEN CUresult fc_copy2d(const CUDA_MEMCPY2D *c, bool unaligned);
FC_HIDDEN CUresult fc_copy2d_check(const CUDA_MEMCPY2D *c);

#endif
