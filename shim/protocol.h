/*
 * The wire protocol between libcudump.so and the cudump controller: the one
 * definition on the C side. cudump/wire/protocol.py is the Python side, and
 * tests/test_protocol.py compiles this header and checks that every constant,
 * size and field offset below agrees with it.
 *
 * Transport: one Unix stream socket per process. Every message, in both
 * directions, is a struct proto_header followed by a payload of
 * header.size - sizeof(struct proto_header) bytes. Integers are little
 * endian (every CUDA host is); structs have explicit padding only, so that
 * Python's struct module with '<' reads them field by field.
 *
 * Bulk bytes never travel here: the controller creates one shared-memory
 * object per process (memfd) and passes its file descriptor with MSG_WELCOME
 * (SCM_RIGHTS). It holds, in this order: the control page (struct
 * proto_control, PROTO_CONTROL_SIZE bytes), the trace ring (ring_slots slots
 * of PROTO_RING_SLOT_SIZE bytes; none without --trace), the result ring
 * (results_slots slots of PROTO_RESULT_SLOT_SIZE bytes), the host-write ring
 * (host_slots slots of PROTO_HOST_SLOT_SIZE bytes; none without NaN/Inf
 * scans), the staging area that snapshot and read copies land in, and at the
 * next multiple of PROTO_COUNTS_ALIGN bytes the launch counts (struct
 * proto_counts), then the flight ring (below), and last, at a multiple of
 * PROTO_BEHIND_ALIGN, the write-behind area (behind_mib MiB; none without
 * snapshot rules).
 *
 * The launch counts are the counters MSG_STATS reports at exit, kept up to
 * date by the shim as it counts: the controller reads them there for a process
 * that ended without MSG_STATS (killed by a signal, ended by _exit). A
 * function's graph kernel-node runs are added when the shim folds them in (a
 * graph destroyed or updated, the process's exit), as MSG_STATS's are.
 *
 * The trace ring carries MSG_LAUNCH events without a system call: many
 * launching threads reserve slots by compare-and-swap on ring_head (never
 * past ring_tail + ring_slots), fill them, and publish each by storing its
 * position + 1 in the slot's `ready`; the controller consumes slots in order
 * and advances ring_tail. A full ring makes the launching thread wait
 * (bounded); what it then still cannot write is counted in ring_dropped.
 *
 * The result ring carries the digests and scans of launches the shim planned
 * itself, repeating a plan the controller marked PLAN_REPEAT: no message per
 * launch, and no waiting for the GPU. The shim reserves a slot the same way
 * (results_head), writes the launch and the state of each result, and
 * publishes it with `ready`; cudump's kernel writes each result's words and
 * then its `done` (position + 1) into the slot itself, from the GPU, whenever
 * it gets there. The controller consumes a slot once it is ready and every
 * result in it is done or failed, and advances results_tail.
 *
 * The host-write ring carries the program's own writes into device memory
 * (host-to-device copies and memsets, struct proto_host_write), so that a
 * NaN/Inf the host put there is not taken for one no launch made. The
 * controller asks for it (host_slots != 0) only when it scans for NaN/Inf;
 * without it the shim's hooks of those calls cost one load. Slots are
 * reserved, published and consumed as the trace ring's (host_head,
 * host_tail, host_dropped); each carries the number of launches the process
 * had made when the call was made, which places it among the launches
 * whatever thread or ring reports them.
 *
 * The write-behind area holds the bytes of deferred launches (PLAN_DEFER) that
 * the controller has not yet written to files. The controller allocates its
 * pages in the background (behind_ready); the shim registers it as pinned
 * memory a piece at a time, as they are ready, copies a launch's buffers into free bytes
 * of it and hands them over with MSG_END (proto_end.behind, then where each
 * copy lies). The program may then go on: the bytes are in memory the
 * controller maps, which a crash of the program does not take. The controller
 * does not answer: it writes the files behind the program, in the order the
 * launches came, and stores in behind_done the number of the last launch it
 * has written; the shim reuses bytes of launches up to that one.
 */
#ifndef CUDUMP_PROTOCOL_H
#define CUDUMP_PROTOCOL_H

#include <stdint.h>

#include "api.h"

#define PROTO_VERSION 22
#define PROTO_MAGIC 0x50445543u /* "CUDP" */

/* ---- limits ---------------------------------------------------------------- */
enum {
    PROTO_MAX_MESSAGE = 1 << 20,   /* largest message either side accepts */
    PROTO_MAX_REPLY = 64 << 10,    /* largest message the shim reads */
    PROTO_MAX_COPIES = 512,        /* copies in one plan */
    PROTO_MAX_FRAMES = 64,         /* host stack frames in a backtrace */
    PROTO_MAX_PARAMS = 256,        /* kernel parameters the shim describes */
    PROTO_CONTROL_SIZE = 4096,     /* the control page at the start of the shared file */
    PROTO_STAGING_ALIGN = 256,     /* copies start at multiples of this in staging */
    PROTO_BEHIND_ALIGN = 2 << 20,  /* the write-behind area starts at a multiple of this */
    PROTO_BEHIND_SEGMENT = 1 << 30, /* and is prepared and pinned this much at a time */
    PROTO_TOKEN_SIZE = 32,         /* bytes of the session token (hex characters) */
    PROTO_RING_SLOT_SIZE = 136,    /* bytes of one trace ring slot */
    PROTO_TOOL_RESULT = 32,        /* staging bytes a COPY_TOOL result takes */
    PROTO_MAX_REPEAT = 512,        /* copies in a plan the shim may repeat (PLAN_REPEAT) */
    PROTO_REPEAT_WAYS = 256,       /* repeated plans the shim keeps per function, at most */
    PROTO_MAX_KEYS = 512,          /* byte ranges a repeated plan is kept by */
    PROTO_RESULT_SLOT_SIZE = 16592, /* bytes of one result ring slot */
    PROTO_IMAGE_CHUNK = 512 << 10, /* image bytes in one MSG_IMAGE */
    PROTO_MAX_COUNTERS = 64,       /* rules whose matching launches the shim counts */
    PROTO_MAX_SELECTORS = 8,       /* counted rules one function's launches count for */
    PROTO_MAX_FUNCS = 65536,       /* functions (ids 1 to this) proto_counts counts */
    PROTO_COUNTS_ALIGN = 4096,     /* proto_counts starts at a multiple of this */
    PROTO_MAX_TMAPS = 64,          /* tensor maps one MSG_BEGIN describes */
    PROTO_TMAP_BYTES = 128,        /* bytes of a CUtensorMap */
    PROTO_TMAP_STEP = 8,           /* the parameter bytes are searched for maps every this many */
    PROTO_TMAP_RANK = 5,           /* dimensions a tensor map has at most */
    PROTO_FLIGHT_PARAM_BYTES = 256, /* parameter bytes a flight ring slot keeps */
    PROTO_FLIGHT_SLOT_SIZE = 384,  /* bytes of one flight ring slot */
    PROTO_MAX_FLIGHT = 16384,      /* slots of the flight ring, at most */
    PROTO_HOST_SLOT_SIZE = 128,    /* bytes of one host-write ring slot (two cache lines) */
    PROTO_MAX_SCOPE_NAME = 512,    /* bytes of a scope's name, at most (longer ones are cut) */
};

/* ---- message kinds ----------------------------------------------------------- */
enum proto_kind {
    /* shim -> controller */
    MSG_HELLO = 1,     /* proto_hello + executable path; reply MSG_WELCOME */
    MSG_FUNC = 2,      /* proto_func + nparams x proto_param + name; reply MSG_WANTS */
    MSG_ASK = 3,       /* proto_ask: wants changed since; reply MSG_WANTS */
    MSG_LAUNCH = 4,    /* proto_launch: a traced launch (event, no reply) */
    MSG_GRAPH = 5,     /* proto_graph: a graph launch (event) */
    MSG_MEMORY = 6,    /* proto_memory: allocation, free, map, unmap (event) */
    MSG_STATS = 7,     /* proto_stats + nfuncs x proto_count, at exit (event) */
    MSG_BEGIN = 8,     /* proto_launch + nparams x proto_param + parameter bytes
                        * (padded to 8) + nptrs x proto_pointer + ntmaps x
                        * proto_tensormap + one proto_counted per selector of the
                        * function (the rest); reply MSG_PLAN */
    MSG_END = 9,       /* proto_end + ncopies x int32 result; reply MSG_PLAN: follow-up
                        * copies (phase after only) and PLAN_HALT to hold the launch now
                        * that it has run, usually neither; a follow-up ends with
                        * MSG_END of its own. With proto_end.behind (a PLAN_DEFER launch
                        * whose copies lie in the write-behind area), ncopies x uint64
                        * offsets follow, and no reply comes */
    MSG_STOPPED = 10,  /* proto_stopped: held; commands follow until MSG_RESUME */
    MSG_RESULT = 11,   /* proto_result + data: answer to a command while held */
    MSG_PIECE = 12,    /* proto_piece: one piece of a streamed copy is in staging; reply
                        * MSG_ACK once the controller has taken it */
    MSG_REPEAT = 13,   /* proto_result_slot: a launch made with a repeated plan whose scans
                        * found non-finite values that were not there before it, reported
                        * at once instead of through the result ring; reply MSG_PLAN, as
                        * to MSG_END (follow-up copies, which end with MSG_END) */
    MSG_IMAGE = 14,    /* proto_image + up to PROTO_IMAGE_CHUNK bytes of the module image a
                        * function came from (event, no reply): sent before the MSG_BEGIN of
                        * the first launch of a function that WANT_CAPTURE covers; an image
                        * goes over once per process, in chunks, and later functions of the
                        * same module send the header alone */
    MSG_NOTICE = 15,   /* proto_notice: something the user should know that no launch
                        * carries (event, no reply) */
    MSG_SCOPE = 16,    /* proto_scope + `length` bytes of UTF-8 name: a scope node, sent once,
                        * before the first launch event that names it (event, no reply) */
    MSG_WATCH = 17,    /* proto_watch + nfound x proto_watch_found: what a window's batched
                        * scan found newly non-finite (--watch-nan, shim/window.c; event) */
    MSG_OUTPUT = 18,   /* proto_output + `length` bytes of its type: a tensor the program's
                        * hooks say a module handed on (event, no reply) */

    /* controller -> shim */
    MSG_WELCOME = 32,  /* proto_welcome, with the shared memory's descriptor attached */
    MSG_WANTS = 33,    /* proto_wants */
    MSG_PLAN = 34,     /* proto_plan + ncopies x proto_copy + nkeys x proto_key */
    MSG_ACK = 35,      /* empty */
    MSG_READ = 40,     /* proto_read: copy device memory into staging; MSG_RESULT */
    MSG_QUERY = 41,    /* proto_query: the allocation holding an address; MSG_RESULT
                        * with one proto_pointer, or rc != 0 */
    MSG_BACKTRACE = 42, /* no payload; MSG_RESULT with text, one frame per line:
                         * "0xADDR\tMODULE\tSYMBOL\tOFFSET" */
    MSG_RESUME = 43,   /* proto_resume: let the held launch go */
    MSG_COUNTS = 44,   /* no payload; MSG_RESULT with a proto_count per launched function */
    MSG_GRAPH_NODES = 45, /* no payload; at a graph launch's stop: MSG_RESULT with a
                           * proto_graph_node per kernel node of the graph, in run order */
    MSG_WRITE = 46,    /* proto_write: copy bytes the controller put in staging into device
                        * memory (`set var` at a stop); MSG_RESULT */
};

/* ---- bits and codes ------------------------------------------------------------ */
enum proto_want {          /* what the controller wants of a function */
    WANT_TRACE = 1,        /* send MSG_LAUNCH after each launch */
    WANT_SNAPSHOT = 2,     /* send MSG_BEGIN before each launch (copies may follow) */
    WANT_STOP = 4,         /* send MSG_BEGIN before each launch (it may be held) */
    WANT_CAPTURE = 8,      /* send the function's module image (MSG_IMAGE) before its first
                            * MSG_BEGIN: a launch the controller captures for replay */
    WANT_COUNTED = 16,     /* WANT_SNAPSHOT holds only for launches a selector of
                            * proto_wants selects (every rule of the function is counted) */
};

enum proto_option {        /* proto_welcome.options */
    OPTION_TRACE_GRAPHS = 1,
    OPTION_CAPTURE = 2,    /* keep module images (a copy where the loader's memory may go
                            * away) so that WANT_CAPTURE can send them */
    OPTION_NO_AHEAD = 4,   /* make no scans ahead (shim/ahead.h): every launch made with a
                            * kept plan has its own launch of cudump's kernel before it */
    OPTION_HAND_OFF = 8,   /* the launcher thread launches cudump's kernel after a launch
                            * nobody waits for (shim/handoff.h); without it, the launching
                            * thread does */
    OPTION_WATCH_NAN = 16, /* stay-on NaN/Inf detection (shim/window.c): a launch made with a
                            * kept plan of scans marks its buffers, scanned at window ends */
};

enum proto_watch_then {    /* proto_welcome.watch_then: after a window's finding */
    WATCH_THEN_EXACT = 0,  /* scan every launch as --check-nan does from then on */
    WATCH_THEN_STOP = 1,   /* the controller ends the program */
    WATCH_THEN_GO_ON = 2,  /* go on scanning in windows */
};

enum proto_image_format {  /* proto_image.format */
    IMAGE_UNKNOWN = 0,     /* the shim did not see the module load, or cannot tell its size */
    IMAGE_CUBIN = 1,       /* an ELF file */
    IMAGE_FATBIN = 2,
    IMAGE_PTX = 3,         /* text, NUL-terminated */
};
#define PROTO_IMAGE_FORMATS(X) X(unknown) X(cubin) X(fatbin) X(ptx)

enum proto_scope_kind {   /* proto_scope.kind (cudump/launches/scopes.py's ScopeKind) */
    SCOPE_RANGE = 1,          /* an NVTX range, or a range the program named itself */
    SCOPE_FORWARD = 2,        /* a PyTorch module's forward */
    SCOPE_BACKWARD = 3,       /* its backward */
    SCOPE_OP = 4,             /* an operation of a compiled program */
    SCOPE_SOURCE = 5,         /* not a scope: the "file:line" a launch's `source` names */
};

enum proto_notice_kind {  /* proto_notice.kind */
    NOTICE_DEVICE_GRAPH = 1,  /* graph `graph` was instantiated for device launch: launches
                               * of it from device code never reach the shim */
    NOTICE_WATCH_EXACT = 2,   /* --watch-nan: the batched scan could not run (`detail`: the
                               * CUresult); the process scans every launch exactly instead */
    NOTICE_GRAPH_SET = 3,     /* a node of graph `graph` was set in the executable graph alone
                               * (cuGraphExec*SetParams, SetEvent, cuGraphNodeSetEnabled):
                               * cudump runs it unchanged from then on, without its copies */
    NOTICE_GRAPH_LEFT_OUT = 4, /* graph `graph`'s replay had no room in its plan
                                * (PROTO_MAX_COPIES) for the copies of `detail` kernel nodes
                                * (its last ones): they go unscanned (once a graph) */
};

/* proto_tensormap.encoding: the function that made the map. */
enum proto_tmap_encoding {
    TMAP_TILED = 0,        /* cuTensorMapEncodeTiled */
    TMAP_IM2COL = 1,       /* cuTensorMapEncodeIm2col */
    TMAP_IM2COL_WIDE = 2,  /* cuTensorMapEncodeIm2colWide */
};
#define PROTO_TMAP_ENCODINGS(X) X(tiled) X(im2col) X(im2col_wide)

enum proto_launch_flag {   /* proto_launch.flags */
    LAUNCH_CAPTURED = 1,   /* recorded into a graph by stream capture, not run */
    LAUNCH_INTERRUPTED = 2, /* the controller asked for a stop at any launch */
    LAUNCH_GRAPH = 4,      /* a kernel node run by cuGraphLaunch: graph, replay and node say which */
    LAUNCH_STOP_ONLY = 8,  /* MSG_BEGIN that only asks whether to hold (a graph's kernel node:
                            * its copies are planned by a MSG_BEGIN of their own) */
    LAUNCH_UNSAFE_GRAPH = 16, /* the node's graph has memory-allocation or conditional nodes:
                               * cudump runs it unchanged, without copy nodes */
};

enum proto_plan_flag {     /* proto_plan.flags */
    PLAN_HALT = 1,         /* hold the launch before it runs */
    PLAN_REPEAT = 2,       /* the shim may make these copies (COPY_TOOL only; none is fine)
                            * again, without asking, for every launch of this function with
                            * the same parameter bytes in the plan's keys (all of them when
                            * it has none) and no other word pointing into an allocation the
                            * shim tracks, while the control generation and the allocations
                            * stay the same; results go through the result ring, tagged with
                            * the plan's id */
    PLAN_DEFER = 4,        /* the answer to this launch's MSG_END will carry nothing: the shim
                            * may copy the buffers device-to-device into scratch memory on
                            * the launch stream, let the launch go, and move them through
                            * staging (MSG_PIECE, MSG_END) from another thread later; a
                            * MSG_BEGIN waits until that is done */
    PLAN_GATE = 8,         /* with PLAN_REPEAT: the shim need not wait for the scans of a
                            * launch made with this plan; cudump's kernel holds the stream
                            * instead when one finds a new NaN or Inf (proto_gate) */
};

enum proto_flight_flag {   /* proto_flight_slot.flags */
    FLIGHT_RETURNED = 1,   /* the launch call returned: `rc` holds its result */
    FLIGHT_MARKED = 2,     /* a completion marker was enqueued after it: `done` says */
    FLIGHT_CAPTURED = 4,   /* made on a capturing stream: recorded into a graph, no marker */
    FLIGHT_GRAPH = 8,      /* a graph launch (cuGraphLaunch): `graph` says which */
};

enum proto_result_flag {   /* proto_result_slot.flags */
    RESULT_TAKEN = 1,      /* reported by MSG_REPEAT instead, or a slot reserved for scans
                            * ahead (shim/ahead.h) that no launch used (set from the
                            * reservation until one does): the ring's reader skips it */
    RESULT_ASKED = 2,      /* the launch was asked about (MSG_BEGIN), then made with the
                            * repeatable plan it got: the controller forgets the plan's
                            * ordinary copies (no MSG_END comes) */
};

/* proto_result_slot.gate: a launch whose scans nobody waits for (PLAN_GATE).
 * Once every scan after the launch has its result, cudump's kernel writes
 * GATE_HELD if one found non-finite values where the scan before it found
 * none, and then waits on the GPU while the word reads GATE_HELD or
 * GATE_SERVING (shim/tooljob.h), so the stream stops right after the launch
 * that produced them, with its buffers as it left them. The shim then marks
 * the gate GATE_SERVING, reports the launch (MSG_REPEAT), has cudump's kernel
 * make the copies the answer asks for, one at a time through the slot's mailbox
 * (GATE_COPY, proto_gate_mail), and opens the gate: GATE_SERVED. If
 * it cannot (the controller is gone, or the shim is busy for too long), it
 * opens it without copies: GATE_RELEASED, as the kernel itself does after
 * TOOL_HOLD_NS held and not served (TOOL_SERVE_NS served); the ring's reader
 * then reports the launch. The reader never passes a slot whose gate is
 * GATE_HELD or GATE_SERVING. */
enum proto_gate {
    GATE_NONE = 0,         /* the shim waited for this launch's scans itself */
    GATE_HELD = 1,
    GATE_ARMED = 2,
    GATE_SERVED = 3,
    GATE_RELEASED = 4,
    GATE_SERVING = 5,      /* the shim is copying its buffers: the kernel waits longer */
    GATE_COPY = 6,         /* as GATE_SERVING, and the slot's mailbox holds a copy for the
                            * holding kernel to make: it makes it and writes the request's
                            * number into the mailbox's `done`; the shim then sets
                            * GATE_SERVING again. The kernel never writes GATE_SERVING or
                            * GATE_COPY, only GATE_RELEASED when it gives up */
};

enum proto_phase { PHASE_BEFORE = 0, PHASE_AFTER = 1 };

enum proto_copy_flag {     /* proto_copy.flags */
    COPY_PIECE = 1,        /* one piece of a buffer larger than the free staging area: made
                            * on its own, waited for, and handed over with MSG_PIECE before
                            * the next piece reuses the same staging bytes */
    COPY_TOOL = 2,         /* not a copy: run cudump's kernel (shim/gpu/tools.cu) over the
                            * buffer on the launch stream, mode in bits 8-15, and put its
                            * PROTO_TOOL_RESULT bytes at `offset` in staging; for a digest,
                            * bits 16-23 may name an element format (a scan mode) whose
                            * sum of |x| it also computes */
};
#define PROTO_TOOL_MODE_SHIFT 8
#define PROTO_TOOL_SUM_SHIFT 16
enum proto_tool_mode {     /* what COPY_TOOL computes (tools.cu's `mode`) */
    TOOL_DIGEST = 0,       /* result: uint64 digest; with a format, float64 sum of |x| */
    TOOL_SCAN_F32 = 1,     /* result: uint64 non-finite count, uint64 max(~index) */
    TOOL_SCAN_F64 = 2,
    TOOL_SCAN_F16 = 3,
    TOOL_SCAN_BF16 = 4,
    TOOL_MODES = 5,
};

enum proto_resume_mode {
    RESUME_CONTINUE = 0,
    RESUME_STEP = 1,       /* run the kernel, then hold again after it (MSG_STOPPED, after) */
    RESUME_DETACH = 2,
    RESUME_KILL = 3,       /* the process ends itself with SIGKILL */
};

enum proto_memory_op { MEM_ALLOC = 0, MEM_FREE = 1, MEM_MAP = 2, MEM_UNMAP = 3 };

/* proto_memory.kind / proto_pointer.kind */
enum proto_alloc_kind {
    KIND_LINEAR = 0, KIND_PITCHED = 1, KIND_MANAGED = 2, KIND_ASYNC = 3, KIND_VMM = 4,
    KIND_HOST = 5, KIND_RANGE = 6, /* from cuMemGetAddressRange: not tracked */
};
#define PROTO_ALLOC_KINDS(X) \
    X(linear) X(pitched) X(managed) X(async) X(vmm) X(host) X(range)

/* proto_host_write.api: the driver call that wrote (its _v2, _ptds and _ptsz
 * variants under one name): the families of api.h's table that write device
 * memory from the host, numbered in the order of their rows. */
#define PROTO_HOST_APIS(X) CUDUMP_HOST_WRITES(X)
#define PROTO_HOST_API_ENUM(name) HOST_API_##name,
enum proto_host_api { PROTO_HOST_APIS(PROTO_HOST_API_ENUM) HOST_API_COUNT };
#undef PROTO_HOST_API_ENUM

/* proto_launch.api: the entry point the launch came through. */
#define PROTO_APIS(X)                                                         \
    X(cuLaunchKernel) X(cuLaunchKernel_ptsz) X(cuLaunchCooperativeKernel)     \
    X(cuLaunchCooperativeKernel_ptsz) X(cuLaunchKernelEx) X(cuLaunchKernelEx_ptsz) \
    X(cuGraphLaunch) X(cuGraphLaunch_ptsz)
#define PROTO_API_ENUM(name) API_##name,
enum proto_api { PROTO_APIS(PROTO_API_ENUM) API_COUNT };
#undef PROTO_API_ENUM

/* ---- messages ---------------------------------------------------------------- */
struct proto_header {
    uint32_t size;      /* whole message, header included */
    uint16_t kind;      /* enum proto_kind */
    uint16_t flags;     /* reserved, 0 */
    uint64_t tag;       /* launch sequence number where there is one */
};

struct proto_hello {
    uint32_t magic;
    uint32_t version;
    int32_t pid;
    int32_t ppid;
    char token[PROTO_TOKEN_SIZE]; /* CUDUMP_TOKEN, proving the process is the run's */
    /* followed by the executable's path (the rest of the payload) */
};

struct proto_welcome {
    uint32_t version;
    uint32_t options;       /* enum proto_option */
    uint64_t staging_size;  /* bytes of the staging area, after the control page and ring */
    uint32_t watch_window;  /* OPTION_WATCH_NAN: launches a window holds at most */
    uint32_t watch_then;    /* enum proto_watch_then */
};

/* Written by the controller, read by the shim on every launch. The ring's
 * words sit on cache lines of their own: producers and the consumer do not
 * share one. */
struct proto_control {
    uint32_t magic;
    uint32_t version;
    uint32_t generation;    /* bumped when any want may have changed */
    uint32_t hold;          /* nonzero: wait at the next launch (another one is held) */
    uint32_t interrupt;     /* nonzero: hold the next launch of any kernel (Ctrl-C);
                             * the shim that takes it sets it back to 0 */
    uint32_t ring_slots;    /* slots in the trace ring (a power of two), 0: no ring */
    uint32_t results_slots; /* slots in the result ring (a power of two), 0: no ring */
    uint32_t scratch_mib;   /* device memory the shim may borrow for a PLAN_DEFER launch's
                             * copies, in MiB; 0: none (never more than a quarter of what is
                             * free on the device) */
    uint32_t flight_slots;  /* slots in the flight ring (--flight), 0: no ring */
    int32_t first_error;    /* shim: the first error a launch, a synchronisation or a copy
                             * of the program's returned (CUresult; 0: none yet) */
    uint32_t host_slots;    /* slots in the host-write ring (a power of two); 0: the shim
                             * records no host writes */
    uint32_t behind_mib;    /* MiB of the write-behind area at the end of the file (see the
                             * top of this file); 0: none */
    uint8_t pad0[16];
    uint64_t ring_head;     /* shim: next position to reserve */
    uint8_t pad1[56];
    uint64_t ring_tail;     /* controller: next position to consume */
    uint8_t pad2[56];
    uint64_t ring_dropped;  /* shim: events the ring had no room for */
    uint8_t pad3[56];
    uint64_t results_head;  /* shim: next result slot to reserve */
    uint8_t pad4[56];
    uint64_t results_tail;  /* controller: next result slot to consume */
    uint8_t pad5[56];
    /* shim: launches that matched each counted rule so far (proto_selector.counter),
     * across every function the rule matches, graph kernel nodes included */
    uint64_t rule_counts[PROTO_MAX_COUNTERS];
    uint64_t flight_head;   /* shim: launches recorded in the flight ring (the next position) */
    uint8_t pad6[56];
    uint64_t host_head;     /* shim: next host-write slot to reserve */
    uint8_t pad7[56];
    uint64_t host_tail;     /* controller: next host-write slot to consume */
    uint8_t pad8[56];
    uint64_t host_dropped;  /* shim: host writes the ring had no room for */
    uint8_t pad9[56];
    uint64_t ahead_used;    /* shim: launches whose "before" tools were made ahead (ahead.h) */
    uint64_t ahead_void;    /* shim: those made ahead and not used */
    uint64_t handed_off;    /* shim: launches of cudump's kernel the launcher thread made
                             * while the program went on (handoff.h) */
    uint64_t handed_back;   /* shim: launches of cudump's kernel the program's thread made
                             * itself where the launcher was off (its trials' stretches,
                             * and where it was found slower: handtune.h) */
    uint64_t handoff_trials; /* shim: the launcher's trials decided, and those it won */
    uint64_t handoff_won;
    uint64_t tools_waiting; /* shim: launches of cudump's kernel made with programmatic stream
                             * serialization (Hopper and later: toollaunch.h) */
    uint64_t tool_launches; /* shim: launches of cudump's kernel the driver took, however
                             * made (toollaunch.c); kernel nodes of graphs not counted */
    uint64_t behind_done;   /* controller: the last write-behind launch whose files are
                             * written (its proto_end.behind); the shim reuses its bytes */
    uint64_t behind_ready;  /* controller: bytes of the write-behind area, from its start,
                             * whose pages it has allocated (or given up on): the shim
                             * registers a piece once this reaches its end */
    uint64_t graph_watched;      /* shim: graph replays run as the copy with the scan node
                                  * after everything, not waited for (--watch-nan) */
    uint64_t graph_instrumented; /* shim: graph replays run as a copy with cudump's nodes
                                  * around the wanted nodes, waited for */
    uint8_t pad11[32];
    uint64_t behind_sent;   /* shim: launches handed over through the write-behind area */
    uint8_t pad12[56];
};


/* The launches of one function, as proto_count says them (launches that failed
 * are taken back). */
struct proto_func_count {
    uint64_t launches;       /* launched directly */
    uint64_t graph_launches; /* run as a kernel node of a graph launch (folded in) */
};

/* Written by the shim after the staging area: the counts of MSG_STATS as they
 * stand (see the top of this file). */
struct proto_counts {
    uint64_t captured;       /* launches recorded during stream capture */
    uint64_t graph_launches; /* graph launches */
    struct proto_func_count funcs[PROTO_MAX_FUNCS]; /* function id N at funcs[N - 1] */
};

struct proto_param {
    uint32_t offset;
    uint32_t size;
};

struct proto_func {
    uint32_t id;            /* per-process function id */
    int32_t nparams;        /* -1 when the driver cannot say */
    uint64_t handle;
    /* followed by nparams x proto_param, then the mangled name */
};

struct proto_ask {
    uint32_t id;
    uint32_t reserved;
};

/* A rule that takes only some of the launches it matches (skip, every, count):
 * the shim counts its launches itself, so that it asks the controller only
 * about those it takes. The n-th launch (from 1) is taken when k = n - skip - 1
 * is >= 0, a multiple of `every`, and k / every < count. */
struct proto_selector {
    uint32_t counter;       /* its slot in proto_control.rule_counts */
    uint32_t every;         /* >= 1 */
    uint64_t skip;
    uint64_t count;         /* UINT64_MAX: no limit */
};

struct proto_wants {
    uint32_t wants;         /* enum proto_want bits */
    uint32_t generation;    /* the control generation the answer holds for */
    uint32_t nselectors;    /* counted rules of this function, in sel[] */
    uint32_t reserved;
    struct proto_selector sel[PROTO_MAX_SELECTORS];
};

/* After MSG_BEGIN's pointers: one per selector of the function, the n-th
 * launch this one is of the rule the selector counts. */
struct proto_counted {
    uint32_t counter;
    uint32_t reserved;
    uint64_t n;
};

struct proto_launch {
    uint64_t seq;           /* per-process launch sequence number */
    uint64_t occurrence;    /* n-th launch of this function (0 when captured) */
    uint64_t stream;
    uint64_t tid;           /* the launching thread (gettid) */
    uint32_t id;            /* function id */
    int32_t device;         /* device ordinal, -1 if unknown */
    uint32_t grid[3];
    uint32_t block[3];
    uint32_t smem;
    uint32_t api;           /* enum proto_api */
    uint32_t flags;         /* enum proto_launch_flag */
    int32_t rc;             /* the launch's result (MSG_LAUNCH only) */
    int32_t nparams;        /* MSG_BEGIN: parameters described, -1 if unknown */
    uint32_t nptrs;         /* MSG_BEGIN: proto_pointer entries */
    uint64_t graph;         /* LAUNCH_GRAPH: the executable graph's id (per process) */
    uint32_t replay;        /* LAUNCH_GRAPH: its n-th launch, from 1 */
    uint32_t node;          /* LAUNCH_GRAPH: the kernel node's index, in run order */
    uint32_t ntmaps;        /* MSG_BEGIN: proto_tensormap entries */
    uint32_t scope;         /* the innermost scope open on the launching thread (a graph's
                             * kernel node: open where it was captured); 0: none */
    uint32_t step;          /* training steps completed + 1; 0: the process counts none */
    uint32_t source;        /* a SCOPE_SOURCE node ("file:line"); 0: none */
};

/* One slot of the trace ring: the event fills it exactly. */
struct proto_ring_slot {
    uint64_t ready;         /* position + 1 once the event is written */
    uint64_t reserved;
    struct proto_launch event;
};

/* One slot of the host-write ring: a call of the program's that wrote device
 * memory from the host, made successfully. The bytes written are `depth`
 * slices `slice` bytes apart, each of `height` rows `pitch` bytes apart, each
 * row `width` bytes from `dst` on. The shim never reads the source bytes:
 * which type they are is not its to guess. */
struct proto_host_write {
    uint64_t ready;         /* position + 1 once the slot is written */
    uint64_t launches;      /* launches the process had numbered when the call was made:
                             * it came after launch `launches` and before the next */
    uint64_t dst;
    uint64_t width;         /* bytes of a row */
    uint64_t height;        /* rows of a slice (1 for a linear copy or memset) */
    uint64_t pitch;         /* bytes from row to row */
    uint64_t depth;         /* slices (1 but for a 3D copy) */
    uint64_t slice;         /* bytes from slice to slice */
    uint64_t stream;        /* as the program passed it (0 for a synchronous call) */
    uint64_t tid;           /* the calling thread (gettid) */
    uint32_t value;         /* memset: the pattern, its `elem` low bytes */
    uint32_t elem;          /* memset: bytes of an element (1, 2 or 4); 0: a copy */
    uint32_t api;           /* enum proto_host_api */
    uint32_t reserved;
    uint8_t pad[32];
};

/* One slot of the flight ring: a launch (or graph launch) as it was made. */
struct proto_flight_slot {
    uint64_t ready;         /* position + 1 once the slot is written; 0 while it is written */
    uint64_t done;          /* FLIGHT_MARKED: position + 1 once the GPU got past the launch */
    uint64_t seq;           /* the launch's sequence number, as in proto_launch */
    uint64_t stream;
    uint64_t tid;           /* the launching thread (gettid) */
    uint64_t graph;         /* FLIGHT_GRAPH: the executable graph's number (per process) */
    uint32_t id;            /* function id; 0 for a graph launch */
    uint32_t api;           /* enum proto_api */
    uint32_t grid[3];
    uint32_t block[3];
    uint32_t smem;
    uint32_t flags;         /* enum proto_flight_flag */
    int32_t rc;             /* FLIGHT_RETURNED: what the launch call returned */
    uint32_t nbytes;        /* bytes of the launch's parameters, one after the other */
    uint32_t kept;          /* of them in params (at most PROTO_FLIGHT_PARAM_BYTES) */
    uint32_t scope;         /* as in proto_launch */
    uint32_t step;
    uint32_t source;
    uint8_t pad[16];
    uint8_t params[PROTO_FLIGHT_PARAM_BYTES];
};

struct proto_pointer {
    uint32_t arg;           /* parameter index */
    uint32_t offset;        /* byte offset of the word inside the parameter */
    uint64_t base;
    uint64_t size;
    uint64_t pitch;         /* pitched allocations only */
    uint64_t width;         /* bytes per row, pitched only */
    uint64_t height;
    uint32_t elem;          /* element size given to cuMemAllocPitch */
    uint32_t kind;          /* enum proto_alloc_kind */
};

/* A TMA tensor map (CUtensorMap) found in a launch's parameters: 128 bytes at
 * any 8-byte step of a parameter that equal a map the shim saw
 * made (cuTensorMapEncode*, cuTensorMapReplaceAddress). The kernel reaches
 * memory through it, not through a pointer word: what it says is the buffer's
 * exact extent. `arg` and `offset` name where its 128 bytes begin. */
struct proto_tensormap {
    uint32_t arg;           /* parameter index */
    uint32_t offset;        /* byte offset of the map inside the parameter */
    uint64_t address;       /* globalAddress */
    uint32_t encoding;      /* enum proto_tmap_encoding */
    uint32_t dtype;         /* CUtensorMapDataType */
    uint32_t rank;          /* 1 to PROTO_TMAP_RANK */
    uint32_t interleave;    /* CUtensorMapInterleave */
    uint64_t dims[PROTO_TMAP_RANK];    /* globalDim: elements, innermost first */
    uint64_t strides[PROTO_TMAP_RANK - 1]; /* globalStrides: bytes per step of dims 1.. */
    uint64_t base;          /* the allocation holding `address`, 0 if none is known */
    uint64_t size;
    uint32_t kind;          /* enum proto_alloc_kind of that allocation */
    uint32_t reserved;
};

struct proto_memory {
    uint32_t op;            /* enum proto_memory_op */
    uint32_t kind;          /* enum proto_alloc_kind */
    uint64_t base;          /* address, or the handle of VMM physical memory */
    uint64_t size;
    uint64_t pitch;
    uint64_t width;
    uint64_t height;
    uint32_t elem;
    int32_t device;
};

struct proto_graph {
    uint64_t seq;
    uint64_t exec;
    uint64_t stream;
    uint32_t api;
    int32_t device;
};

/* MSG_SCOPE: one node of the tree of scopes the process's threads opened. Each
 * distinct (parent, kind, name) is one node, numbered from 1 in the order the
 * shim met them; the name's bytes follow. */
struct proto_scope {
    uint32_t id;
    uint32_t parent;        /* 0: outermost (and always for a SCOPE_SOURCE node) */
    uint32_t kind;          /* enum proto_scope_kind */
    uint32_t length;        /* bytes of name after the struct */
};

/* MSG_OUTPUT: a tensor a module's forward returned, as the program's own hooks
 * tell it (cudump/target, cudump_scope_output): what the scope left behind, so
 * that two implementations of the module are compared by exactly that. Sent on
 * the declaring thread with the module's scope still open; `launches` places it
 * among the process's launches whatever ring reports them. The type follows:
 * "float32[8,64,56,56]" (a numpy dtype's name, the shape). */
struct proto_output {
    uint64_t launches;      /* launches the process had made (sequence numbers up to it) */
    uint64_t address;       /* the tensor's first byte */
    uint64_t bytes;         /* and its size: contiguous, numel x itemsize */
    uint32_t scope;         /* the declaring thread's innermost scope node */
    uint32_t step;          /* the step then (wire form, as proto_launch's) */
    uint32_t index;         /* its place among the module's outputs, from 0 */
    uint32_t length;        /* bytes of type text after the struct */
};

/* MSG_WATCH: the end of a window of launches (shim/window.c) whose batched scan found
 * buffers non-finite that its last scan found finite (or that none scanned before). */
struct proto_watch {
    uint64_t first;         /* the window's launches: sequence numbers first..last */
    uint64_t last;
    uint32_t nfound;        /* proto_watch_found entries after this */
    uint32_t window;        /* the window's number in the process, from 1 */
    uint32_t exact;         /* 1: the shim scans every launch exactly from now on */
    uint32_t graph;         /* a graph's scan node (the per-process graph number): first..last
                             * are graph launches of it, found by its `replays` of them; 0: a
                             * window of launches */
    uint32_t replays;       /* with `graph`: how many of its scans the finding lies among */
    uint32_t reserved;
};
struct proto_watch_found {
    uint64_t address;       /* the scan: rows of width bytes at pitch */
    uint64_t width;
    uint64_t height;
    uint64_t pitch;
    uint64_t count;         /* non-finite elements */
    uint64_t first_index;   /* the first of them, in elements */
    uint64_t first_touch;   /* the window's launches that touched the buffer: the first */
    uint64_t last_touch;    /* and the last (the producer where touches is 1) */
    uint32_t touches;       /* how many of the window's launches touched it */
    uint32_t first_node;    /* with proto_watch.graph: the first kernel node that touches it */
    uint32_t host;          /* 1: the host wrote it since its last scan (a copy, a memset):
                             * not a launch's finding, but one a launch may carry on */
    uint32_t func;          /* the function of the last one (proto_func's id) */
    uint32_t mode;          /* enum proto_tool_mode of the scan */
    uint32_t node;          /* with proto_watch.graph: the last kernel node that touches it
                             * (the graph's order), touches the kernel nodes that do, and
                             * first_touch, last_touch the graph launches */
};
struct proto_notice {
    uint32_t kind;          /* enum proto_notice_kind */
    uint32_t detail;        /* NOTICE_WATCH_EXACT: the CUresult; NOTICE_GRAPH_LEFT_OUT: the
                             * kernel nodes left out; else 0 */
    uint64_t graph;         /* the per-process graph number, as in proto_launch.graph */
};

struct proto_graph_node {
    uint32_t node;          /* index in run order */
    uint32_t id;            /* function id */
    uint32_t grid[3];
    uint32_t block[3];
    uint32_t smem;
    uint32_t child;         /* 1: inside a child graph */
};

struct proto_count {
    uint32_t id;
    uint32_t reserved;
    uint64_t launches;      /* launched directly */
    uint64_t graph_launches; /* run as a kernel node of a graph launch */
};

struct proto_stats {
    uint64_t seq;
    uint64_t captured;
    uint64_t graph_launches;
    uint32_t nfuncs;
    uint32_t reserved;
};

struct proto_copy {
    uint32_t phase;         /* enum proto_phase */
    uint32_t flags;         /* enum proto_copy_flag */
    uint64_t src;
    uint64_t width;         /* bytes per row */
    uint64_t height;        /* rows */
    uint64_t pitch;         /* source bytes from row to row */
    uint64_t offset;        /* destination in the staging area */
};

struct proto_plan {
    uint32_t flags;         /* enum proto_plan_flag */
    uint32_t ncopies;
    uint32_t id;            /* PLAN_REPEAT: the plan's number, per process */
    uint32_t nkeys;         /* PLAN_REPEAT: proto_key entries after the copies */
};

/* Bytes of a launch's parameters (all of them one after the other, in order)
 * that a repeated plan depends on: its pointer words. */
struct proto_key {
    uint32_t offset;
    uint32_t size;
};

/* What cudump's kernel computed over one buffer (COPY_TOOL), in staging or in
 * a result ring slot. The kernel writes `words`, then `done`; `rc` is the
 * shim's. */
struct proto_tool_result {
    uint64_t words[2];      /* digest: words[0] (and the float64 sum of |x|, if asked);
                             * scans: count, max(~index) of the first */
    uint64_t done;          /* nonzero once words hold the result (the job's tag) */
    int32_t rc;             /* running the kernel: CUresult; -1: not run (the launch failed) */
    uint32_t reserved;
};

/* A held launch's mailbox (proto_result_slot.mail): one copy the shim asks the
 * kernel that holds the stream to make (GATE_COPY). The shim writes the fields,
 * then `seq`, then the gate; the kernel copies the rows, packed, to `dst` and
 * then writes `seq` into `done`. Copies made by the hold itself cannot queue
 * behind it, as copies on another stream can (gate.c). */
struct proto_gate_mail {
    uint64_t seq;           /* the request's number: never 0, never the same twice */
    uint64_t done;          /* the kernel's: the number of the last request it made */
    uint64_t src;           /* device address of the first byte */
    uint64_t dst;           /* device address of the staging bytes (mapped host memory) */
    uint64_t width;         /* bytes per row */
    uint64_t height;        /* rows */
    uint64_t pitch;         /* source bytes from row to row */
};

/* One slot of the result ring: a launch made with a repeated plan. */
struct proto_result_slot {
    uint64_t ready;         /* position + 1 once the shim has written the slot */
    uint32_t plan;          /* the repeated plan's id */
    uint32_t ncopies;       /* results in use, in the plan's order */
    int32_t launch_rc;
    uint32_t flags;         /* enum proto_result_flag */
    uint32_t gate;          /* enum proto_gate; the device writes it, and waits on it */
    uint32_t reserved;
    struct proto_launch event;
    struct proto_tool_result results[PROTO_MAX_REPEAT];
    struct proto_gate_mail mail; /* a gated launch's, while its stream is held */
};

struct proto_image {
    uint64_t module;        /* the CUmodule or CUlibrary handle */
    uint64_t size;          /* bytes of the whole image; 0: not available (see format) */
    uint64_t offset;        /* of this chunk's bytes in the image; == size: header only */
    uint32_t id;            /* the function whose launch asked for it */
    uint32_t format;        /* enum proto_image_format */
    /* followed by the chunk's bytes */
};

struct proto_piece {
    uint32_t index;         /* of the copy in the plan */
    int32_t rc;             /* the copy's result */
};

struct proto_end {
    int32_t launch_rc;
    int32_t sync_rc;
    uint32_t ncopies;
    uint32_t reserved;
    uint64_t behind;        /* nonzero: the copies lie in the write-behind area, and this is
                             * the launch's number there (1, 2, ...; behind_done) */
    /* followed by ncopies x int32: each copy's result, -1 if not attempted; then, with
     * behind, ncopies x uint64: where each copy lies in the write-behind area */
};

struct proto_stopped {
    uint32_t phase;         /* enum proto_phase */
    int32_t sync_rc;        /* making the device quiescent */
    int32_t launch_rc;      /* after: the launch's result */
    uint32_t reserved;
};

struct proto_read {
    uint64_t src;
    uint64_t width;
    uint64_t height;
    uint64_t pitch;
    uint64_t offset;        /* destination in the staging area */
};

struct proto_query {
    uint64_t address;
};

struct proto_write {
    uint64_t dst;           /* device address */
    uint64_t size;          /* bytes */
    uint64_t offset;        /* source in the staging area */
};

struct proto_resume {
    uint32_t mode;          /* enum proto_resume_mode */
    uint32_t reserved;
};

struct proto_result {
    int32_t rc;             /* CUresult, or -1 for a request the shim refused */
    uint32_t reserved;
    uint64_t nbytes;        /* of data following */
};

#endif
