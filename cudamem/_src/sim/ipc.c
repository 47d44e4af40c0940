/* ipc.c: legacy CUDA IPC across processes. Exporting moves an allocation's
 * backing into a POSIX shared memory object; importing maps that object at
 * a fresh device address. Not the allocation table (memory.c), nor IPC of
 * events, which cudamem does not use. */
#include "sim.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Only the driver's internal build declares this older ABI. */
typedef CUresult(CUDAAPI *PFN_cuIpcOpenMemHandle_v4010)(
    CUdeviceptr_v2 *pdptr, CUipcMemHandle_v1 handle, unsigned int Flags);

#define IPC_MAGIC 0x4d495343u /* "CSIM" */

/* What a CUipcMemHandle carries. */
typedef struct ipc_wire {
    uint32_t magic;
    uint32_t pid; /* the exporter */
    uint64_t size;
    uint64_t buffer_id;
    char name[40];
} ipc_wire;

_Static_assert(sizeof(ipc_wire) == CU_IPC_HANDLE_SIZE, "handle layout");
_Static_assert(sizeof(((sim_alloc *)0)->ipc_name) == 40, "name size");

/* Objects this process created, so that they are unlinked at exit. */
typedef struct exported {
    struct exported *next;
    char name[40];
} exported;

/* Mappings this process opened; checked against the table on use, since a
 * context reset frees them behind this file's back. */
typedef struct opened {
    struct opened *next;
    char name[40];
    CUcontext ctx;
    uintptr_t base;
    unsigned long long buffer_id;
} opened;

static exported *exports;
static pid_t exports_pid;
static opened *opens;

static size_t
page_round(size_t n)
{
    size_t ps = (size_t)sysconf(_SC_PAGESIZE);
    return (n + ps - 1) & ~(ps - 1);
}

/* Exit (or unload): shared memory objects outlive processes otherwise. */
__attribute__((destructor)) static void
unlink_exports(void)
{
    if (exports_pid != getpid())
        return;
    while (exports) {
        exported *e = exports;
        exports = e->next;
        shm_unlink(e->name);
        free(e);
    }
}

static void
exports_drop(const char *name)
{
    for (exported **p = &exports; *p; p = &(*p)->next) {
        if (strcmp((*p)->name, name) == 0) {
            exported *e = *p;
            *p = e->next;
            free(e);
            return;
        }
    }
}

/* Moves a's bytes into a new shared memory object mapped at the same
 * address. Lock held, a's context drained. */
static CUresult
export_alloc(sim_alloc *a)
{
    char name[40] = {0};
    CUresult r = CUDA_ERROR_MAP_FAILED;
    void *tmp = MAP_FAILED;
    exported *e = malloc(sizeof(*e));
    snprintf(name, sizeof(name), "/cusim.%ld.%llu", (long)getpid(),
             a->buffer_id);
    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (!e || fd < 0)
        goto done;
    if (ftruncate(fd, (off_t)a->backing_size) != 0)
        goto done;
    tmp = mmap(NULL, a->backing_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
               0);
    if (tmp == MAP_FAILED)
        goto done;
    memcpy(tmp, a->backing, a->backing_size);
    if (mmap(a->backing, a->backing_size, PROT_READ | PROT_WRITE,
             MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED)
        goto done;
    a->ipc_fd = fd;
    memcpy(a->ipc_name, name, sizeof(name));
    memcpy(e->name, name, sizeof(name));
    if (exports_pid != getpid()) {
        exports = NULL; /* a forked parent's list is not ours to unlink */
        exports_pid = getpid();
    }
    e->next = exports;
    exports = e;
    e = NULL;
    fd = -1;
    r = CUDA_SUCCESS;
done:
    if (tmp != MAP_FAILED)
        munmap(tmp, a->backing_size);
    if (fd >= 0) {
        close(fd);
        shm_unlink(name);
    }
    free(e);
    return r;
}

void
sim_ipc_forget(sim_alloc *a)
{
    if (a->ipc_name[0]) {
        shm_unlink(a->ipc_name);
        exports_drop(a->ipc_name);
        a->ipc_name[0] = '\0';
    }
    if (a->ipc_fd >= 0)
        close(a->ipc_fd);
    a->ipc_fd = -1;
}

SIM_EXPORT CUresult CUDAAPI
cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr)
{
    SIM_ENTER(cuIpcGetMemHandle);
    CUcontext ctx;
    sim_lock();
    CUresult r = sim_ctx_get(&ctx);
    if (r != CUDA_SUCCESS)
        goto done;
    sim_alloc *a = sim_mem_find(dptr);
    if (!pHandle || !a || a->kind != SIM_MEM_DEVICE || a->pool) {
        r = CUDA_ERROR_INVALID_VALUE;
        goto done;
    }
    if (a->ipc_fd < 0) {
        /* Work in flight must not write the old backing after the copy. */
        CUcontext owner = a->ctx;
        unsigned long long id = a->buffer_id;
        sim_unlock();
        r = sim_ctx_drain(owner);
        sim_lock();
        if (r != CUDA_SUCCESS)
            goto done;
        a = sim_mem_find(dptr);
        if (!a || a->buffer_id != id) {
            r = CUDA_ERROR_INVALID_VALUE;
            goto done;
        }
        if (a->ipc_fd < 0)
            r = export_alloc(a);
        if (r != CUDA_SUCCESS)
            goto done;
    }
    ipc_wire w;
    memset(&w, 0, sizeof(w));
    w.magic = IPC_MAGIC;
    w.pid = (uint32_t)getpid();
    w.size = a->size;
    w.buffer_id = a->buffer_id;
    memcpy(w.name, a->ipc_name, sizeof(w.name));
    memcpy(pHandle->reserved, &w, sizeof(w));
done:
    sim_unlock();
    return r;
}

/* The live record of an open of `name` in ctx, or NULL; forgets entries
 * whose mapping a context reset has freed. */
static sim_alloc *
find_open(const char *name, CUcontext ctx)
{
    opened **p = &opens;
    while (*p) {
        opened *o = *p;
        sim_alloc *a = sim_mem_find(o->base);
        if (!a || a->kind != SIM_MEM_IPC || a->base != o->base ||
            a->buffer_id != o->buffer_id) {
            *p = o->next;
            free(o);
            continue;
        }
        if (o->ctx == ctx && strcmp(o->name, name) == 0)
            return a;
        p = &o->next;
    }
    return NULL;
}

static void
forget_open(uintptr_t base)
{
    for (opened **p = &opens; *p; p = &(*p)->next) {
        if ((*p)->base == base) {
            opened *o = *p;
            *p = o->next;
            free(o);
            return;
        }
    }
}

static CUresult
ipc_open(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
    ipc_wire w;
    CUcontext ctx;
    opened *o = NULL;
    void *p = MAP_FAILED;
    size_t len = 0;
    int fd = -1;
    memcpy(&w, handle.reserved, sizeof(w));
    if (!pdptr || Flags != CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)
        return CUDA_ERROR_INVALID_VALUE;
    if (w.magic != IPC_MAGIC || w.size == 0 ||
        memchr(w.name, '\0', sizeof(w.name)) == NULL ||
        strncmp(w.name, "/cusim.", 7) != 0)
        return CUDA_ERROR_INVALID_HANDLE;
    sim_lock();
    CUresult r = sim_ctx_get(&ctx);
    if (r != CUDA_SUCCESS)
        goto done;
    /* The driver refuses to map a process's own memory. */
    if (w.pid == (uint32_t)getpid()) {
        r = CUDA_ERROR_INVALID_CONTEXT;
        goto done;
    }
    sim_alloc *a = find_open(w.name, ctx);
    if (a) {
        if (sim.ipc_reopen_error) {
            r = CUDA_ERROR_ALREADY_MAPPED;
        }
        else {
            a->ipc_refs++;
            *pdptr = a->base;
        }
        goto done;
    }
    struct stat st;
    len = page_round(w.size);
    fd = shm_open(w.name, O_RDWR, 0);
    if (fd < 0 || fstat(fd, &st) != 0 || (uint64_t)st.st_size < len) {
        r = CUDA_ERROR_INVALID_HANDLE;
        goto done;
    }
    o = calloc(1, sizeof(*o));
    p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (!o || p == MAP_FAILED) {
        r = o ? CUDA_ERROR_MAP_FAILED : CUDA_ERROR_OUT_OF_MEMORY;
        goto done;
    }
    r = sim_mem_add(SIM_MEM_IPC, ctx, p, w.size, &a);
    if (r != CUDA_SUCCESS)
        goto done;
    a->backing_size = len;
    a->ipc_refs = 1;
    memcpy(a->ipc_name, w.name, sizeof(a->ipc_name));
    sim.live.ipc_open++;
    memcpy(o->name, w.name, sizeof(o->name));
    o->ctx = ctx;
    o->base = a->base;
    o->buffer_id = a->buffer_id;
    o->next = opens;
    opens = o;
    o = NULL;
    p = MAP_FAILED;
    *pdptr = a->base;
done:
    sim_unlock();
    if (p != MAP_FAILED)
        munmap(p, len);
    if (fd >= 0)
        close(fd);
    free(o);
    return r;
}

SIM_EXPORT CUresult CUDAAPI
cuIpcCloseMemHandle(CUdeviceptr dptr)
{
    SIM_ENTER(cuIpcCloseMemHandle);
    CUcontext ctx;
    sim_lock();
    CUresult r = sim_ctx_get(&ctx);
    if (r != CUDA_SUCCESS)
        goto done;
    sim_alloc *a = sim_mem_find(dptr);
    if (!a || a->kind != SIM_MEM_IPC || a->base != dptr) {
        r = CUDA_ERROR_INVALID_VALUE;
        goto done;
    }
    if (a->ipc_refs > 1) {
        a->ipc_refs--;
        goto done;
    }
    CUcontext owner = a->ctx;
    unsigned long long id = a->buffer_id;
    sim_unlock();
    /* Work in flight on the mapping finishes before it goes away. */
    r = sim_ctx_drain(owner);
    sim_lock();
    if (r != CUDA_SUCCESS)
        goto done;
    a = sim_mem_find(dptr);
    if (!a || a->kind != SIM_MEM_IPC || a->buffer_id != id) {
        r = CUDA_ERROR_INVALID_VALUE;
        goto done;
    }
    if (a->ipc_refs == 1 && !(a = sim_mem_quiesce(a))) {
        /* Any context's work, too (peer copies). */
        r = CUDA_ERROR_INVALID_VALUE;
        goto done;
    }
    if (--a->ipc_refs > 0)
        goto done;
    forget_open(a->base);
    munmap(a->backing, a->backing_size);
    sim_mem_remove(a);
    sim.live.ipc_open--;
done:
    sim_unlock();
    return r;
}

/* The older ABI, exported below under the plain name the header redirects. */
#undef cuIpcOpenMemHandle

/* ---------------------------------------------------------------------------
 * Entry points: one row per exported ABI alias (see SIM_ALIAS_WRAPPER in
 * sim.h); the wrappers of the W rows, then the cuGetProcAddress rows. */

/* clang-format off */
#define IPC_ALIASES(W, R)                                                     \
    R(cuIpcGetMemHandle, cuIpcGetMemHandle, 4010, )                           \
    W(cuIpcOpenMemHandle, cuIpcOpenMemHandle, 4010, , ipc_open,               \
      (CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags),        \
      (pdptr, handle, Flags))                                                 \
    W(cuIpcOpenMemHandle_v2, cuIpcOpenMemHandle, 11000, , ipc_open,           \
      (CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags),        \
      (pdptr, handle, Flags))                                                 \
    R(cuIpcCloseMemHandle, cuIpcCloseMemHandle, 4010, )

IPC_ALIASES(SIM_ALIAS_WRAPPER, SIM_ALIAS_SKIP)

const sim_proc sim_procs_ipc[] = {
    IPC_ALIASES(SIM_ALIAS_ROW, SIM_ALIAS_ROW)
};
/* clang-format on */
const size_t sim_nprocs_ipc = sizeof(sim_procs_ipc) / sizeof(sim_procs_ipc[0]);
