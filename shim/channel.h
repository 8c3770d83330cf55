/* The connection to the controller (channel.c). */
#ifndef CUDUMP_CHANNEL_H
#define CUDUMP_CHANNEL_H

#include "util.h"

/* Connects if CUDUMP_SOCKET names a controller (once per process), after
 * checking that the peer is the controller this process was started by. */
void channel_connect(void);
/* The control page while connected; NULL when there is no controller (or it
 * went away): the launch fast path reads it once per launch. */
static inline const volatile struct proto_control *channel_control(void)
{
    extern _Atomic(const volatile struct proto_control *) channel_control_page;
    return atomic_load_explicit(&channel_control_page, memory_order_acquire);
}
static inline bool channel_up(void)
{
    return channel_control() != NULL;
}
/* The launch counts in shared memory (proto_counts), from the greeting on;
 * NULL before it. Each counter of the shim that MSG_STATS reports is added to
 * here too, as it is counted, so that the controller has them even when the
 * process ends without MSG_STATS. */
static inline struct proto_counts *channel_counts(void)
{
    extern _Atomic(struct proto_counts *) channel_counts_area;
    return atomic_load_explicit(&channel_counts_area, memory_order_acquire);
}
/* The flight ring (--flight) in shared memory, from the greeting on, and its
 * slots; NULL (and 0) without one. It stays mapped while the controller goes
 * away: a launch that took a slot may still be writing it. */
static inline struct proto_flight_slot *channel_flight(uint32_t *slots)
{
    extern _Atomic(struct proto_flight_slot *) channel_flight_area;
    extern uint32_t channel_flight_count;
    struct proto_flight_slot *ring = atomic_load_explicit(&channel_flight_area,
                                                          memory_order_acquire);
    *slots = channel_flight_count; /* stored before the ring is published */
    return ring;
}
/* Whether the controller asked for the program's host writes (a host-write
 * ring, under NaN/Inf scans): one relaxed load, all that the hooks of copies
 * and memsets cost without it. */
static inline bool channel_host_on(void)
{
    extern _Atomic(struct proto_host_write *) channel_host_area;
    return atomic_load_explicit(&channel_host_area, memory_order_relaxed) != NULL;
}
/* The host-write ring's slots; NULL (and 0) without one, or once the
 * controller is gone. */
static inline struct proto_host_write *channel_host_ring(uint32_t *slots)
{
    extern _Atomic(struct proto_host_write *) channel_host_area;
    extern uint32_t channel_host_count;
    struct proto_host_write *ring = atomic_load_explicit(&channel_host_area,
                                                         memory_order_acquire);
    *slots = channel_host_count; /* stored before the ring is published */
    return ring;
}
/* Adds to function `id`'s launches (graph: its graph kernel-node runs) there. */
static inline void counts_add_func(unsigned id, bool graph, uint64_t n)
{
    struct proto_counts *c = channel_counts();
    if (c && id - 1u < PROTO_MAX_FUNCS)
        __atomic_fetch_add(graph ? &c->funcs[id - 1].graph_launches : &c->funcs[id - 1].launches,
                           n, __ATOMIC_RELAXED);
}
/* Adds one to the process's captured launches (graph: its graph launches) there. */
static inline void counts_add_process(bool graph)
{
    struct proto_counts *c = channel_counts();
    if (c)
        __atomic_fetch_add(graph ? &c->graph_launches : &c->captured, 1, __ATOMIC_RELAXED);
}
/* The control page, writable: only for the `interrupt` handshake. */
volatile struct proto_control *channel_control_rw(void);
unsigned channel_options(void);
/* With OPTION_WATCH_NAN: the launches a window holds at most, and what follows a
 * finding (enum proto_watch_then). */
unsigned channel_watch_window(void);
unsigned channel_watch_then(void);
/* The staging area after the control page (mapped, not yet pinned), its size. */
char *channel_staging(void);
size_t channel_staging_size(void);
/* The write-behind area at the end of the shared file (protocol.h); NULL and 0
 * without one. */
char *channel_behind(size_t *size);
/* The trace ring's slots (NULL and 0 without --trace). */
struct proto_ring_slot *channel_ring(uint32_t *slots);
/* The result ring's slots (NULL and 0 without one). */
struct proto_result_slot *channel_results(uint32_t *slots);
/* Whether the controller process still runs: false once it has exited, even
 * while its parent has not reaped it (a pidfd where the kernel has them, else
 * its state in /proc). Once false, false for good (one load), and the shim is
 * a pass-through from then on. Every wait for the controller consults it. */
bool channel_controller_alive(void);

/* A message being built: header first, then payload appended. */
struct msg {
    struct strbuf sb;
};
void msg_init(struct msg *m, char *stack, size_t cap, enum proto_kind kind, uint64_t tag);
void msg_add(struct msg *m, const void *data, size_t len);
/* Sends a finished message; no reply. False if the controller is gone. */
bool channel_send(struct msg *m);
/* Sends an event of one struct (no reply). */
bool channel_send_event(enum proto_kind kind, uint64_t tag, const void *payload, size_t size);
/* Sends a message and reads the reply, which must be of kind `expect`, into
 * reply[cap]; *len is the payload size. False if the controller is gone or
 * broke the protocol (the shim then passes everything through). */
bool channel_request(struct msg *m, enum proto_kind expect, void *reply, size_t cap,
                     size_t *len);
/* While a launch is held its thread owns the connection: every other thread
 * that needs the controller waits, which is the all-stop the prompt wants. */
/* Runs fn(arg) owning the connection; fn talks with channel_*_locked. */
void channel_exclusive(void (*fn)(void *), void *arg);
bool channel_send_locked(struct msg *m);
/* Reads one message of any kind (header checked, payload bounded by cap). */
bool channel_recv_locked(uint16_t *kind, uint64_t *tag, void *payload, size_t cap, size_t *len);
void channel_reset_after_fork(void);
void msg_free(struct msg *m);

#endif
