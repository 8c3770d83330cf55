/* Initialisation, the one device, contexts and error strings. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

FC_HIDDEN atomic_bool fc_initialized;
FC_HIDDEN atomic_int fc_fault;
FC_HIDDEN atomic_int fc_fault_pending;

FC_HIDDEN void fc_set_fault(CUresult error)
{
    int none = 0;
    atomic_compare_exchange_strong(&fc_fault_pending, &none, error); /* the first one stays */
}

FC_HIDDEN CUresult fc_fault_noticed(void)
{
    int pending = atomic_load(&fc_fault_pending), none = 0;
    if (pending)
        atomic_compare_exchange_strong(&fc_fault, &none, pending);
    return atomic_load(&fc_fault);
}

struct fc_context {
    unsigned int magic;
    bool primary;
    _Atomic unsigned long long id;
    _Atomic uint32_t functions; /* built-in functions got in it, a bit each */
};
_Static_assert(FC_MAX_BUILTINS <= 32, "a bit per built-in function");

/* One primary context, as for the one device; created contexts are separate
 * objects so that a program can tell them apart. */
static struct fc_context primary_ctx = {FC_MAGIC_CONTEXT, true, 1, 0};
static atomic_int primary_refs;
static _Thread_local struct fc_context *current_ctx;
static _Atomic unsigned long long last_id = 1;
static struct fc_context *_Atomic last_destroyed;

static unsigned long long new_id(void)
{
    return atomic_fetch_add(&last_id, 1) + 1;
}

/* What was made in a context ends with it; a primary context comes back under
 * the same handle as a new context (a new id), as on the real driver. */
static void end_context(struct fc_context *c)
{
    fc_registrations_end(atomic_load(&c->id));
    atomic_store(&c->functions, 0);
    if (c->primary)
        atomic_store(&c->id, new_id());
}

FC_HIDDEN unsigned long long fc_context_id_of(CUcontext ctx)
{
    return ctx ? atomic_load(&((struct fc_context *)ctx)->id) : 0;
}

FC_HIDDEN unsigned long long fc_context_id(void)
{
    return current_ctx ? atomic_load(&current_ctx->id) : 0;
}

FC_HIDDEN void fc_context_got_function(size_t index)
{
    if (current_ctx)
        atomic_fetch_or(&current_ctx->functions, 1u << index);
}

FC_HIDDEN bool fc_context_has_function(size_t index)
{
    return current_ctx && (atomic_load(&current_ctx->functions) >> index & 1u);
}

#define REQUIRE_INIT()                                                                             \
    do {                                                                                           \
        if (!atomic_load(&fc_initialized))                                                         \
            return CUDA_ERROR_NOT_INITIALIZED;                                                     \
    } while (0)

FC_HIDDEN CUresult fc_require_context(void)
{
    if (!atomic_load(&fc_initialized))
        return CUDA_ERROR_NOT_INITIALIZED;
    /* The real driver needs a current context for memory and launches; a
     * program (or a tool inside it) that forgets one must fail here too. */
    if (!current_ctx)
        return FC_ERROR_INVALID_CONTEXT;
    return atomic_load(&fc_fault);
}

FC_HIDDEN bool fc_context_alive(CUcontext ctx)
{
    const struct fc_context *c = (const struct fc_context *)ctx;
    return !c || __atomic_load_n(&c->magic, __ATOMIC_ACQUIRE) == FC_MAGIC_CONTEXT;
}

FC_HIDDEN CUcontext fc_current_context(void)
{
    return (CUcontext)current_ctx;
}

CUresult cuInit(unsigned int Flags)
{
    if (Flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    atomic_store(&fc_initialized, true);
    return CUDA_SUCCESS;
}

CUresult cuDriverGetVersion(int *driverVersion)
{
    /* Works before cuInit, like the real one. */
    if (!driverVersion)
        return CUDA_ERROR_INVALID_VALUE;
    *driverVersion = 13000;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
    REQUIRE_INIT();
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    if (ordinal != 0)
        return FC_ERROR_INVALID_DEVICE;
    *device = 0;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int *count)
{
    REQUIRE_INIT();
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    *count = 1;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
    REQUIRE_INIT();
    if (!name || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (dev != 0)
        return FC_ERROR_INVALID_DEVICE;
    static const char fake_name[] = "cudump host-memory stand-in";
    size_t n = (size_t)len - 1 < sizeof fake_name - 1 ? (size_t)len - 1 : sizeof fake_name - 1;
    memcpy(name, fake_name, n);
    name[n] = '\0';
    return CUDA_SUCCESS;
}

/* Only what the shim asks: whether kernels are ended after a while (a display's
 * watchdog), which FAKECUDA_WATCHDOG=1 turns on; other attributes are not known. */
CUresult cuDeviceGetAttribute(int *value, int attribute, CUdevice dev)
{
    REQUIRE_INIT();
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    if (dev != 0)
        return FC_ERROR_INVALID_DEVICE;
    if (attribute == FC_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR) {
        *value = fc_cc_major();
        return CUDA_SUCCESS;
    }
    if (attribute != FC_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT)
        return CUDA_ERROR_INVALID_VALUE;
    *value = fc_watchdog();
    return CUDA_SUCCESS;
}

FC_HIDDEN int fc_cc_major(void)
{
    const char *major = getenv("FAKECUDA_CC_MAJOR");
    return major && *major ? atoi(major) : 9;
}

FC_HIDDEN int fc_watchdog(void)
{
    const char *on = getenv("FAKECUDA_WATCHDOG");
    return on && strcmp(on, "1") == 0;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    REQUIRE_INIT();
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    if (dev != 0)
        return FC_ERROR_INVALID_DEVICE;
    atomic_fetch_add(&primary_refs, 1);
    *pctx = (CUcontext)&primary_ctx;
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    REQUIRE_INIT();
    if (dev != 0)
        return FC_ERROR_INVALID_DEVICE;
    int was = atomic_fetch_sub(&primary_refs, 1);
    if (was <= 0) {
        atomic_fetch_add(&primary_refs, 1);
        return FC_ERROR_INVALID_CONTEXT;
    }
    if (was == 1)
        end_context(&primary_ctx);
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease(CUdevice dev)
{
    return cuDevicePrimaryCtxRelease_v2(dev);
}

CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    REQUIRE_INIT();
    if (dev != 0)
        return FC_ERROR_INVALID_DEVICE;
    /* As the real driver's: the retains stay (a reset does not release). */
    end_context(&primary_ctx);
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxReset(CUdevice dev)
{
    return cuDevicePrimaryCtxReset_v2(dev);
}

/* The reset the CUDA runtime's cudaDeviceReset makes on the real driver: through
 * the driver's private export table, so no call a tool can wrap (seen on an H200). */
CUresult fcPrivatePrimaryCtxReset(CUdevice dev)
{
    return cuDevicePrimaryCtxReset_v2(dev);
}

CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
    REQUIRE_INIT();
    if (dev != 0)
        return FC_ERROR_INVALID_DEVICE;
    if (!flags || !active)
        return CUDA_ERROR_INVALID_VALUE;
    *flags = 0;
    *active = atomic_load(&primary_refs) > 0;
    return CUDA_SUCCESS;
}

CUresult cuCtxGetId(CUcontext ctx, unsigned long long *id)
{
    REQUIRE_INIT();
    struct fc_context *c = ctx ? (struct fc_context *)ctx : current_ctx;
    if (!id)
        return CUDA_ERROR_INVALID_VALUE;
    if (!c)
        return FC_ERROR_INVALID_CONTEXT;
    if (__atomic_load_n(&c->magic, __ATOMIC_ACQUIRE) != FC_MAGIC_CONTEXT)
        return FC_ERROR_CONTEXT_IS_DESTROYED;
    *id = atomic_load(&c->id);
    return CUDA_SUCCESS;
}

static CUresult create_context(CUcontext *pctx, CUdevice dev)
{
    REQUIRE_INIT();
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    if (dev != 0)
        return FC_ERROR_INVALID_DEVICE;
    /* FAKECUDA_REUSE_CONTEXTS=1: the last context destroyed comes back as the next
     * one made, under the same handle, as the real driver's did on an H200. */
    const char *reuse = getenv("FAKECUDA_REUSE_CONTEXTS");
    struct fc_context *c = reuse && *reuse == '1' ? atomic_exchange(&last_destroyed, NULL) : NULL;
    if (c)
        memset(c, 0, sizeof *c);
    else
        c = calloc(1, sizeof *c);
    if (!c)
        return CUDA_ERROR_OUT_OF_MEMORY;
    c->magic = FC_MAGIC_CONTEXT;
    atomic_store(&c->id, new_id());
    current_ctx = c;
    *pctx = (CUcontext)c;
    return CUDA_SUCCESS;
}

CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    (void)flags;
    return create_context(pctx, dev);
}

CUresult cuCtxCreate_v3(CUcontext *pctx, void *paramsArray, int numParams, unsigned int flags,
                        CUdevice dev)
{
    (void)paramsArray;
    (void)numParams;
    (void)flags;
    return create_context(pctx, dev);
}

CUresult cuCtxCreate_v4(CUcontext *pctx, void *ctxCreateParams, unsigned int flags, CUdevice dev)
{
    (void)ctxCreateParams;
    (void)flags;
    return create_context(pctx, dev);
}

CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    REQUIRE_INIT();
    struct fc_context *c = (struct fc_context *)ctx;
    if (!c || c->magic != FC_MAGIC_CONTEXT || c->primary)
        return FC_ERROR_INVALID_CONTEXT;
    if (current_ctx == c)
        current_ctx = NULL;
    end_context(c);
    atomic_store(&last_destroyed, c);
    /* Kept, not freed: a launch another thread was making in it meanwhile must find it
     * destroyed (fc_context_alive), not read freed memory. A test program makes few. */
    __atomic_store_n(&c->magic, 0, __ATOMIC_RELEASE);
    return CUDA_SUCCESS;
}

CUresult cuCtxSetCurrent(CUcontext ctx)
{
    REQUIRE_INIT();
    struct fc_context *c = (struct fc_context *)ctx;
    if (c && c->magic != FC_MAGIC_CONTEXT)
        return FC_ERROR_INVALID_CONTEXT;
    current_ctx = c;
    return CUDA_SUCCESS;
}

/* The thread's context stack below the current context (cuCtxPushCurrent): a tool
 * enters a context for a while and gives the thread's own back. */
static _Thread_local struct fc_context *ctx_stack[8];
static _Thread_local unsigned ctx_depth;

CUresult cuCtxPushCurrent_v2(CUcontext ctx)
{
    REQUIRE_INIT();
    struct fc_context *c = (struct fc_context *)ctx;
    if (!c || c->magic != FC_MAGIC_CONTEXT)
        return FC_ERROR_INVALID_CONTEXT;
    if (ctx_depth == sizeof ctx_stack / sizeof *ctx_stack)
        return CUDA_ERROR_OUT_OF_MEMORY;
    ctx_stack[ctx_depth++] = current_ctx;
    current_ctx = c;
    return CUDA_SUCCESS;
}

CUresult cuCtxPopCurrent_v2(CUcontext *pctx)
{
    REQUIRE_INIT();
    if (!current_ctx)
        return FC_ERROR_INVALID_CONTEXT;
    if (pctx)
        *pctx = (CUcontext)current_ctx;
    current_ctx = ctx_depth ? ctx_stack[--ctx_depth] : NULL;
    return CUDA_SUCCESS;
}

CUresult cuCtxGetCurrent(CUcontext *pctx)
{
    REQUIRE_INIT();
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    *pctx = (CUcontext)current_ctx;
    return CUDA_SUCCESS;
}

CUresult cuCtxGetDevice(CUdevice *device)
{
    CUresult r = fc_require_context();
    if (r != CUDA_SUCCESS)
        return r;
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    *device = 0; /* the one device */
    return CUDA_SUCCESS;
}

CUresult cuCtxSynchronize(void)
{
    CUresult r = fc_require_context();
    if (r != CUDA_SUCCESS)
        return r;
    /* Work runs synchronously, so there is nothing to wait for but held
     * streams; and a sync during a capture breaks it, as on the real driver. */
    fc_wait_held(NULL);
    atomic_fetch_add(&fc_ctx_syncs, 1);
    if ((r = fc_fault_noticed()) != CUDA_SUCCESS)
        return r;
    return fc_capture_check_unsafe();
}

_Atomic unsigned long fc_ctx_syncs;

CUresult cuCtxSynchronize_v2(CUcontext ctx)
{
    struct fc_context *c = (struct fc_context *)ctx;
    if (c && c->magic != FC_MAGIC_CONTEXT)
        return FC_ERROR_INVALID_CONTEXT;
    return cuCtxSynchronize();
}

struct fc_error_text {
    int code;
    const char *name;
    const char *text;
};

static const struct fc_error_text error_texts[] = {
    {0, "CUDA_SUCCESS", "no error"},
    {1, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {200, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {201, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {400, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {401, "CUDA_ERROR_ILLEGAL_STATE", "the operation cannot be performed in the present state"},
    {402, "CUDA_ERROR_LOSSY_QUERY",
     "attempted introspection would be semantically lossy"},
    {500, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {700, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
    {709, "CUDA_ERROR_CONTEXT_IS_DESTROYED", "context is destroyed"},
    {712, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
     "part or all of the requested memory range is already mapped"},
    {713, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED",
     "pointer does not correspond to a registered memory region"},
    {801, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {900, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
     "operation not permitted when stream is capturing"},
    {901, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
     "operation failed due to a previous error during capture"},
    {906, "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT",
     "operation would make the legacy stream depend on a capturing blocking stream"},
    {908, "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD",
     "attempt to terminate a thread-local capture sequence from another thread"},
    {910, "CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE",
     "the graph update was not performed because it included changes which violated "
     "constraints specific to instantiated graph update"},
    {999, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

static const struct fc_error_text *find_error(CUresult error)
{
    for (size_t i = 0; i < sizeof error_texts / sizeof error_texts[0]; i++)
        if (error_texts[i].code == error)
            return &error_texts[i];
    return NULL;
}

CUresult cuGetErrorName(CUresult error, const char **pStr)
{
    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    const struct fc_error_text *e = find_error(error);
    *pStr = e ? e->name : NULL;
    return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuGetErrorString(CUresult error, const char **pStr)
{
    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    const struct fc_error_text *e = find_error(error);
    *pStr = e ? e->text : NULL;
    return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
