/*
 * How calls reach the shim.
 *
 * Programs reach the driver three ways (DESIGN.md): by linking libcuda and
 * calling exported names, by dlsym on a libcuda handle, and through
 * cuGetProcAddress, which the CUDA runtime also asks for itself. This file
 * generates one wrapper per real variant from api.h, exports it under the
 * variant's name, and maps real pointers handed out by dlsym and
 * cuGetProcAddress to the wrapper of exactly that variant, chosen by
 * address. A wrapper calls its family's entry through the table the layer
 * above fills (interpose.h): nothing here calls a file above it.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <string.h>

#include "interpose.h"

SHIM_TLS int shim_busy;

/* ---- real pointers ----------------------------------------------------- */

#define DEFINE_REAL(sym, family, ptsz, ...) static _Atomic(family##_fn) real_##sym;
CUDUMP_VARIANTS(DEFINE_REAL)
#undef DEFINE_REAL

/* The shim's own calls of functions it also wraps go to the real pointers. */
#define DEFINE_GETTER(sym, family, ptsz, ...) \
    family##_fn shim_real_##sym(void) { return atomic_load_explicit(&real_##sym, memory_order_relaxed); }
CUDUMP_VARIANTS(DEFINE_GETTER)
#undef DEFINE_GETTER

#define DEFINE_SERVICE(sym, params) sym##_fn real_##sym;
CUDUMP_SERVICES(DEFINE_SERVICE)
#undef DEFINE_SERVICE

typedef void *(*dlsym_fn)(void *, const char *);
static _Atomic(dlsym_fn) real_dlsym;

static dlsym_fn get_real_dlsym(void)
{
    dlsym_fn fn = atomic_load_explicit(&real_dlsym, memory_order_acquire);
    if (fn)
        return fn;
    /* dlvsym is not overridden, so this cannot recurse. The default
     * version of dlsym moved to GLIBC_2.34 when libdl merged into libc. */
    fn = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (!fn)
        fn = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    atomic_store_explicit(&real_dlsym, fn, memory_order_release);
    return fn;
}

static pthread_mutex_t resolve_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic bool resolved;

bool shim_resolve_real(void)
{
    if (atomic_load_explicit(&resolved, memory_order_acquire))
        return true;
    pthread_mutex_lock(&resolve_lock);
    if (!atomic_load_explicit(&resolved, memory_order_relaxed)) {
        /* Only look at a libcuda that the program already loaded: loading it
         * ourselves from inside dlsym would be heavy and surprising. */
        void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
        if (!h)
            h = dlopen("libcuda.so", RTLD_NOW | RTLD_NOLOAD);
        dlsym_fn look = get_real_dlsym();
        if (h && look) {
#define RESOLVE(sym, family, ptsz, ...) \
    atomic_store_explicit(&real_##sym, (family##_fn)look(h, #sym), memory_order_relaxed);
            CUDUMP_VARIANTS(RESOLVE)
#undef RESOLVE
#define RESOLVE_SERVICE(sym, params) real_##sym = (sym##_fn)look(h, #sym);
            CUDUMP_SERVICES(RESOLVE_SERVICE)
#undef RESOLVE_SERVICE
            atomic_store_explicit(&resolved, true, memory_order_release);
        }
    }
    pthread_mutex_unlock(&resolve_lock);
    return atomic_load_explicit(&resolved, memory_order_acquire);
}

/* ---- generated wrappers ------------------------------------------------ */

/* The shim's own driver calls (shim_busy) go straight to the driver; the
 * program's go to the family's entry, told whether the variant is a
 * per-thread-default-stream one. */
#define DEFINE_WRAPPER(sym, family, ptsz, params, args)                                \
    static CUresult wrap_##sym params                                                  \
    {                                                                                  \
        family##_fn real = atomic_load_explicit(&real_##sym, memory_order_relaxed);    \
        if (__builtin_expect(!real, 0)) {                                              \
            if (!shim_resolve_real())                                                  \
                return CUDA_ERROR_NOT_INITIALIZED;                                     \
            real = atomic_load_explicit(&real_##sym, memory_order_relaxed);            \
            if (!real)                                                                 \
                return CUDA_ERROR_NOT_FOUND;                                           \
        }                                                                              \
        if (shim_busy)                                                                 \
            return real args;                                                          \
        return shim_entries.family(real, ptsz CUDUMP_TAIL args);                      \
    }                                                                                  \
    SHIM_EXPORT CUresult sym params __attribute__((alias("wrap_" #sym)));

CUDUMP_VARIANTS(DEFINE_WRAPPER)
#undef DEFINE_WRAPPER

/* ---- real pointer -> wrapper ------------------------------------------- */

void *shim_wrap_pointer(void *real)
{
    if (!real || !shim_resolve_real())
        return real;
#define MATCH(sym, family, ptsz, ...)                                               \
    if (real == (void *)atomic_load_explicit(&real_##sym, memory_order_relaxed)) \
        return (void *)wrap_##sym;
    CUDUMP_VARIANTS(MATCH)
#undef MATCH
    return real;
}

/* ---- dlsym ------------------------------------------------------------- */

static inline bool is_driver_name(const char *name)
{
    /* cu + capital letter: cuLaunchKernel, not cudnnCreate or cublasSgemm. */
    return name && name[0] == 'c' && name[1] == 'u' && name[2] >= 'A' && name[2] <= 'Z';
}

__attribute__((noinline)) static void *dlsym_driver(dlsym_fn look, void *handle, const char *name)
{
    return shim_wrap_pointer(look(handle, name));
}

/*
 * Every dlsym in the process lands here, so it must be cheap, and it must
 * not become the caller of the real dlsym for lookups whose meaning depends
 * on the caller (RTLD_NEXT): those, and every name that is not a driver
 * function, leave through a tail call, which keeps the original return
 * address as the one glibc sees.
 */
SHIM_EXPORT void *dlsym(void *handle, const char *name)
{
    dlsym_fn look = atomic_load_explicit(&real_dlsym, memory_order_acquire);
    if (__builtin_expect(!look, 0))
        look = get_real_dlsym();
    if (__builtin_expect(handle != RTLD_NEXT && is_driver_name(name), 0))
        return dlsym_driver(look, handle, name);
    return look(handle, name);
}

/* ---- cuGetProcAddress --------------------------------------------------- */

CUresult hook_cuGetProcAddress(cuGetProcAddress_fn real, const char *symbol, void **pfn,
                               int cudaVersion, cuuint64_t flags)
{
    CUresult rc = real(symbol, pfn, cudaVersion, flags);
    if (rc == CUDA_SUCCESS && pfn)
        *pfn = shim_wrap_pointer(*pfn);
    return rc;
}

CUresult hook_cuGetProcAddress_v2(cuGetProcAddress_v2_fn real, const char *symbol, void **pfn,
                                  int cudaVersion, cuuint64_t flags,
                                  CUdriverProcAddressQueryResult *status)
{
    CUresult rc = real(symbol, pfn, cudaVersion, flags, status);
    if (rc == CUDA_SUCCESS && pfn)
        *pfn = shim_wrap_pointer(*pfn);
    return rc;
}
