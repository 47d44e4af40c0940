/* pending.c: the deferred-free queue of pending.h and the process-wide
 * thresholds it reads from the environment. Owns the queue's memory; takes
 * no lock (the owner serializes every call); does not know how a handle is
 * freed (the owner's free function), which context it belongs to, or the
 * fork rule (the owner checks it). */
#include "pending.h"
#include "env.h"

#include <locale.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define COUNT_VAR "CUDAMEM_MAX_PENDING_DEALLOCS_COUNT"
#define RATIO_VAR "CUDAMEM_MAX_PENDING_DEALLOCS_RATIO"
#define NUMBA_COUNT_VAR "NUMBA_CUDA_MAX_PENDING_DEALLOCS_COUNT"
#define NUMBA_RATIO_VAR "NUMBA_CUDA_MAX_PENDING_DEALLOCS_RATIO"
#define DEFAULT_COUNT 10
#define DEFAULT_RATIO 0.2

/* Queue storage grows by doubling from one chunk and shrinks back to it
 * when a large queue empties, so a long defer_cleanup() keeps no memory. */
#define CHUNK 16
#define SHRINK_ABOVE 1024

typedef struct item {
    cm_free_kind kind;
    uint64_t handle;
    size_t nbytes;
} item;

struct cm_pending {
    item *ring;
    size_t cap;
    size_t head;
    size_t len;
    size_t bytes;
    size_t max_count;
    size_t max_bytes;
    unsigned deferred; /* nesting depth of defer_cleanup() */
    int stopped;       /* after cm__pending_shutdown */
    cm_free_fn fn;
    void *arg;
};

/* The thresholds: written once by read_limits, read-only afterwards, so the
 * message stays valid for every err that points at it. */
static struct {
    int failed;
    cm_error_kind kind;
    size_t count;
    double ratio;
    char msg[256];
} limits;
static pthread_once_t limits_once = PTHREAD_ONCE_INIT;
/* Set (release) once read: every allocation asks, and a load is cheaper
 * than a call into pthread_once. */
static int limits_read;

/* cudamem's variable wins; numba's is honoured only when cudamem's is
 * unset (an empty value counts as set, and malformed). */
static const char *
env_value(const char *name, const char *numba_name, const char **used)
{
    const char *value = getenv(name);

    *used = name;
    if (value == NULL) {
        value = getenv(numba_name);
        *used = numba_name;
    }
    return value;
}

/* A plain decimal ("0.25", ".5", "1", "5e-1"): the syntax is checked here
 * so that strtod's extras (spaces, signs, hex, inf, nan) are refused. */
static int
is_decimal(const char *s)
{
    int digits = 0;

    for (; *s >= '0' && *s <= '9'; s++) {
        digits++;
    }
    if (*s == '.') {
        for (s++; *s >= '0' && *s <= '9'; s++) {
            digits++;
        }
    }
    if (digits == 0) {
        return 0;
    }
    if (*s == 'e' || *s == 'E') {
        s++;
        if (*s == '+' || *s == '-') {
            s++;
        }
        if (*s < '0' || *s > '9') {
            return 0;
        }
        while (*s >= '0' && *s <= '9') {
            s++;
        }
    }
    return *s == '\0';
}

/* 0, -1 (malformed or outside [0, 1]) or -2 (no locale object). */
static int
parse_ratio(const char *s, double *out)
{
    locale_t c_locale;
    double value;

    if (!is_decimal(s)) {
        return -1;
    }
    /* The process locale may use a decimal comma (the application may have
     * called setlocale); the variable is always written with a point. */
    c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0);
    if (c_locale == (locale_t)0) {
        return -2;
    }
    value = strtod_l(s, NULL, c_locale);
    freelocale(c_locale);
    if (!(value >= 0.0 && value <= 1.0)) {
        return -1;
    }
    *out = value;
    return 0;
}

static void
limits_fail(cm_error_kind kind, const char *var, const char *value,
            const char *why)
{
    limits.failed = 1;
    limits.kind = kind;
    snprintf(limits.msg, sizeof(limits.msg), "%s='%.100s' %s", var, value,
             why);
}

static void
read_limits(void)
{
    const char *var, *value;
    int rc;

    limits.count = DEFAULT_COUNT;
    limits.ratio = DEFAULT_RATIO;

    value = env_value(COUNT_VAR, NUMBA_COUNT_VAR, &var);
    if (value != NULL) {
        rc = cm__parse_size(value, &limits.count);
        if (rc == -1) {
            limits_fail(CM_ERR_VALUE, var, value,
                        "is not a non-negative integer");
            return;
        }
        if (rc == -2) {
            limits_fail(CM_ERR_VALUE, var, value, "is too large");
            return;
        }
    }

    value = env_value(RATIO_VAR, NUMBA_RATIO_VAR, &var);
    if (value != NULL) {
        rc = parse_ratio(value, &limits.ratio);
        if (rc == -1) {
            limits_fail(CM_ERR_VALUE, var, value,
                        "is not a number between 0 and 1");
        }
        else if (rc == -2) {
            limits_fail(CM_ERR_NOMEM, var, value,
                        "could not be read: no memory for the C locale");
        }
    }
}

int
cm__pending_limits(size_t *max_count, double *max_ratio, cm_error *err)
{
    if (!__atomic_load_n(&limits_read, __ATOMIC_ACQUIRE)) {
        pthread_once(&limits_once, read_limits);
        __atomic_store_n(&limits_read, 1, __ATOMIC_RELEASE);
    }
    if (limits.failed) {
        return cm_fail(err, limits.kind, limits.msg);
    }
    *max_count = limits.count;
    *max_ratio = limits.ratio;
    return 0;
}

/* Truncation is exact here: for whole byte counts, bytes > limit exactly
 * when bytes > floor(limit), which is numba's comparison with a float. */
static size_t
byte_limit(double ratio, size_t device_memory)
{
    double limit = ratio * (double)device_memory;

    if (limit >= (double)SIZE_MAX) {
        return SIZE_MAX;
    }
    return (size_t)limit;
}

cm_pending *
cm__pending_new(size_t device_memory, cm_free_fn fn, void *arg, cm_error *err)
{
    cm_pending *q = NULL;
    size_t max_count;
    double ratio;

    if (cm__pending_limits(&max_count, &ratio, err) < 0) {
        return NULL;
    }
    if (fn == NULL) {
        cm_fail(err, CM_ERR_VALUE, "cm__pending_new: no free function");
        return NULL;
    }
    q = calloc(1, sizeof(*q));
    if (q == NULL) {
        goto nomem;
    }
    q->ring = malloc(CHUNK * sizeof(item));
    if (q->ring == NULL) {
        goto nomem;
    }
    q->cap = CHUNK;
    q->max_count = max_count;
    q->max_bytes = byte_limit(ratio, device_memory);
    q->fn = fn;
    q->arg = arg;
    return q;

nomem:
    if (q != NULL) {
        free(q->ring);
        free(q);
    }
    cm_fail(err, CM_ERR_NOMEM, "no memory for a pending-free queue");
    return NULL;
}

int
cm__pending_resize(cm_pending *q, size_t device_memory, cm_error *err)
{
    size_t max_count;
    double ratio;

    if (cm__pending_limits(&max_count, &ratio, err) < 0) {
        return -1;
    }
    q->max_bytes = byte_limit(ratio, device_memory);
    return 0;
}

void
cm__pending_delete(cm_pending *q)
{
    if (q == NULL) {
        return;
    }
    free(q->ring);
    free(q);
}

/* Doubles the ring, unwrapping it. */
static int
grow(cm_pending *q)
{
    size_t cap = q->cap * 2, first;
    item *ring;

    if (cap > SIZE_MAX / sizeof(item)) {
        return -1;
    }
    ring = malloc(cap * sizeof(item));
    if (ring == NULL) {
        return -1;
    }
    first = q->cap - q->head;
    if (first > q->len) {
        first = q->len;
    }
    memcpy(ring, q->ring + q->head, first * sizeof(item));
    memcpy(ring + first, q->ring, (q->len - first) * sizeof(item));
    free(q->ring);
    q->ring = ring;
    q->cap = cap;
    q->head = 0;
    return 0;
}

/* With the queue empty. */
static void
reset_empty(cm_pending *q)
{
    q->head = 0;
    q->bytes = 0;
    if (q->cap > SHRINK_ABOVE) {
        item *ring = realloc(q->ring, CHUNK * sizeof(item));

        /* A failed shrink keeps the larger ring, which is still valid. */
        if (ring != NULL) {
            q->ring = ring;
            q->cap = CHUNK;
        }
    }
}

/* The ring slot `i` (< cap) items after the head: a compare, where `%`
 * was a 64-bit division on every add and pop. */
static size_t
slot(const cm_pending *q, size_t i)
{
    size_t at = q->head + i;

    return at >= q->cap ? at - q->cap : at;
}

/* Takes the oldest item; 0 when the queue is empty. */
static int
pop(cm_pending *q, item *out)
{
    if (q->len == 0) {
        return 0;
    }
    *out = q->ring[q->head];
    q->head = slot(q, 1);
    q->len--;
    q->bytes -= out->nbytes;
    if (q->len == 0) {
        reset_empty(q);
    }
    return 1;
}

/* Pops one item at a time: the free function may itself release further
 * handles into this queue (the owner's lock is recursive), so the queue's
 * state is read again after each free. `force` ignores deferral and
 * shutdown. */
static int
flush_items(cm_pending *q, int force, cm_error *err)
{
    item it;

    while ((force || (!q->deferred && !q->stopped)) && pop(q, &it)) {
        /* A failed item is not retried: freeing it again may be a double
         * free. The rest stay queued (numba cancels them instead). */
        if (q->fn(q->arg, it.kind, it.handle, it.nbytes, err) < 0) {
            return -1;
        }
    }
    return 0;
}

/* On CM_ERR_NOMEM the item is not queued and the caller still owns the
 * handle; on any other -1 it was queued and a flush failed. */
int
cm__pending_add(cm_pending *q, cm_free_kind kind, uint64_t handle,
                size_t nbytes, int *due, cm_error *err)
{
    int over;

    if (q->stopped) {
        return 0;
    }
    if (q->len == q->cap && grow(q) < 0) {
        return cm_fail(err, CM_ERR_NOMEM, "no memory to queue a free");
    }
    q->ring[slot(q, q->len)] = (item){kind, handle, nbytes};
    q->len++;
    q->bytes += nbytes;
    over = !q->deferred && (q->len > q->max_count || q->bytes > q->max_bytes);
    if (over && due != NULL) {
        *due = 1;
        return 0;
    }
    return over ? flush_items(q, 0, err) : 0;
}

/* After cm__pending_shutdown this frees nothing and returns 0. */
int
cm__pending_flush(cm_pending *q, cm_error *err)
{
    return flush_items(q, 0, err);
}

void
cm__pending_drop(cm_pending *q)
{
    q->len = 0;
    reset_empty(q);
}

int
cm__pending_salvage(cm_pending *q, cm_free_fn salvage, void *arg,
                    cm_error *err)
{
    cm_error later;
    item it;
    int rc = 0;

    while (pop(q, &it)) {
        if (salvage(arg, it.kind, it.handle, it.nbytes,
                    rc < 0 ? &later : err) < 0) {
            rc = -1;
        }
    }
    return rc;
}

void
cm__pending_defer(cm_pending *q)
{
    q->deferred++;
}

void
cm__pending_undefer(cm_pending *q)
{
    /* An unbalanced undefer is a caller's bug; clamping keeps the queue
     * usable rather than deferred for ever after a wrap-around. */
    if (q->deferred > 0) {
        q->deferred--;
    }
}

int
cm__pending_deferred(const cm_pending *q)
{
    return q->deferred > 0;
}

size_t
cm__pending_count(const cm_pending *q)
{
    return q->len;
}

size_t
cm__pending_bytes(const cm_pending *q)
{
    return q->bytes;
}

/* At interpreter shutdown the queue is flushed once even if deferred (a
 * defer_cleanup() block can be left open by an exiting thread, and nothing
 * would flush it later), then stopped: later adds neither free nor queue,
 * leaking on purpose. Stopping first makes adds from the flush's own free
 * functions leak rather than queue behind it. If a free fails, the items
 * after it stay queued and are never freed; cm__pending_drop forgets
 * them. */
int
cm__pending_shutdown(cm_pending *q, cm_error *err)
{
    int first = !q->stopped;

    q->stopped = 1;
    return first ? flush_items(q, 1, err) : 0;
}
