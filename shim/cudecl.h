/*
 * The few CUDA driver API declarations cudump needs.
 *
 * Written from the driver's documented ABI so that the shim builds with a
 * plain C compiler and no CUDA toolkit. tests/test_cudecl.py checks every
 * size, offset and constant here against the real cuda.h where one exists.
 */
#ifndef CUDUMP_CUDECL_H
#define CUDUMP_CUDECL_H

#include <stddef.h>
#include <stdint.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef uint64_t cuuint64_t;
typedef unsigned long long CUmemGenericAllocationHandle;

typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUlib_st *CUlibrary;
typedef struct CUkern_st *CUkernel;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUgraphExec_st *CUgraphExec;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphNode_st *CUgraphNode;
typedef struct CUmemPoolHandle_st *CUmemoryPool;
typedef struct CUarray_st *CUarray;
/* Passed through only (api.h's PASSES rows): never looked into, so
 * declared without their members, under cuda.h's tags. */
typedef struct CUextSemaphore_st *CUexternalSemaphore;
typedef struct CUDA_MEMCPY3D_PEER_st CUDA_MEMCPY3D_PEER;
typedef struct CUDA_MEMCPY3D_BATCH_OP_st CUDA_MEMCPY3D_BATCH_OP;
typedef struct CUmemcpyAttributes_st CUmemcpyAttributes;
typedef struct CUDA_EXTERNAL_SEMAPHORE_WAIT_PARAMS_st CUDA_EXTERNAL_SEMAPHORE_WAIT_PARAMS;
typedef struct CUDA_EXTERNAL_SEMAPHORE_SIGNAL_PARAMS_st CUDA_EXTERNAL_SEMAPHORE_SIGNAL_PARAMS;
typedef union CUstreamBatchMemOpParams_union CUstreamBatchMemOpParams;
typedef void (*CUhostFn)(void *userData);
typedef struct CUgraphicsResource_st *CUgraphicsResource;
typedef void (*CUstreamCallback)(CUstream hStream, CUresult status, void *userData);

enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_DEINITIALIZED = 4,
    CUDA_ERROR_INVALID_CONTEXT = 201,
    CUDA_ERROR_INVALID_HANDLE = 400,
    CUDA_ERROR_NOT_FOUND = 500,
    CUDA_ERROR_NOT_READY = 600,
    CUDA_ERROR_TIMEOUT = 909,
    CUDA_ERROR_NOT_SUPPORTED = 801,
    CUDA_ERROR_STREAM_CAPTURE_IMPLICIT = 906,
};

/* cuGetProcAddress flags and query results. */
enum {
    CU_GET_PROC_ADDRESS_DEFAULT = 0,
    CU_GET_PROC_ADDRESS_LEGACY_STREAM = 1,
    CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM = 2,
};
typedef enum {
    CU_GET_PROC_ADDRESS_SUCCESS = 0,
    CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND = 1,
    CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT = 2,
} CUdriverProcAddressQueryResult;

typedef enum {
    CU_MEMORYTYPE_HOST = 1,
    CU_MEMORYTYPE_DEVICE = 2,
    CU_MEMORYTYPE_ARRAY = 3,
    CU_MEMORYTYPE_UNIFIED = 4,
} CUmemorytype;

typedef enum {
    CU_STREAM_CAPTURE_STATUS_NONE = 0,
    CU_STREAM_CAPTURE_STATUS_ACTIVE = 1,
    CU_STREAM_CAPTURE_STATUS_INVALIDATED = 2,
} CUstreamCaptureStatus;

typedef enum {
    CU_STREAM_CAPTURE_MODE_GLOBAL = 0,
    CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1,
    CU_STREAM_CAPTURE_MODE_RELAXED = 2,
} CUstreamCaptureMode;

#define CU_STREAM_LEGACY ((CUstream)0x1)
#define CU_STREAM_PER_THREAD ((CUstream)0x2)
#define CU_MEMHOSTREGISTER_PORTABLE 0x01
#define CU_MEMHOSTREGISTER_DEVICEMAP 0x02
#define CU_EVENT_DISABLE_TIMING 0x2
#define CU_STREAM_NON_BLOCKING 0x1

/* CUdevice_attribute values cudump asks for. */
enum {
    CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
};

typedef struct {
    size_t srcXInBytes;
    size_t srcY;
    CUmemorytype srcMemoryType;
    const void *srcHost;
    CUdeviceptr srcDevice;
    CUarray srcArray;
    size_t srcPitch;
    size_t dstXInBytes;
    size_t dstY;
    CUmemorytype dstMemoryType;
    void *dstHost;
    CUdeviceptr dstDevice;
    CUarray dstArray;
    size_t dstPitch;
    size_t WidthInBytes;
    size_t Height;
} CUDA_MEMCPY2D;

/* A launch attribute: cudump never reads the program's, but CUlaunchConfig's
 * layout depends on its size, and cudump's own kernel is launched with one
 * (programmatic stream serialization: its value, an int, first in `value`). */
enum {
    CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6,
    CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT = 7,
};

typedef struct {
    int id;
    char pad[4];
    char value[64];
} CUlaunchAttribute;

typedef struct {
    unsigned int gridDimX;
    unsigned int gridDimY;
    unsigned int gridDimZ;
    unsigned int blockDimX;
    unsigned int blockDimY;
    unsigned int blockDimZ;
    unsigned int sharedMemBytes;
    CUstream hStream;
    CUlaunchAttribute *attrs;
    unsigned int numAttrs;
} CUlaunchConfig;

/* CUgraphNodeType values cudump looks at. */
enum {
    CU_GRAPH_NODE_TYPE_KERNEL = 0, CU_GRAPH_NODE_TYPE_GRAPH = 4, CU_GRAPH_NODE_TYPE_MEM_ALLOC = 10,
    CU_GRAPH_NODE_TYPE_MEM_FREE = 11, CU_GRAPH_NODE_TYPE_CONDITIONAL = 13,
};

/* CUDA_GRAPH_INSTANTIATE_PARAMS, for cuGraphInstantiateWithParams. */
typedef struct {
    unsigned long long flags;       /* CUDA_GRAPH_INSTANTIATE_FLAG_* */
    CUstream hUploadStream;
    CUgraphNode hErrNode_out;
    int result_out;                 /* CUgraphInstantiateResult */
} CUDA_GRAPH_INSTANTIATE_PARAMS;

/* A graph instantiated with this flag may be launched from device code. */
enum { CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH = 4 };

/* CUDA_KERNEL_NODE_PARAMS (_v2, CUDA 12 and later): `func`, or `kern` when
 * func is NULL; kernelParams point at each parameter's value. */
typedef struct {
    CUfunction func;
    unsigned int gridDimX;
    unsigned int gridDimY;
    unsigned int gridDimZ;
    unsigned int blockDimX;
    unsigned int blockDimY;
    unsigned int blockDimZ;
    unsigned int sharedMemBytes;
    void **kernelParams;
    void **extra;
    CUkernel kern;
    CUcontext ctx;
} CUDA_KERNEL_NODE_PARAMS;

/* CUDA_MEMCPY3D, for the copy nodes cudump adds to its own copies of graphs. */
typedef struct {
    size_t srcXInBytes;
    size_t srcY;
    size_t srcZ;
    size_t srcLOD;
    CUmemorytype srcMemoryType;
    const void *srcHost;
    CUdeviceptr srcDevice;
    CUarray srcArray;
    void *reserved0;
    size_t srcPitch;
    size_t srcHeight;
    size_t dstXInBytes;
    size_t dstY;
    size_t dstZ;
    size_t dstLOD;
    CUmemorytype dstMemoryType;
    void *dstHost;
    CUdeviceptr dstDevice;
    CUarray dstArray;
    void *reserved1;
    size_t dstPitch;
    size_t dstHeight;
    size_t WidthInBytes;
    size_t Height;
    size_t Depth;
} CUDA_MEMCPY3D;

/* TMA tensor maps (Hopper and later): an opaque 128-byte descriptor that the
 * encode functions fill in and kernels take by value. CUDA 12's cuda.h aligns
 * it at 64 bytes, CUDA 13's at 128: the shim copies its bytes and never relies
 * on more than 64, which both kinds of program give it (and a kernel's
 * parameter block places it at a multiple of either). The enums are int-sized;
 * cudump reads only the data type's numbers. */
typedef uint32_t cuuint32_t;
typedef struct {
    _Alignas(64) cuuint64_t opaque[16];
} CUtensorMap;
typedef int CUtensorMapDataType;
typedef int CUtensorMapInterleave;
typedef int CUtensorMapSwizzle;
typedef int CUtensorMapL2promotion;
typedef int CUtensorMapFloatOOBfill;
typedef int CUtensorMapIm2ColWideMode;
enum {
    CU_TENSOR_MAP_DATA_TYPE_UINT8 = 0, CU_TENSOR_MAP_DATA_TYPE_UINT16 = 1,
    CU_TENSOR_MAP_DATA_TYPE_UINT32 = 2, CU_TENSOR_MAP_DATA_TYPE_INT32 = 3,
    CU_TENSOR_MAP_DATA_TYPE_UINT64 = 4, CU_TENSOR_MAP_DATA_TYPE_INT64 = 5,
    CU_TENSOR_MAP_DATA_TYPE_FLOAT16 = 6, CU_TENSOR_MAP_DATA_TYPE_FLOAT32 = 7,
    CU_TENSOR_MAP_DATA_TYPE_FLOAT64 = 8, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 = 9,
    CU_TENSOR_MAP_DATA_TYPE_FLOAT32_FTZ = 10, CU_TENSOR_MAP_DATA_TYPE_TFLOAT32 = 11,
    CU_TENSOR_MAP_DATA_TYPE_TFLOAT32_FTZ = 12, CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN8B = 13,
    CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN16B = 14, CU_TENSOR_MAP_DATA_TYPE_16U6_ALIGN16B = 15,
};
enum { CU_TENSOR_MAP_NUM_QWORDS = 16 };

/* Opaque to cudump: passed through to the real driver untouched. */
typedef struct CUmemAllocationProp_st CUmemAllocationProp;

/* A memory pool of cudump's own (scratch.c): device memory, no export. */
enum {
    CU_MEM_ALLOCATION_TYPE_PINNED = 1,
    CU_MEM_HANDLE_TYPE_NONE = 0,
    CU_MEM_LOCATION_TYPE_DEVICE = 1,
    CU_MEMPOOL_ATTR_RELEASE_THRESHOLD = 4,
    CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT = 5,
};
typedef struct CUmemLocation_st {
    int type;
    int id;
} CUmemLocation;
typedef struct CUmemPoolProps_st {
    int allocType;
    int handleTypes;
    CUmemLocation location;
    void *win32SecurityAttributes;
    size_t maxSize;
    unsigned short usage;
    unsigned char reserved[54];
} CUmemPoolProps;

#endif
