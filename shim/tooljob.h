/*
 * What the shim hands cudump's kernel (shim/gpu/tools.cu): the one definition
 * of its parameter, shared by tools.cu, tools.c and the test stand-in's copy
 * of the kernel. Plain C, so that nvcc and the system C compiler lay it out
 * the same way (every field naturally aligned, no implicit padding).
 *
 * One launch of the kernel serves up to TOOL_JOBS buffers: the blocks of the
 * grid are dealt out to the jobs in order, `blocks` each. Every block adds
 * what it found to its job's accumulator in device scratch; the last block of
 * a job to finish copies the accumulator into the job's result (host memory
 * the device can write: the staging area or the result ring, both pinned and
 * mapped), writes `tag` into the result's `done` after it, and zeroes the
 * accumulator for the next use. So nothing needs zeroing before a launch and
 * nothing needs copying after it: one kernel launch per phase of a launch.
 *
 * A job may also have a `twin`: a second result the same words go to, with its
 * own tag (the same bytes asked for twice in one launch of the kernel: a
 * launch's scans after it and the next launch's scans before it, made ahead,
 * where what one launch writes the next reads). The bytes are read once.
 *
 * A scan after a gated launch (PLAN_GATE) is also given `mark` and `before`
 * (the result of the scan of the same buffer before the launch, or 0): where
 * it finds non-finite values and that scan found none, the last block sets
 * the word at `mark`, in device scratch, before `done`.
 *
 * Every launch of the kernel after such a launch gets `hold_acc`: two zeroed
 * words of scratch, jobs counted and the word the jobs `mark`. The last of
 * those launches also gets `hold`, the launch's gate (its word in the result
 * ring, protocol.h's proto_gate). Each of its jobs of the held launch
 * (TOOL_HOLDS; not those made ahead for the next launch) counts itself after
 * its result is written and before its `done`, and the job that finishes last
 * zeroes both words; if a job marked something it writes GATE_HELD into the
 * gate (after every result is in) and waits while the gate reads GATE_HELD or
 * GATE_SERVING. So the stream stops there, with the buffers as the launch left
 * them, until the shim opens the gate (gate.c). It waits TOOL_HOLD_NS for the
 * shim to begin and TOOL_SERVE_NS for it to finish at most, then opens the
 * gate itself (GATE_RELEASED): nothing the shim does, or fails to do, holds the
 * program's stream for good.
 *
 * While it holds, the whole block of the job that holds waits (its threads do
 * not leave before the hold is decided), so that it can make the copies that
 * serve the hold: where the gate reads GATE_COPY, the mailbox at `hold_mail`
 * (protocol.h's proto_gate_mail) names one copy, rows of device memory into
 * staging, which the block's threads make together; then the block writes the
 * request's number into the mailbox's `done`. Copies on another stream may
 * queue behind the holding kernel in the GPU's shared hardware queues; these
 * cannot. Counting before `done` means that once every
 * `done` of the slot is written nothing touches its scratch words again, so a
 * reused slot finds them zeroed.
 */
#ifndef CUDUMP_TOOLJOB_H
#define CUDUMP_TOOLJOB_H

enum {
    TOOL_JOBS = 40,         /* buffers one launch of the kernel serves (4 KB of parameter) */
    TOOL_THREADS = 256,     /* threads per block */
    TOOL_ACC_WORDS = 4,     /* 64-bit words of a job's accumulator: sum, mark, blocks done, - */
    TOOL_HOLDS = 1u << 24,  /* in a job's `mode`: one of the held launch's own jobs, which
                             * count for the hold (tool_jobs.hold_jobs); jobs made ahead for
                             * the next launch in the same kernel launch (shim/ahead.h) do not */
};

/* How long the kernel holds a stream at most: the shim begins to serve a held
 * gate in milliseconds, or gives up on it after a second (gate.c); serving
 * copies every buffer of the launch, which may be many GB. */
#define TOOL_HOLD_NS 10000000000ull
#define TOOL_SERVE_NS 600000000000ull

struct tool_job {
    unsigned long long src;     /* first byte of the buffer */
    unsigned long long width;   /* bytes per row */
    unsigned long long height;  /* rows */
    unsigned long long pitch;   /* bytes from row to row */
    unsigned long long result;  /* device address of its struct proto_tool_result */
    unsigned long long acc;     /* device address of TOOL_ACC_WORDS zeroed words */
    unsigned long long tag;     /* written to the result's `done` once the result is there */
    unsigned long long mark;    /* scans after a gated launch: device address of the word a
                                 * new non-finite value is marked in (hold_acc + 8), or 0 */
    unsigned long long before;  /* and of the result of the scan before it, or 0 */
    unsigned long long twin;    /* device address of a second result its words go to, or 0 */
    unsigned long long twin_tag; /* written to the twin's `done` once they are there */
    unsigned int mode;          /* enum proto_tool_mode; a digest's bits 8-15: the element
                                 * format of its sum of |x| (a scan mode), or 0; TOOL_HOLDS */
    unsigned int blocks;        /* blocks of the grid that work on it (at least 1) */
};

struct tool_jobs {
    struct tool_job job[TOOL_JOBS];
    unsigned int njobs;
    unsigned int hold_jobs;      /* with `hold`: the jobs marked TOOL_HOLDS, which count */
    unsigned long long hold;     /* device address of the gate to hold the stream at, or 0 */
    unsigned long long hold_acc; /* after a gated launch: two zeroed words of scratch, jobs
                                  * counted and marked, or 0 */
    unsigned long long hold_mail; /* with `hold`: device address of the slot's mailbox */
};

/* The batched scan (cudump_scan_list): NaN/Inf scans of up to TOOL_LIST_MAX buffers
 * in one launch, the list given by address rather than in the parameter, so that a
 * window of the program's launches (shim/window.c) or a graph's kernel nodes take one
 * launch or one node whatever their number of buffers. `starts` holds njobs words:
 * each job's first block (the first is 0), in order; the grid is the last job's start
 * plus its blocks. Jobs neither mark nor hold (mark, before: 0). A job's `twin`, where
 * not 0, is a running record of its scans for the host to read while the GPU goes on
 * (a graph's scan node, shim/window.c): TOOL_RECORD_WORDS 64-bit words, scans that found
 * the buffer non-finite, scans that found it finite, the first non-finite index (as ~ of
 * the result's max) and the count of the last one that found it so, and a sequence word
 * that is odd while the others are being written (the host reads it before and after
 * them, and takes them only where it read one even value both times: the words of one
 * scan, never parts of two). */
enum { TOOL_LIST_MAX = 1024 };

enum {
    TOOL_RECORD_BAD = 0,
    TOOL_RECORD_GOOD = 1,
    TOOL_RECORD_FIRST = 2,
    TOOL_RECORD_SEQ = 3,
    TOOL_RECORD_COUNT = 4,
    TOOL_RECORD_WORDS = 8,  /* a cache line an entry */
};

struct tool_list {
    unsigned long long jobs;    /* device address of njobs struct tool_job */
    unsigned long long starts;  /* device address of njobs unsigned ints */
    unsigned int njobs;
    unsigned int reserved;
};

/* The mailbox's 64-bit words (protocol.h's proto_gate_mail, checked in tools.c). */
enum {
    TOOL_MAIL_SEQ = 0,
    TOOL_MAIL_DONE = 1,
    TOOL_MAIL_SRC = 2,
    TOOL_MAIL_DST = 3,
    TOOL_MAIL_WIDTH = 4,
    TOOL_MAIL_HEIGHT = 5,
    TOOL_MAIL_PITCH = 6,
};

#endif
