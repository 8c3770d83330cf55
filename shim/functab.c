/*
 * Kernel functions the process has named or launched, keyed by handle.
 *
 * Launches look handles up from many threads at once, so the table is an
 * open-addressing hash with atomic keys: lookups take no lock, inserts claim
 * a slot with one compare-and-swap, and entries are never removed (module
 * unloads are rare, and a stale entry only costs its slot). What the
 * controller wants of a function is cached in its entry together with the
 * control generation it was given for: the launch fast path is this lookup
 * and one compare with the control page's generation.
 */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "channel.h"
#include "functab.h"

#define FUNCTAB_BITS 16
#define FUNCTAB_SIZE (1u << FUNCTAB_BITS)
#define MAX_PROBE 64

static struct func_entry table[FUNCTAB_SIZE];
static _Atomic unsigned next_id;

static inline size_t slot_of(uintptr_t key)
{
    /* Handles are aligned heap pointers: mix the bits before masking. */
    uint64_t h = (uint64_t)key * 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> (64 - FUNCTAB_BITS));
}

struct func_entry *functab_find(uintptr_t key)
{
    size_t i = slot_of(key);
    for (int probe = 0; probe < MAX_PROBE; probe++, i = (i + 1) & (FUNCTAB_SIZE - 1)) {
        uintptr_t k = atomic_load_explicit(&table[i].key, memory_order_acquire);
        if (k == key)
            return &table[i];
        if (k == 0)
            return NULL;
    }
    return NULL;
}

struct func_entry *functab_get(uintptr_t key)
{
    if (!key)
        return NULL;
    size_t i = slot_of(key);
    for (int probe = 0; probe < MAX_PROBE; probe++, i = (i + 1) & (FUNCTAB_SIZE - 1)) {
        uintptr_t k = atomic_load_explicit(&table[i].key, memory_order_acquire);
        if (k == key)
            return &table[i];
        if (k == 0) {
            uintptr_t expected = 0;
            if (atomic_compare_exchange_strong(&table[i].key, &expected, key)) {
                table[i].id = atomic_fetch_add(&next_id, 1) + 1;
                table[i].nparams = -1;
                return &table[i];
            }
            if (expected == key)
                return &table[i];
        }
    }
    return NULL;
}

void functab_name(uintptr_t key, const char *name, bool is_kernel)
{
    struct func_entry *e = functab_get(key);
    if (!e || !name)
        return;
    int expected = FN_EMPTY;
    /* Claim the entry for naming; if another thread already named or
     * registered it, the first name stands. */
    if (!atomic_compare_exchange_strong(&e->state, &expected, FN_PENDING))
        return;
    e->name = strdup(name);
    e->is_kernel = is_kernel;
    atomic_store_explicit(&e->state, FN_NAMED, memory_order_release);
}

void functab_module(uintptr_t key, uintptr_t module)
{
    struct func_entry *e = functab_get(key);
    if (e && module)
        atomic_store_explicit(&e->module, module, memory_order_relaxed);
}

static void learn_layout(struct func_entry *e, uintptr_t key)
{
    size_t offsets[PROTO_MAX_PARAMS], sizes[PROTO_MAX_PARAMS];
    int n = 0;
    for (; n < PROTO_MAX_PARAMS; n++) {
        CUresult rc = CUDA_ERROR_NOT_FOUND;
        if (!e->is_kernel && real_cuFuncGetParamInfo)
            rc = real_cuFuncGetParamInfo((CUfunction)key, (size_t)n, &offsets[n], &sizes[n]);
        if (rc == CUDA_ERROR_INVALID_HANDLE || e->is_kernel) {
            if (real_cuKernelGetParamInfo)
                rc = real_cuKernelGetParamInfo((CUkernel)key, (size_t)n, &offsets[n], &sizes[n]);
        }
        if (rc != CUDA_SUCCESS)
            break;
    }
    if (n == 0 && !(real_cuFuncGetParamInfo || real_cuKernelGetParamInfo))
        return;
    e->param_offset = calloc((size_t)n + 1, sizeof(uint32_t));
    e->param_size = calloc((size_t)n + 1, sizeof(uint32_t));
    if (!e->param_offset || !e->param_size)
        return;
    for (int i = 0; i < n; i++) {
        e->param_offset[i] = (uint32_t)offsets[i];
        e->param_size[i] = (uint32_t)sizes[i];
    }
    e->nparams = n;
}

static void learn_name(struct func_entry *e, uintptr_t key)
{
    const char *name = NULL;
    CUresult rc = CUDA_ERROR_NOT_FOUND;
    if (real_cuFuncGetName)
        rc = real_cuFuncGetName(&name, (CUfunction)key);
    /* A CUkernel cast to CUfunction launches, but cuFuncGetName rejects it. */
    if (rc != CUDA_SUCCESS && real_cuKernelGetName) {
        rc = real_cuKernelGetName(&name, (CUkernel)key);
        if (rc == CUDA_SUCCESS)
            e->is_kernel = true;
    }
    if (rc == CUDA_SUCCESS && name)
        e->name = strdup(name);
}

/* Stores the controller's answer; wants 0 and the current generation when
 * there is no controller, so that the entry is not asked about again. */
static void store_wants(struct func_entry *e, bool ok, const struct proto_wants *w)
{
    const volatile struct proto_control *ctl = channel_control();
    unsigned wants = ok ? w->wants : 0;
    uint32_t gen = ok ? w->generation : (ctl ? ctl->generation : 0);
    unsigned nsel = 0;
    for (unsigned i = 0; ok && i < w->nselectors && i < PROTO_MAX_SELECTORS; i++) {
        if (w->sel[i].counter >= PROTO_MAX_COUNTERS || w->sel[i].every == 0)
            continue; /* not a selector to trust: the controller counts without it */
        e->sel[nsel++] = w->sel[i];
    }
    if (nsel != (ok ? w->nselectors : 0))
        wants &= ~(unsigned)WANT_COUNTED;
    atomic_store_explicit(&e->nselectors, nsel, memory_order_release);
    atomic_store_explicit(&e->wants, wants, memory_order_relaxed);
    atomic_store_explicit(&e->gen, gen, memory_order_relaxed);
}

void functab_register(struct func_entry *e)
{
    uintptr_t key = atomic_load_explicit(&e->key, memory_order_relaxed);
    int state = atomic_load_explicit(&e->state, memory_order_acquire);
    for (;;) {
        if (state == FN_READY)
            return;
        if (state == FN_EMPTY || state == FN_NAMED) {
            if (atomic_compare_exchange_weak(&e->state, &state, FN_PENDING))
                break;
            continue;
        }
        /* Another thread is naming or registering it: wait for that. */
        sched_yield();
        state = atomic_load_explicit(&e->state, memory_order_acquire);
    }
    shim_busy++;
    if (!e->name)
        learn_name(e, key);
    learn_layout(e, key);
    struct proto_wants w = {0};
    bool ok = false;
    if (channel_up()) {
        char stack[2048];
        struct msg m;
        msg_init(&m, stack, sizeof stack, MSG_FUNC, 0);
        struct proto_func f = {.id = e->id, .nparams = e->nparams, .handle = key};
        msg_add(&m, &f, sizeof f);
        for (int i = 0; i < e->nparams; i++) {
            struct proto_param p = {e->param_offset[i], e->param_size[i]};
            msg_add(&m, &p, sizeof p);
        }
        if (e->name)
            msg_add(&m, e->name, strlen(e->name));
        size_t len = 0;
        ok = channel_request(&m, MSG_WANTS, &w, sizeof w, &len) && len == sizeof w;
        msg_free(&m);
    }
    store_wants(e, ok, &w);
    shim_busy--;
    atomic_store_explicit(&e->state, FN_READY, memory_order_release);
}

void functab_refresh(struct func_entry *e)
{
    shim_busy++;
    char stack[64];
    struct msg m;
    msg_init(&m, stack, sizeof stack, MSG_ASK, 0);
    struct proto_ask a = {.id = e->id};
    msg_add(&m, &a, sizeof a);
    struct proto_wants w = {0};
    size_t len = 0;
    bool ok = channel_request(&m, MSG_WANTS, &w, sizeof w, &len) && len == sizeof w;
    msg_free(&m);
    store_wants(e, ok, &w);
    shim_busy--;
}

void functab_each(void (*fn)(struct func_entry *, void *), void *ctx)
{
    for (size_t i = 0; i < FUNCTAB_SIZE; i++)
        if (atomic_load_explicit(&table[i].key, memory_order_acquire) &&
            (atomic_load_explicit(&table[i].launches, memory_order_relaxed) ||
             atomic_load_explicit(&table[i].graph_launches, memory_order_relaxed)))
            fn(&table[i], ctx);
}

void functab_reset_after_fork(void)
{
    /* The child is a new process for the controller: it must ask again
     * what is wanted, and count its own launches. Names stay valid. */
    for (size_t i = 0; i < FUNCTAB_SIZE; i++) {
        if (!atomic_load_explicit(&table[i].key, memory_order_relaxed))
            continue;
        atomic_store(&table[i].launches, 0);
        atomic_store(&table[i].graph_launches, 0);
        int s = atomic_load(&table[i].state);
        if (s == FN_READY || s == FN_PENDING)
            atomic_store(&table[i].state, table[i].name ? FN_NAMED : FN_EMPTY);
        atomic_store(&table[i].gen, 0);
        atomic_store(&table[i].image_sent, false);
    }
}
