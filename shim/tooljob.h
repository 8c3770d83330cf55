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
 * A scan after a launch may also be given `gate` (a word the stream waits on,
 * protocol.h's proto_gate) and `before` (the result of the scan of the same
 * buffer before the launch, or 0): where it finds non-finite values and that
 * scan found none, the last block writes GATE_HELD into the gate before `done`.
 */
#ifndef CUDUMP_TOOLJOB_H
#define CUDUMP_TOOLJOB_H

enum {
    TOOL_JOBS = 48,         /* buffers one launch of the kernel serves (4 KB of parameter) */
    TOOL_THREADS = 256,     /* threads per block */
    TOOL_ACC_WORDS = 4,     /* 64-bit words of a job's accumulator: sum, mark, blocks done, - */
};

struct tool_job {
    unsigned long long src;     /* first byte of the buffer */
    unsigned long long width;   /* bytes per row */
    unsigned long long height;  /* rows */
    unsigned long long pitch;   /* bytes from row to row */
    unsigned long long result;  /* device address of its struct proto_tool_result */
    unsigned long long acc;     /* device address of TOOL_ACC_WORDS zeroed words */
    unsigned long long tag;     /* written to the result's `done` once the result is there */
    unsigned long long gate;    /* scans after a launch: device address of its 32-bit gate, or 0 */
    unsigned long long before;  /* and of the result of the scan before it, or 0 */
    unsigned int mode;          /* enum proto_tool_mode */
    unsigned int blocks;        /* blocks of the grid that work on it (at least 1) */
};

struct tool_jobs {
    struct tool_job job[TOOL_JOBS];
    unsigned int njobs;
    unsigned int reserved;
};

#endif
