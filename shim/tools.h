/* cudump's own kernel: digests and NaN/Inf scans of buffers (tools.c). */
#ifndef CUDUMP_TOOLS_H
#define CUDUMP_TOOLS_H

#include "ctxlife.h"
#include "launchinfo.h"
#include "tooljob.h"

/* What a COPY_TOOL copy asks cudump's kernel to compute (enum proto_tool_mode). */
static inline unsigned tool_mode(const struct proto_copy *c)
{
    return (c->flags >> PROTO_TOOL_MODE_SHIFT) & 0xff;
}
/* For a digest: the element format of the sum of |x| it also computes (a scan
 * mode), or 0. */
static inline unsigned tool_sum(const struct proto_copy *c)
{
    return (c->flags >> PROTO_TOOL_SUM_SHIFT) & 0xff;
}

/* One COPY_TOOL copy for cudump's kernel. */
struct tool_request {
    const struct proto_copy *copy;
    struct proto_tool_result *result;   /* in staging or the result ring */
    unsigned acc;                       /* its accumulator in the context's scratch: the
                                         * copy's index in a plan, or PROTO_MAX_COPIES +
                                         * a ring slot's index * PROTO_MAX_REPEAT + its own */
    uint64_t tag;                       /* written to result->done after the result */
    bool marks;                         /* a scan after a gated launch: a new non-finite
                                         * value it finds holds the stream (tooljob.h) */
    const struct proto_tool_result *before; /* and the scan before it, or NULL */
    bool checked;                       /* in: found inside an allocation before, under the
                                         * same alloctab_removals(), so not looked up again;
                                         * out: inside a tracked allocation */
    bool ahead;                         /* made ahead for the next launch (shim/ahead.h):
                                         * not one of the held launch's jobs (TOOL_HOLDS) */
};
/* Where the stream is held after a gated launch: the slot's gate, and the
 * slot's index (its word of hold scratch). */
struct tool_hold {
    uint32_t *gate;
    struct proto_gate_mail *mail;   /* the slot's mailbox: copies that serve the hold */
    unsigned acc;
};
/* How tools_run may launch cudump's kernel. */
enum tools_how {
    /* The caller neither waits for the kernel nor puts anything on the stream
     * before the program's next call: a kernel launch that serves every job is
     * handed to the launcher thread (handoff.h). */
    TOOLS_HAND_OFF = 1u,
    /* The program's launch, made plainly (not itself with programmatic
     * serialization), is the last thing on the stream, and no other call of the
     * program's was in progress: cudump's kernel may be launched so that it
     * waits on the GPU for it (toollaunch.h), while no call begins after
     * `begun` (tools_run's). */
    TOOLS_RIGHT_AFTER = 2u,
};

/* Runs cudump's kernel over the buffers of n tool copies on the launch's stream
 * (as few launches as it takes); sets each result's rc. The kernel writes the
 * words and `done` once the stream gets there. With `hold`, the last of those
 * launches holds the stream at the gate if a scan that `marks` finds a new
 * non-finite value (tooljob.h); returns whether it was made (false without
 * `hold`). `how`: enum tools_how's flags; `begun`: with TOOLS_RIGHT_AFTER,
 * calls_begun() read before the program's launch was made. */
bool tools_run(const struct launch_info *li, struct tool_request *reqs, unsigned n,
               const struct tool_hold *hold, unsigned how, unsigned long long begun);

/* For a copy that serves a held launch through its mailbox (GATE_COPY, made by
 * cudump's kernel that holds the stream, in the current context): CUDA_SUCCESS
 * with the device's address of the `size` staging bytes at `host` in *dst if
 * the bytes it reads lie inside one allocation and the kernel's context sees
 * staging there; else why not (the copy is then made as any other). */
CUresult tools_mail_target(CUdeviceptr src, size_t width, size_t height, size_t pitch,
                           const void *host, CUdeviceptr *dst);

/* cudump's kernel as kernel nodes of a graph (graph.c), where nothing goes on
 * the stream: the function of the kernel loaded in the context of li's stream
 * (*fn), and the jobs of the n requests that pass tools_run's checks, in
 * order (*njobs of them; of[i] is the request of jobs[i]). Each request's
 * result rc says whether it passed, or why not. Nothing marks or holds.
 * Returns why the kernel cannot run in that context at all, else CUDA_SUCCESS. */
CUresult tools_graph_jobs(const struct launch_info *li, struct tool_request *reqs, unsigned n,
                          struct tool_job *jobs, struct tool_request **of, unsigned *njobs,
                          CUfunction *fn);
/* One launch's parameter over k (at most TOOL_JOBS) of those jobs, holding
 * nothing; returns its grid (blocks). */
unsigned tools_pack(struct tool_jobs *out, const struct tool_job *jobs, unsigned k);
/* Whether cudump's kernel may still read the buffer of a COPY_TOOL copy (the
 * check tools_run makes): for a graph made with its nodes, run again once
 * allocations have changed. */
bool tools_readable(const struct proto_copy *c);
/* A context destroyed (its key, taken before): what cudump's kernel kept in it
 * is forgotten. By handle and id, since another thread may meanwhile have made
 * a context under the same handle and loaded the kernel there. */
void tools_forget(const struct ctx_key *gone);
void tools_reset_after_fork(void);

/* The batched scan (tooljob.h's struct tool_list), for windows of launches (window.c):
 * each context has TOOL_LIST_SLOTS lists, used in turn by the caller, which reads a
 * slot's results once their `done` says so before it uses the slot again. */
enum { TOOL_LIST_SLOTS = 4 };
/* One launch of the batched scan on li's stream (in its context, the kernel loaded on
 * first use) over n (at most TOOL_LIST_MAX) NaN/Inf scan copies, in list slot `slot`.
 * A copy that fails tools_run's checks is not scanned: its result's rc says why and its
 * `done` is `tag` at once. Returns the slot's results (result i is copy i's; host memory
 * that stays while the context does: see tools_list_epoch), or NULL with *rc where the
 * kernel could not be launched. */
struct proto_tool_result *tools_list_run(const struct launch_info *li,
                                         const struct proto_copy *const *copies, unsigned n,
                                         unsigned slot, uint64_t tag, CUresult *rc);
/* A number that moves whenever a context the kernel was loaded in ended: results
 * returned before then went with it. */
unsigned long long tools_list_epoch(void);
/* The batched scan as a node of a graph (window.c): its function, loaded in the context
 * of li's stream, and the most blocks a job should have there. */
CUresult tools_list_fn(const struct launch_info *li, CUfunction *fn, unsigned *max_blocks);

#endif
