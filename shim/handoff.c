/*
 * cudump's kernel after a launch, launched by a thread of the shim while the
 * program goes on.
 *
 * A launch made with a kept plan has cudump's kernel launched after it (its
 * scans or digests, with those of the next launch made ahead). That is one
 * more cuLaunchKernel on the program's thread for each of its own: about as
 * much CPU as the program's launch (4-6 us on an H200 host), which a program
 * that is bound by its launches (PyTorch's eager mode on a small model) pays
 * in full. Where the launching thread does not wait for that kernel (the
 * gated scans of --check-nan, digests), it hands the launch to the launcher
 * thread and returns to the program, which does its own work between two
 * launches (PyTorch: 8 us and more) while the launcher makes it. On by
 * default (--no-hand-off turns it off): ResNet-18 under --check-nan ran at
 * 1.09x bare with it and 1.57x without, on a host where the model is bound by
 * the CPU (docs/performance.md). The cost is a core, which the launcher spins
 * while the program launches. On other hosts the same program ran slower
 * with it than without, so it is tried against the launching thread making
 * the launches, stretch by stretch, and the faster way kept (handtune.h).
 *
 * Order is kept by one rule: at most one launch is handed over at a time, and
 * every wrapped call of the program (but those that work on the host alone)
 * waits until it has been made before it does anything (handoff_fence,
 * interpose.c). The launches, copies, memsets, events, waits, queries, host
 * functions and stream memory operations are all wrapped, so whatever the
 * program does next with them, on any stream and from any thread, reaches the
 * driver after cudump's kernel, as if the launching thread had made it. So
 * are the calls that end a context (destroyed, its primary released or
 * reset: the launcher must not launch in a context going away) and an
 * external semaphore's signal (another API's word that the stream's work is
 * done). Only launches on a stream that every thread names alike are handed
 * over: not a per-thread default stream. The calls the shim does not wrap
 * need no order behind it: array copies but cuMemcpyAtoD (wrapped) write no
 * memory cudump's kernel reads, and cuMemPrefetchAsync changes no byte. While
 * the launcher is blocked in the driver (a launch queue full behind a stream
 * held by a host function that waits for a lock), every thread's next call
 * waits with it.
 *
 * The launcher spins for SPIN_NS after each launch, since a program that
 * launches launches again within microseconds and a sleeping thread takes
 * tens of them to wake; then it sleeps on a futex until the next hand-over.
 * A program thread that finds the launch not yet made spins for it too: the
 * launcher is making it, which takes microseconds.
 *
 * The counters and the one launch in hand are process-wide: there is one
 * launcher per process, and every thread's calls are ordered by it.
 */
#include <fcntl.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "channel.h"
#include "handoff.h"
#include "handtune.h"
#include "util.h"

enum {
    SPIN_NS = 200000,           /* the launcher's spin after a launch, before it sleeps */
    FENCE_SPIN_NS = 50000,      /* a waiting call's spin, before it yields between looks */
};

_Atomic unsigned handoff_posted, handoff_made;

/* The launch in hand: written by the thread that hands it over (under the
 * staging lock, after handoff_made caught up), read by the launcher. */
static struct {
    struct tool_launcher launcher;
    CUcontext ctx;
    CUfunction fn;
    CUstream stream;
    unsigned grid, k;
    uint32_t *gate;
    struct proto_tool_result *results[2 * TOOL_JOBS]; /* a job's own, and its twin's */
    struct tool_jobs jobs;
} hand;

/* Whether the launcher is faster here (handtune.h): under the staging lock,
 * which every hand-over is made under. */
static struct handtune tune;

static pthread_mutex_t start_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int state;       /* 0: not started, 1: running, -1: could not start */
static _Atomic unsigned sleeping;

static inline void relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void make_launch(void)
{
    /* Set each time: the handle of a context destroyed and made again may be reused. */
    CUresult rc = real_cuCtxSetCurrent ? real_cuCtxSetCurrent(hand.ctx) : CUDA_ERROR_NOT_SUPPORTED;
    if (rc == CUDA_SUCCESS) {
        rc = toollaunch(&hand.launcher, hand.fn, hand.grid, hand.stream, &hand.jobs);
    }
    if (rc == CUDA_SUCCESS) {
        volatile struct proto_control *ctl = channel_control_rw();
        if (ctl)
            __atomic_fetch_add(&ctl->handed_off, 1, __ATOMIC_RELAXED);
        return;
    }
    for (unsigned i = 0; i < hand.k; i++)
        hand.results[i]->rc = rc;
    if (hand.gate)
        __atomic_store_n(hand.gate, GATE_NONE, __ATOMIC_RELEASE);
}

static void *launcher_main(void *arg)
{
    (void)arg;
    shim_busy = 1; /* it makes the shim's calls only, never the program's */
    /* Its launches can never invalidate a capture of the program's (stream.h). */
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    if (real_cuThreadExchangeStreamCaptureMode)
        real_cuThreadExchangeStreamCaptureMode(&mode);
    unsigned made = atomic_load(&handoff_made);
    for (;;) {
        unsigned posted;
        uint64_t idle = monotonic_ns();
        while ((posted = atomic_load_explicit(&handoff_posted, memory_order_acquire)) == made) {
            if (monotonic_ns() - idle < SPIN_NS) {
                relax();
                continue;
            }
            /* Said before looking once more: a hand-over after the look wakes it. */
            atomic_store(&sleeping, 1);
            if (atomic_load(&handoff_posted) == made)
                syscall(SYS_futex, &handoff_posted, FUTEX_WAIT_PRIVATE, made, NULL, NULL, 0);
            atomic_store(&sleeping, 0);
            idle = monotonic_ns();
        }
        make_launch();
        atomic_store_explicit(&handoff_made, posted, memory_order_release);
        made = posted;
    }
    return NULL;
}

/* At exit, nothing handed over is left unmade. */
static void fence_at_exit(void)
{
    handoff_fence();
}

/* The first line of a small file, NUL-terminated; whether there was one. */
static bool first_line(const char *path, char *buf, size_t size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t n = read(fd, buf, size - 1);
    close(fd);
    if (n <= 0)
        return false;
    buf[n] = 0;
    return true;
}

/* Whether the process's cgroup lets it use less than two CPUs' time (its CPU
 * quota over its period; cgroup v2's cpu.max, else v1's): a container held to
 * one CPU still sees every CPU of the host in its affinity, and a launcher
 * spinning there would spend the program's quota. No quota, or none read:
 * false. */
static bool under_two_cpus_of_quota(void)
{
    char line[64];
    long long quota = -1, period = 0;
    if (first_line("/sys/fs/cgroup/cpu.max", line, sizeof line)) {
        if (sscanf(line, "%lld %lld", &quota, &period) != 2) /* "max 100000": none */
            return false;
    } else if (first_line("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", line, sizeof line) &&
               sscanf(line, "%lld", &quota) == 1 &&
               first_line("/sys/fs/cgroup/cpu/cpu.cfs_period_us", line, sizeof line)) {
        sscanf(line, "%lld", &period);
    }
    return quota > 0 && period > 0 && quota < 2 * period;
}

/* Whether the process may run on two CPUs at least: on one, the launcher and
 * the program would take turns, and each hand-over would cost the program a
 * time slice. */
static bool two_cpus(void)
{
    cpu_set_t cpus;
    return sched_getaffinity(0, sizeof cpus, &cpus) == 0 && CPU_COUNT(&cpus) >= 2 &&
           !under_two_cpus_of_quota();
}

static bool started(void)
{
    int s = atomic_load_explicit(&state, memory_order_acquire);
    if (s)
        return s > 0;
    pthread_mutex_lock(&start_lock);
    if (!atomic_load(&state) && !two_cpus())
        atomic_store(&state, -1);
    if (!atomic_load(&state)) {
        pthread_t t;
        pthread_attr_t attr;
        sigset_t all, was;
        /* The program's signals are the program's threads' to take. */
        sigfillset(&all);
        pthread_sigmask(SIG_BLOCK, &all, &was);
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        bool up = pthread_create(&t, &attr, launcher_main, NULL) == 0;
        pthread_attr_destroy(&attr);
        pthread_sigmask(SIG_SETMASK, &was, NULL);
        if (up) {
            pthread_setname_np(t, "cudump-launch");
            atexit(fence_at_exit);
        }
        atomic_store_explicit(&state, up ? 1 : -1, memory_order_release);
    }
    pthread_mutex_unlock(&start_lock);
    return atomic_load(&state) > 0;
}

void handoff_wait(void)
{
    uint64_t start = monotonic_ns();
    unsigned posted = atomic_load_explicit(&handoff_posted, memory_order_acquire);
    /* Made when the launcher has caught up with this hand-over (or a later one). */
    while ((int)(atomic_load_explicit(&handoff_made, memory_order_acquire) - posted) < 0) {
        if (monotonic_ns() - start < FENCE_SPIN_NS)
            relax();
        else
            sched_yield();
    }
}

bool handoff_launch(const struct tool_launcher *launcher, CUcontext ctx, CUfunction fn,
                    unsigned grid, CUstream stream, const struct tool_jobs *jobs,
                    struct proto_tool_result *const *results, unsigned k, uint32_t *gate)
{
    if (!(channel_options() & OPTION_HAND_OFF) || !launcher->plain || k > 2 * TOOL_JOBS ||
        !started())
        return false;
    const uint64_t trials = tune.trials;
    const bool on = handtune_hand_off(&tune, monotonic_ns);
    volatile struct proto_control *ctl = channel_control_rw();
    if (ctl && tune.trials != trials) {
        __atomic_store_n(&ctl->handoff_trials, tune.trials, __ATOMIC_RELAXED);
        __atomic_store_n(&ctl->handoff_won, tune.won, __ATOMIC_RELAXED);
    }
    if (!on) {
        if (ctl)
            __atomic_fetch_add(&ctl->handed_back, 1, __ATOMIC_RELAXED);
        return false;
    }
    handoff_fence(); /* the launcher has the one before (another thread's) made */
    hand.launcher = *launcher;
    hand.ctx = ctx;
    hand.fn = fn;
    hand.stream = stream;
    hand.grid = grid;
    hand.k = k;
    hand.gate = gate;
    memcpy(hand.results, results, k * sizeof *results);
    memcpy(&hand.jobs, jobs, sizeof *jobs);
    atomic_fetch_add_explicit(&handoff_posted, 1, memory_order_seq_cst);
    if (atomic_load(&sleeping))
        syscall(SYS_futex, &handoff_posted, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
    return true;
}

void handoff_reset_after_fork(void)
{
    /* The parent's launcher does not exist here, and a launch the parent had
     * handed over is the parent's to make: the child starts afresh, with a
     * launcher of its own when it needs one. */
    pthread_mutex_init(&start_lock, NULL);
    atomic_store(&state, 0);
    atomic_store(&sleeping, 0);
    atomic_store(&handoff_made, atomic_load(&handoff_posted));
    tune = (struct handtune){0}; /* its own trials: the parent's stretches were the parent's */
}
