/*
 * What the driver calls on a launch's path cost on this host: the calls the
 * shim makes around a launch it scans (the context, its id, the capture mode,
 * whether the stream captures), each timed over a million calls; then two
 * launches a step, an empty kernel and one with a 3.6 KB parameter (as large
 * as cudump's kernel's), made by one thread, or the second made by another
 * thread after the first (as the launcher thread does, shim/handoff.c).
 *
 * build: gcc -O2 -std=c11 -I/usr/local/cuda/include -o driver_calls bench/driver_calls.c \
 *            -L/usr/local/cuda/lib64/stubs -lcuda -lpthread
 * usage: ./driver_calls   (needs a GPU; prints ns a call, us a step)
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define CHECK(x)                                                           \
    do {                                                                   \
        CUresult rc_ = (x);                                                \
        if (rc_ != CUDA_SUCCESS) {                                         \
            fprintf(stderr, "%s failed: %d\n", #x, (int)rc_);              \
            return 1;                                                      \
        }                                                                  \
    } while (0)

enum { CALLS = 1000000, STEPS = 20000, BIG = 3600 };

/* An empty kernel with one parameter of `bytes` bytes, as PTX. */
static const char ptx[] =
    ".version 7.0\n.target sm_75\n.address_size 64\n"
    ".visible .entry small(.param .u64 p) { ret; }\n"
    ".visible .entry big(.param .align 8 .b8 p[3600]) { ret; }\n";

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static CUcontext ctx;
static CUstream stream;
static CUfunction small_fn, big_fn;
static _Atomic unsigned posted, made;
static _Atomic int quit;
static unsigned char big_param[BIG];

static CUresult launch(CUfunction fn)
{
    unsigned long long p = 0;
    void *params[] = {fn == big_fn ? (void *)big_param : (void *)&p};
    return cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, stream, params, NULL);
}

/* The second launch of each step, made by this thread when the first is made. */
static void *second(void *arg)
{
    (void)arg;
    cuCtxSetCurrent(ctx);
    unsigned seen = 0;
    while (!atomic_load(&quit)) {
        unsigned p = atomic_load_explicit(&posted, memory_order_acquire);
        if (p == seen)
            continue;
        launch(big_fn);
        seen = p;
        atomic_store_explicit(&made, p, memory_order_release);
    }
    return NULL;
}

/* us a step of the loop: the program's launch, then cudump's (`handed`: made by
 * the other thread, which the next step waits for before its own launch). */
static double steps(int handed, double work_ns)
{
    cuStreamSynchronize(stream);
    const unsigned base = atomic_load(&made);
    double t = now_ns();
    for (unsigned s = base + 1; s <= base + STEPS; s++) {
        if (handed)
            while (atomic_load_explicit(&made, memory_order_acquire) != s - 1)
                ;
        launch(small_fn);
        if (handed)
            atomic_store_explicit(&posted, s, memory_order_release);
        else
            launch(big_fn);
        /* The program's own work between two launches. */
        for (double until = now_ns() + work_ns; now_ns() < until;)
            ;
    }
    while (handed && atomic_load(&made) != base + STEPS)
        ;
    double us = (now_ns() - t) / 1e3 / STEPS;
    cuStreamSynchronize(stream);
    return us;
}

int main(void)
{
    CUdevice dev;
    CUmodule mod;
    setvbuf(stdout, NULL, _IOLBF, 0);
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));
    CHECK(cuModuleLoadData(&mod, ptx));
    CHECK(cuModuleGetFunction(&small_fn, mod, "small"));
    CHECK(cuModuleGetFunction(&big_fn, mod, "big"));
    CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    char name[128];
    CHECK(cuDeviceGetName(name, sizeof name, dev));
    printf("device: %s\n", name);

    double t;
    CUcontext c;
    unsigned long long id;
    CUstreamCaptureMode mode;
    CUstreamCaptureStatus status;
    CUdevice d;
#define TIME(label, call)                                                  \
    do {                                                                   \
        t = now_ns();                                                      \
        for (int i = 0; i < CALLS; i++)                                    \
            call;                                                          \
        printf("%-44s %7.1f ns\n", label, (now_ns() - t) / CALLS);         \
    } while (0)
    TIME("cuCtxGetCurrent", cuCtxGetCurrent(&c));
    TIME("cuCtxGetId", cuCtxGetId(ctx, &id));
    TIME("cuCtxGetDevice", cuCtxGetDevice(&d));
    TIME("cuStreamGetCtx", cuStreamGetCtx(stream, &c));
    TIME("cuStreamIsCapturing", cuStreamIsCapturing(stream, &status));
    TIME("cuThreadExchangeStreamCaptureMode (x2)",
         (mode = CU_STREAM_CAPTURE_MODE_RELAXED, cuThreadExchangeStreamCaptureMode(&mode),
          cuThreadExchangeStreamCaptureMode(&mode)));
    TIME("cuCtxSetCurrent (the current one)", cuCtxSetCurrent(ctx));

    pthread_t th;
    pthread_create(&th, NULL, second, NULL);
    printf("%-44s %9s %9s %9s\n", "us a step (the program's launch + cudump's)", "no work",
           "8 us work", "one launch");
    for (int round = 0; round < 3; round++) {
        double one = steps(0, 0), one_w = steps(0, 8000), two = steps(1, 0), two_w = steps(1, 8000);
        /* The program's launch alone, with its work. */
        cuStreamSynchronize(stream);
        double t0 = now_ns();
        for (int s = 0; s < STEPS; s++) {
            launch(small_fn);
            for (double until = now_ns() + 8000; now_ns() < until;)
                ;
        }
        double alone = (now_ns() - t0) / 1e3 / STEPS;
        cuStreamSynchronize(stream);
        printf("round %d: %-35s %9.2f %9.2f %9.2f\n", round, "both on one thread", one, one_w,
               alone);
        printf("round %d: %-35s %9.2f %9.2f\n", round, "the second on another thread", two, two_w);
    }
    atomic_store(&quit, 1);
    pthread_join(th, NULL);
    return 0;
}
