/*
 * A sampling profiler of one thread's CPU, preloaded into a program: where the
 * thread that loaded it (the program's main thread) spends its time, by
 * library and function, for a stretch the program marks itself.
 *
 * SIGUSR2 starts the sampling and a second SIGUSR2 stops it: a timer of the
 * thread's own CPU time fires SIGPROF every SAMPLER_US microseconds (default
 * 100) of it, and the handler keeps the interrupted address and a backtrace.
 * At exit it prints to stderr, for the samples taken: the share of each
 * library the thread was in, the functions it was in most (the nearest
 * exported symbol, dladdr's), and the share of samples with each function of
 * libcudump.so anywhere on the stack (the shim's own time, the driver's calls
 * it made included).
 *
 * With SAMPLER_RAW=FILE it also writes every sample to FILE, a line each: its
 * frames, innermost first, as library+0xoffset (the address less the
 * library's load base: its address in the ELF, which addr2line takes, against
 * the same build), to name static functions
 * (which dladdr cannot) and to tell which caller each library's time is for.
 *
 * build: gcc -O2 -std=c11 -shared -fPIC -o sampler.so bench/sampler.c -ldl -lrt
 * usage: LD_PRELOAD=sampler.so program   (the program sends itself SIGUSR2)
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

enum { MAX_SAMPLES = 200000, DEPTH = 24, TOP = 30 };

static void *frames[MAX_SAMPLES][DEPTH];
static unsigned char depth[MAX_SAMPLES];
static _Atomic unsigned taken;
static timer_t timer;
static _Atomic int on;
static long interval_us = 100;
static pid_t owner;

static void on_prof(int sig, siginfo_t *info, void *uc)
{
    (void)sig;
    (void)info;
    unsigned i = atomic_fetch_add(&taken, 1);
    if (i >= MAX_SAMPLES)
        return;
    void *pc = (void *)((ucontext_t *)uc)->uc_mcontext.gregs[REG_RIP];
    int n = backtrace(frames[i] + 1, DEPTH - 1);
    frames[i][0] = pc;
    depth[i] = (unsigned char)(n + 1);
}

static void arm(long us)
{
    struct itimerspec t = {{0, us * 1000}, {0, us * 1000}};
    timer_settime(timer, 0, &t, NULL);
}

static void on_toggle(int sig)
{
    (void)sig;
    int was = atomic_fetch_xor(&on, 1);
    arm(was ? 0 : interval_us);
}

struct count {
    char name[160];
    unsigned n;
};

static struct count *counts;
static unsigned ncounts;

static void add(const char *name, unsigned n)
{
    for (unsigned i = 0; i < ncounts; i++)
        if (!strcmp(counts[i].name, name)) {
            counts[i].n += n;
            return;
        }
    counts = realloc(counts, (ncounts + 1) * sizeof *counts);
    snprintf(counts[ncounts].name, sizeof counts[ncounts].name, "%s", name);
    counts[ncounts++].n = n;
}

static int by_count(const void *a, const void *b)
{
    return (int)((const struct count *)b)->n - (int)((const struct count *)a)->n;
}

static void print(const char *title, unsigned total, unsigned top)
{
    qsort(counts, ncounts, sizeof *counts, by_count);
    fprintf(stderr, "sampler: %s\n", title);
    for (unsigned i = 0; i < ncounts && i < top; i++)
        fprintf(stderr, "sampler: %6.2f%%  %s\n", 100.0 * counts[i].n / total, counts[i].name);
    free(counts);
    counts = NULL;
    ncounts = 0;
}

static const char *base(const char *path)
{
    const char *s = path ? strrchr(path, '/') : NULL;
    return s ? s + 1 : path ? path : "?";
}

static void name_of(void *pc, char *out, size_t size, int with_symbol)
{
    Dl_info d;
    if (!dladdr(pc, &d)) {
        snprintf(out, size, "?");
        return;
    }
    if (with_symbol)
        snprintf(out, size, "%s %s", base(d.dli_fname), d.dli_sname ? d.dli_sname : "?");
    else
        snprintf(out, size, "%s", base(d.dli_fname));
}

/* Every sample's frames to SAMPLER_RAW's file, if set. */
static void write_raw(unsigned n)
{
    const char *path = getenv("SAMPLER_RAW");
    FILE *f = path && *path ? fopen(path, "w") : NULL;
    if (!f)
        return;
    for (unsigned i = 0; i < n; i++) {
        for (unsigned k = 0; k < depth[i]; k++) {
            Dl_info d;
            if (dladdr(frames[i][k], &d) && d.dli_fname)
                fprintf(f, "%s%s+0x%lx", k ? " " : "", base(d.dli_fname),
                        (unsigned long)((char *)frames[i][k] - (char *)d.dli_fbase));
            else
                fprintf(f, "%s?", k ? " " : "");
        }
        fputc('\n', f);
    }
    fclose(f);
}

static void report(void)
{
    if (getpid() != owner)
        return;
    unsigned n = atomic_load(&taken);
    if (n > MAX_SAMPLES)
        n = MAX_SAMPLES;
    if (!n)
        return;
    char name[160];
    fprintf(stderr, "sampler: %u samples of %ld us of the thread's CPU\n", n, interval_us);
    for (unsigned i = 0; i < n; i++) {
        name_of(frames[i][0], name, sizeof name, 0);
        add(name, 1);
    }
    print("the library the thread was in", n, TOP);
    for (unsigned i = 0; i < n; i++) {
        name_of(frames[i][0], name, sizeof name, 1);
        add(name, 1);
    }
    print("the function it was in", n, TOP);
    for (unsigned i = 0; i < n; i++) {
        char seen[DEPTH][160];
        unsigned nseen = 0;
        for (unsigned f = 0; f < depth[i]; f++) {
            name_of(frames[i][f], name, sizeof name, 1);
            if (strncmp(name, "libcudump.so ", 13))
                continue;
            unsigned k = 0;
            while (k < nseen && strcmp(seen[k], name))
                k++;
            if (k == nseen) {
                memcpy(seen[nseen++], name, sizeof name);
                add(name, 1);
            }
        }
        if (nseen)
            add("libcudump.so (anywhere on the stack)", 1);
    }
    print("functions of the shim on the stack", n, TOP);
    write_raw(n);
}

__attribute__((constructor)) static void start(void)
{
    const char *us = getenv("SAMPLER_US");
    if (us && atol(us) > 0)
        interval_us = atol(us);
    owner = getpid();
    void *warm[4];
    backtrace(warm, 4); /* loads the unwinder outside the handler */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_prof;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigaction(SIGPROF, &sa, NULL);
    signal(SIGUSR2, on_toggle);
    struct sigevent ev;
    memset(&ev, 0, sizeof ev);
    ev.sigev_notify = SIGEV_THREAD_ID;
    ev.sigev_signo = SIGPROF;
    ev._sigev_un._tid = (pid_t)syscall(SYS_gettid);
    if (timer_create(CLOCK_THREAD_CPUTIME_ID, &ev, &timer) != 0)
        return;
    atexit(report);
}
