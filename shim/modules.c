/*
 * Module images, so that a launch captured for replay can take the code it
 * ran with it (MSG_IMAGE).
 *
 * Only when the controller asks for it (OPTION_CAPTURE): every load is then
 * remembered by handle. An image inside a loaded object (the .nv_fatbin of
 * a program or library: what the CUDA runtime loads) stays valid, so only its
 * address is kept; anything else (a JIT's PTX, a cubin read into a buffer) is
 * copied, since the loader may free it as soon as the load returns. Loads are
 * rare, so one lock and a list are enough; launches never touch this file
 * unless WANT_CAPTURE says so.
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "channel.h"
#include "modules.h"

enum {
    FATBIN_MAGIC = 0xBA55ED50u,         /* a fat binary's header */
    FATBIN_WRAPPER_MAGIC = 0x466243B1u, /* the runtime's wrapper around a fat binary */
    MAX_IMAGE = 1u << 31,               /* larger "images" are taken for garbage */
};

struct module_entry {
    uintptr_t handle;           /* CUmodule or CUlibrary */
    const unsigned char *image; /* the loader's bytes, or `copy` */
    unsigned char *copy;        /* owned */
    char *path;                 /* a file load: read when sent */
    size_t size;
    enum proto_image_format format;
    bool sent;
};

static pthread_mutex_t modules_lock = PTHREAD_MUTEX_INITIALIZER;
static struct module_entry *modules;
static size_t nmodules, modules_cap;

static uint64_t read_u64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static uint32_t read_u32(const unsigned char *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static uint16_t read_u16(const unsigned char *p)
{
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* The extent of a 64-bit ELF file in memory: its headers' tables and every
 * section with bytes in the file. */
static size_t elf_size(const unsigned char *p)
{
    if (p[4] != 2) /* ELFCLASS64: the only class CUDA cubins use */
        return 0;
    uint64_t phoff = read_u64(p + 0x20), shoff = read_u64(p + 0x28);
    uint16_t phentsize = read_u16(p + 0x36), phnum = read_u16(p + 0x38);
    uint16_t shentsize = read_u16(p + 0x3A), shnum = read_u16(p + 0x3C);
    if (shoff > MAX_IMAGE || phoff > MAX_IMAGE || (shnum && shentsize < 0x28))
        return 0;
    uint64_t end = 0x40;
    if (phoff + (uint64_t)phnum * phentsize > end)
        end = phoff + (uint64_t)phnum * phentsize;
    if (shoff + (uint64_t)shnum * shentsize > end)
        end = shoff + (uint64_t)shnum * shentsize;
    for (unsigned i = 0; i < shnum; i++) {
        const unsigned char *sh = p + shoff + (uint64_t)i * shentsize;
        uint32_t type = read_u32(sh + 4);
        uint64_t off = read_u64(sh + 0x18), size = read_u64(sh + 0x20);
        if (type != 8 /* SHT_NOBITS */ && off + size > end && off + size <= MAX_IMAGE)
            end = off + size;
    }
    return end <= MAX_IMAGE ? (size_t)end : 0;
}

/* What image bytes are, by their first four (at least four there): a fat binary, an ELF
 * cubin, or else PTX text. */
static enum proto_image_format magic_format(const unsigned char *p)
{
    if (read_u32(p) == FATBIN_MAGIC)
        return IMAGE_FATBIN;
    return memcmp(p, "\177ELF", 4) == 0 ? IMAGE_CUBIN : IMAGE_PTX;
}

/* What an image in memory is and how many bytes it takes. A runtime wrapper
 * is followed to the fat binary it points to (*image moves there). */
static enum proto_image_format measure(const unsigned char **image, size_t *size)
{
    const unsigned char *p = *image;
    *size = 0;
    if (!p)
        return IMAGE_UNKNOWN;
    enum proto_image_format format = IMAGE_PTX; /* too short for a magic number: text */
    if (strnlen((const char *)p, 4) == 4) {
        if (read_u32(p) == FATBIN_WRAPPER_MAGIC) {
            const unsigned char *data;
            memcpy(&data, p + 8, sizeof data);
            if (!data || read_u32(data) != FATBIN_MAGIC)
                return IMAGE_UNKNOWN;
            *image = p = data;
        }
        format = magic_format(p);
    }
    uint64_t total;
    switch (format) {
    case IMAGE_FATBIN:
        total = (uint64_t)read_u16(p + 6) + read_u64(p + 8);
        break;
    case IMAGE_CUBIN:
        total = elf_size(p);
        break;
    default:
        /* PTX, which the driver reads as a NUL-terminated string. */
        total = strnlen((const char *)p, MAX_IMAGE) + 1;
        break;
    }
    *size = total && total <= MAX_IMAGE ? (size_t)total : 0;
    return *size ? format : IMAGE_UNKNOWN;
}

/* What a file load's bytes are (the file's size is the image's). */
static enum proto_image_format format_of(const unsigned char *p, size_t n)
{
    if (n == 0)
        return IMAGE_UNKNOWN;
    return n >= 4 ? magic_format(p) : IMAGE_PTX;
}

static bool in_loaded_object(const void *p)
{
    Dl_info info;
    return dladdr(p, &info) != 0 && info.dli_fname != NULL;
}

static void entry_free(struct module_entry *m)
{
    free(m->copy);
    free(m->path);
    memset(m, 0, sizeof *m);
}

void modules_add(uintptr_t handle, const void *image, const char *path)
{
    if (!handle || !channel_up() || !(channel_options() & OPTION_CAPTURE))
        return;
    struct module_entry m = {.handle = handle};
    if (path) {
        m.path = strdup(path);
    } else {
        const unsigned char *p = image;
        m.format = measure(&p, &m.size);
        m.image = p;
        if (m.format != IMAGE_UNKNOWN && !in_loaded_object(p)) {
            m.copy = malloc(m.size);
            if (m.copy)
                memcpy(m.copy, p, m.size);
            m.image = m.copy;
            if (!m.copy)
                m.format = IMAGE_UNKNOWN;
        }
    }
    pthread_mutex_lock(&modules_lock);
    size_t i = 0;
    while (i < nmodules && modules[i].handle != handle)
        i++;
    if (i == nmodules && nmodules == modules_cap) {
        size_t cap = modules_cap ? modules_cap * 2 : 64;
        struct module_entry *grown = realloc(modules, cap * sizeof *grown);
        if (!grown) {
            pthread_mutex_unlock(&modules_lock);
            entry_free(&m);
            return;
        }
        modules = grown;
        modules_cap = cap;
    }
    if (i == nmodules)
        nmodules++;
    else
        entry_free(&modules[i]); /* the handle of an unloaded module, reused */
    modules[i] = m;
    pthread_mutex_unlock(&modules_lock);
}

static void send_chunk(const struct proto_image *head, const unsigned char *bytes, size_t n)
{
    char stack[256];
    struct msg m;
    msg_init(&m, stack, sizeof stack, MSG_IMAGE, 0);
    msg_add(&m, head, sizeof *head);
    msg_add(&m, bytes, n);
    channel_send(&m);
    msg_free(&m);
}

/* Reads a file load's image (the file may have changed since: it is what
 * there is now). */
static unsigned char *read_file(const char *path, size_t *size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    struct stat st;
    unsigned char *data = NULL;
    if (fstat(fd, &st) == 0 && st.st_size > 0 && (uint64_t)st.st_size <= MAX_IMAGE &&
        (data = malloc((size_t)st.st_size)) != NULL) {
        size_t got = 0;
        while (got < (size_t)st.st_size) {
            ssize_t r = read(fd, data + got, (size_t)st.st_size - got);
            if (r <= 0)
                break;
            got += (size_t)r;
        }
        *size = got;
    }
    close(fd);
    return data;
}

static uintptr_t module_of(struct func_entry *e)
{
    uintptr_t module = atomic_load_explicit(&e->module, memory_order_relaxed);
    uintptr_t key = atomic_load_explicit(&e->key, memory_order_relaxed);
    if (module)
        return module;
    /* Named some other way (cuFuncGetName): ask the driver. */
    if (e->is_kernel && real_cuKernelGetLibrary) {
        CUlibrary lib = NULL;
        if (real_cuKernelGetLibrary(&lib, (CUkernel)key) == CUDA_SUCCESS)
            return (uintptr_t)lib;
    } else if (real_cuFuncGetModule) {
        CUmodule mod = NULL;
        if (real_cuFuncGetModule(&mod, (CUfunction)key) == CUDA_SUCCESS)
            return (uintptr_t)mod;
    }
    return 0;
}

void modules_send(struct func_entry *e)
{
    if (atomic_exchange(&e->image_sent, true))
        return;
    uintptr_t handle = module_of(e);
    struct proto_image head = {.module = handle, .id = e->id, .format = IMAGE_UNKNOWN};
    pthread_mutex_lock(&modules_lock);
    struct module_entry *m = NULL;
    for (size_t i = 0; handle && i < nmodules; i++)
        if (modules[i].handle == handle)
            m = &modules[i];
    if (m && m->path && !m->copy) {
        m->copy = read_file(m->path, &m->size);
        m->image = m->copy;
        m->format = m->copy ? format_of(m->copy, m->size) : IMAGE_UNKNOWN;
    }
    if (m && m->format != IMAGE_UNKNOWN) {
        head.format = m->format;
        head.size = m->size;
        if (!m->sent) {
            for (size_t off = 0; off < m->size; off += PROTO_IMAGE_CHUNK) {
                head.offset = off;
                size_t n = m->size - off < PROTO_IMAGE_CHUNK ? m->size - off : PROTO_IMAGE_CHUNK;
                send_chunk(&head, m->image + off, n);
            }
            m->sent = true;
        }
        head.offset = head.size; /* "this function's image is that one" */
    }
    pthread_mutex_unlock(&modules_lock);
    send_chunk(&head, NULL, 0);
}

void modules_reset_after_fork(void)
{
    /* The child tells its own controller connection about images again. */
    pthread_mutex_lock(&modules_lock);
    for (size_t i = 0; i < nmodules; i++)
        modules[i].sent = false;
    pthread_mutex_unlock(&modules_lock);
}
