/*
 * Helpers shared by the test programs: checked driver calls and the summary
 * lines tests compare ("launches NAME=COUNT ..." and "allocs N bytes B").
 */
#ifndef FAKECUDA_PROGCOMMON_H
#define FAKECUDA_PROGCOMMON_H

#define _POSIX_C_SOURCE 200809L
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fakecuda.h"

/* Any bytes do as a module image for the stand-in; on a real driver these
 * programs are not meant to run. */
static const char prog_image[] = "fakecuda test image";

#define CHECK(call)                                                                                \
    do {                                                                                           \
        CUresult check_r_ = (call);                                                                \
        if (check_r_ != CUDA_SUCCESS) {                                                            \
            fprintf(stderr, "%s:%d: %s failed: %d\n", __FILE__, __LINE__, #call, (int)check_r_);   \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

#define EXPECT(call, code)                                                                         \
    do {                                                                                           \
        CUresult expect_r_ = (call);                                                               \
        if (expect_r_ != (code)) {                                                                 \
            fprintf(stderr, "%s:%d: %s returned %d, expected %d\n", __FILE__, __LINE__, #call,    \
                    (int)expect_r_, (int)(code));                                                  \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fputc('\n', stderr);                                                                       \
        exit(1);                                                                                   \
    } while (0)

/* The start most programs share: the driver, the device's primary context made
 * current, and the test image loaded as a module. */
static inline CUmodule prog_start(void)
{
    CUcontext ctx;
    CUmodule mod;
    CHECK(cuInit(0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
    CHECK(cuCtxSetCurrent(ctx));
    CHECK(cuModuleLoadData(&mod, prog_image));
    return mod;
}

/* n floats: start, start + step, start + 2 step, ... */
static inline void prog_floats(float *out, int n, float start, float step)
{
    for (int i = 0; i < n; i++)
        out[i] = start + step * (float)i;
}

/* Copies n floats of buffer `from` back and prints `sum S` (their sum). */
static inline void prog_print_sum(CUdeviceptr from, float *host, int n)
{
    CHECK(cuMemcpyDtoH_v2(host, from, (size_t)n * sizeof *host));
    double sum = 0;
    for (int j = 0; j < n; j++)
        sum += host[j];
    printf("sum %.4f\n", sum);
}

#define TALLY_MAX 8

struct tally {
    const char *names[TALLY_MAX];
    unsigned long counts[TALLY_MAX];
    int n;
    unsigned long allocs;
    unsigned long long bytes;
};

static inline void tally_launch(struct tally *t, const char *name, unsigned long count)
{
    for (int i = 0; i < t->n; i++) {
        if (strcmp(t->names[i], name) == 0) {
            t->counts[i] += count;
            return;
        }
    }
    if (t->n < TALLY_MAX) {
        t->names[t->n] = name;
        t->counts[t->n++] = count;
    }
}

static inline void tally_alloc(struct tally *t, size_t bytes)
{
    t->allocs++;
    t->bytes += bytes;
}

static inline void tally_print(const struct tally *t)
{
    printf("launches");
    for (int i = 0; i < t->n; i++)
        printf(" %s=%lu", t->names[i], t->counts[i]);
    printf("\nallocs %lu bytes %llu\n", t->allocs, t->bytes);
    fflush(stdout);
}

#endif
