/*
 * NVTX ranges as scopes.
 *
 * Two ways in. NVTX 3 (header only, what current programs and libraries use)
 * loads the library NVTX_INJECTION64_PATH names at a program's first NVTX
 * call and calls its InitializeInjectionNvtx2, which fills NVTX's table of
 * function pointers: the controller names the shim there when a mode reads
 * scopes. Programs linked against the older libnvToolsExt call its exported
 * functions instead: the shim exports the same names, records the scope, and
 * forwards to the library after it (dlsym RTLD_NEXT), returning what it
 * returns; without one it answers what NVTX documents. Those record only
 * when the controller reads scopes (CUDUMP_SCOPES=1). A libnvToolsExt the
 * shim forwards to may itself load the shim as its tool: while forwarding, the
 * tool's calls record nothing (the call was recorded once already).
 *
 * Names: a range's message; outside the default domain "domain:message".
 * Marks are instants, not scopes: ignored.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "nvtx.h"
#include "scope.h"

static SHIM_TLS int forwarding;

/* ---- names --------------------------------------------------------------------- */

/* Domains and registered strings: what each handle names. NVTX's handles are
 * the tool's to make (the shim's own, when it is the tool) or the forwarded
 * library's; either way the name is kept by handle. */
enum { HANDLES = 4096 };
static struct { const void *handle; char *name; } handles[HANDLES];
static pthread_mutex_t handles_lock = PTHREAD_MUTEX_INITIALIZER;

static size_t handle_slot(const void *h)
{
    return ((uintptr_t)h >> 4) * 0x9E3779B97F4A7C15ull >> 52; /* 12 bits: HANDLES */
}

static void keep_name(const void *h, const char *name)
{
    if (!h || !name)
        return;
    char *copy = strdup(name);
    if (!copy)
        return;
    pthread_mutex_lock(&handles_lock);
    size_t i = handle_slot(h);
    for (size_t n = 0; n < HANDLES; n++, i = (i + 1) % HANDLES) {
        if (!handles[i].handle || handles[i].handle == h) {
            free(handles[i].name);
            handles[i].handle = h;
            handles[i].name = copy;
            copy = NULL;
            break;
        }
    }
    pthread_mutex_unlock(&handles_lock);
    free(copy); /* a full table: that handle goes unnamed */
}

/* Copies the handle's name into out[cap]; "" for one not known. */
static void name_of(const void *h, char *out, size_t cap)
{
    out[0] = '\0';
    if (!h)
        return;
    pthread_mutex_lock(&handles_lock);
    size_t i = handle_slot(h);
    for (size_t n = 0; n < HANDLES && handles[i].handle; n++, i = (i + 1) % HANDLES) {
        if (handles[i].handle == h) {
            strncpy(out, handles[i].name, cap - 1);
            out[cap - 1] = '\0';
            break;
        }
    }
    pthread_mutex_unlock(&handles_lock);
}

/* A wide string (UTF-32 on every platform CUDA runs on) as UTF-8, cut to fit. */
static void utf8_of(const wchar_t *w, char *out, size_t cap)
{
    size_t at = 0;
    for (; w && *w; w++) {
        uint32_t c = (uint32_t)*w;
        char b[4];
        size_t n;
        if (c < 0x80) {
            b[0] = (char)c;
            n = 1;
        } else if (c < 0x800) {
            b[0] = (char)(0xC0 | c >> 6);
            b[1] = (char)(0x80 | (c & 0x3F));
            n = 2;
        } else if (c < 0x10000) {
            b[0] = (char)(0xE0 | c >> 12);
            b[1] = (char)(0x80 | (c >> 6 & 0x3F));
            b[2] = (char)(0x80 | (c & 0x3F));
            n = 3;
        } else {
            b[0] = (char)(0xF0 | (c >> 18 & 0x07));
            b[1] = (char)(0x80 | (c >> 12 & 0x3F));
            b[2] = (char)(0x80 | (c >> 6 & 0x3F));
            b[3] = (char)(0x80 | (c & 0x3F));
            n = 4;
        }
        if (at + n >= cap)
            break;
        memcpy(out + at, b, n);
        at += n;
    }
    out[at] = '\0';
}

enum { NAME_CAP = PROTO_MAX_SCOPE_NAME + 1 };

/* The scope's name of an event's message in `domain` (NULL: the default one). */
static size_t attributes_name(const void *domain, const struct nvtx_attributes *a, char *out)
{
    char message[NAME_CAP];
    message[0] = '\0';
    if (a && a->size >= offsetof(struct nvtx_attributes, message) + sizeof a->message) {
        if (a->message_type == NVTX_MSG_ASCII && a->message.ascii) {
            strncpy(message, a->message.ascii, sizeof message - 1);
            message[sizeof message - 1] = '\0';
        } else if (a->message_type == NVTX_MSG_UNICODE) {
            utf8_of(a->message.unicode, message, sizeof message);
        } else if (a->message_type == NVTX_MSG_REGISTERED) {
            name_of(a->message.registered, message, sizeof message);
        }
    }
    char dom[NAME_CAP];
    name_of(domain, dom, sizeof dom);
    if (!dom[0]) {
        memcpy(out, message, strlen(message) + 1);
    } else {
        size_t d = strlen(dom);
        memcpy(out, dom, d);
        out[d] = ':';
        size_t m = strlen(message);
        if (m > NAME_CAP - 2 - d)
            m = NAME_CAP - 2 - d;
        memcpy(out + d + 1, message, m);
        out[d + 1 + m] = '\0';
    }
    return strlen(out);
}

static int push_named(const void *domain, const char *name)
{
    if (forwarding)
        return NVTX_NO_PUSH_POP_TRACKING;
    int level = scope_push(SCOPE_RANGE, name ? name : "", name ? strlen(name) : 0,
                           (uintptr_t)domain);
    return level < 0 ? NVTX_NO_PUSH_POP_TRACKING : level;
}

static nvtx_range_id start_named(const char *name)
{
    if (forwarding)
        return 0;
    return scope_start(SCOPE_RANGE, name ? name : "", name ? strlen(name) : 0);
}

/* ---- the tool's functions -------------------------------------------------------- */

static int tool_push_a(const char *message)
{
    return push_named(NULL, message);
}

static int tool_push_w(const wchar_t *message)
{
    char name[NAME_CAP];
    utf8_of(message, name, sizeof name);
    return push_named(NULL, name);
}

static int tool_domain_push(const void *domain, const struct nvtx_attributes *a)
{
    char name[NAME_CAP];
    attributes_name(domain, a, name);
    return push_named(domain, name);
}

static int tool_push_ex(const struct nvtx_attributes *a)
{
    return tool_domain_push(NULL, a);
}

/* Each domain pops its own pushes. */
static int tool_domain_pop(const void *domain)
{
    if (forwarding)
        return NVTX_NO_PUSH_POP_TRACKING;
    int level = scope_pop((uintptr_t)domain);
    return level < 0 ? NVTX_NO_PUSH_POP_TRACKING : level;
}

static int tool_pop(void)
{
    return tool_domain_pop(NULL);
}

static nvtx_range_id tool_start_a(const char *message)
{
    return start_named(message);
}

static nvtx_range_id tool_start_w(const wchar_t *message)
{
    char name[NAME_CAP];
    utf8_of(message, name, sizeof name);
    return start_named(name);
}

static nvtx_range_id tool_domain_start(const void *domain, const struct nvtx_attributes *a)
{
    char name[NAME_CAP];
    attributes_name(domain, a, name);
    return start_named(name);
}

static nvtx_range_id tool_start_ex(const struct nvtx_attributes *a)
{
    return tool_domain_start(NULL, a);
}

static void tool_end(nvtx_range_id id)
{
    if (!forwarding)
        scope_end(id);
}

static void tool_domain_end(const void *domain, nvtx_range_id id)
{
    (void)domain;
    tool_end(id);
}

/* A handle of the shim's own: an address that names one domain or string. */
static const void *own_handle(const char *name)
{
    char *h = strdup(name ? name : "");
    keep_name(h, h);
    return h;
}

static const void *tool_domain_create_a(const char *name)
{
    return own_handle(name);
}

static const void *tool_domain_create_w(const wchar_t *name)
{
    char utf8[NAME_CAP];
    utf8_of(name, utf8, sizeof utf8);
    return own_handle(utf8);
}

static const void *tool_register_a(const void *domain, const char *text)
{
    (void)domain;
    return own_handle(text);
}

static const void *tool_register_w(const void *domain, const wchar_t *text)
{
    (void)domain;
    char utf8[NAME_CAP];
    utf8_of(text, utf8, sizeof utf8);
    return own_handle(utf8);
}

static void fill(nvtx_table table, unsigned size, unsigned id, nvtx_fn fn)
{
    if (id <= size && table[id])
        *table[id] = fn;
}

SHIM_EXPORT int InitializeInjectionNvtx2(nvtx_get_export_table get)
{
    const struct nvtx_callbacks_table *cb = get ? get(NVTX_ETID_CALLBACKS) : NULL;
    if (!cb || cb->struct_size < sizeof *cb || !cb->GetModuleFunctionTable)
        return 0;
    nvtx_table t = NULL;
    unsigned n = 0;
    if (cb->GetModuleFunctionTable(NVTX_MOD_CORE, &t, &n) && t) {
        fill(t, n, NVTX_CORE_RangePushA, (nvtx_fn)tool_push_a);
        fill(t, n, NVTX_CORE_RangePushW, (nvtx_fn)tool_push_w);
        fill(t, n, NVTX_CORE_RangePushEx, (nvtx_fn)tool_push_ex);
        fill(t, n, NVTX_CORE_RangePop, (nvtx_fn)tool_pop);
        fill(t, n, NVTX_CORE_RangeStartA, (nvtx_fn)tool_start_a);
        fill(t, n, NVTX_CORE_RangeStartW, (nvtx_fn)tool_start_w);
        fill(t, n, NVTX_CORE_RangeStartEx, (nvtx_fn)tool_start_ex);
        fill(t, n, NVTX_CORE_RangeEnd, (nvtx_fn)tool_end);
    }
    t = NULL;
    n = 0;
    if (cb->GetModuleFunctionTable(NVTX_MOD_CORE2, &t, &n) && t) {
        fill(t, n, NVTX_CORE2_DomainRangePushEx, (nvtx_fn)tool_domain_push);
        fill(t, n, NVTX_CORE2_DomainRangePop, (nvtx_fn)tool_domain_pop);
        fill(t, n, NVTX_CORE2_DomainRangeStartEx, (nvtx_fn)tool_domain_start);
        fill(t, n, NVTX_CORE2_DomainRangeEnd, (nvtx_fn)tool_domain_end);
        fill(t, n, NVTX_CORE2_DomainCreateA, (nvtx_fn)tool_domain_create_a);
        fill(t, n, NVTX_CORE2_DomainCreateW, (nvtx_fn)tool_domain_create_w);
        fill(t, n, NVTX_CORE2_DomainRegisterStringA, (nvtx_fn)tool_register_a);
        fill(t, n, NVTX_CORE2_DomainRegisterStringW, (nvtx_fn)tool_register_w);
    }
    return 1;
}

/* ---- the older libnvToolsExt's exported calls ---------------------------------------- */

static _Atomic int scopes_wanted = -1;   /* CUDUMP_SCOPES=1, read once */

static bool recording(void)
{
    int on = atomic_load_explicit(&scopes_wanted, memory_order_relaxed);
    if (on < 0) {
        const char *v = getenv("CUDUMP_SCOPES");
        on = v && strcmp(v, "1") == 0;
        atomic_store_explicit(&scopes_wanted, on, memory_order_relaxed);
    }
    return on && !forwarding;
}

/* The same function in the library after the shim, looked up once; NULL where
 * there is none. */
#define NEXT(name, type)                                                                 \
    static _Atomic(void *) next_##name = (void *)1;                                      \
    static type next_fn_##name(void)                                                     \
    {                                                                                    \
        void *p = atomic_load_explicit(&next_##name, memory_order_acquire);              \
        if (p == (void *)1) {                                                            \
            p = dlsym(RTLD_NEXT, #name);                                                 \
            atomic_store_explicit(&next_##name, p, memory_order_release);                \
        }                                                                                \
        return (type)p;                                                                  \
    }

typedef int (*push_a_fn)(const char *);
typedef int (*push_w_fn)(const wchar_t *);
typedef int (*push_ex_fn)(const struct nvtx_attributes *);
typedef int (*pop_fn)(void);
typedef nvtx_range_id (*start_a_fn)(const char *);
typedef nvtx_range_id (*start_w_fn)(const wchar_t *);
typedef nvtx_range_id (*start_ex_fn)(const struct nvtx_attributes *);
typedef void (*end_fn)(nvtx_range_id);
typedef int (*dpush_fn)(const void *, const struct nvtx_attributes *);
typedef int (*dpop_fn)(const void *);
typedef nvtx_range_id (*dstart_fn)(const void *, const struct nvtx_attributes *);
typedef void (*dend_fn)(const void *, nvtx_range_id);
typedef const void *(*create_a_fn)(const char *);
typedef const void *(*create_w_fn)(const wchar_t *);
typedef const void *(*register_a_fn)(const void *, const char *);
typedef const void *(*register_w_fn)(const void *, const wchar_t *);

NEXT(nvtxRangePushA, push_a_fn)
NEXT(nvtxRangePushW, push_w_fn)
NEXT(nvtxRangePushEx, push_ex_fn)
NEXT(nvtxRangePop, pop_fn)
NEXT(nvtxRangeStartA, start_a_fn)
NEXT(nvtxRangeStartW, start_w_fn)
NEXT(nvtxRangeStartEx, start_ex_fn)
NEXT(nvtxRangeEnd, end_fn)
NEXT(nvtxDomainRangePushEx, dpush_fn)
NEXT(nvtxDomainRangePop, dpop_fn)
NEXT(nvtxDomainRangeStartEx, dstart_fn)
NEXT(nvtxDomainRangeEnd, dend_fn)
NEXT(nvtxDomainCreateA, create_a_fn)
NEXT(nvtxDomainCreateW, create_w_fn)
NEXT(nvtxDomainRegisterStringA, register_a_fn)
NEXT(nvtxDomainRegisterStringW, register_w_fn)

/* Start/end ranges made through a forwarded library: its id, the shim's id. */
enum { PAIRS = 1024 };
static struct { nvtx_range_id theirs, ours; } pairs[PAIRS];
static unsigned next_pair;
static pthread_mutex_t pairs_lock = PTHREAD_MUTEX_INITIALIZER;

static nvtx_range_id started(nvtx_range_id ours, nvtx_range_id theirs)
{
    pthread_mutex_lock(&pairs_lock);
    pairs[next_pair] = (__typeof__(pairs[0])){theirs, ours};
    next_pair = (next_pair + 1) % PAIRS;
    pthread_mutex_unlock(&pairs_lock);
    return theirs;
}

static nvtx_range_id ours_of(nvtx_range_id theirs)
{
    nvtx_range_id ours = 0;
    pthread_mutex_lock(&pairs_lock);
    for (unsigned i = 0; i < PAIRS && !ours; i++)
        if (pairs[i].ours && pairs[i].theirs == theirs) {
            ours = pairs[i].ours;
            pairs[i].ours = 0;
        }
    pthread_mutex_unlock(&pairs_lock);
    return ours;
}

/* Calls the next library's function with the shim's tool quiet. */
#define FORWARD(call) (forwarding++, __extension__({ __typeof__(call) r_ = (call); forwarding--; r_; }))
#define FORWARD_VOID(call) do { forwarding++; (call); forwarding--; } while (0)

/* A push: recorded, then forwarded (what the library answers), else the level. */
#define PUSH_BODY(next, record, call)                                                    \
    int level = recording() ? (record) : NVTX_NO_PUSH_POP_TRACKING;                    \
    __typeof__(next_fn_##next()) real = next_fn_##next();                               \
    return real ? FORWARD(call) : level;

SHIM_EXPORT int nvtxRangePushA(const char *message)
{
    PUSH_BODY(nvtxRangePushA, tool_push_a(message), real(message))
}

SHIM_EXPORT int nvtxRangePushW(const wchar_t *message)
{
    PUSH_BODY(nvtxRangePushW, tool_push_w(message), real(message))
}

SHIM_EXPORT int nvtxRangePushEx(const struct nvtx_attributes *a)
{
    PUSH_BODY(nvtxRangePushEx, tool_push_ex(a), real(a))
}

SHIM_EXPORT int nvtxRangePop(void)
{
    PUSH_BODY(nvtxRangePop, tool_pop(), real())
}

SHIM_EXPORT int nvtxDomainRangePushEx(const void *domain, const struct nvtx_attributes *a)
{
    PUSH_BODY(nvtxDomainRangePushEx, tool_domain_push(domain, a), real(domain, a))
}

SHIM_EXPORT int nvtxDomainRangePop(const void *domain)
{
    PUSH_BODY(nvtxDomainRangePop, tool_domain_pop(domain), real(domain))
}

/* A start: the shim's id where no library is after it, else the library's
 * (mapped to the shim's for the end). */
#define START_BODY(next, record, call)                                                   \
    nvtx_range_id ours = recording() ? (record) : 0;                                     \
    __typeof__(next_fn_##next()) real = next_fn_##next();                               \
    if (!real)                                                                           \
        return ours ? ours : (nvtx_range_id)0;                                           \
    nvtx_range_id theirs = FORWARD(call);                                                \
    return ours ? started(ours, theirs) : theirs;

SHIM_EXPORT nvtx_range_id nvtxRangeStartA(const char *message)
{
    START_BODY(nvtxRangeStartA, tool_start_a(message), real(message))
}

SHIM_EXPORT nvtx_range_id nvtxRangeStartW(const wchar_t *message)
{
    START_BODY(nvtxRangeStartW, tool_start_w(message), real(message))
}

SHIM_EXPORT nvtx_range_id nvtxRangeStartEx(const struct nvtx_attributes *a)
{
    START_BODY(nvtxRangeStartEx, tool_start_ex(a), real(a))
}

SHIM_EXPORT nvtx_range_id nvtxDomainRangeStartEx(const void *domain,
                                                 const struct nvtx_attributes *a)
{
    START_BODY(nvtxDomainRangeStartEx, tool_domain_start(domain, a), real(domain, a))
}

SHIM_EXPORT void nvtxRangeEnd(nvtx_range_id id)
{
    end_fn real = next_fn_nvtxRangeEnd();
    if (recording())
        tool_end(real ? ours_of(id) : id);
    if (real)
        FORWARD_VOID(real(id));
}

SHIM_EXPORT void nvtxDomainRangeEnd(const void *domain, nvtx_range_id id)
{
    dend_fn real = next_fn_nvtxDomainRangeEnd();
    if (recording())
        tool_end(real ? ours_of(id) : id);
    if (real)
        FORWARD_VOID(real(domain, id));
}

/* Domains and strings: the library's handle where there is one (named by the
 * shim too), else the shim's own. */
SHIM_EXPORT const void *nvtxDomainCreateA(const char *name)
{
    create_a_fn real = next_fn_nvtxDomainCreateA();
    if (!real)
        return tool_domain_create_a(name);
    const void *h = FORWARD(real(name));
    keep_name(h, name);
    return h;
}

SHIM_EXPORT const void *nvtxDomainCreateW(const wchar_t *name)
{
    create_w_fn real = next_fn_nvtxDomainCreateW();
    if (!real)
        return tool_domain_create_w(name);
    const void *h = FORWARD(real(name));
    char utf8[NAME_CAP];
    utf8_of(name, utf8, sizeof utf8);
    keep_name(h, utf8);
    return h;
}

SHIM_EXPORT const void *nvtxDomainRegisterStringA(const void *domain, const char *text)
{
    register_a_fn real = next_fn_nvtxDomainRegisterStringA();
    if (!real)
        return tool_register_a(domain, text);
    const void *h = FORWARD(real(domain, text));
    keep_name(h, text);
    return h;
}

SHIM_EXPORT const void *nvtxDomainRegisterStringW(const void *domain, const wchar_t *text)
{
    register_w_fn real = next_fn_nvtxDomainRegisterStringW();
    if (!real)
        return tool_register_w(domain, text);
    const void *h = FORWARD(real(domain, text));
    char utf8[NAME_CAP];
    utf8_of(text, utf8, sizeof utf8);
    keep_name(h, utf8);
    return h;
}
