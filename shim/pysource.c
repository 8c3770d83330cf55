/*
 * Source lines: the file and line of the user's own Python code that led to a
 * launch (CUDUMP_SOURCES=1).
 *
 * At a launch made by a thread holding the GIL, the Python frames are walked
 * from the innermost outwards to the first whose file is the user's: not a
 * package's (site-packages, dist-packages), not the standard library's, not
 * cudump's, not frozen or generated ("<string>"). Its "file:line" (the path
 * relative to the working directory where it is inside it) is a SCOPE_SOURCE
 * node. Python's C API is found with dlsym at the first launch: a process
 * without Python (or one older than 3.9, without PyFrame_GetCode) has no
 * source lines. Whether a code object's file is the user's is kept per code
 * object, so a walk costs a few calls per frame.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pysource.h"
#include "scope.h"

enum {
    PYSOURCE_FRAMES = 64,   /* frames walked at most */
    PYSOURCE_CODES = 4096,  /* code objects whose verdict is kept */
};

_Atomic int pysource_on = -1;

typedef void py_object;
static struct {
    int (*gil_check)(void);
    py_object *(*get_frame)(void);              /* borrowed */
    py_object *(*frame_back)(py_object *);      /* new */
    py_object *(*frame_code)(py_object *);      /* new */
    int (*frame_line)(py_object *);
    py_object *(*get_attr)(py_object *, const char *);  /* new */
    const char *(*utf8)(py_object *);
    void (*dec_ref)(py_object *);
    py_object *(*import)(const char *);         /* new */
    void (*err_clear)(void);
} py;

static char *cwd;
static size_t cwd_len;
static char *stdlib_dir;     /* the directory of the standard library's os.py */
static size_t stdlib_len;
static char *cudump_dir;     /* the cudump package (CUDUMP_PACKAGE_DIR, from the controller) */
static size_t cudump_len;

static struct code_seen {
    const void *code;
    bool user;
    char *file;              /* as shown: relative to the working directory when inside it */
} codes[PYSOURCE_CODES];
static pthread_mutex_t codes_lock = PTHREAD_MUTEX_INITIALIZER;

static char *dir_of(const char *path, int up)
{
    char *d = strdup(path);
    for (int i = 0; d && i < up; i++) {
        char *slash = strrchr(d, '/');
        if (!slash)
            break;
        *slash = '\0';
    }
    return d;
}

static bool resolve(void)
{
#define FIND(field, name)                                                                  \
    do {                                                                                   \
        void *p_ = dlsym(RTLD_DEFAULT, name);                                              \
        memcpy(&py.field, &p_, sizeof p_);                                                 \
    } while (0)
    FIND(gil_check, "PyGILState_Check");
    FIND(get_frame, "PyEval_GetFrame");
    FIND(frame_back, "PyFrame_GetBack");
    FIND(frame_code, "PyFrame_GetCode");
    FIND(frame_line, "PyFrame_GetLineNumber");
    FIND(get_attr, "PyObject_GetAttrString");
    FIND(utf8, "PyUnicode_AsUTF8");
    FIND(dec_ref, "Py_DecRef");
    FIND(import, "PyImport_ImportModule");
    FIND(err_clear, "PyErr_Clear");
#undef FIND
    return py.gil_check && py.get_frame && py.frame_back && py.frame_code && py.frame_line &&
           py.get_attr && py.utf8 && py.dec_ref && py.import && py.err_clear;
}

/* What the first walk needs (the GIL is held): the working directory, where
 * the standard library and cudump are. */
static void learn_places(void)
{
    char buf[4096];
    if (getcwd(buf, sizeof buf)) {
        cwd = strdup(buf);
        cwd_len = cwd ? strlen(cwd) : 0;
    }
    py_object *os = py.import("os");
    py_object *file = os ? py.get_attr(os, "__file__") : NULL;
    const char *path = file ? py.utf8(file) : NULL;
    if (path) {
        stdlib_dir = dir_of(path, 1);
        stdlib_len = stdlib_dir ? strlen(stdlib_dir) : 0;
    }
    if (file)
        py.dec_ref(file);
    if (os)
        py.dec_ref(os);
    py.err_clear();
    const char *package = getenv("CUDUMP_PACKAGE_DIR");
    if (package && *package) {
        cudump_dir = strdup(package);
        cudump_len = cudump_dir ? strlen(cudump_dir) : 0;
        while (cudump_len > 1 && cudump_dir[cudump_len - 1] == '/')
            cudump_dir[--cudump_len] = '\0';
    }
}

static bool under(const char *path, const char *dir, size_t len)
{
    return dir && len && strncmp(path, dir, len) == 0 && path[len] == '/';
}

static bool users_file(const char *path)
{
    return path[0] != '<' && !strstr(path, "/site-packages/") &&
           !strstr(path, "/dist-packages/") && !under(path, stdlib_dir, stdlib_len) &&
           !under(path, cudump_dir, cudump_len);
}

/* The verdict on a code object's file, kept. NULL: not the user's. */
static const char *code_file(py_object *code)
{
    size_t i = ((uintptr_t)code >> 4) % PYSOURCE_CODES;
    pthread_mutex_lock(&codes_lock);
    struct code_seen seen = codes[i];
    pthread_mutex_unlock(&codes_lock);
    if (seen.code == code)
        return seen.user ? seen.file : NULL;
    py_object *name = py.get_attr(code, "co_filename");
    const char *path = name ? py.utf8(name) : NULL;
    bool user = path && users_file(path);
    char *shown = NULL;
    if (user)
        shown = strdup(under(path, cwd, cwd_len) ? path + cwd_len + 1 : path);
    if (name)
        py.dec_ref(name);
    py.err_clear();
    pthread_mutex_lock(&codes_lock);
    /* A code object freed and another made at its address may take its verdict
     * until the slot is taken again: the price of not asking at every frame. */
    free(codes[i].file);
    codes[i] = (struct code_seen){.code = code, .user = user && shown, .file = shown};
    pthread_mutex_unlock(&codes_lock);
    return shown;
}

static pthread_once_t once = PTHREAD_ONCE_INIT;

static void decide(void)
{
    const char *v = getenv("CUDUMP_SOURCES");
    bool on = v && strcmp(v, "1") == 0 && resolve();
    atomic_store_explicit(&pysource_on, on ? 1 : 0, memory_order_release);
}

static pthread_once_t places_once = PTHREAD_ONCE_INIT;

/* The line the program's own hooks said is behind what runs on this thread (a
 * PyTorch module's call, cudump/target): PyTorch gives the GIL up around its
 * operations, so their launches find no frame to walk, and take this instead. */
static _Thread_local uint32_t hook_source;

SHIM_EXPORT unsigned cudump_scope_source(const char *text)
{
    uint32_t before = hook_source;
    size_t len = text ? strlen(text) : 0;
    hook_source = len ? scope_intern(0, SCOPE_SOURCE, text,
                                     len < PROTO_MAX_SCOPE_NAME ? len : PROTO_MAX_SCOPE_NAME)
                      : 0;
    return before;
}

SHIM_EXPORT void cudump_scope_source_restore(unsigned node)
{
    hook_source = node;
}

uint32_t pysource_walk(void)
{
    if (atomic_load_explicit(&pysource_on, memory_order_acquire) < 0)
        pthread_once(&once, decide);
    if (atomic_load_explicit(&pysource_on, memory_order_acquire) != 1)
        return 0;
    if (!py.gil_check())
        return hook_source;
    pthread_once(&places_once, learn_places);
    py_object *frame = py.get_frame();
    if (!frame)
        return hook_source;
    py_object *owned = NULL; /* the reference PyFrame_GetBack gave */
    uint32_t node = 0;
    for (int depth = 0; frame && depth < PYSOURCE_FRAMES; depth++) {
        py_object *code = py.frame_code(frame);
        const char *file = code ? code_file(code) : NULL;
        if (code)
            py.dec_ref(code);
        if (file) {
            char text[PROTO_MAX_SCOPE_NAME + 1];
            int n = snprintf(text, sizeof text, "%s:%d", file, py.frame_line(frame));
            if (n > 0)
                node = scope_intern(0, SCOPE_SOURCE, text,
                                    (size_t)n < sizeof text ? (size_t)n : sizeof text - 1);
            break;
        }
        py_object *back = py.frame_back(frame);
        if (owned)
            py.dec_ref(owned);
        owned = frame = back;
    }
    if (owned)
        py.dec_ref(owned);
    return node ? node : hook_source;
}
