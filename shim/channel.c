/*
 * The connection to the cudump controller: a Unix socket named by
 * CUDUMP_SOCKET, one per process. Messages to the controller are JSON
 * lines; replies are short text lines. If the controller is gone (or was
 * never there) every call here is a no-op and the shim is a pass-through.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "shim.h"

enum { CH_NEW = 0, CH_CONNECTING, CH_UP, CH_DOWN };

static pthread_mutex_t io_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int state = CH_NEW;
static int fd = -1;
static unsigned options;
static char staging_path[512];
static size_t staging_size;
/* Bytes of a reply read past its newline (the controller sends one line
 * per request, so this stays empty in practice). */
static char pending[8192];
static size_t npending;

static void go_down_locked(void)
{
    if (fd >= 0)
        close(fd);
    fd = -1;
    atomic_store(&state, CH_DOWN);
}

static bool write_all_locked(const char *data, size_t len)
{
    while (len > 0) {
        ssize_t n = send(fd, data, len, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            go_down_locked();
            return false;
        }
        data += n;
        len -= (size_t)n;
    }
    return true;
}

static bool read_line_locked(char *out, size_t cap)
{
    size_t len = 0;
    for (;;) {
        for (size_t i = 0; i < npending; i++) {
            if (pending[i] == '\n') {
                size_t take = i < cap - 1 ? i : cap - 1;
                memcpy(out, pending, take);
                out[take] = '\0';
                memmove(pending, pending + i + 1, npending - i - 1);
                npending -= i + 1;
                return true;
            }
        }
        (void)len;
        if (npending == sizeof pending)
            npending = 0; /* an over-long line: drop it rather than wedge */
        ssize_t n = recv(fd, pending + npending, sizeof pending - npending, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            go_down_locked();
            return false;
        }
        npending += (size_t)n;
    }
}

void channel_connect(void)
{
    int expected = CH_NEW;
    if (!atomic_compare_exchange_strong(&state, &expected, CH_CONNECTING))
        return;
    const char *path = getenv("CUDUMP_SOCKET");
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    if (!path || !*path || strlen(path) >= sizeof addr.sun_path) {
        atomic_store(&state, CH_DOWN);
        return;
    }
    strcpy(addr.sun_path, path);
    /* CLOEXEC: a child that execs connects on its own. */
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0 || connect(s, (struct sockaddr *)&addr, sizeof addr) != 0) {
        if (s >= 0)
            close(s);
        atomic_store(&state, CH_DOWN);
        return;
    }
    char exe[1024];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[n > 0 ? n : 0] = '\0';
    char stack[1536];
    struct strbuf sb;
    sb_init(&sb, stack, sizeof stack);
    sb_printf(&sb, "{\"ev\":\"hello\",\"pid\":%d,\"ppid\":%d,\"exe\":", (int)getpid(),
              (int)getppid());
    sb_json_string(&sb, exe);
    sb_printf(&sb, "}\n");
    pthread_mutex_lock(&io_lock);
    fd = s;
    npending = 0;
    char reply[640];
    bool ok = !sb.oom && write_all_locked(sb.data, sb.len) && read_line_locked(reply, sizeof reply) &&
              strncmp(reply, "ok", 2) == 0;
    if (ok) {
        options = 0;
        staging_path[0] = '\0';
        staging_size = 0;
        /* "ok <options> <staging path or -> <staging bytes>" */
        sscanf(reply + 2, "%u %511s %zu", &options, staging_path, &staging_size);
        if (strcmp(staging_path, "-") == 0)
            staging_path[0] = '\0';
        atomic_store(&state, CH_UP);
    }
    else
        go_down_locked();
    pthread_mutex_unlock(&io_lock);
    sb_free(&sb);
}

const char *channel_staging_path(void)
{
    return staging_path[0] ? staging_path : NULL;
}

size_t channel_staging_size(void)
{
    return staging_size;
}

unsigned channel_options(void)
{
    return options;
}

bool channel_up(void)
{
    return atomic_load_explicit(&state, memory_order_acquire) == CH_UP;
}

void channel_send(const char *line, size_t len)
{
    if (!channel_up())
        return;
    pthread_mutex_lock(&io_lock);
    if (fd >= 0)
        write_all_locked(line, len);
    pthread_mutex_unlock(&io_lock);
}

bool channel_request(const char *line, size_t len, char *reply, size_t cap)
{
    if (!channel_up())
        return false;
    pthread_mutex_lock(&io_lock);
    bool ok = fd >= 0 && write_all_locked(line, len) && read_line_locked(reply, cap);
    pthread_mutex_unlock(&io_lock);
    return ok;
}

void channel_reset_after_fork(void)
{
    /* The socket belongs to the parent's conversation: the child must not
     * write into it. It connects anew when it initialises CUDA itself. */
    pthread_mutex_init(&io_lock, NULL);
    if (fd >= 0)
        close(fd);
    fd = -1;
    npending = 0;
    atomic_store(&state, CH_NEW);
}
