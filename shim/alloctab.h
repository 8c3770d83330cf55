/* Device allocations (alloctab.c). */
#ifndef CUDUMP_ALLOCTAB_H
#define CUDUMP_ALLOCTAB_H

#include "shim.h"

/* The protocol's allocation kinds (protocol.h). */
enum alloc_kind {
    AK_LINEAR = KIND_LINEAR, AK_PITCHED = KIND_PITCHED, AK_MANAGED = KIND_MANAGED,
    AK_ASYNC = KIND_ASYNC, AK_VMM = KIND_VMM, AK_HOST = KIND_HOST, AK_RANGE = KIND_RANGE
};

struct alloc_info {
    CUdeviceptr base;
    size_t size;
    enum alloc_kind kind;
    size_t pitch, width, height;
    unsigned elem_size;
};

void alloctab_add(const struct alloc_info *a);
/* Removes the allocation that starts at base; returns false if unknown. */
bool alloctab_remove(CUdeviceptr base, struct alloc_info *out);
/* A number that changes whenever an allocation is added or removed. */
unsigned long long alloctab_epoch(void);
/* One that changes only when an allocation goes away (or its address is
 * reused unseen): what an allocation's extent was worked out to be holds
 * until then, however many allocations are added. */
unsigned long long alloctab_removals(void);
/* Finds the allocation containing ptr. */
bool alloctab_find(CUdeviceptr ptr, struct alloc_info *out);
/* alloctab_find, else the driver's cuMemGetAddressRange (kind AK_RANGE). */
bool alloc_resolve(CUdeviceptr ptr, bool ask_driver, struct alloc_info *out);
void alloctab_reset_after_fork(void);

#endif
