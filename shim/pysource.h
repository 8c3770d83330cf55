/* The line of the program's own Python code behind a launch (pysource.c). */
#ifndef CUDUMP_PYSOURCE_H
#define CUDUMP_PYSOURCE_H

#include "shim.h"

/* 0: off (CUDUMP_SOURCES not 1, or no Python in the process); 1: on; -1: not
 * yet known. */
extern _Atomic int pysource_on;

/* With the GIL held: the SCOPE_SOURCE node of "file:line" of the innermost
 * frame of the user's own code; 0 when there is none. */
uint32_t pysource_walk(void);

/* A launch's source node: one load when off. */
static inline uint32_t pysource_here(void)
{
    if (__builtin_expect(atomic_load_explicit(&pysource_on, memory_order_relaxed) == 0, 1))
        return 0;
    return pysource_walk();
}

#endif
