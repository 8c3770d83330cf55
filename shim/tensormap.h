/* TMA tensor maps the process made (tensormap.c): what each one says, found
 * again by its 128 bytes in a launch's parameters. */
#ifndef CUDUMP_TENSORMAP_H
#define CUDUMP_TENSORMAP_H

#include "shim.h"

/* What a tensor map was encoded with that tells where its tensor lies. */
struct tmap_info {
    CUdeviceptr address;
    uint32_t encoding;      /* enum proto_tmap_encoding */
    uint32_t dtype;         /* CUtensorMapDataType */
    uint32_t rank;          /* 1 to PROTO_TMAP_RANK */
    uint32_t interleave;
    uint64_t dims[PROTO_TMAP_RANK];
    uint64_t strides[PROTO_TMAP_RANK - 1];
};

/* Remembers the map's bytes as they are now, with what they say. */
void tensormap_remember(const CUtensorMap *map, const struct tmap_info *info);
/* What the map whose bytes these are says; false if no map of the process has them. */
bool tensormap_find(const unsigned char *bytes, struct tmap_info *out);
/* Whether any map was made: a launch of a program without them looks for none. */
bool tensormap_any(void);
void tensormap_reset_after_fork(void);

#endif
