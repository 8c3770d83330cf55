/* A small growable byte buffer for building messages. It starts in a
 * caller-provided stack buffer so the common case never calls malloc. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util.h"

void sb_init(struct strbuf *sb, char *stack, size_t cap)
{
    sb->data = stack;
    sb->len = 0;
    sb->cap = cap;
    sb->heap = false;
    sb->oom = false;
    sb->data[0] = '\0';
}

static bool sb_reserve(struct strbuf *sb, size_t extra)
{
    if (sb->oom)
        return false;
    if (sb->len + extra + 1 <= sb->cap)
        return true;
    size_t cap = sb->cap * 2;
    while (cap < sb->len + extra + 1)
        cap *= 2;
    char *grown = sb->heap ? realloc(sb->data, cap) : malloc(cap);
    if (!grown) {
        sb->oom = true;
        return false;
    }
    if (!sb->heap)
        memcpy(grown, sb->data, sb->len + 1);
    sb->data = grown;
    sb->cap = cap;
    sb->heap = true;
    return true;
}

void sb_printf(struct strbuf *sb, const char *fmt, ...)
{
    if (sb->oom)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(sb->data + sb->len, sb->cap - sb->len, fmt, ap);
    va_end(ap);
    if (n < 0) {
        sb->oom = true;
        return;
    }
    if (sb->len + (size_t)n >= sb->cap) {
        sb->data[sb->len] = '\0';
        if (!sb_reserve(sb, (size_t)n))
            return;
        va_start(ap, fmt);
        vsnprintf(sb->data + sb->len, sb->cap - sb->len, fmt, ap);
        va_end(ap);
    }
    sb->len += (size_t)n;
}

void sb_append(struct strbuf *sb, const void *data, size_t len)
{
    if (!sb_reserve(sb, len))
        return;
    memcpy(sb->data + sb->len, data, len);
    sb->len += len;
    sb->data[sb->len] = '\0';
}

void sb_free(struct strbuf *sb)
{
    if (sb->heap)
        free(sb->data);
}

uint64_t monotonic_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

struct timespec realtime_after_ms(unsigned ms)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += ms / 1000;
    until.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    return until;
}

bool poll_until(bool (*done)(void *arg), void *arg, unsigned seconds)
{
    for (long waited_us = 0; waited_us < (long)seconds * 1000000L; waited_us += 100) {
        if (done(arg))
            return true;
        struct timespec nap = {0, 100 * 1000};
        nanosleep(&nap, NULL);
    }
    return false;
}
