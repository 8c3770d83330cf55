/*
 * The TMA tensor maps the process made, remembered by their bytes.
 *
 * cuTensorMapEncode* writes a 128-byte descriptor into the caller's memory,
 * which the program then copies wherever it likes (a kernel parameter, a
 * CUTLASS Params struct, a buffer of descriptors) and may change in place
 * (cuTensorMapReplaceAddress). There is no handle to follow: what is
 * remembered is the bytes themselves, and a launch's parameters are matched
 * against them. The descriptor is opaque (the driver may encode the address
 * and sizes in any form), so the bytes are compared whole, never parsed.
 *
 * The table is bounded: an open-addressed hash of TMAP_SLOTS entries, probed
 * over TMAP_PROBE slots; a new map that finds them all taken replaces the
 * oldest of them. cuBLASLt and cuDNN encode maps per call, mostly the same
 * bytes again (same buffers, same shapes), which land on the entry they
 * already have. One mutex: maps are made on the host between launches, and
 * looked up only for launches someone wants.
 */
#include <pthread.h>
#include <string.h>

#include "tensormap.h"

enum { TMAP_SLOTS = 4096, TMAP_PROBE = 8 };
_Static_assert(sizeof(CUtensorMap) == PROTO_TMAP_BYTES, "a CUtensorMap is 128 bytes");

struct tmap_entry {
    uint64_t hash;              /* 0: empty */
    unsigned long long stamp;   /* when it was remembered: the oldest goes first */
    unsigned char bytes[PROTO_TMAP_BYTES];
    struct tmap_info info;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct tmap_entry table[TMAP_SLOTS];
/* A bit per hash of a map's first 8 bytes (for a tiled map, its address), set
 * once a map with them is remembered: a launch's parameters are searched for
 * maps every 8 bytes, and most windows are turned away here, without the lock
 * or the hash of 128 bytes. Bits are never cleared: a stale one costs a lookup. */
static _Atomic uint64_t first_words[64];
static unsigned long long stamps;
static _Atomic bool any;

/* A 64-bit hash of the 128 bytes, word by word (never 0: 0 marks an empty slot). */
static unsigned first_word_bit(const unsigned char *bytes)
{
    uint64_t w;
    memcpy(&w, bytes, sizeof w);
    return (unsigned)((w * 0x9E3779B97F4A7C15ull) >> 52); /* 12 bits: 4096 of them */
}

static uint64_t hash_of(const unsigned char *bytes)
{
    uint64_t h = 0x9E3779B97F4A7C15ull;
    for (unsigned i = 0; i < PROTO_TMAP_BYTES; i += 8) {
        uint64_t w;
        memcpy(&w, bytes + i, sizeof w);
        h ^= w + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
        h *= 0xBF58476D1CE4E5B9ull;
        h ^= h >> 31;
    }
    return h ? h : 1;
}

void tensormap_remember(const CUtensorMap *map, const struct tmap_info *info)
{
    unsigned char bytes[PROTO_TMAP_BYTES];
    memcpy(bytes, map, sizeof bytes);
    uint64_t h = hash_of(bytes);
    pthread_mutex_lock(&lock);
    struct tmap_entry *slot = NULL, *oldest = NULL;
    for (unsigned k = 0; k < TMAP_PROBE; k++) {
        struct tmap_entry *e = &table[(h + k) & (TMAP_SLOTS - 1)];
        if (e->hash == h && memcmp(e->bytes, bytes, sizeof bytes) == 0) {
            slot = e; /* the same bytes again: what they say now wins */
            break;
        }
        if (!e->hash && !slot)
            slot = e;
        if (!oldest || e->stamp < oldest->stamp)
            oldest = e;
    }
    if (!slot)
        slot = oldest;
    slot->hash = h;
    slot->stamp = ++stamps;
    memcpy(slot->bytes, bytes, sizeof bytes);
    slot->info = *info;
    pthread_mutex_unlock(&lock);
    unsigned bit = first_word_bit(bytes);
    atomic_fetch_or_explicit(&first_words[bit / 64], 1ull << (bit % 64), memory_order_release);
    atomic_store_explicit(&any, true, memory_order_release);
}

bool tensormap_find(const unsigned char *bytes, struct tmap_info *out)
{
    unsigned bit = first_word_bit(bytes);
    if (!(atomic_load_explicit(&first_words[bit / 64], memory_order_acquire) & (1ull << (bit % 64))))
        return false;
    uint64_t h = hash_of(bytes);
    bool found = false;
    pthread_mutex_lock(&lock);
    for (unsigned k = 0; k < TMAP_PROBE && !found; k++) {
        const struct tmap_entry *e = &table[(h + k) & (TMAP_SLOTS - 1)];
        if (e->hash == h && memcmp(e->bytes, bytes, PROTO_TMAP_BYTES) == 0) {
            *out = e->info;
            found = true;
        }
    }
    pthread_mutex_unlock(&lock);
    return found;
}

bool tensormap_any(void)
{
    return atomic_load_explicit(&any, memory_order_acquire);
}

void tensormap_reset_after_fork(void)
{
    /* The lock may have been held by a thread the child does not have; the
     * maps stay what they were (the child's memory is a copy). */
    pthread_mutex_init(&lock, NULL);
}
