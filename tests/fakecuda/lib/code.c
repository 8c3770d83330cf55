/*
 * Modules, libraries and the handles of their functions and kernels. Every
 * image gives access to every built-in kernel. A CUkernel and the CUfunction
 * cuKernelGetFunction returns for it are different objects, as with the real
 * driver, so that a tool cannot get away with confusing the two.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

struct fc_handle {
    unsigned int magic;
};

/* One function object and one kernel object per built-in kernel. Handles are
 * addresses inside these arrays, which makes validation a range check. */
static struct fc_handle functions[FC_MAX_BUILTINS];
static struct fc_handle kernels[FC_MAX_BUILTINS];

static const struct fc_builtin *builtin_of(const void *h, const struct fc_handle *table)
{
    uintptr_t p = (uintptr_t)h, lo = (uintptr_t)table;
    if (p < lo || p >= lo + fc_builtin_count * sizeof table[0] || (p - lo) % sizeof table[0])
        return NULL;
    return fc_builtin_at((p - lo) / sizeof table[0]);
}

static size_t index_of(const struct fc_builtin *k)
{
    for (size_t i = 0; i < fc_builtin_count; i++)
        if (fc_builtin_at(i) == k)
            return i;
    return 0;
}

/* A function is its module's, so of one context: one got in another context,
 * or in one that ended, is not launchable (CUDA_ERROR_INVALID_HANDLE; the real
 * driver may crash there instead). */
FC_HIDDEN bool fc_function_in_context(CUfunction f)
{
    const struct fc_builtin *k = builtin_of(f, functions);
    return !k || fc_context_has_function(index_of(k)); /* a CUkernel: of no one context */
}

FC_HIDDEN const struct fc_builtin *fc_launchable(CUfunction f)
{
    const struct fc_builtin *k = builtin_of(f, functions);
    return k ? k : builtin_of(f, kernels);
}

FC_HIDDEN const struct fc_builtin *fc_function_builtin(CUfunction f)
{
    return builtin_of(f, functions);
}

FC_HIDDEN const struct fc_builtin *fc_kernel_builtin(CUkernel k)
{
    return builtin_of(k, kernels);
}

FC_HIDDEN CUfunction fc_function_handle(const struct fc_builtin *k)
{
    return (CUfunction)&functions[index_of(k)];
}

static void *new_object(unsigned int magic)
{
    struct fc_handle *h = malloc(sizeof *h);
    if (h)
        h->magic = magic;
    return h;
}

static bool is_object(const void *p, unsigned int magic)
{
    return p && ((const struct fc_handle *)p)->magic == magic;
}

static CUresult free_object(void *p, unsigned int magic)
{
    if (!is_object(p, magic))
        return CUDA_ERROR_INVALID_HANDLE;
    ((struct fc_handle *)p)->magic = 0;
    free(p);
    return CUDA_SUCCESS;
}

/* FAKECUDA_NO_PTX=1: a driver older than the PTX it is given (cudump's own
 * kernel is PTX for a CUDA 13 driver), which refuses to load PTX text. */
static bool refuses_ptx(const void *image)
{
    const char *on = getenv("FAKECUDA_NO_PTX"), *text = image;
    return on && strcmp(on, "1") == 0 &&
           (strncmp(text, "//", 2) == 0 || strncmp(text, ".version", 8) == 0);
}

/* Whether the PTX of cudump's kernel loaded last waits for the kernel before it. */
static _Atomic bool tools_waits;

FC_HIDDEN bool fc_tools_ptx_waits(void)
{
    return atomic_load(&tools_waits);
}

/* PTX text (never a binary image, which has no end to search to) with cudump's kernel. */
static void note_tools_ptx(const void *image)
{
    const char *text = image;
    if ((strncmp(text, "//", 2) == 0 || strncmp(text, ".version", 8) == 0) &&
        strstr(text, ".entry cudump_tools"))
        atomic_store(&tools_waits, strstr(text, "griddepcontrol.wait") != NULL);
}

CUresult cuModuleLoadData(CUmodule *module, const void *image)
{
    CUresult r = fc_require_context();
    if (r != CUDA_SUCCESS)
        return r;
    if (!module || !image)
        return CUDA_ERROR_INVALID_VALUE;
    if (refuses_ptx(image))
        return FC_ERROR_UNSUPPORTED_PTX_VERSION;
    note_tools_ptx(image);
    *module = new_object(FC_MAGIC_MODULE);
    return *module ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions,
                            int *options, void **optionValues)
{
    (void)numOptions;
    (void)options;
    (void)optionValues;
    return cuModuleLoadData(module, image);
}

CUresult cuModuleLoadFatBinary(CUmodule *module, const void *fatCubin)
{
    return cuModuleLoadData(module, fatCubin);
}

CUresult cuModuleLoad(CUmodule *module, const char *fname)
{
    if (!fname)
        return CUDA_ERROR_INVALID_VALUE;
    FILE *f = fopen(fname, "rb");
    if (!f)
        return CUDA_ERROR_NOT_FOUND;
    fclose(f);
    return cuModuleLoadData(module, fname);
}

CUresult cuFuncGetModule(CUmodule *hmod, CUfunction hfunc)
{
    /* Functions are shared by every module here: there is no one module to name. */
    (void)hmod;
    (void)hfunc;
    return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuModuleUnload(CUmodule hmod)
{
    return free_object(hmod, FC_MAGIC_MODULE);
}

/* FAKECUDA_LAZY_LOAD=1: the first get of each function loads it as the real
 * driver's lazy loading does, waiting for the context (every held stream)
 * with the lock the other threads' copies need (fc_wait_held_locked). */
static void lazy_load(const struct fc_builtin *k)
{
    static _Atomic bool loaded[FC_MAX_BUILTINS];
    const char *on = getenv("FAKECUDA_LAZY_LOAD");
    if (on && *on == '1' && !atomic_exchange(&loaded[index_of(k)], true))
        fc_wait_held_locked();
}

CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
    if (!hfunc || !name)
        return CUDA_ERROR_INVALID_VALUE;
    if (!is_object(hmod, FC_MAGIC_MODULE))
        return CUDA_ERROR_INVALID_HANDLE;
    const struct fc_builtin *k = fc_builtin_find(name);
    /* FAKECUDA_NO_SCAN_LIST: cudump's module is as an older PTX of it (or one whose JIT
     * failed for that kernel): no batched scan in it. */
    if (k && getenv("FAKECUDA_NO_SCAN_LIST") && strcmp(name, "cudump_scan_list") == 0)
        k = NULL;
    if (!k)
        return CUDA_ERROR_NOT_FOUND;
    lazy_load(k);
    fc_context_got_function(index_of(k));
    *hfunc = (CUfunction)&functions[index_of(k)];
    return CUDA_SUCCESS;
}

CUresult cuLibraryLoadData(CUlibrary *library, const void *code, int *jitOptions,
                           void **jitOptionsValues, unsigned int numJitOptions,
                           int *libraryOptions, void **libraryOptionValues,
                           unsigned int numLibraryOptions)
{
    (void)jitOptions;
    (void)jitOptionsValues;
    (void)numJitOptions;
    (void)libraryOptions;
    (void)libraryOptionValues;
    (void)numLibraryOptions;
    /* Libraries are context-independent: only cuInit is needed. */
    if (!atomic_load(&fc_initialized))
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!library || !code)
        return CUDA_ERROR_INVALID_VALUE;
    *library = new_object(FC_MAGIC_LIBRARY);
    return *library ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult cuLibraryUnload(CUlibrary library)
{
    return free_object(library, FC_MAGIC_LIBRARY);
}

CUresult cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name)
{
    if (!pKernel || !name)
        return CUDA_ERROR_INVALID_VALUE;
    if (!is_object(library, FC_MAGIC_LIBRARY))
        return CUDA_ERROR_INVALID_HANDLE;
    const struct fc_builtin *k = fc_builtin_find(name);
    if (!k)
        return CUDA_ERROR_NOT_FOUND;
    *pKernel = (CUkernel)&kernels[index_of(k)];
    return CUDA_SUCCESS;
}

CUresult cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel)
{
    CUresult r = fc_require_context();
    if (r != CUDA_SUCCESS)
        return r;
    if (!pFunc)
        return CUDA_ERROR_INVALID_VALUE;
    const struct fc_builtin *k = builtin_of(kernel, kernels);
    if (!k)
        return CUDA_ERROR_INVALID_HANDLE;
    lazy_load(k);
    fc_context_got_function(index_of(k));
    *pFunc = (CUfunction)&functions[index_of(k)];
    return CUDA_SUCCESS;
}

CUresult cuFuncGetName(const char **name, CUfunction hfunc)
{
    if (!name)
        return CUDA_ERROR_INVALID_VALUE;
    /* A CUkernel cast to CUfunction is not a function here: the real driver
     * answers CUDA_ERROR_INVALID_HANDLE and callers must ask cuKernelGetName. */
    const struct fc_builtin *k = builtin_of(hfunc, functions);
    if (!k)
        return CUDA_ERROR_INVALID_HANDLE;
    *name = k->mangled;
    return CUDA_SUCCESS;
}

CUresult cuKernelGetName(const char **name, CUkernel hfunc)
{
    if (!name)
        return CUDA_ERROR_INVALID_VALUE;
    const struct fc_builtin *k = builtin_of(hfunc, kernels);
    if (!k)
        return CUDA_ERROR_INVALID_HANDLE;
    *name = k->mangled;
    return CUDA_SUCCESS;
}

static CUresult param_info(const struct fc_builtin *k, size_t index, size_t *offset, size_t *size)
{
    if (!k)
        return CUDA_ERROR_INVALID_HANDLE;
    if (index >= k->nparams)
        return CUDA_ERROR_INVALID_VALUE;
    if (offset) {
        /* FAKECUDA_PARAM_BASE=N reports every offset N bytes further on, as a real
         * driver may (an H100 gave 112 for a kernel's first parameter). */
        const char *base = getenv("FAKECUDA_PARAM_BASE");
        *offset = k->offsets[index] + (base ? strtoul(base, NULL, 10) : 0);
    }
    if (size)
        *size = k->sizes[index];
    return CUDA_SUCCESS;
}

CUresult cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t *paramOffset,
                            size_t *paramSize)
{
    return param_info(builtin_of(func, functions), paramIndex, paramOffset, paramSize);
}

CUresult cuKernelGetParamInfo(CUkernel kernel, size_t paramIndex, size_t *paramOffset,
                              size_t *paramSize)
{
    return param_info(builtin_of(kernel, kernels), paramIndex, paramOffset, paramSize);
}
