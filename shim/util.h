/* Small helpers (util.c). */
#ifndef CUDUMP_UTIL_H
#define CUDUMP_UTIL_H

#include <time.h>

#include "shim.h"

struct strbuf {
    char *data;
    size_t len, cap;
    bool heap; /* data was malloc'ed by the buffer */
    bool oom;
};
void sb_init(struct strbuf *sb, char *stack, size_t cap);
void sb_printf(struct strbuf *sb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sb_append(struct strbuf *sb, const void *data, size_t len);
void sb_free(struct strbuf *sb);

/* How long an exit handler of the shim waits at most for work still on the
 * GPU: the program's exit goes on regardless. */
enum { EXIT_WAIT_S = 5 };
/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t monotonic_ns(void);
/* CLOCK_REALTIME ms from now: the deadline pthread's timed waits take. */
struct timespec realtime_after_ms(unsigned ms);
/* Asks `done(arg)` every 100 us, for `seconds` at most; whether it said yes. */
bool poll_until(bool (*done)(void *arg), void *arg, unsigned seconds);

#endif
