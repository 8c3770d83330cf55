/*
 * The plain way of copying: the plan's copies straight into the staging area
 * on the launch stream, "before" copies ahead of the launch and "after"
 * copies behind it, so they see exactly what the kernel reads and what it
 * leaves; COPY_TOOL copies run cudump's kernel instead (tools.c), and pieces
 * of buffers larger than the staging area are copied, waited for and handed
 * over one at a time. The launching thread waits for the "after" copies and
 * reports them (MSG_END).
 *
 * The copies that serve a launch held by cudump's kernel (watch.c) are made
 * by that kernel instead, through the slot's mailbox (gate_mail_copy): copies
 * on another stream can queue behind the held one on the GPU.
 */
#include "gate.h"
#include "interpose.h"
#include "plain.h"
#include "plan.h"
#include "staging.h"
#include "stream.h"
#include "tools.h"

/* Set when this thread's copies put work on the stream (reset each round of
 * plain_after): a serve whose copies all went through the mailbox has nothing
 * on its side stream to wait for, and does not wait on the GPU at all. */
static _Thread_local bool on_stream;

/* A copy that serves a held launch, made by the kernel that holds it where it
 * can be (*rc: its result); false: it is made on the stream as any other. */
static bool mail_copy(CUdeviceptr src, size_t width, size_t height, size_t pitch, size_t offset,
                      CUresult *rc)
{
    if (!gate_mail_open())
        return false;
    size_t size;
    char *area = staging_area(&size);
    CUdeviceptr dst;
    if (!area || tools_mail_target(src, width, height, pitch, area + offset, &dst) != CUDA_SUCCESS)
        return false;
    *rc = gate_mail_copy(src, width, height, pitch, dst);
    return true;
}

static void enqueue_copies(const struct launch_info *li, enum proto_phase phase)
{
    unsigned ncopies;
    struct plan_copy *copies = plan_copies(&ncopies);
    cuMemcpy2DAsync_fn copy2d =
        li->ptsz ? shim_real_cuMemcpy2DAsync_v2_ptsz() : shim_real_cuMemcpy2DAsync_v2();
    size_t size;
    char *area = staging_area(&size);
    static struct tool_request tools[PROTO_MAX_COPIES]; /* under the staging lock; 28 KB */
    unsigned ntools = 0;
    for (unsigned i = 0; i < ncopies; i++) {
        struct plan_copy *c = &copies[i];
        if (c->c.phase != phase || (c->c.flags & COPY_PIECE))
            continue;
        if (c->c.flags & COPY_TOOL) {
            /* All of a phase's in one go: one launch of cudump's kernel. */
            if (area)
                tools[ntools++] = (struct tool_request){
                    .copy = &c->c, .result = (struct proto_tool_result *)(area + c->c.offset),
                    .acc = i, .tag = 1};
            else
                c->rc = CUDA_ERROR_NOT_FOUND;
            continue;
        }
        if (!copy2d || !area) {
            c->rc = CUDA_ERROR_NOT_FOUND;
            continue;
        }
        if (mail_copy(c->c.src, c->c.width, c->c.height, c->c.pitch, c->c.offset, &c->rc))
            continue;
        CUDA_MEMCPY2D m = rows_copy(c->c.src, c->c.pitch, area + c->c.offset, 0, c->c.width,
                                    c->c.height);
        c->rc = copy2d(&m, li->stream);
        on_stream = true;
    }
    on_stream = on_stream || ntools;
    tools_run(li, tools, ntools, NULL, 0, 0);
    for (unsigned k = 0; k < ntools; k++)
        copies[tools[k].acc].rc = tools[k].result->rc;
}

/* Pieces of buffers larger than the free staging area: each is copied, waited
 * for and handed over before the next one reuses the same staging bytes. */
static void run_pieces(const struct launch_info *li, enum proto_phase phase)
{
    unsigned ncopies;
    struct plan_copy *copies = plan_copies(&ncopies);
    for (unsigned i = 0; i < ncopies; i++) {
        struct plan_copy *c = &copies[i];
        if (c->c.phase != phase || !(c->c.flags & COPY_PIECE))
            continue;
        c->rc = plain_copy_wait(li, c->c.src, c->c.width, c->c.height, c->c.pitch, c->c.offset);
        if (!plan_send_piece(li->seq, i, c->rc))
            return; /* the controller is gone: nobody would take the rest */
    }
}

void plain_before(const struct launch_info *li)
{
    enqueue_copies(li, PHASE_BEFORE);
    run_pieces(li, PHASE_BEFORE);
}

CUresult plain_copy_wait(const struct launch_info *li, CUdeviceptr src, size_t width, size_t height,
                        size_t pitch, size_t offset)
{
    size_t size;
    char *area = staging_area(&size);
    cuMemcpy2DAsync_fn copy2d =
        li->ptsz ? shim_real_cuMemcpy2DAsync_v2_ptsz() : shim_real_cuMemcpy2DAsync_v2();
    if (!area || !copy2d)
        return CUDA_ERROR_NOT_FOUND;
    CUresult rc;
    if (mail_copy(src, width, height, pitch, offset, &rc))
        return rc;
    CUDA_MEMCPY2D m = rows_copy(src, pitch, area + offset, 0, width, height);
    rc = copy2d(&m, li->stream);
    return rc == CUDA_SUCCESS ? gate_wait_stream(li) : rc;
}

CUresult plain_write_wait(const struct launch_info *li, CUdeviceptr dst, size_t size, size_t offset)
{
    size_t area_size;
    char *area = staging_area(&area_size);
    cuMemcpy2DAsync_fn copy2d =
        li->ptsz ? shim_real_cuMemcpy2DAsync_v2_ptsz() : shim_real_cuMemcpy2DAsync_v2();
    if (!area || !copy2d)
        return CUDA_ERROR_NOT_FOUND;
    /* A device address: the driver refuses one that is not (the controller writes only
     * inside the device allocations it knows). */
    CUDA_MEMCPY2D m = {.srcMemoryType = CU_MEMORYTYPE_HOST,
                       .srcHost = area + offset,
                       .srcPitch = size,
                       .dstMemoryType = CU_MEMORYTYPE_DEVICE,
                       .dstDevice = dst,
                       .dstPitch = size,
                       .WidthInBytes = size,
                       .Height = 1};
    CUresult rc = copy2d(&m, li->stream);
    return rc == CUDA_SUCCESS ? gate_wait_stream(li) : rc;
}

/* Each round makes the "after" copies, waits for the kernel and them (the
 * controller reads the staging area as soon as it hears back) and reports
 * them; the answer may ask for follow-up copies, which make the next round.
 * The controller asks once per finding; the bound only keeps a confused one
 * from holding the launch: copies it asks for past it are not made. Returns
 * whether an answer asked to hold the launch (PLAN_HALT). */
bool plain_after(const struct launch_info *li, CUresult launch_rc, bool more, int round)
{
    bool halt = false;
    for (; more; round++) {
        on_stream = false;
        if (launch_rc == CUDA_SUCCESS) {
            enqueue_copies(li, PHASE_AFTER);
            run_pieces(li, PHASE_AFTER);
        }
        CUresult sync_rc =
            gate_mail_open() && !on_stream ? CUDA_SUCCESS : gate_wait_stream(li);
        uint32_t flags;
        unsigned ncopies;
        plan_copies(&ncopies);
        if (!ncopies || !plan_report_end(li->seq, launch_rc, sync_rc, &flags))
            break;
        if (flags & PLAN_HALT)
            halt = true;
        if (round == 4)
            break;
    }
    plan_clear();
    return halt;
}

