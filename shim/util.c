/* A small growable string buffer for building JSON lines. It starts in a
 * caller-provided stack buffer so the common case never calls malloc. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shim.h"

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

void sb_json_string(struct strbuf *sb, const char *s)
{
    if (!sb_reserve(sb, 2 + (s ? strlen(s) * 6 : 0)))
        return;
    char *out = sb->data + sb->len;
    *out++ = '"';
    for (const unsigned char *p = (const unsigned char *)s; p && *p; p++) {
        if (*p == '"' || *p == '\\') {
            *out++ = '\\';
            *out++ = (char)*p;
        } else if (*p < 0x20) {
            out += sprintf(out, "\\u%04x", *p);
        } else {
            *out++ = (char)*p;
        }
    }
    *out++ = '"';
    *out = '\0';
    sb->len = (size_t)(out - sb->data);
}

void sb_free(struct strbuf *sb)
{
    if (sb->heap)
        free(sb->data);
}
