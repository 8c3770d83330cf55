/*
 * The connection to the cudump controller: a Unix socket named by
 * CUDUMP_SOCKET, one per process, speaking the binary protocol of
 * protocol.h. If the controller is gone (or was never there), or breaks the
 * protocol, every call here fails quietly and the shim is a pass-through.
 *
 * Before saying anything the shim checks who it is talking to: the peer must
 * be the very controller process that started this run (CUDUMP_CONTROLLER_PID,
 * checked with SO_PEERCRED, as is its uid), so a process started after the
 * controller has gone never talks to whatever appears later at that path.
 * The controller in turn checks the session token (CUDUMP_TOKEN) in HELLO.
 *
 * The socket lives in the abstract namespace (CUDUMP_SOCKET starts with '@')
 * and the shared memory arrives as a file descriptor with the WELCOME
 * (SCM_RIGHTS): nothing of cudump's is left in the file system, even if the
 * controller is killed.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stddef.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "channel.h"

enum { CH_NEW = 0, CH_CONNECTING, CH_UP, CH_DOWN };

_Atomic(const volatile struct proto_control *) channel_control_page;
_Atomic(struct proto_counts *) channel_counts_area;
_Atomic(struct proto_flight_slot *) channel_flight_area;
uint32_t channel_flight_count;
_Atomic(struct proto_host_write *) channel_host_area;
uint32_t channel_host_count;

/* The connection is process-wide state by nature: one per process. */
static pthread_mutex_t io_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int state = CH_NEW;
static int fd = -1;
/* The controller process: its pid, a pidfd on it where the kernel has them
 * (-1 otherwise), and whether it is known to have ended (latched: a process
 * does not come back, so every later look is one load). */
static _Atomic pid_t controller_pid;
static _Atomic int controller_pidfd = -1;
static _Atomic bool controller_gone;
static unsigned options;
static unsigned watch_window, watch_then; /* the welcome's, with OPTION_WATCH_NAN */
static size_t staging_size;
static uint32_t ring_slots;
static uint32_t results_slots;
static uint32_t flight_slots;
static uint32_t host_slots;
static uint32_t behind_mib;
/* The control page, the trace ring and the staging area, mapped at greeting. */
static void *shared_map;
static size_t shared_size;

static void controller_ended(void);

static void go_down_locked(void)
{
    /* Pass-through from now on; the control page stays mapped because a
     * racing launch may still be reading it. */
    atomic_store_explicit(&channel_control_page, NULL, memory_order_release);
    /* Nobody drains the host-write ring any more: the hooks stop writing it. */
    atomic_store_explicit(&channel_host_area, NULL, memory_order_release);
    if (fd >= 0)
        close(fd);
    fd = -1;
    atomic_store(&state, CH_DOWN);
}

static bool write_all_locked(const void *data, size_t len)
{
    const char *p = data;
    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            go_down_locked();
            return false;
        }
        p += n;
        len -= (size_t)n;
    }
    return true;
}

static bool read_all_locked(void *data, size_t len)
{
    char *p = data;
    while (len > 0) {
        ssize_t n = recv(fd, p, len, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            go_down_locked();
            return false;
        }
        p += n;
        len -= (size_t)n;
    }
    return true;
}

/* Reads the first bytes of a message that carries a file descriptor. */
static bool read_with_fd_locked(void *data, size_t len, int *passed)
{
    *passed = -1;
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof(int))];
    } control;
    struct iovec iov = {data, len};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf,
                        .msg_controllen = sizeof control.buf};
    ssize_t n;
    do
        n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
    while (n < 0 && errno == EINTR);
    if (n <= 0) {
        go_down_locked();
        return false;
    }
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
            c->cmsg_len == CMSG_LEN(sizeof(int)))
            memcpy(passed, CMSG_DATA(c), sizeof(int));
    return read_all_locked((char *)data + n, len - (size_t)n);
}

/* Discards n bytes of a payload the caller has no room for. */
static bool skip_locked(size_t n)
{
    char sink[512];
    while (n > 0) {
        size_t take = n < sizeof sink ? n : sizeof sink;
        if (!read_all_locked(sink, take))
            return false;
        n -= take;
    }
    return true;
}

bool channel_recv_locked(uint16_t *kind, uint64_t *tag, void *payload, size_t cap, size_t *len)
{
    if (fd < 0)
        return false;
    struct proto_header h;
    if (!read_all_locked(&h, sizeof h))
        return false;
    if (h.size < sizeof h || h.size > PROTO_MAX_REPLY) {
        go_down_locked(); /* not a message of ours: stop listening */
        return false;
    }
    size_t n = h.size - sizeof h;
    size_t take = n < cap ? n : cap;
    if (!read_all_locked(payload, take) || !skip_locked(n - take))
        return false;
    if (n > cap) {
        go_down_locked(); /* longer than any reply this side expects */
        return false;
    }
    *kind = h.kind;
    *tag = h.tag;
    *len = n;
    return true;
}

void msg_init(struct msg *m, char *stack, size_t cap, enum proto_kind kind, uint64_t tag)
{
    sb_init(&m->sb, stack, cap);
    struct proto_header h = {.size = 0, .kind = (uint16_t)kind, .flags = 0, .tag = tag};
    sb_append(&m->sb, &h, sizeof h);
}

void msg_add(struct msg *m, const void *data, size_t len)
{
    sb_append(&m->sb, data, len);
}

void msg_free(struct msg *m)
{
    sb_free(&m->sb);
}

static bool msg_finish(struct msg *m)
{
    if (m->sb.oom || m->sb.len > PROTO_MAX_MESSAGE)
        return false;
    uint32_t size = (uint32_t)m->sb.len;
    memcpy(m->sb.data, &size, sizeof size);
    return true;
}

bool channel_send_locked(struct msg *m)
{
    return fd >= 0 && msg_finish(m) && write_all_locked(m->sb.data, m->sb.len);
}

void channel_exclusive(void (*fn)(void *), void *arg)
{
    pthread_mutex_lock(&io_lock);
    fn(arg);
    pthread_mutex_unlock(&io_lock);
}

bool channel_send_event(enum proto_kind kind, uint64_t tag, const void *payload, size_t size)
{
    char stack[256];
    struct msg m;
    msg_init(&m, stack, sizeof stack, kind, tag);
    msg_add(&m, payload, size);
    bool ok = channel_send(&m);
    msg_free(&m);
    return ok;
}

bool channel_send(struct msg *m)
{
    if (!channel_up())
        return false;
    pthread_mutex_lock(&io_lock);
    bool ok = channel_send_locked(m);
    pthread_mutex_unlock(&io_lock);
    return ok;
}

static bool request_locked(struct msg *m, enum proto_kind expect, void *reply, size_t cap,
                           size_t *len)
{
    uint16_t kind;
    uint64_t tag;
    if (!channel_send_locked(m) || !channel_recv_locked(&kind, &tag, reply, cap, len))
        return false;
    if (kind != expect) {
        go_down_locked(); /* replies come in order: anything else is a broken peer */
        return false;
    }
    return true;
}

bool channel_request(struct msg *m, enum proto_kind expect, void *reply, size_t cap, size_t *len)
{
    if (!channel_up())
        return false;
    pthread_mutex_lock(&io_lock);
    bool ok = request_locked(m, expect, reply, cap, len);
    pthread_mutex_unlock(&io_lock);
    return ok;
}

/* A pidfd on process `pid` (close-on-exec, as pidfd_open always makes them);
 * -1 where the kernel has none (before Linux 5.3). */
static int open_pidfd(pid_t pid)
{
#ifdef SYS_pidfd_open
    return (int)syscall(SYS_pidfd_open, pid, 0);
#else
    (void)pid;
    errno = ENOSYS;
    return -1;
#endif
}

/* Starts watching the controller `pid` that this process has just connected to. */
static void watch_controller(pid_t pid)
{
    int old = atomic_exchange(&controller_pidfd, -1);
    if (old >= 0)
        close(old);
    atomic_store(&controller_gone, false);
    atomic_store(&controller_pid, pid);
    atomic_store(&controller_pidfd, open_pidfd(pid));
}

/* The peer must be the controller this process was started by. */
static bool peer_is_controller(int s)
{
    const char *want = getenv("CUDUMP_CONTROLLER_PID");
    struct ucred cred;
    socklen_t len = sizeof cred;
    if (!want || getsockopt(s, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
        return false;
    char *end = NULL;
    long pid = strtol(want, &end, 10);
    if (!end || *end || pid <= 0)
        return false;
    if (cred.pid != (pid_t)pid || cred.uid != geteuid())
        return false;
    watch_controller((pid_t)pid);
    return true;
}

/* Bytes of the three rings, which lie between the control page and staging. */
static size_t ring_bytes(void)
{
    return (size_t)ring_slots * PROTO_RING_SLOT_SIZE;
}

static size_t results_bytes(void)
{
    return (size_t)results_slots * PROTO_RESULT_SLOT_SIZE;
}

static size_t rings_bytes(void)
{
    return ring_bytes() + results_bytes() + (size_t)host_slots * PROTO_HOST_SLOT_SIZE;
}

/* The file must be (and stay) at least `size` bytes long: touching a page of a
 * MAP_SHARED mapping past the end of its file raises SIGBUS in the program, so
 * sizes the controller claims (WELCOME, control page) are believed only as far
 * as the file really reaches. The shim first seals the file against shrinking
 * (the controller created it with MFD_ALLOW_SEALING), so that the size checked
 * here is the size for as long as the mapping lives; a file that cannot be
 * sealed so could be cut under the program at any time, and is refused. */
static bool shared_file_holds(int sfd, size_t size)
{
    if (fcntl(sfd, F_ADD_SEALS, F_SEAL_SHRINK) != 0 && errno != EPERM)
        return false; /* EPERM: F_SEAL_SEAL is set; F_GET_SEALS says if SHRINK is too */
    int seals = fcntl(sfd, F_GET_SEALS);
    if (seals < 0 || !(seals & F_SEAL_SHRINK))
        return false;
    struct stat st;
    if (fstat(sfd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < 0)
        return false;
    return (uintmax_t)st.st_size >= (uintmax_t)size;
}

/* Where the launch counts begin, after what ends at `end`. */
static size_t counts_offset(size_t end)
{
    return (end + PROTO_COUNTS_ALIGN - 1) / PROTO_COUNTS_ALIGN * PROTO_COUNTS_ALIGN;
}

/* Where the flight ring begins: after the launch counts, which begin at `counts`. */
static size_t flight_offset(size_t counts)
{
    return counts_offset(counts + sizeof(struct proto_counts));
}

/* Where the write-behind area begins, after what ends at `end` (0 on overflow). */
static size_t behind_offset(size_t end)
{
    if (end > SIZE_MAX - PROTO_BEHIND_ALIGN)
        return 0;
    return (end + PROTO_BEHIND_ALIGN - 1) / PROTO_BEHIND_ALIGN * PROTO_BEHIND_ALIGN;
}

/* The bytes the control page, the three rings, the staging area, the launch
 * counts and the flight ring take, as the controller claims them; false if
 * the sum does not fit a size_t. Each product and sum is checked before it is
 * formed: the sizes come from the other side (the flight ring's is bounded by
 * PROTO_MAX_FLIGHT before this). */
static bool claimed_size(size_t *size)
{
    size_t total = PROTO_CONTROL_SIZE;
    if (ring_slots > (SIZE_MAX - total) / PROTO_RING_SLOT_SIZE)
        return false;
    total += (size_t)ring_slots * PROTO_RING_SLOT_SIZE;
    if (results_slots > (SIZE_MAX - total) / PROTO_RESULT_SLOT_SIZE)
        return false;
    total += (size_t)results_slots * PROTO_RESULT_SLOT_SIZE;
    if (host_slots > (SIZE_MAX - total) / PROTO_HOST_SLOT_SIZE)
        return false;
    total += (size_t)host_slots * PROTO_HOST_SLOT_SIZE;
    /* at most: the counts and the flight ring, each after a multiple of the alignment */
    size_t tail = 2 * PROTO_COUNTS_ALIGN + sizeof(struct proto_counts) +
                  (size_t)PROTO_MAX_FLIGHT * PROTO_FLIGHT_SLOT_SIZE;
    if (total > SIZE_MAX - tail || staging_size > SIZE_MAX - tail - total)
        return false;
    size_t counts = counts_offset(total + staging_size);
    *size = flight_slots ? flight_offset(counts) + (size_t)flight_slots * PROTO_FLIGHT_SLOT_SIZE
                         : counts + sizeof(struct proto_counts);
    if (behind_mib) {
        size_t area = (size_t)behind_mib << 20;
        size_t at = behind_offset(*size);
        if (at < *size || area > SIZE_MAX - at)
            return false;
        *size = at + area;
    }
    return true;
}

static bool map_shared(int sfd)
{
    size_t size;
    if (!claimed_size(&size) || !shared_file_holds(sfd, size))
        return false;
    /* Address space only: pages exist once something is copied into them. */
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, sfd, 0);
    if (p == MAP_FAILED)
        return false;
    const volatile struct proto_control *c = p;
    if (c->magic != PROTO_MAGIC || c->version != PROTO_VERSION || c->ring_slots != ring_slots ||
        c->results_slots != results_slots || c->flight_slots != flight_slots ||
        c->host_slots != host_slots || c->behind_mib != behind_mib) {
        munmap(p, size);
        return false;
    }
    shared_map = p;
    shared_size = size;
    return true;
}

static bool greet_locked(void)
{
    struct proto_hello hello = {.magic = PROTO_MAGIC, .version = PROTO_VERSION,
                                .pid = (int32_t)getpid(), .ppid = (int32_t)getppid()};
    const char *token = getenv("CUDUMP_TOKEN");
    if (!token || strlen(token) != PROTO_TOKEN_SIZE)
        return false;
    memcpy(hello.token, token, PROTO_TOKEN_SIZE);
    char exe[1024];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[n > 0 ? n : 0] = '\0';
    char stack[1536];
    struct msg m;
    msg_init(&m, stack, sizeof stack, MSG_HELLO, 0);
    msg_add(&m, &hello, sizeof hello);
    msg_add(&m, exe, strlen(exe));
    bool sent = channel_send_locked(&m);
    msg_free(&m);
    struct proto_header h;
    struct proto_welcome w;
    int sfd = -1;
    if (!sent || !read_with_fd_locked(&h, sizeof h, &sfd))
        return false;
    bool ok = h.kind == MSG_WELCOME && h.size == sizeof h + sizeof w && sfd >= 0 &&
              read_all_locked(&w, sizeof w) && w.version == PROTO_VERSION;
    if (ok) {
        options = w.options;
        watch_window = w.watch_window;
        watch_then = w.watch_then;
        staging_size = (size_t)w.staging_size;
        /* The rings' sizes are on the control page itself: read them before mapping all. */
        struct proto_control head;
        ok = pread(sfd, &head, sizeof head, 0) == (ssize_t)sizeof head;
        ring_slots = ok ? head.ring_slots : 0;
        results_slots = ok ? head.results_slots : 0;
        flight_slots = ok ? head.flight_slots : 0;
        host_slots = ok ? head.host_slots : 0;
        behind_mib = ok ? head.behind_mib : 0;
        ok = ok && ring_slots <= (1u << 24) && (ring_slots & (ring_slots - 1)) == 0 &&
             results_slots <= (1u << 20) && (results_slots & (results_slots - 1)) == 0 &&
             host_slots <= (1u << 20) && (host_slots & (host_slots - 1)) == 0 &&
             flight_slots <= PROTO_MAX_FLIGHT && behind_mib <= (1u << 20) && map_shared(sfd);
    }
    if (sfd >= 0)
        close(sfd);
    return ok;
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
    socklen_t addr_len = sizeof addr;
    if (path[0] == '@') { /* the abstract namespace: no file anywhere */
        addr.sun_path[0] = '\0';
        addr_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(path));
    }
    /* CLOEXEC: a child that execs connects on its own. */
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0 || connect(s, (struct sockaddr *)&addr, addr_len) != 0 || !peer_is_controller(s)) {
        if (s >= 0)
            close(s);
        atomic_store(&state, CH_DOWN);
        return;
    }
    pthread_mutex_lock(&io_lock);
    fd = s;
    if (greet_locked()) {
        atomic_store(&state, CH_UP);
        /* Before the control page: a launch that sees the page sees the counts. */
        size_t at = counts_offset(PROTO_CONTROL_SIZE + rings_bytes() + staging_size);
        atomic_store_explicit(&channel_counts_area,
                              (struct proto_counts *)((char *)shared_map + at),
                              memory_order_release);
        channel_flight_count = flight_slots;
        if (flight_slots)
            atomic_store_explicit(&channel_flight_area,
                                  (struct proto_flight_slot *)((char *)shared_map +
                                                               flight_offset(at)),
                                  memory_order_release);
        channel_host_count = host_slots;
        if (host_slots)
            atomic_store_explicit(&channel_host_area,
                                  (struct proto_host_write *)((char *)shared_map +
                                                              PROTO_CONTROL_SIZE + ring_bytes() +
                                                              results_bytes()),
                                  memory_order_release);
        atomic_store_explicit(&channel_control_page, shared_map, memory_order_release);
        /* A controller found gone while this greeting went on stays gone. */
        if (atomic_load(&controller_gone))
            controller_ended();
    } else {
        go_down_locked();
    }
    pthread_mutex_unlock(&io_lock);
}

volatile struct proto_control *channel_control_rw(void)
{
    return channel_up() ? shared_map : NULL;
}

char *channel_staging(void)
{
    return shared_map ? (char *)shared_map + PROTO_CONTROL_SIZE + rings_bytes() : NULL;
}

struct proto_ring_slot *channel_ring(uint32_t *slots)
{
    *slots = ring_slots;
    return shared_map && ring_slots ? (struct proto_ring_slot *)((char *)shared_map +
                                                                 PROTO_CONTROL_SIZE)
                                    : NULL;
}

struct proto_result_slot *channel_results(uint32_t *slots)
{
    *slots = results_slots;
    return shared_map && results_slots
               ? (struct proto_result_slot *)((char *)shared_map + PROTO_CONTROL_SIZE +
                                              ring_bytes())
               : NULL;
}

size_t channel_staging_size(void)
{
    return staging_size;
}

char *channel_behind(size_t *size)
{
    *size = shared_map ? (size_t)behind_mib << 20 : 0;
    return *size ? (char *)shared_map + shared_size - *size : NULL;
}

unsigned channel_options(void)
{
    return options;
}

unsigned channel_watch_window(void)
{
    return watch_window;
}

unsigned channel_watch_then(void)
{
    return watch_then;
}

/* Whether process `pid` has ended, without a pidfd: gone, or a zombie that its
 * parent has not reaped yet (kill(pid, 0) succeeds on a zombie). */
static bool ended_by_proc(pid_t pid)
{
    if (kill(pid, 0) != 0 && errno == ESRCH)
        return true;
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int f = open(path, O_RDONLY | O_CLOEXEC);
    if (f < 0)
        return errno == ENOENT;
    ssize_t n = read(f, buf, sizeof buf - 1);
    close(f);
    if (n <= 0)
        return false;
    buf[n] = '\0';
    /* "pid (comm) S ...": the state follows the last ')' (comm may hold one). */
    const char *close_paren = strrchr(buf, ')');
    return close_paren && close_paren[1] == ' ' &&
           (close_paren[2] == 'Z' || close_paren[2] == 'X');
}

/* The controller is gone: from now on the shim is a pass-through, at once,
 * whatever thread noticed (the socket is closed by the next call that uses
 * it, under its lock). Every wait that consults channel_controller_alive()
 * ends at its next look. */
static void controller_ended(void)
{
    atomic_store(&controller_gone, true);
    atomic_store_explicit(&channel_control_page, NULL, memory_order_release);
    atomic_store_explicit(&channel_host_area, NULL, memory_order_release);
}

bool channel_controller_alive(void)
{
    if (atomic_load_explicit(&controller_gone, memory_order_acquire))
        return false;
    pid_t pid = atomic_load_explicit(&controller_pid, memory_order_relaxed);
    if (pid <= 0)
        return false;
    /* A pidfd is readable once its process has exited, reaped or not. */
    int pfd = atomic_load_explicit(&controller_pidfd, memory_order_relaxed);
    bool ended;
    if (pfd >= 0) {
        struct pollfd p = {.fd = pfd, .events = POLLIN};
        int n;
        do
            n = poll(&p, 1, 0);
        while (n < 0 && errno == EINTR);
        ended = n > 0 && (p.revents & POLLNVAL) ? ended_by_proc(pid) : n > 0;
    } else {
        ended = ended_by_proc(pid);
    }
    if (ended)
        controller_ended();
    return !ended;
}

void channel_reset_after_fork(void)
{
    /* The socket belongs to the parent's conversation: the child must not
     * write into it. It connects anew when it initialises CUDA itself. */
    pthread_mutex_init(&io_lock, NULL);
    atomic_store(&channel_control_page, NULL);
    atomic_store(&channel_counts_area, NULL);
    atomic_store(&channel_flight_area, NULL);
    channel_flight_count = 0;
    atomic_store(&channel_host_area, NULL);
    channel_host_count = 0;
    if (fd >= 0)
        close(fd);
    fd = -1;
    /* The parent's pidfd too, while the number is still the shim's (the program's
     * child may close descriptors it does not know of, and reuse the number): the
     * child opens its own when it connects, and until then looks in /proc. A
     * controller known to be gone stays so. */
    int pidfd = atomic_exchange(&controller_pidfd, -1);
    if (pidfd >= 0)
        close(pidfd);
    /* The parent's shared memory: the child gets its own when it connects. */
    if (shared_map)
        munmap(shared_map, shared_size);
    shared_map = NULL;
    shared_size = 0;
    ring_slots = results_slots = flight_slots = host_slots = behind_mib = 0;
    atomic_store(&state, CH_NEW);
}
