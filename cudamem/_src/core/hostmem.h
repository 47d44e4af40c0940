/* hostmem.h: page-locked host memory: the one registry of host
 * registrations (page-rounded driver registrations shared by reference)
 * and the host buffers built on it (pinned, mapped, write-combined, and
 * the caller's memory registered). Does not own Python objects or device
 * memory. */
#ifndef CM_HOSTMEM_H
#define CM_HOSTMEM_H

#include <cuda.h>
#include <stddef.h>
#include <stdint.h>

#include "context.h"

typedef enum cm_host_kind {
    CM_HOST_PINNED = 1, /* cudamem's pages (mmap), registered */
    CM_HOST_MAPPED,     /* the same, with a device address */
    CM_HOST_MAPPED_WC,  /* cuMemHostAlloc, write-combined and mapped */
    CM_HOST_REGISTERED  /* the caller's memory, registered */
} cm_host_kind;

/* A user-level registration: references on the driver registrations that
 * cover its pages. Opaque. */
typedef struct cm_hostreg cm_hostreg;

/* One host buffer, owned by one Python object. */
typedef struct cm_host {
    cm_host_kind kind;
    void *ptr;            /* the first byte the owner sees (NULL: size 0) */
    size_t size;          /* bytes from ptr */
    size_t maplen;        /* pinned / mapped: length of the mmap at ptr */
    int readonly;         /* registered read-only */
    int external;         /* REGISTERED: page-locked by its owner (an EMM
                         plugin), not by cudamem */
    int mapped;           /* dptr is the device address of ptr */
    cm_hostreg *reg;      /* NULL: write-combined, size 0 or unregistered */
    cm_device *dev;       /* the device it was registered or mapped on */
    uint64_t generation;  /* write-combined: dev's when allocated */
    uint64_t resets;      /* dev's then: a reset ends registrations and
                         write-combined memory, close() does not */
    CUdeviceptr dptr;     /* mapped kinds: the device address of ptr */
    int pooled;           /* hostpool.h's block: give it back there */
    struct cm_host *next; /* hostpool.c's free list while cached, or the
                             retiring list while its release waits */
    int (*then)(struct cm_host *, cm_error *); /* the release, once the
                                                  work on it is done */
} cm_host;

/* A release of host memory: frees or caches h and reports in err. */
typedef int (*cm_host_fn)(cm_host *h, cm_error *err);

/* New host memory of `kind` (PINNED, MAPPED or MAPPED_WC) for nbytes on
 * dev (the calling thread's current device). PINNED and MAPPED are
 * page-rounded mmap pages registered portable and mapped, valid until
 * cm_host_free whatever happens to contexts (page-locked until a
 * reset: a registration retains its device's primary context);
 * MAPPED_WC is cuMemHostAlloc'd (PORTABLE when `portable`) under a
 * retain of the device's primary context (so close() leaves it), freed
 * through the device's memory queue or by Device.reset(). nbytes 0 maps
 * nothing. A driver's out-of-memory gets oom.h's recovery and one more
 * try. Counted in stats.h's PINNED, MAPPED or WRITE_COMBINED until
 * cm_host_free; registrations of the caller's memory are not counted. */
int cm_host_alloc(cm_device *dev, cm_host_kind kind, size_t nbytes,
                  int portable, cm_host **out, cm_error *err);
/* cm_host_alloc counting `requested` bytes as asked for in stats.h
 * (hostpool.c: nbytes is the size class, requested the caller's; the
 * pool sets h->size to it, which cm_host_free counts out). */
int cm__host_alloc_for(cm_device *dev, cm_host_kind kind, size_t nbytes,
                       size_t requested, int portable, cm_host **out,
                       cm_error *err);

/* Registers the caller's [ptr, ptr + size) (READ_ONLY when `readonly`;
 * CM_ERR_SUPPORT when the device cannot) in dev's primary context (the
 * calling thread's current device); with `mapped`, also finds its device
 * address. Pages already registered by cudamem are shared; pages another
 * owner page-locked are accepted as they are. A writable request over
 * pages registered read-only fails with CM_ERR_VALUE. On failure nothing
 * stays registered. size 0 registers nothing. */
int cm_host_register(cm_device *dev, void *ptr, size_t size, int readonly,
                     int mapped, cm_host **out, cm_error *err);

/* A record (kind REGISTERED, `external`) of [ptr, ptr + size), which
 * another owner page-locked (an EMM plugin's memory); with `mapped`, its
 * device address in dev's context (which must be current). cudamem never
 * registers nor frees that memory: cm_host_free frees the record. */
int cm_host_external(cm_device *dev, void *ptr, size_t size, int mapped,
                     cm_host **out, cm_error *err);

/* Drops h's registration (a no-op the second time); registrations that
 * no one else holds are unregistered, after the queued work noted on
 * them. A failed unregister is reported; the registration is forgotten
 * anyway. */
int cm_host_unregister(cm_host *h, cm_error *err);

/* cm_host_unregister, then frees cudamem's memory and the record. After
 * a failed unregister the pages stay mapped (the driver still holds them)
 * and the failure is reported; the record is freed anyway. Ordered after
 * the queued work noted on its pages (cm__host_retire). */
int cm_host_free(cm_host *h, cm_error *err);

/* The one lifetime rule of host memory (DESIGN rule 4): asynchronous
 * copies note the streams that use a registration's pages, and the
 * release of a record over them (unregister, free, return to the pool)
 * waits for that work without blocking whoever let go.
 *
 * cm__host_note: `size` bytes at ptr were just queued on `stream` (dev's
 * context current): every registration covering them records an event
 * after that work (one per stream, re-recorded). Pageable memory has no
 * registration and notes nothing: 1 when no registration covers any of
 * the bytes, else 0. On failure (-1) nothing is noted: the caller waits
 * for the stream instead. */
int cm__host_note(cm_device *dev, CUstream stream, const void *ptr,
                  size_t size, cm_error *err);
/* Runs `then` on h now when no noted work on its pages is pending, else
 * once it is done: h joins the retiring list, which cm__host_reap (every
 * host allocation and release) and cm_host_drain empty. Completed
 * releases of others are run first and their first failure is reported
 * in err, as is h's own when it runs now. */
int cm__host_retire(cm_host *h, cm_host_fn then, cm_error *err);
/* Runs the releases whose work is complete; never waits. */
int cm__host_reap(cm_error *err);
/* Waits for the work of every retiring record and runs its release
 * (context teardown, interpreter exit, quiescing, out-of-memory). Blocks:
 * py/ releases the GIL. */
int cm_host_drain(cm_error *err);
/* How many releases wait for queued work. */
size_t cm__host_retiring(void);

/* For a mapped kind: fails with CM_ERR_STATE when the mapping is gone
 * (its device was reset). */
int cm_host_check(const cm_host *h, cm_error *err);

/* 1 when every page of [ptr, ptr + size) is in a live registration of
 * the registry (cudamem's pinned and mapped buffers, registered memory),
 * else 0. Memory another owner page-locked is not known here. */
int cm_host_locked(const void *ptr, size_t size);

/* 1 when h is memory cudamem page-locked itself (pinned or mapped, locked
 * for as long as h lives), covering [ptr, ptr + size), and no reset of
 * its device took it from the driver since: what cm_host_locked would
 * find there, known without the registry's lock. 0 for registered
 * memory, which another thread may unregister. */
int cm_host_covers(const cm_host *h, const void *ptr, size_t size);

#endif
