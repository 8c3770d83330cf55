/* Kernel functions the shim has seen (functab.c). */
#ifndef CUDUMP_FUNCTAB_H
#define CUDUMP_FUNCTAB_H

#include "shim.h"

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
    struct repeat_cache *repeats; /* plans the shim repeats on its own (repeat.c) */
    /* The counted rules its launches count for, given with `wants` (a torn read
     * while the controller changes rules at the prompt miscounts one launch). */
    _Atomic unsigned nselectors;
    struct proto_selector sel[PROTO_MAX_SELECTORS];
    _Atomic(uintptr_t) module;  /* the CUmodule or CUlibrary it came from; 0: not seen */
    _Atomic bool image_sent;    /* its module image went to the controller (MSG_IMAGE) */
    _Atomic bool got;           /* a CUkernel: a function was got for it once, so its lazy
                                 * load is done (hooks.c: later gets do not wait) */
};

/* The bytes of parameter i of a launch of e, from its kernelParams or from
 * its `extra` buffer; NULL where the launch gave none. */
static inline const unsigned char *func_param_bytes(const struct func_entry *e, void **params,
                                                    void **extra, int i)
{
    if (params)
        return params[i];
    /* extra = {CU_LAUNCH_PARAM_BUFFER_POINTER, buf, CU_LAUNCH_PARAM_BUFFER_SIZE, &size, END} */
    for (void **x = extra; x && *x; x += 2) {
        if ((uintptr_t)x[0] == 1)
            return (const unsigned char *)x[1] + e->param_offset[i];
    }
    return NULL;
}

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

#endif
