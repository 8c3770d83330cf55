/*
 * Scopes: what was open on a host thread when it launched.
 *
 * Each thread keeps a stack of open scopes (NVTX ranges, PyTorch modules, a
 * compiled program's operations). Every distinct (parent, kind, name) is one
 * node of a process-wide tree, numbered from 1 and announced to the controller
 * once (MSG_SCOPE); a frame of a stack holds its node, so the innermost node
 * names the whole chain, and a launch carries that one number (scope_here).
 *
 * The table of nodes is read without a lock: a slot, once filled, never
 * changes, and a node is complete before its slot is published. Only the
 * making of a node takes the table's lock. Nodes are never freed (bounded by
 * SCOPE_MAX_NODES; a process that names more gets its new scopes named by
 * their parent).
 *
 * Announcing is apart from making: a node made before the controller is
 * connected (an NVTX range opened before the first driver call) goes with the
 * first launch that carries a scope (scope_stamp), on the launching thread.
 * One thread announces at a time (a flag, not a lock): a thread that finds
 * another announcing goes on, its node being sent by that one or by a later launch.
 * The controller tolerates a launch naming a node not yet read.
 *
 * The step: steps completed + 1, set by the program's Python hooks (an
 * optimizer's step) or counted here: each push of the range CUDUMP_STEP_RANGE
 * names begins the next step (the n-th push, step n - 1).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "channel.h"
#include "scope.h"

enum {
    SCOPE_MAX_NODES = 32768,
    SCOPE_SLOTS = 2 * SCOPE_MAX_NODES,  /* open addressing, at most half full */
    SCOPE_DEPTH = 256,                  /* frames of one thread's stack */
    SCOPE_ENDED = 256,                  /* start/end ranges ended on another thread */
};

struct scope_node {
    uint32_t id, parent, kind, len;
    uint64_t hash;
    char name[];
};

SHIM_TLS uint32_t scope_here;
_Atomic uint32_t scope_step_now;
_Atomic uint32_t scope_nodes, scope_sent;

static _Atomic(struct scope_node *) slots[SCOPE_SLOTS];
static _Atomic(struct scope_node *) by_id[SCOPE_MAX_NODES + 1];
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_flag announcing = ATOMIC_FLAG_INIT;

/* ---- the nodes ------------------------------------------------------------- */

static uint64_t hash_of(uint32_t parent, unsigned kind, const char *name, size_t len)
{
    uint64_t h = 1469598103934665603ull ^ ((uint64_t)parent << 8) ^ kind; /* FNV-1a */
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)name[i];
        h *= 1099511628211ull;
    }
    return h ? h : 1;
}

static bool same(const struct scope_node *n, uint64_t h, uint32_t parent, unsigned kind,
                 const char *name, size_t len)
{
    return n->hash == h && n->parent == parent && n->kind == kind && n->len == len &&
           memcmp(n->name, name, len) == 0;
}

/* The slot of (parent, kind, name): its node, or the empty slot it would take. */
static size_t probe(uint64_t h, uint32_t parent, unsigned kind, const char *name, size_t len,
                    struct scope_node **found)
{
    size_t i = (size_t)h & (SCOPE_SLOTS - 1);
    for (;;) {
        struct scope_node *n = atomic_load_explicit(&slots[i], memory_order_acquire);
        if (!n || same(n, h, parent, kind, name, len)) {
            *found = n;
            return i;
        }
        i = (i + 1) & (SCOPE_SLOTS - 1);
    }
}

uint32_t scope_intern(uint32_t parent, unsigned kind, const char *name, size_t len)
{
    if (kind < SCOPE_RANGE || kind > SCOPE_SOURCE || !name)
        return 0;
    if (len > PROTO_MAX_SCOPE_NAME) {
        len = PROTO_MAX_SCOPE_NAME;
        while (len && ((unsigned char)name[len] & 0xC0) == 0x80)
            len--; /* not in the middle of a UTF-8 character */
    }
    uint64_t h = hash_of(parent, kind, name, len);
    struct scope_node *n;
    probe(h, parent, kind, name, len, &n);
    if (n)
        return n->id;
    pthread_mutex_lock(&table_lock);
    uint32_t id = 0;
    size_t at = probe(h, parent, kind, name, len, &n);
    uint32_t count = atomic_load_explicit(&scope_nodes, memory_order_relaxed);
    if (n) {
        id = n->id;
    } else if (count < SCOPE_MAX_NODES && (n = malloc(sizeof *n + len + 1)) != NULL) {
        id = count + 1;
        *n = (struct scope_node){.id = id, .parent = parent, .kind = kind,
                                 .len = (uint32_t)len, .hash = h};
        memcpy(n->name, name, len);
        n->name[len] = '\0';
        atomic_store_explicit(&by_id[id], n, memory_order_release);
        atomic_store_explicit(&slots[at], n, memory_order_release);
        atomic_store_explicit(&scope_nodes, id, memory_order_release);
    }
    pthread_mutex_unlock(&table_lock);
    if (id > atomic_load_explicit(&scope_sent, memory_order_relaxed))
        scope_announce();
    return id;
}

const char *scope_name(uint32_t id, unsigned *kind, size_t *len)
{
    if (!id || id > SCOPE_MAX_NODES)
        return NULL;
    const struct scope_node *n = atomic_load_explicit(&by_id[id], memory_order_acquire);
    if (!n)
        return NULL;
    *kind = n->kind;
    *len = n->len;
    return n->name;
}

void scope_announce(void)
{
    if (!channel_up() || atomic_flag_test_and_set_explicit(&announcing, memory_order_acquire))
        return;
    uint32_t sent = atomic_load_explicit(&scope_sent, memory_order_relaxed);
    uint32_t count = atomic_load_explicit(&scope_nodes, memory_order_acquire);
    while (sent < count) {
        const struct scope_node *n = atomic_load_explicit(&by_id[sent + 1], memory_order_acquire);
        if (!n)
            break;
        char stack[sizeof(struct proto_scope) + PROTO_MAX_SCOPE_NAME + 16];
        struct msg m;
        msg_init(&m, stack, sizeof stack, MSG_SCOPE, n->id);
        struct proto_scope head = {.id = n->id, .parent = n->parent, .kind = n->kind,
                                   .length = n->len};
        msg_add(&m, &head, sizeof head);
        msg_add(&m, n->name, n->len);
        bool ok = channel_send(&m);
        msg_free(&m);
        if (!ok)
            break;
        sent++;
    }
    atomic_store_explicit(&scope_sent, sent, memory_order_release);
    atomic_flag_clear_explicit(&announcing, memory_order_release);
}

void scope_reset_after_fork(void)
{
    atomic_store(&scope_sent, 0);
    /* The parent's other threads held these, perhaps, at the fork. */
    atomic_flag_clear(&announcing);
    pthread_mutex_init(&table_lock, NULL);
}

/* ---- each thread's stack --------------------------------------------------- */

struct frame {
    uint32_t node;      /* what the thread has open up to here (its parent's when unnamed) */
    uint64_t range;     /* a start/end range's id; 0: pushed */
    uintptr_t owner;    /* who pushed it (scope_push) */
};

struct scope_stack {
    unsigned depth;
    unsigned overflow;  /* pushes past SCOPE_DEPTH, taken back by the first pops */
    unsigned ranges;    /* start/end frames in it */
    struct frame f[SCOPE_DEPTH];
};

static SHIM_TLS struct scope_stack *mine;
static pthread_key_t stack_key;
static pthread_once_t stack_once = PTHREAD_ONCE_INIT;
static const char *step_range;      /* CUDUMP_STEP_RANGE, or NULL */
static size_t step_range_len;

static void stack_init(void)
{
    pthread_key_create(&stack_key, free); /* a thread's stack goes with it */
    const char *s = getenv("CUDUMP_STEP_RANGE");
    if (s && *s) {
        step_range = strdup(s);
        step_range_len = step_range ? strlen(step_range) : 0;
    }
}

static struct scope_stack *stack_here(void)
{
    if (__builtin_expect(mine != NULL, 1))
        return mine;
    pthread_once(&stack_once, stack_init);
    mine = calloc(1, sizeof *mine);
    if (mine)
        pthread_setspecific(stack_key, mine);
    return mine;
}

static void publish(const struct scope_stack *s)
{
    scope_here = s->depth ? s->f[s->depth - 1].node : 0;
}

/* Takes frame i out; the frames above it are opened again under what is below
 * it (their nodes named anew: the chain a launch shows is what is open). */
static void remove_frame(struct scope_stack *s, unsigned i)
{
    uint32_t parent = i ? s->f[i - 1].node : 0;
    uint32_t was = s->f[i].node;
    if (s->f[i].range)
        s->ranges--;
    for (unsigned j = i + 1; j < s->depth; j++) {
        struct frame fr = s->f[j];
        unsigned kind;
        size_t len;
        const char *name = fr.node != was ? scope_name(fr.node, &kind, &len) : NULL;
        uint32_t node = name ? scope_intern(parent, kind, name, len) : 0;
        was = fr.node;
        fr.node = node ? node : parent;
        s->f[j - 1] = fr;
        parent = fr.node;
    }
    s->depth--;
    publish(s);
}

/* Start/end ranges ended on a thread other than the one they are open on: the
 * owner takes them out at its next push, pop, start or end. */
static uint64_t ended[SCOPE_ENDED];
static unsigned nended;
static _Atomic unsigned ended_waiting;
static pthread_mutex_t ended_lock = PTHREAD_MUTEX_INITIALIZER;

static void take_ended(struct scope_stack *s)
{
    if (!s->ranges || !atomic_load_explicit(&ended_waiting, memory_order_relaxed))
        return;
    pthread_mutex_lock(&ended_lock);
    for (unsigned i = s->depth; i-- > 0;) {
        if (!s->f[i].range)
            continue;
        for (unsigned k = 0; k < nended; k++) {
            if (ended[k] == s->f[i].range) {
                ended[k] = ended[--nended];
                remove_frame(s, i);
                break;
            }
        }
    }
    atomic_store_explicit(&ended_waiting, nended, memory_order_relaxed);
    pthread_mutex_unlock(&ended_lock);
}

static bool open_frame(struct scope_stack *s, unsigned kind, const char *name, size_t len,
                       uint64_t range, uintptr_t owner)
{
    if (s->depth == SCOPE_DEPTH)
        return false;
    uint32_t parent = s->depth ? s->f[s->depth - 1].node : 0;
    uint32_t node = scope_intern(parent, kind, name, len);
    s->f[s->depth++] = (struct frame){.node = node ? node : parent, .range = range,
                                      .owner = owner};
    if (range)
        s->ranges++;
    publish(s);
    return node != 0;
}

int scope_push(unsigned kind, const char *name, size_t len, uintptr_t owner)
{
    struct scope_stack *s = stack_here();
    if (!s)
        return -1;
    take_ended(s);
    int level = (int)(s->depth + s->overflow);
    if (s->depth == SCOPE_DEPTH) {
        s->overflow++;
        return -1;
    }
    bool named = open_frame(s, kind, name, len, 0, owner);
    if (kind == SCOPE_RANGE && step_range && len == step_range_len &&
        memcmp(name, step_range, len) == 0)
        atomic_fetch_add_explicit(&scope_step_now, 1, memory_order_relaxed);
    return named ? level : -1;
}

int scope_pop(uintptr_t owner)
{
    struct scope_stack *s = mine;
    if (!s)
        return -1;
    take_ended(s);
    if (s->overflow) {
        s->overflow--;
        return (int)(s->depth + s->overflow);
    }
    for (unsigned i = s->depth; i-- > 0;) {
        if (!s->f[i].range && s->f[i].owner == owner) {
            remove_frame(s, i);
            return (int)i;
        }
    }
    return -1;
}

static _Atomic uint64_t next_range = 1;

uint64_t scope_start(unsigned kind, const char *name, size_t len)
{
    uint64_t id = atomic_fetch_add_explicit(&next_range, 1, memory_order_relaxed);
    struct scope_stack *s = stack_here();
    if (s) {
        take_ended(s);
        open_frame(s, kind, name, len, id, 0);
    }
    return id;
}

/* A range ended on the thread it is open on goes now, wherever it is in the
 * stack. Ended on another thread, it cannot be taken out of the owner's stack
 * from here (that stack is the owner's alone, unlocked): it is left for the
 * owner to take out at its next scope call; its launches until then still name
 * it. An id no thread has open (a range opened past the stack's depth) is
 * forgotten once SCOPE_ENDED later ends have come. */
void scope_end(uint64_t id)
{
    if (!id)
        return;
    struct scope_stack *s = mine;
    if (s) {
        take_ended(s);
        for (unsigned i = s->depth; i-- > 0;) {
            if (s->f[i].range == id) {
                remove_frame(s, i);
                return;
            }
        }
    }
    pthread_mutex_lock(&ended_lock);
    if (nended == SCOPE_ENDED)
        memmove(ended, ended + 1, --nended * sizeof *ended);
    ended[nended++] = id;
    atomic_store_explicit(&ended_waiting, nended, memory_order_relaxed);
    pthread_mutex_unlock(&ended_lock);
}

void scope_set_step(uint32_t wire_step)
{
    atomic_store_explicit(&scope_step_now, wire_step, memory_order_relaxed);
}

/* ---- for the program's own hooks (ctypes: CDLL(None)) ------------------------ */

/* 0 when the scope is named; -1 when it could not be (a kind not a scope's, no
 * name, a full table, a stack too deep). Every push, whatever it returned, is
 * balanced by one pop. */
SHIM_EXPORT int cudump_scope_push(unsigned kind, const char *name)
{
    if (kind == SCOPE_SOURCE)
        kind = 0; /* a source line is no scope: pushed unnamed */
    return scope_push(kind, name ? name : "", name ? strlen(name) : 0, 0) < 0 ? -1 : 0;
}

SHIM_EXPORT void cudump_scope_pop(void)
{
    scope_pop(0);
}

SHIM_EXPORT void cudump_scope_step(unsigned wire_step)
{
    scope_set_step(wire_step);
}

/* A tensor the module whose forward is open on this thread returned (the
 * program's PyTorch hooks, before they close its scope): `type` is
 * "float32[8,64,56,56]". Sent as MSG_OUTPUT, after the nodes not yet announced,
 * so that the scope it names is known first. 0 when sent; -1 when there is no
 * controller to tell or the type is too long: nothing is kept, the program
 * goes on. */
SHIM_EXPORT int cudump_scope_output(uint64_t address, uint64_t bytes, unsigned index,
                                    const char *type)
{
    size_t len = type ? strlen(type) : 0;
    if (!channel_up() || len > PROTO_MAX_SCOPE_NAME)
        return -1;
    struct proto_output head = {.address = address, .bytes = bytes, .index = index,
                                .length = (uint32_t)len};
    scope_stamp(&head.scope, &head.step);
    /* Every launch made before this call has its number by now: it is counted
     * before the program's own call goes out (launch.c), on this thread or one
     * the program has synchronised with. */
    head.launches = atomic_load_explicit(&shim_stats.seq, memory_order_relaxed);
    char stack[sizeof head + PROTO_MAX_SCOPE_NAME + 16];
    struct msg m;
    msg_init(&m, stack, sizeof stack, MSG_OUTPUT, head.launches);
    msg_add(&m, &head, sizeof head);
    msg_add(&m, type, len);
    bool ok = channel_send(&m);
    msg_free(&m);
    return ok ? 0 : -1;
}

SHIM_EXPORT unsigned cudump_scope_current(void)
{
    return scope_here;
}
