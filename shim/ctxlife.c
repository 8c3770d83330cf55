/*
 * Contexts that end while the program runs.
 *
 * A context destroyed (cuCtxDestroy), or a primary context reset or released
 * for the last time (cudaDeviceReset), takes with it what was made in it:
 * modules and their functions, streams, device memory, the registration of
 * host memory. The driver does not check a handle of an ended context: on an
 * H200, cudump's kernel launched from the module of a reset primary context
 * failed with CUDA_ERROR_INVALID_HANDLE or crashed the program (SIGSEGV in
 * cuLaunchKernel), and a query of a stream made there crashed in
 * cuStreamQuery.
 *
 * The handle alone does not say whether what cudump made in a context still
 * exists: a primary context keeps its handle across a reset, and a destroyed
 * context's handle comes back for the next one made. Its id does (cuCtxGetId:
 * unique for the process's life, a new one after a reset). Nor do the calls
 * that end contexts: cudaDeviceReset ends the primary context without any
 * call the shim wraps (seen on an H200, CUDA 13). So a key is compared by id
 * each time it is used, which costs one driver call of about 15 ns; the
 * wrappers of the calls that end contexts count the epoch too, and let go of
 * a destroyed handle's entries at once (hooks.c).
 */
#include "ctxlife.h"
#include "interpose.h"

static atomic_uint epoch;

unsigned ctxlife_epoch(void)
{
    return atomic_load_explicit(&epoch, memory_order_acquire);
}

void ctxlife_ended(void)
{
    atomic_fetch_add_explicit(&epoch, 1, memory_order_acq_rel);
}

void ctxlife_reset_after_fork(void)
{
    /* The child has no context of the parent's: the tables that hold keys
     * are emptied, and what it registers it registers anew. */
    atomic_store(&epoch, 0);
}

static unsigned long long id_of(CUcontext ctx)
{
    unsigned long long id = 0;
    if (!real_cuCtxGetId || real_cuCtxGetId(ctx, &id) != CUDA_SUCCESS)
        return 0;
    return id;
}

void ctx_key_set(struct ctx_key *k, CUcontext ctx)
{
    k->ctx = ctx;
    k->id = id_of(ctx);
}

enum ctx_match ctx_key_match(const struct ctx_key *k, CUcontext ctx)
{
    if (k->ctx != ctx)
        return CTX_OTHER;
    if (id_of(ctx) == k->id)
        return CTX_SAME;
    ctxlife_ended();
    return CTX_ENDED;
}
