/*
 * Kernel launches. The parameters are packed into one buffer by the
 * kernel's layout (what the real driver copies at launch time), then the
 * launch is submitted to its stream: run at once, or recorded while the
 * stream captures.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static CUresult launch(CUfunction f, struct fc_dim3 grid, struct fc_dim3 block, unsigned int smem,
                       CUstream hStream, void **kernelParams, void **extra, bool per_thread)
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
    unsigned char args[1024]; /* cudump's own kernel takes a 520-byte struct */
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
    struct fc_op op = {.kind = FC_OP_LAUNCH,
                       .launch = {.kernel = k,
                                  .func = by_kernel ? NULL : f,
                                  .kern = by_kernel ? (CUkernel)f : NULL,
                                  .ctx = fc_current_context(),
                                  .grid = grid,
                                  .block = block,
                                  .smem = smem,
                                  .args = args}};
    return fc_submit(s, &op);
}

#define DIM(x, y, z) ((struct fc_dim3){(x), (y), (z)})

CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                        unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                        unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                        void **kernelParams, void **extra)
{
    return launch(f, DIM(gridDimX, gridDimY, gridDimZ), DIM(blockDimX, blockDimY, blockDimZ),
                  sharedMemBytes, hStream, kernelParams, extra, false);
}

CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                             unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                             unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                             void **kernelParams, void **extra)
{
    return launch(f, DIM(gridDimX, gridDimY, gridDimZ), DIM(blockDimX, blockDimY, blockDimZ),
                  sharedMemBytes, hStream, kernelParams, extra, true);
}

static CUresult launch_ex(const CUlaunchConfig *c, CUfunction f, void **kernelParams, void **extra,
                          bool per_thread)
{
    if (!c)
        return CUDA_ERROR_INVALID_VALUE;
    return launch(f, DIM(c->gridDimX, c->gridDimY, c->gridDimZ),
                  DIM(c->blockDimX, c->blockDimY, c->blockDimZ), c->sharedMemBytes, c->hStream,
                  kernelParams, extra, per_thread);
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
                  sharedMemBytes, hStream, kernelParams, NULL, false);
}

CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                        unsigned int gridDimZ, unsigned int blockDimX,
                                        unsigned int blockDimY, unsigned int blockDimZ,
                                        unsigned int sharedMemBytes, CUstream hStream,
                                        void **kernelParams)
{
    return launch(f, DIM(gridDimX, gridDimY, gridDimZ), DIM(blockDimX, blockDimY, blockDimZ),
                  sharedMemBytes, hStream, kernelParams, NULL, true);
}
