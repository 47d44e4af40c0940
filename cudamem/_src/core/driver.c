/* driver.c: loading libcuda (or the simulator), resolving the table through
 * cuGetProcAddress, cuInit, tracing and the fork check. The only file that
 * talks to the library directly; nothing else here calls the driver. */
#include "driver.h"
#include "lockorder.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CM_MIN_DRIVER_VERSION 12000
#define CM_PTDS_VERSION 7000 /* per-thread variants appeared in CUDA 7.0 */

cm_driver_table cm__drv;
int cm__log_api;

typedef struct cm_row {
    const char *name;
    int version;
    int flags;
    size_t offset;
} cm_row;

static const cm_row rows[] = {
#define CM_DRIVER_ROW(name, version, flags)                                   \
    {#name, version, flags, offsetof(cm_driver_table, name)},
    CM_DRIVER_ROWS(CM_DRIVER_ROW)
#undef CM_DRIVER_ROW
};
#define NROWS (sizeof(rows) / sizeof(rows[0]))

static struct {
    pthread_mutex_t lock;
    int state; /* 0: not tried, 1: loaded, -1: failed (kept) */
    cm_error error;
    char msg[4096];
    void *handle;
    char path[PATH_MAX];
    int version;
    int is_sim;
    int ptds;
    pid_t pid;
    unsigned char present[NROWS];
} drv = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* This process's pid for the fork check of every entry: getpid() is a
 * system call (glibc 2.25 dropped its cache), so it is read once at load
 * and again in a fork child, by the handler registered then. */
static pid_t self_pid;

static void
refresh_pid(void)
{
    self_pid = getpid();
}

static int
env_true(const char *name)
{
    const char *v = getenv(name);
    return v != NULL && v[0] != '\0' && strcmp(v, "0") != 0;
}

/* Sets a CM_ERR_SUPPORT failure whose message lives in drv.msg. */
static int support_error(cm_error *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int
support_error(cm_error *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(drv.msg, sizeof(drv.msg), fmt, ap);
    va_end(ap);
    return cm_fail(err, CM_ERR_SUPPORT, drv.msg);
}

static const char *
name_or_unknown(CUresult rc)
{
    const char *name = cm_error_name(rc);
    return name != NULL ? name : "CUDA_ERROR_UNKNOWN_CODE";
}

static int
stub_error(cm_error *err)
{
    return support_error(
        err,
        "%s is the CUDA toolkit's stub library (CUDA_ERROR_STUB_LIBRARY): "
        "it lets programs link but cannot run them. Install the NVIDIA "
        "driver, or put the driver's libcuda.so.1 ahead of the toolkit's "
        "stubs directory in the library path (set CUDAMEM_SIMULATOR=1 to "
        "use cudamem's simulated driver instead)",
        drv.path);
}

/* Appends "path (reason)" to the list of places tried. */
static void
note_tried(char *tried, size_t size, const char *path, const char *why)
{
    size_t used = strlen(tried);
    snprintf(tried + used, size - used, "%s%s (%s)", used ? "; " : "", path,
             why);
}

static int
open_library(const char *sim_path, cm_error *err)
{
    const char *candidates[3];
    size_t n = 0;
    const char *explicit_path = getenv("CUDAMEM_DRIVER");
    char tried[2048] = "";

    if (explicit_path != NULL && explicit_path[0] != '\0') {
        candidates[n++] = explicit_path;
    }
    else if (env_true("CUDAMEM_SIMULATOR")) {
        if (sim_path == NULL) {
            return support_error(err, "CUDAMEM_SIMULATOR=1 but the "
                                      "simulated driver was not built");
        }
        candidates[n++] = sim_path;
    }
    else {
        if (access("/usr/lib/wsl/lib/libcuda.so.1", F_OK) == 0) {
            candidates[n++] = "/usr/lib/wsl/lib/libcuda.so.1";
        }
        candidates[n++] = "libcuda.so.1";
    }
    for (size_t i = 0; i < n; i++) {
        /* CUDAMEM_DRIVER names the library to load on purpose, as
         * LD_LIBRARY_PATH would: the environment is trusted here. */
        /* NOLINTNEXTLINE(clang-analyzer-optin.taint.GenericTaint) */
        drv.handle = dlopen(candidates[i], RTLD_NOW | RTLD_LOCAL);
        if (drv.handle != NULL) {
            snprintf(drv.path, sizeof(drv.path), "%s", candidates[i]);
            return 0;
        }
        const char *why = dlerror();
        note_tried(tried, sizeof(tried), candidates[i],
                   why != NULL ? why : "not loadable");
    }
    return support_error(err, "CUDA driver library not found; tried: %s",
                         tried);
}

static int
resolve_rows(PFN_cuGetProcAddress_v12000 getproc, cm_error *err)
{
    for (size_t i = 0; i < NROWS; i++) {
        const cm_row *row = &rows[i];
        int version = row->version;
        cuuint64_t flags = CU_GET_PROC_ADDRESS_LEGACY_STREAM;
        void *fn = NULL;
        CUdriverProcAddressQueryResult status;

        if ((row->flags & CM_ROW_PTDS) && drv.ptds) {
            flags = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
            if (version < CM_PTDS_VERSION) {
                version = CM_PTDS_VERSION;
            }
        }
        /* Asking for a version the driver does not know fails outright. */
        if (version <= drv.version) {
            CUresult rc = getproc(row->name, &fn, version, flags, &status);
            if (rc == CUDA_ERROR_STUB_LIBRARY) {
                return stub_error(err);
            }
            if (rc != CUDA_SUCCESS && rc != CUDA_ERROR_NOT_FOUND) {
                return support_error(
                    err, "cuGetProcAddress(\"%s\", %d) failed in %s: %s (%d)",
                    row->name, version, drv.path, name_or_unknown(rc),
                    (int)rc);
            }
            if (rc != CUDA_SUCCESS) {
                fn = NULL;
            }
        }
        if (fn == NULL && (row->flags & CM_ROW_REQUIRED)) {
            return support_error(
                err, "the CUDA driver %s (version %d.%d) has no %s (ABI %d)",
                drv.path, drv.version / 1000, drv.version % 1000 / 10,
                row->name, version);
        }
        memcpy((char *)&cm__drv + row->offset, &fn, sizeof(fn));
        drv.present[i] = fn != NULL;
    }
    return 0;
}

static int
load_locked(const char *sim_path, cm_error *err)
{
    PFN_cuGetProcAddress_v12000 getproc;
    PFN_cuDriverGetVersion_v2020 get_version;
    CUresult rc;

    if (open_library(sim_path, err) < 0) {
        return -1;
    }
    drv.is_sim = dlsym(drv.handle, "cusim_is_simulator") != NULL;
    *(void **)&getproc = dlsym(drv.handle, "cuGetProcAddress_v2");
    *(void **)&get_version = dlsym(drv.handle, "cuDriverGetVersion");
    if (getproc == NULL) {
        int found = 0;
        if (get_version != NULL && get_version(&found) == CUDA_SUCCESS) {
            return support_error(
                err,
                "the CUDA driver %s is version %d.%d; cudamem needs %d.%d or "
                "newer",
                drv.path, found / 1000, found % 1000 / 10,
                CM_MIN_DRIVER_VERSION / 1000,
                CM_MIN_DRIVER_VERSION % 1000 / 10);
        }
        return support_error(err,
                             "%s is not a CUDA driver: it has no "
                             "cuGetProcAddress_v2",
                             drv.path);
    }
    rc = getproc("cuDriverGetVersion", (void **)&get_version, 2020,
                 CU_GET_PROC_ADDRESS_DEFAULT, NULL);
    if (rc == CUDA_SUCCESS && get_version != NULL) {
        rc = get_version(&drv.version);
    }
    else if (rc == CUDA_SUCCESS) {
        rc = CUDA_ERROR_NOT_FOUND;
    }
    if (rc == CUDA_ERROR_STUB_LIBRARY) {
        return stub_error(err);
    }
    if (rc != CUDA_SUCCESS) {
        return support_error(err, "cuDriverGetVersion failed in %s: %s (%d)",
                             drv.path, name_or_unknown(rc), (int)rc);
    }
    if (drv.version < CM_MIN_DRIVER_VERSION) {
        return support_error(
            err,
            "the CUDA driver %s is version %d.%d; cudamem needs %d.%d "
            "or newer",
            drv.path, drv.version / 1000, drv.version % 1000 / 10,
            CM_MIN_DRIVER_VERSION / 1000, CM_MIN_DRIVER_VERSION % 1000 / 10);
    }
    if (getenv("CUDAMEM_PER_THREAD_DEFAULT_STREAM") != NULL) {
        drv.ptds = env_true("CUDAMEM_PER_THREAD_DEFAULT_STREAM");
    }
    else {
        drv.ptds = env_true("NUMBA_CUDA_PER_THREAD_DEFAULT_STREAM");
    }
    if (resolve_rows(getproc, err) < 0) {
        return -1;
    }
    if (CM_CALL(err, cuInit, 0) < 0) {
        if (err->code == CUDA_ERROR_STUB_LIBRARY) {
            return stub_error(err);
        }
        return support_error(err, "Error at driver init: %s (%d)",
                             name_or_unknown(err->code), (int)err->code);
    }
    drv.pid = getpid();
    self_pid = drv.pid;
    /* Once: a failed load is kept, so this runs at most once. */
    if (pthread_atfork(NULL, NULL, refresh_pid) != 0) {
        return support_error(err, "pthread_atfork failed");
    }
    return 0;
}

int
cm_driver_load(const char *sim_path, cm_error *err)
{
    int rc;

    cm__lock(&drv.lock, CM_LOCK_DRIVER);
    if (drv.state == 0) {
        const char *log = getenv("CUDAMEM_LOG");
        cm__log_api = log != NULL && strstr(log, "api") != NULL;
        if (load_locked(sim_path, &drv.error) < 0) {
            drv.state = -1;
            if (drv.handle != NULL) {
                dlclose(drv.handle);
                drv.handle = NULL;
            }
            memset(&cm__drv, 0, sizeof(cm__drv));
        }
        else {
            drv.state = 1;
        }
    }
    rc = drv.state == 1 ? 0 : -1;
    if (rc < 0) {
        *err = drv.error;
    }
    cm__unlock(&drv.lock);
    return rc;
}

int
cm_driver_ready(void)
{
    return __atomic_load_n(&drv.state, __ATOMIC_ACQUIRE) == 1;
}

const char *
cm_driver_path(void)
{
    return drv.path;
}

int
cm_driver_version(void)
{
    return drv.version;
}

int
cm__missing(cm_error *err, const char *call)
{
    int rc = cm__fail_fmt(
        err, CM_ERR_SUPPORT, "the CUDA driver %s (version %d.%d) has no %s",
        drv.path, drv.version / 1000, drv.version % 1000 / 10, call);

    err->call = call;
    return rc;
}

int
cm_driver_is_simulator(void)
{
    return drv.is_sim;
}

int
cm_driver_ptds(void)
{
    return drv.ptds;
}

int
cm_driver_row(size_t index, const char **name, int *version, int *flags,
              int *present)
{
    if (index >= NROWS) {
        return -1;
    }
    *name = rows[index].name;
    *version = rows[index].version;
    *flags = rows[index].flags;
    *present = drv.state == 1 && drv.present[index];
    return 0;
}

int
cm_fork_check(cm_error *err)
{
    if (drv.state == 1 && self_pid != drv.pid) {
        return cm_fail(err, CM_ERR_FORK,
                       "CUDA initialized before forking; use the spawn "
                       "start method");
    }
    return 0;
}

/* The next name of a stringified argument list, split at top-level commas;
 * advances *cursor past it. */
static const char *
next_name(const char **cursor, int *len)
{
    int depth = 0;
    const char *start = *cursor, *p;

    while (*start == ' ') {
        start++;
    }
    for (p = start; *p != '\0'; p++) {
        if (*p == '(' || *p == '[' || *p == '{') {
            depth++;
        }
        else if (*p == ')' || *p == ']' || *p == '}') {
            depth--;
        }
        else if (*p == ',' && depth == 0) {
            break;
        }
    }
    *len = (int)(p - start);
    *cursor = *p == ',' ? p + 1 : p;
    return start;
}

static void
trace(const char *call, CUresult rc, const cm__arg *args, const char *names)
{
    char line[1024];
    size_t used = (size_t)snprintf(line, sizeof(line), "cudamem api: %s(",
                                   call);

    for (int i = 0; args[i].value != NULL && used < sizeof(line); i++) {
        unsigned long long v = 0;
        int len;
        const char *name = next_name(&names, &len);
        if (args[i].size <= sizeof(v)) {
            memcpy(&v, args[i].value, args[i].size);
            if (len > 0 && name[0] >= '0' && name[0] <= '9') {
                len = 0; /* a literal: its value says it all */
            }
            used += (size_t)snprintf(
                line + used, sizeof(line) - used,
                v < 65536 ? "%s%.*s%s%llu" : "%s%.*s%s%#llx", i ? ", " : "",
                len, name, len ? "=" : "", v);
        }
        else {
            used += (size_t)snprintf(line + used, sizeof(line) - used,
                                     "%s%.*s={%zu bytes}", i ? ", " : "", len,
                                     name, args[i].size);
        }
    }
    if (used < sizeof(line)) {
        snprintf(line + used, sizeof(line) - used, ") -> %s (%d)",
                 name_or_unknown(rc), (int)rc);
    }
    fprintf(stderr, "%s\n", line);
}

int
cm__done(cm_error *err, const char *call, CUresult rc, const cm__arg *args,
         const char *names)
{
    if (args != NULL) {
        trace(call, rc, args, names);
    }
    if (rc == CUDA_SUCCESS) {
        return 0;
    }
    err->kind = CM_ERR_DRIVER;
    err->code = rc;
    err->call = call;
    err->msg = NULL;
    err->oom_dev = NULL;
    err->oom_bytes = 0;
    err->device = -1;
    err->text[0] = '\0';
    return -1;
}
