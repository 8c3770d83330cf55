/* Gated launches in flight, and the shim's waits on the GPU that open their
 * gates meanwhile (gate.c). The watcher that serves them is watch.c. */
#ifndef CUDUMP_GATE_H
#define CUDUMP_GATE_H

#include "launchinfo.h"

struct gate_entry {
    struct proto_result_slot *slot;
    uint64_t tag;               /* the slot's position + 1: its `ready` and its results' `done` */
    uint64_t seq;
    CUcontext ctx;
    uint64_t added_ns;          /* when the launch was made: its hold began later */
    CUstream stream;            /* the launch's stream, and whether per-thread (ptsz) */
    int ptsz;
};

/* Whether every result of the slot (whose `ready` is tag) is in, or will never
 * come (its tool was not launched). */
bool gate_results_in(const struct proto_result_slot *s, uint64_t tag);
/* Keeps track of a gated launch until its gate is settled (under the staging lock). */
void gate_add(struct proto_result_slot *slot, uint64_t tag, uint64_t seq, CUcontext ctx,
              CUstream stream, int ptsz);
/* Forgets the settled launches; returns how many of those in flight, from the
 * from-th ever added on, work on `stream` might wait behind (the same stream,
 * or either is the legacy stream), and in *held whether any launch is held. */
unsigned gate_pending_for(CUstream stream, int ptsz, unsigned long long from, bool *held);
/* How many gated launches were ever added (the next one's number). */
unsigned long long gate_added(void);
/* Forgets the settled launches; returns how many are in flight, and in *held
 * whether any of them is held. */
unsigned gate_look(bool *held);
/* Copies out the held launches (at most cap). */
unsigned gate_held(struct gate_entry *out, unsigned cap);
/* Whether the newest gated launch is held. One load when none is in flight. */
bool gate_newest_held(void);
/* Blocks until some launch is in flight (the watcher's idle wait). */
void gate_wait_any(void);
/* Opens the gate if it is held, or being served, as `how`. */
void gate_open(const struct gate_entry *g, uint32_t how);
/* Opens every held gate without copies: for a thread about to wait on the
 * GPU, which may be waiting behind one. Cheap when nothing is gated. */
void gate_release_held(void);
/* This thread serves held gates (on) or no longer does (off); while it does,
 * its waits are on a side stream, which no gate holds. */
void gate_serving(bool on);
/* The gate this serving thread serves now (NULL: none); gate_serve_stalled
 * says whether a wait of the serve had to open it before its copies were done
 * (every copy of that serve is then reported failed). */
void gate_serve_slot(struct proto_result_slot *slot);
bool gate_serve_stalled(void);
/* Whether this thread serves a held gate now: its copies are then made by the
 * kernel that holds it (gate_mail_copy), not on a stream. */
bool gate_mail_open(void);
/* Has the kernel that holds the gate this thread serves copy `height` rows of
 * `width` bytes, `pitch` apart, from src to dst (a device address of staging,
 * tools_mail_target): fills the slot's mailbox, sets GATE_COPY and waits, on
 * host memory only, until the kernel says it is made (the gate reads
 * GATE_SERVING again). If the kernel gave up on the hold (GATE_RELEASED), or
 * the copy is not made within a bound, the gate is opened and this copy and
 * every later one of the serve fail with CUDA_ERROR_TIMEOUT, as the copies of a
 * stalled wait do. */
CUresult gate_mail_copy(CUdeviceptr src, size_t width, size_t height, size_t pitch,
                        CUdeviceptr dst);
/* Waits for an event recorded on a stream the caller waits for: as
 * cuEventSynchronize, opening held gates meanwhile while any launch is gated;
 * after grace_ms of waiting only (0: at once), for a caller the watcher may
 * still serve them around. A serving thread's wait opens its own gate instead
 * if it lasts (see SERVE_STALL_MS). */
CUresult gate_wait_event(CUevent ev, unsigned grace_ms);
/* Waits for everything queued on `stream` so far (ptsz: its per-thread
 * default stream), as gate_wait_event waits. */
CUresult gate_wait_on(CUstream stream, int ptsz, unsigned grace_ms);
/* Waits for everything queued on the launch's stream so far, a launch of
 * cudump's kernel handed to the launcher thread included (handoff.h). */
CUresult gate_wait_stream(const struct launch_info *li);
/* For a call of the program that waits on the GPU inside the driver (a
 * synchronous copy, a synchronize), before it is made: waits until the gated
 * launches in flight are settled (served by the watcher, or let go), at most
 * SETTLE_S, then lets go of any still held. While a synchronous copy waits
 * in the driver for a held stream, the driver keeps a lock that the serve's
 * own copies wait for (seen on an H200: the program in cuMemcpyHtoD_v2, the
 * watcher in cuMemcpy2DAsync_v2), so a gate held then would be opened only
 * by cudump's kernel giving up, minutes later. The same holds for the calls
 * that wait inside the driver without saying so: freeing memory, loading a
 * module, and getting or first launching a function (lazy loading loads a
 * kernel into the context at its first use, which waits for the context: seen
 * as a hang under --check-nan on an H200, cuDNN's convolution launched for the
 * first time while the launch before it was held). Cheap when nothing is gated. */
void gate_settle(void);
void gate_reset_after_fork(void);

#endif
