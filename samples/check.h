/* Error checks shared by the samples: every CUDA call is checked, and any
 * failure ends the program with status 1 so that a test cannot mistake a
 * broken run for a good one. */
#ifndef SAMPLES_CHECK_H
#define SAMPLES_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#if defined(__CUDACC__)
#include <cuda_runtime.h>

#define CHECK_RT(call)                                                          \
    do {                                                                        \
        cudaError_t err_ = (call);                                              \
        if (err_ != cudaSuccess) {                                              \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__,       \
                    #call, cudaGetErrorName(err_));                             \
            exit(1);                                                            \
        }                                                                       \
    } while (0)

/* A <<<>>> launch reports its errors only through cudaGetLastError. */
#define CHECK_LAUNCH() CHECK_RT(cudaGetLastError())
#endif

/* A C program, or a CUDA one that defines SAMPLES_DRIVER_API, calls the driver. */
#if !defined(__CUDACC__) || defined(SAMPLES_DRIVER_API)
#include <cuda.h>

#define CHECK_CU(call)                                                          \
    do {                                                                        \
        CUresult err_ = (call);                                                 \
        if (err_ != CUDA_SUCCESS) {                                             \
            const char *name_ = NULL;                                           \
            cuGetErrorName(err_, &name_);                                       \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__,       \
                    #call, name_ ? name_ : "unknown error");                    \
            exit(1);                                                            \
        }                                                                       \
    } while (0)
#endif

#define FAIL_IF(cond, ...)                                                      \
    do {                                                                        \
        if (cond) {                                                             \
            fprintf(stderr, __VA_ARGS__);                                       \
            fputc('\n', stderr);                                                \
            exit(1);                                                            \
        }                                                                       \
    } while (0)

#endif
