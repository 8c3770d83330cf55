/*
 * Copies of argument buffers around a wanted launch.
 *
 * The shim sends the controller the launch's raw parameter bytes and what it
 * knows of every pointer-sized value (the allocation it falls in); the
 * controller answers with a plan of 2-D copies (source address, width in
 * bytes, rows, source pitch, offset in the staging area). The staging area
 * is a shared-memory file the controller created, mapped here and
 * registered as pinned memory, so one DMA moves the bytes to where the
 * controller reads them: bulk data never goes through the socket.
 *
 * "before" copies are enqueued on the launch stream ahead of the launch and
 * "after" copies behind it, so they see exactly what the kernel reads and
 * what it leaves. The shim's own driver calls run in the RELAXED capture
 * mode so that they can never invalidate another thread's stream capture.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "snapshot.h"

#define MAX_COPIES 128

struct copy {
    char phase; /* 'b' or 'a' */
    CUdeviceptr src;
    size_t width, height, pitch, offset;
    CUresult rc;
};

/* One snapshot at a time per process: they share the staging area. */
static pthread_mutex_t snap_lock = PTHREAD_MUTEX_INITIALIZER;
static struct copy copies[MAX_COPIES];
static int ncopies;
static CUevent done_event;
static CUresult event_rc;

static char *staging;
static size_t staging_size;
static bool staging_failed;

void launch_reset_after_fork(void)
{
    pthread_mutex_init(&snap_lock, NULL);
    /* The mapping belongs to the parent's staging file. */
    if (staging)
        munmap(staging, staging_size);
    staging = NULL;
    staging_size = 0;
    staging_failed = false;
}

static bool map_staging(void)
{
    if (staging)
        return true;
    if (staging_failed)
        return false;
    const char *path = channel_staging_path();
    size_t size = channel_staging_size();
    int fd = path ? open(path, O_RDWR | O_CLOEXEC) : -1;
    if (fd < 0 || size == 0) {
        if (fd >= 0)
            close(fd);
        staging_failed = true;
        return false;
    }
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
        staging_failed = true;
        return false;
    }
    staging = p;
    staging_size = size;
    /* Pinned, so the copies are real async DMAs. If pinning fails the
     * copies still work, through the driver's own bounce buffers. */
    if (real_cuMemHostRegister_v2)
        real_cuMemHostRegister_v2(staging, staging_size, CU_MEMHOSTREGISTER_PORTABLE);
    return true;
}

static void append_hex(struct strbuf *sb, const unsigned char *p, size_t n)
{
    static const char digits[] = "0123456789abcdef";
    sb_printf(sb, "\"");
    for (size_t i = 0; i < n; i++)
        sb_printf(sb, "%c%c", digits[p[i] >> 4], digits[p[i] & 15]);
    sb_printf(sb, "\"");
}

/* The bytes of parameter i, from kernelParams or from the `extra` buffer. */
static const unsigned char *param_bytes(const struct launch_info *li, int i)
{
    if (li->params)
        return li->params[i];
    /* extra = {CU_LAUNCH_PARAM_BUFFER_POINTER, buf, CU_LAUNCH_PARAM_BUFFER_SIZE, &size, END} */
    for (void **x = li->extra; x && *x; x += 2) {
        if ((uintptr_t)x[0] == 1)
            return (const unsigned char *)x[1] + li->e->param_offset[i];
    }
    return NULL;
}

/* Describes the allocation a word of argument `index` (at byte `off`)
 * points into, if any. Words inside by-value structs count too: PyTorch
 * passes its buffers as std::array<char*, N>. */
static void describe_pointer(struct strbuf *sb, int index, unsigned off, CUdeviceptr value,
                             bool ask_driver, int *count)
{
    struct alloc_info a;
    if (alloctab_find(value, &a)) {
        sb_printf(sb, "%s{\"arg\":%d,\"off\":%u,\"base\":\"0x%llx\",\"size\":%zu,"
                  "\"kind\":\"%s\",\"pitch\":%zu,\"width\":%zu,\"height\":%zu,\"elem\":%u}",
                  (*count)++ ? "," : "", index, off, (unsigned long long)a.base, a.size,
                  alloc_kind_name(a.kind), a.pitch, a.width, a.height, a.elem_size);
        return;
    }
    if (!ask_driver)
        return;
    /* Memory allocated before the shim was loaded or through a path it does
     * not hook: the driver still knows the range. */
    CUdeviceptr base = 0;
    size_t size = 0;
    if (value && real_cuMemGetAddressRange_v2 &&
        real_cuMemGetAddressRange_v2(&base, &size, value) == CUDA_SUCCESS)
        sb_printf(sb, "%s{\"arg\":%d,\"off\":0,\"base\":\"0x%llx\",\"size\":%zu,"
                  "\"kind\":\"range\"}",
                  (*count)++ ? "," : "", index, (unsigned long long)base, size);
}

static bool parse_plan(const char *reply)
{
    ncopies = 0;
    if (strncmp(reply, "plan", 4) != 0)
        return false;
    const char *p = reply + 4;
    while (*p == ' ' && ncopies < MAX_COPIES) {
        p++;
        struct copy c = {0};
        unsigned long long src;
        int used = 0;
        if (sscanf(p, "%c:%llx:%zu:%zu:%zu:%zu%n", &c.phase, &src, &c.width, &c.height, &c.pitch,
                   &c.offset, &used) != 6)
            return false;
        c.src = (CUdeviceptr)src;
        if ((c.phase != 'b' && c.phase != 'a') || c.offset + c.width * c.height > staging_size)
            return false;
        copies[ncopies++] = c;
        p += used;
    }
    return true;
}

static void enqueue_copies(const struct launch_info *li, char phase)
{
    cuMemcpy2DAsync_v2_fn copy2d = li->ptsz ? real_cuMemcpy2DAsync_v2_ptsz : real_cuMemcpy2DAsync_v2;
    for (int i = 0; i < ncopies; i++) {
        struct copy *c = &copies[i];
        if (c->phase != phase)
            continue;
        CUDA_MEMCPY2D m;
        memset(&m, 0, sizeof m);
        m.srcMemoryType = CU_MEMORYTYPE_UNIFIED;
        m.srcDevice = c->src;
        m.srcPitch = c->pitch;
        m.dstMemoryType = CU_MEMORYTYPE_HOST;
        m.dstHost = staging + c->offset;
        m.dstPitch = c->width;
        m.WidthInBytes = c->width;
        m.Height = c->height;
        c->rc = copy2d ? copy2d(&m, li->stream) : CUDA_ERROR_NOT_FOUND;
    }
}

/* Runs fn with the calling thread in RELAXED capture mode. */
static CUstreamCaptureMode relax(void)
{
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    if (real_cuThreadExchangeStreamCaptureMode)
        real_cuThreadExchangeStreamCaptureMode(&mode);
    return mode;
}

static void unrelax(CUstreamCaptureMode mode)
{
    if (real_cuThreadExchangeStreamCaptureMode)
        real_cuThreadExchangeStreamCaptureMode(&mode);
}

bool snapshot_before(struct launch_info *li)
{
    struct func_entry *e = li->e;
    pthread_mutex_lock(&snap_lock);
    CUstreamCaptureMode mode = relax();
    bool armed = false;
    char stack[8192];
    struct strbuf sb;
    sb_init(&sb, stack, sizeof stack);
    sb_printf(&sb, "{\"ev\":\"snap\",\"seq\":%llu,\"id\":%u,\"occ\":%llu,"
              "\"grid\":[%u,%u,%u],\"block\":[%u,%u,%u],\"smem\":%u,\"stream\":\"0x%llx\","
              "\"api\":\"%s\",\"staging\":%s,\"args\":",
              li->seq, e->id, li->occurrence, li->grid[0], li->grid[1], li->grid[2], li->block[0],
              li->block[1], li->block[2], li->smem, (unsigned long long)(uintptr_t)li->stream,
              li->api, map_staging() ? "true" : "false");
    bool have_args = e->nparams >= 0 && (li->params || li->extra);
    int nptrs = 0;
    if (have_args) {
        sb_printf(&sb, "[");
        for (int i = 0; i < e->nparams; i++) {
            const unsigned char *p = param_bytes(li, i);
            if (i)
                sb_printf(&sb, ",");
            if (p)
                append_hex(&sb, p, e->param_size[i]);
            else
                sb_printf(&sb, "null");
        }
        sb_printf(&sb, "],\"ptrs\":[");
        for (int i = 0; i < e->nparams; i++) {
            const unsigned char *p = param_bytes(li, i);
            for (unsigned off = 0; p && off + sizeof(CUdeviceptr) <= e->param_size[i];
                 off += sizeof(CUdeviceptr)) {
                CUdeviceptr v;
                memcpy(&v, p + off, sizeof v);
                /* A lone 8-byte argument is worth asking the driver about;
                 * words inside structs only count if cudump tracked them. */
                describe_pointer(&sb, i, off, v, e->param_size[i] == sizeof v, &nptrs);
            }
        }
        sb_printf(&sb, "]");
    } else {
        sb_printf(&sb, "null");
    }
    sb_printf(&sb, "}\n");
    char reply[8192];
    if (!sb.oom && channel_request(sb.data, sb.len, reply, sizeof reply) && staging &&
        parse_plan(reply) && ncopies > 0) {
        enqueue_copies(li, 'b');
        armed = true;
    }
    sb_free(&sb);
    unrelax(mode);
    if (!armed)
        pthread_mutex_unlock(&snap_lock);
    return armed;
}

void snapshot_after(struct launch_info *li, CUresult launch_rc)
{
    CUstreamCaptureMode mode = relax();
    if (launch_rc == CUDA_SUCCESS)
        enqueue_copies(li, 'a');
    /* Wait for the kernel and every copy: the controller reads the staging
     * area as soon as it hears back. */
    done_event = NULL;
    event_rc = real_cuEventCreate ? real_cuEventCreate(&done_event, CU_EVENT_DISABLE_TIMING)
                                  : CUDA_ERROR_NOT_FOUND;
    if (event_rc == CUDA_SUCCESS) {
        cuEventRecord_fn record = li->ptsz ? real_cuEventRecord_ptsz : real_cuEventRecord;
        event_rc = record ? record(done_event, li->stream) : CUDA_ERROR_NOT_FOUND;
        if (event_rc == CUDA_SUCCESS)
            event_rc = real_cuEventSynchronize(done_event);
        real_cuEventDestroy_v2(done_event);
    }
    char stack[2048];
    struct strbuf sb;
    sb_init(&sb, stack, sizeof stack);
    sb_printf(&sb, "{\"ev\":\"snapped\",\"seq\":%llu,\"launch_rc\":%d,\"sync_rc\":%d,\"rc\":[",
              li->seq, launch_rc, event_rc);
    for (int i = 0; i < ncopies; i++) {
        CUresult rc = copies[i].rc;
        if (copies[i].phase == 'a' && launch_rc != CUDA_SUCCESS)
            rc = -1; /* not attempted: the launch failed */
        sb_printf(&sb, "%s%d", i ? "," : "", rc);
    }
    sb_printf(&sb, "]}\n");
    char reply[64];
    if (!sb.oom)
        channel_request(sb.data, sb.len, reply, sizeof reply);
    sb_free(&sb);
    unrelax(mode);
    pthread_mutex_unlock(&snap_lock);
}
