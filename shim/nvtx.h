/* The shim as an NVTX tool (nvtx.c): the part of NVTX's public injection
 * interface it uses, declared here so that the shim builds without NVTX's
 * headers. The layouts and numbers are those of nvtx3's nvToolsExt.h and
 * nvtxDetail/nvtxTypes.h (NVTX API version 2 and 3 share them). */
#ifndef CUDUMP_NVTX_H
#define CUDUMP_NVTX_H

#include <stddef.h>
#include <stdint.h>
#include <wchar.h>

typedef uint64_t nvtx_range_id;

/* nvtxEventAttributes_v2: the message is all the shim reads. */
struct nvtx_attributes {
    uint16_t version;
    uint16_t size;              /* bytes of the struct as the program knows it */
    uint32_t category;
    int32_t color_type;
    uint32_t color;
    int32_t payload_type;
    int32_t reserved0;
    uint64_t payload;
    int32_t message_type;       /* enum nvtx_message_type */
    int32_t reserved1;          /* the union's alignment */
    union {
        const char *ascii;
        const wchar_t *unicode;
        const void *registered; /* nvtxStringHandle_t */
    } message;
};

enum nvtx_message_type {
    NVTX_MSG_UNKNOWN = 0,
    NVTX_MSG_ASCII = 1,
    NVTX_MSG_UNICODE = 2,
    NVTX_MSG_REGISTERED = 3,
};

/* NVTX's answer to a push or pop when no tool tracks them. */
enum { NVTX_NO_PUSH_POP_TRACKING = -2 };

/* NvtxCallbackModule, and the callback ids of the two modules the shim fills. */
enum nvtx_module { NVTX_MOD_CORE = 1, NVTX_MOD_CORE2 = 5 };
enum nvtx_core_id {
    NVTX_CORE_MarkEx = 1, NVTX_CORE_MarkA = 2, NVTX_CORE_MarkW = 3,
    NVTX_CORE_RangeStartEx = 4, NVTX_CORE_RangeStartA = 5, NVTX_CORE_RangeStartW = 6,
    NVTX_CORE_RangeEnd = 7, NVTX_CORE_RangePushEx = 8, NVTX_CORE_RangePushA = 9,
    NVTX_CORE_RangePushW = 10, NVTX_CORE_RangePop = 11,
};
enum nvtx_core2_id {
    NVTX_CORE2_DomainMarkEx = 1, NVTX_CORE2_DomainRangeStartEx = 2,
    NVTX_CORE2_DomainRangeEnd = 3, NVTX_CORE2_DomainRangePushEx = 4,
    NVTX_CORE2_DomainRangePop = 5, NVTX_CORE2_DomainRegisterStringA = 10,
    NVTX_CORE2_DomainRegisterStringW = 11, NVTX_CORE2_DomainCreateA = 12,
    NVTX_CORE2_DomainCreateW = 13,
};

/* NvtxExportTableID, and the export table of callbacks. */
enum { NVTX_ETID_CALLBACKS = 1 };
typedef void (*nvtx_fn)(void);
typedef nvtx_fn **nvtx_table;   /* an array of pointers to the program's function pointers */
struct nvtx_callbacks_table {
    size_t struct_size;
    int (*GetModuleFunctionTable)(int module, nvtx_table *out_table, unsigned *out_size);
};
typedef const void *(*nvtx_get_export_table)(uint32_t id);

#endif
