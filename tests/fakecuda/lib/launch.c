/*
 * Kernel launches. The parameters are packed into one buffer by the
 * kernel's layout (what the real driver copies at launch time), then the
 * launch is submitted to its stream: run at once, or recorded while the
 * stream captures.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "tooljob.h"

static CUresult launch(CUfunction f, struct fc_dim3 grid, struct fc_dim3 block, unsigned int smem,
                       CUstream hStream, void **kernelParams, void **extra, bool per_thread,
                       bool programmatic)
{
    CUresult r = fc_require_context();
    if (r != CUDA_SUCCESS)
        return r;
    const struct fc_builtin *k = fc_launchable(f);
    if (!k)
        return CUDA_ERROR_INVALID_HANDLE;
    /* Only kernelParams is supported: the packed `extra` form is not needed
     * by any test program. */
    if (extra)
        return CUDA_ERROR_NOT_SUPPORTED;
    if (k->nparams > 0 && !kernelParams)
        return CUDA_ERROR_INVALID_VALUE;
    if (!grid.x || !grid.y || !grid.z || !block.x || !block.y || !block.z ||
        (unsigned long long)block.x * block.y * block.z > 1024)
        return CUDA_ERROR_INVALID_VALUE;
    struct fc_stream *s;
    r = fc_resolve_stream(hStream, per_thread, &s);
    if (r != CUDA_SUCCESS)
        return r;
    unsigned char args[4096]; /* CUDA's limit; cudump's own kernel takes a 3 KB struct */
    if (k->args_size > sizeof args)
        return CUDA_ERROR_NOT_SUPPORTED;
    for (unsigned int i = 0; i < k->nparams; i++) {
        if (!kernelParams[i])
            return CUDA_ERROR_INVALID_VALUE;
        memcpy(args + k->offsets[i], kernelParams[i], k->sizes[i]);
    }
    /* A CUkernel passed as the function is recorded as such, which a
     * captured kernel node reports in its `kern` field. */
    bool by_kernel = fc_function_builtin(f) == NULL;
    if (!fc_function_in_context(f))
        return CUDA_ERROR_INVALID_HANDLE;
    struct fc_op op = {.kind = FC_OP_LAUNCH,
                       .launch = {.kernel = k,
                                  .func = by_kernel ? NULL : f,
                                  .kern = by_kernel ? (CUkernel)f : NULL,
                                  .ctx = fc_current_context(),
                                  .grid = grid,
                                  .block = block,
                                  .smem = smem,
                                  .programmatic = programmatic,
                                  .args = args}};
    fc_tools_delay(k);
    fc_pause_launch(k);
    /* As the driver: a launch into a context destroyed meanwhile (by another thread,
     * during the delay above) fails. */
    if (!fc_context_alive(op.launch.ctx))
        return FC_ERROR_INVALID_CONTEXT;
    r = fc_submit(s, &op);
    if (r == CUDA_SUCCESS && strncmp(k->short_name, "cudump_", 7) == 0) /* any of cudump's */
        atomic_fetch_add(&fc_tool_launches, 1);
    volatile uint64_t *mail = NULL;
    volatile uint32_t *gate = r == CUDA_SUCCESS ? fc_tools_hold(k, args, &mail) : NULL;
    if (gate && fc_watchdog()) {
        /* The real driver would end the kernel with CUDA_ERROR_LAUNCH_TIMEOUT and
         * the context with it: a test must never get here. */
        fprintf(stderr, "fakecuda: cudump's kernel held a stream on a device with a watchdog\n");
        abort();
    }
    if (gate)
        fc_hold_gate(s, gate, mail, fc_tools_hold_ns(), 4 /* GATE_RELEASED */);
    return r;
}

_Atomic unsigned long fc_tool_launches;

#define DIM(x, y, z) ((struct fc_dim3){(x), (y), (z)})

CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                        unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                        unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                        void **kernelParams, void **extra)
{
    return launch(f, DIM(gridDimX, gridDimY, gridDimZ), DIM(blockDimX, blockDimY, blockDimZ),
                  sharedMemBytes, hStream, kernelParams, extra, false, false);
}

CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                             unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                             unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                             void **kernelParams, void **extra)
{
    return launch(f, DIM(gridDimX, gridDimY, gridDimZ), DIM(blockDimX, blockDimY, blockDimZ),
                  sharedMemBytes, hStream, kernelParams, extra, true, false);
}

/* A launch with programmatic stream serialization may start while the kernel
 * before it ends (Hopper and later). Below compute capability 9, or with
 * FAKECUDA_NO_PDL=1, the attribute is refused, as a driver that lacks it
 * would; else the launch is marked, and its stream checks it when it is put on
 * it (stream.c, fc_submit). */
static CUresult check_serialization(const CUlaunchConfig *c, bool *programmatic)
{
    *programmatic = false;
    for (unsigned i = 0; c->attrs && i < c->numAttrs; i++)
        if (c->attrs[i].id == CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION) {
            int allowed; /* the value's first member, an int */
            memcpy(&allowed, c->attrs[i].value, sizeof allowed);
            *programmatic = allowed != 0;
        }
    const char *refused = getenv("FAKECUDA_NO_PDL");
    if (*programmatic && (fc_cc_major() < 9 || (refused && strcmp(refused, "1") == 0)))
        return CUDA_ERROR_NOT_SUPPORTED;
    return CUDA_SUCCESS;
}

static CUresult launch_ex(const CUlaunchConfig *c, CUfunction f, void **kernelParams, void **extra,
                          bool per_thread)
{
    if (!c)
        return CUDA_ERROR_INVALID_VALUE;
    bool programmatic;
    CUresult r = check_serialization(c, &programmatic);
    if (r != CUDA_SUCCESS)
        return r;
    return launch(f, DIM(c->gridDimX, c->gridDimY, c->gridDimZ),
                  DIM(c->blockDimX, c->blockDimY, c->blockDimZ), c->sharedMemBytes, c->hStream,
                  kernelParams, extra, per_thread, programmatic);
}

CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams,
                          void **extra)
{
    return launch_ex(config, f, kernelParams, extra, false);
}

CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **kernelParams,
                               void **extra)
{
    return launch_ex(config, f, kernelParams, extra, true);
}

CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                   unsigned int gridDimZ, unsigned int blockDimX,
                                   unsigned int blockDimY, unsigned int blockDimZ,
                                   unsigned int sharedMemBytes, CUstream hStream,
                                   void **kernelParams)
{
    return launch(f, DIM(gridDimX, gridDimY, gridDimZ), DIM(blockDimX, blockDimY, blockDimZ),
                  sharedMemBytes, hStream, kernelParams, NULL, false, false);
}

CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                        unsigned int gridDimZ, unsigned int blockDimX,
                                        unsigned int blockDimY, unsigned int blockDimZ,
                                        unsigned int sharedMemBytes, CUstream hStream,
                                        void **kernelParams)
{
    return launch(f, DIM(gridDimX, gridDimY, gridDimZ), DIM(blockDimX, blockDimY, blockDimZ),
                  sharedMemBytes, hStream, kernelParams, NULL, true, false);
}

/* Function attributes (cuFuncGetAttribute / cuFuncSetAttribute), for the
 * built-ins: fixed answers, except the dynamic shared memory limit a program
 * raises before launching with more than 48 KiB, which is kept per kernel. */
#define FC_MAX_ATTR_KERNELS 32
#define FC_DEFAULT_DYNAMIC_SMEM 49152
#define FC_MAX_OPTIN_DYNAMIC_SMEM 232448 /* 227 KiB, as an H100 allows */
static atomic_int max_dynamic_smem[FC_MAX_ATTR_KERNELS];
static atomic_int smem_carveout[FC_MAX_ATTR_KERNELS];

static int attr_slot(CUfunction f)
{
    const struct fc_builtin *k = fc_launchable(f);
    for (size_t i = 0; k && i < fc_builtin_count && i < FC_MAX_ATTR_KERNELS; i++)
        if (fc_builtin_at(i) == k)
            return (int)i;
    return -1;
}

CUresult cuFuncGetAttribute(int *pi, int attrib, CUfunction hfunc)
{
    if (!atomic_load(&fc_initialized))
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!pi)
        return CUDA_ERROR_INVALID_VALUE;
    int slot = attr_slot(hfunc);
    if (slot < 0)
        return CUDA_ERROR_INVALID_HANDLE;
    int stored;
    /* Both stored attributes are kept plus one, so that zero means "never set". */
    switch (attrib) {
    case FC_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *pi = 1024; break;
    case FC_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES:
    case FC_FUNC_ATTRIBUTE_CONST_SIZE_BYTES:
    case FC_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES: *pi = 0; break;
    case FC_FUNC_ATTRIBUTE_NUM_REGS: *pi = 32; break;
    case FC_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
        stored = atomic_load(&max_dynamic_smem[slot]);
        *pi = stored ? stored - 1 : FC_DEFAULT_DYNAMIC_SMEM;
        break;
    case FC_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
        *pi = atomic_load(&smem_carveout[slot]) - 1;
        break;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

CUresult cuFuncSetAttribute(CUfunction hfunc, int attrib, int value)
{
    if (!atomic_load(&fc_initialized))
        return CUDA_ERROR_NOT_INITIALIZED;
    int slot = attr_slot(hfunc);
    if (slot < 0)
        return CUDA_ERROR_INVALID_HANDLE;
    switch (attrib) {
    case FC_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
        if (value < 0 || value > FC_MAX_OPTIN_DYNAMIC_SMEM)
            return CUDA_ERROR_INVALID_VALUE;
        atomic_store(&max_dynamic_smem[slot], value + 1);
        return CUDA_SUCCESS;
    case FC_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
        if (value < -1 || value > 100)
            return CUDA_ERROR_INVALID_VALUE;
        atomic_store(&smem_carveout[slot], value + 1);
        return CUDA_SUCCESS;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
}
