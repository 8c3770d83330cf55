/*
 * How many blocks of cudump's kernel (shim/gpu/tools.cu) work on one job: the
 * one definition, for shim/tools.c and bench/tools_kernel.cu. Plain C, so that
 * the benchmark's C++ compiler reads it too.
 *
 * A unit is 16 bytes, which a thread of the kernel reads at once where the
 * buffer is in one piece, four units in flight; each block ends with a
 * reduction and atomics on its job's accumulator, and the job's last block
 * waits on them before it writes the result. A scan is bound by those loads
 * and waits: a big one gives each thread 16 units (fewer blocks, fewer closing
 * atomics), a small one at least 4 a thread over up to MIN_BLOCKS blocks
 * (enough threads that the few loads of each are in flight together). A
 * digest is bound by its arithmetic (two 64-bit products a word), so it keeps
 * 4 units a thread, as many threads as can be had. On an H200
 * (bench/tools_kernel.cu), a scan over two 6.4 MiB buffers took 6.5 us this
 * way against 7.9 us at 4 units a thread, and over two of 0.8 MiB 4.6 us
 * against 5.7 us at 16; small digests at 16 units took 9.3 us against 5.8 at
 * 4. At most `max_blocks` (enough to fill the GPU), at least one.
 */
#ifndef CUDUMP_TOOLBLOCKS_H
#define CUDUMP_TOOLBLOCKS_H

#include <stdbool.h>
#include <stdint.h>

#include "tooljob.h"

static inline unsigned tool_job_blocks(uint64_t bytes, bool digest, unsigned max_blocks)
{
    enum { MIN_BLOCKS = 48, SMALL = TOOL_THREADS * 4, BIG = TOOL_THREADS * 16 };
    uint64_t units = (bytes + 15) / 16;
    uint64_t wide = (units + SMALL - 1) / SMALL, blocks = wide;
    if (!digest) {
        blocks = (units + BIG - 1) / BIG;
        if (blocks < MIN_BLOCKS)
            blocks = wide < MIN_BLOCKS ? wide : (uint64_t)MIN_BLOCKS;
    }
    return blocks < 1 ? 1 : blocks > max_blocks ? max_blocks : (unsigned)blocks;
}

#endif
