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
 * A scan after a launch may also be given `gate` (the launch's word in the
 * result ring, protocol.h's proto_gate) and `before` (the result of the scan
 * of the same buffer before the launch, or 0): where it finds non-finite
 * values and that scan found none, the last block writes GATE_HELD into the
 * gate before `done`.
 *
 * The last launch of the kernel after such a launch is also given `hold`, the
 * same gate: the block that finishes its last job then waits while the gate
 * reads GATE_HELD, so the stream stops there, with the buffers as the launch
 * left them, until the shim opens the gate (gate.c). It waits TOOL_HOLD_NS at
 * most, then opens the gate itself (GATE_RELEASED): nothing the shim does, or
 * fails to do, can hold the program's stream for good. `hold_acc` counts the
 * jobs finished, so that the hold comes after every gate write of the launch.
 */
#ifndef CUDUMP_TOOLJOB_H
#define CUDUMP_TOOLJOB_H

enum {
    TOOL_JOBS = 48,         /* buffers one launch of the kernel serves (4 KB of parameter) */
    TOOL_THREADS = 256,     /* threads per block */
    TOOL_ACC_WORDS = 4,     /* 64-bit words of a job's accumulator: sum, mark, blocks done, - */
};

/* How long the kernel holds a stream at most: the shim opens a held gate in
 * milliseconds, or gives up on it after a second (gate.c). */
#define TOOL_HOLD_NS 10000000000ull

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
    unsigned long long hold;     /* device address of the gate to hold the stream at, or 0 */
    unsigned long long hold_acc; /* with it: a zeroed word of scratch, jobs finished */
};

#endif
