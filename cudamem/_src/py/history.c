/* history.c (py/): the recorder of the memory history behind
 * cudamem.memory.record_history() and snapshot(): core's hook
 * (core/history.h), a ring of the last max_entries events, and the
 * Python stack and annotation of each. memory.py builds PyTorch's snapshot
 * format from _history_entries(); this file only records.
 *
 * The hook runs on any thread, with or without the GIL, sometimes under a
 * core lock, so it never waits for the GIL: a thread that holds it records
 * its stack and annotation at once; one that released it around a core
 * call (an allocation, a flush) leaves them to cmpy_history_adopt, which
 * py/'s CMPY_END_ALLOW_THREADS (module.h) runs after each GIL release; a
 * thread that never ran Python records none. The ring is behind a mutex
 * that nothing else is taken under. Code objects and annotations are kept alive in a
 * table of pointers (`kept`, by identity: a code object's hash walks its
 * contents) until the next start, so an entry holds borrowed pointers and
 * overwriting it needs no GIL. One recorder per process, like core. */
#include "module.h"

#include <pthread.h>
#include <time.h>
#if PY_VERSION_HEX < 0x030B0000
/* PyFrame_GetBack: in Python.h from 3.11 on. */
#include <frameobject.h>
#endif

#include "../core/history.h"

/* The frames an entry keeps, innermost first. */
#define DEPTH_MAX 64

typedef struct frame {
    PyObject *code; /* borrowed from kept */
    int line;
} frame;

typedef struct entry {
    uint64_t seq;
    int64_t time_ns;
    unsigned long tid;
    cm_hist_event ev;
    PyObject *annotation; /* borrowed from kept; NULL: none */
    int nframes;          /* -1: to be adopted (GIL released) */
    frame frames[];       /* depth of them */
} entry;

static pthread_mutex_t ring_lock = PTHREAD_MUTEX_INITIALIZER;
/* Under ring_lock. */
static char *ring;       /* capacity entries of entry_size bytes */
static size_t capacity;  /* max_entries */
static size_t allocated; /* entries ring has room for (grows to capacity) */
static size_t count;     /* entries held */
static size_t head;      /* the oldest entry's slot */
static size_t entry_size;
static int depth;
static uint64_t next_seq;
/* Under the GIL: what entries point to (an open-addressed set of owned
 * references, at most half full), and the annotations' variable. */
static PyObject **kept;
static size_t kept_cap, kept_len;
static PyObject *annotation_var;
/* module.h's: set once an entry waits for adoption (until the next
 * start). */
int cmpy_history_adopting;
/* This thread's first entry left for cmpy_history_adopt_now; 0: none. */
static _Thread_local uint64_t adopt_from;

static size_t
kept_slot(PyObject *const *table, size_t cap, PyObject *op)
{
    size_t i = ((uintptr_t)op >> 4) * (size_t)0x9E3779B97F4A7C15ULL;

    for (i &= cap - 1; table[i] != NULL && table[i] != op;
         i = (i + 1) & (cap - 1)) {
    }
    return i;
}

/* Keeps op alive until kept_clear; -1 (MemoryError set): no room. */
static int
kept_add(PyObject *op)
{
    size_t i;

    if (2 * (kept_len + 1) > kept_cap) {
        size_t cap = kept_cap == 0 ? 256 : 2 * kept_cap;
        PyObject **bigger = PyMem_Calloc(cap, sizeof(*bigger));

        if (bigger == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        for (size_t j = 0; j < kept_cap; j++) {
            if (kept[j] != NULL) {
                bigger[kept_slot(bigger, cap, kept[j])] = kept[j];
            }
        }
        PyMem_Free(kept);
        kept = bigger;
        kept_cap = cap;
    }
    i = kept_slot(kept, kept_cap, op);
    if (kept[i] == NULL) {
        kept[i] = Py_NewRef(op);
        kept_len++;
    }
    return 0;
}

static void
kept_clear(void)
{
    PyObject **table = kept;
    size_t cap = kept_cap;

    kept = NULL;
    kept_cap = kept_len = 0;
    for (size_t j = 0; j < cap; j++) {
        Py_XDECREF(table[j]);
    }
    PyMem_Free(table);
}

static entry *
slot(size_t i)
{
    return (entry *)(ring + ((head + i) % capacity) * entry_size);
}

/* The calling thread's stack (up to depth frames) and annotation, into e.
 * With the GIL held. The collector stays off meanwhile: making frame
 * objects allocates, and a collection could run a finalizer that
 * allocates device memory under the lock the hook was called with. -1
 * (MemoryError set): the entry goes without them. */
static int
capture(entry *e)
{
    int gc_was = PyGC_Disable(), rc = 0;
    PyFrameObject *f = PyEval_GetFrame();
    PyObject *value = NULL;

    Py_XINCREF(f);
    e->nframes = 0;
    while (f != NULL && e->nframes < depth) {
        PyCodeObject *code = PyFrame_GetCode(f);
        PyFrameObject *back;

        rc = kept_add((PyObject *)code);
        Py_DECREF(code); /* kept holds it */
        if (rc < 0) {
            break;
        }
        e->frames[e->nframes++] = (frame){(PyObject *)code,
                                          PyFrame_GetLineNumber(f)};
        back = PyFrame_GetBack(f);
        Py_DECREF(f);
        f = back;
    }
    Py_XDECREF(f);
    e->annotation = NULL;
    if (rc == 0 && PyContextVar_Get(annotation_var, NULL, &value) < 0) {
        rc = -1;
    }
    if (rc == 0 && value != NULL && value != Py_None) {
        rc = kept_add(value);
        if (rc == 0) {
            e->annotation = value;
        }
    }
    Py_XDECREF(value);
    if (gc_was) {
        PyGC_Enable();
    }
    return rc;
}

/* Grows ring towards capacity; with ring_lock held. -1: no room. */
static int
grow(void)
{
    size_t n = allocated == 0 ? 64 : allocated * 2;
    char *bigger;

    if (n > capacity) {
        n = capacity;
    }
    if (n <= allocated || n > SIZE_MAX / entry_size) {
        return -1;
    }
    bigger = realloc(ring, n * entry_size);
    if (bigger == NULL) {
        return -1;
    }
    ring = bigger;
    allocated = n;
    return 0;
}

/* Takes the next slot (the oldest one when full); with ring_lock held.
 * NULL: no memory for it (the event is dropped). */
static entry *
take(void)
{
    entry *e;

    if (count < capacity) {
        /* Until full, head is 0 and the ring grows in place. */
        if (count == allocated && grow() < 0) {
            return NULL;
        }
        return slot(count++);
    }
    e = slot(0);
    head = (head + 1) % capacity;
    return e;
}

static void
hook(const cm_hist_event *ev)
{
    /* An entry on the stack, copied into the ring under the lock. */
    char buf[sizeof(entry) + DEPTH_MAX * sizeof(frame)];
    entry *e = (entry *)buf, *into;
    struct timespec now;
    int gil = PyGILState_Check();

    clock_gettime(CLOCK_REALTIME, &now);
    e->time_ns = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
    e->tid = (unsigned long)pthread_self();
    e->ev = *ev;
    e->annotation = NULL;
    e->nframes = 0;
    if (gil && capture(e) < 0) {
        PyErr_Clear(); /* recorded without them */
    }
    else if (!gil && PyGILState_GetThisThreadState() != NULL) {
        e->nframes = -1;
    }
    pthread_mutex_lock(&ring_lock);
    if (capacity > 0 && (into = take()) != NULL) {
        e->seq = ++next_seq;
        if (e->nframes < 0 && adopt_from == 0) {
            adopt_from = e->seq;
            __atomic_store_n(&cmpy_history_adopting, 1, __ATOMIC_RELAXED);
        }
        memcpy(into, e, entry_size);
    }
    pthread_mutex_unlock(&ring_lock);
}

void
cmpy_history_adopt_now(void)
{
    char buf[sizeof(entry) + DEPTH_MAX * sizeof(frame)];
    entry *mine = (entry *)buf;
    uint64_t from;

    if ((from = adopt_from) == 0) {
        return;
    }
    adopt_from = 0;
    /* With the GIL held throughout: no start resizes the entries. */
    if (capture(mine) < 0) {
        PyErr_Clear();
        mine->nframes = 0;
        mine->annotation = NULL;
    }
    pthread_mutex_lock(&ring_lock);
    /* The ring is in seq order: only its newest entries can be ours. */
    for (size_t i = count; i-- > 0;) {
        entry *e = slot(i);

        if (e->seq < from) {
            break;
        }
        if (e->nframes < 0 && e->tid == (unsigned long)pthread_self()) {
            e->nframes = mine->nframes;
            e->annotation = mine->annotation;
            memcpy(e->frames, mine->frames,
                   (size_t)mine->nframes * sizeof(frame));
        }
    }
    pthread_mutex_unlock(&ring_lock);
}

static const char *const action_names[CM_HIST_ACTION_COUNT] = {
    [CM_HIST_ALLOC] = "alloc",
    [CM_HIST_FREE_REQUESTED] = "free_requested",
    [CM_HIST_FREE_COMPLETED] = "free_completed",
    [CM_HIST_SEGMENT_ALLOC] = "segment_alloc",
    [CM_HIST_SEGMENT_FREE] = "segment_free",
};

static const char *const memory_names[CM_HIST_MEMORY_COUNT] = {
    [CM_HIST_DEVICE] = "device",
    [CM_HIST_MANAGED] = "managed",
    [CM_HIST_PINNED] = "pinned",
    [CM_HIST_MAPPED] = "mapped",
};

/* Stops the hook and empties the ring, sized for max_entries of `frames`
 * frames from now on. With the GIL held. */
static void
reset(size_t max_entries, int frames)
{
    cm_history_set_hook(NULL);
    pthread_mutex_lock(&ring_lock);
    free(ring);
    ring = NULL;
    allocated = count = head = 0;
    capacity = max_entries;
    depth = frames;
    entry_size = sizeof(entry) + (size_t)depth * sizeof(frame);
    __atomic_store_n(&cmpy_history_adopting, 0, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&ring_lock);
}

PyDoc_STRVAR(history_start_doc,
             "_history_start(max_entries, depth, /)\n--\n\n"
             "Starts recording into a new ring of max_entries (> 0) events "
             "with up to depth (0 to 64) Python frames each; what was "
             "recorded before is dropped.");

static PyObject *
history_start(PyObject *Py_UNUSED(module), PyObject *args)
{
    Py_ssize_t max_entries, want;

    if (!PyArg_ParseTuple(args, "nn:_history_start", &max_entries, &want)) {
        return NULL;
    }
    if (max_entries <= 0) {
        return PyErr_Format(PyExc_ValueError,
                            "max_entries must be positive, not %zd",
                            max_entries);
    }
    if (want < 0 || want > DEPTH_MAX) {
        return PyErr_Format(PyExc_ValueError, "depth must be 0 to %d, not %zd",
                            DEPTH_MAX, want);
    }
    reset((size_t)max_entries, (int)want);
    /* No entry points into the old table any more. */
    kept_clear();
    cm_history_set_hook(hook);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(history_stop_doc, "_history_stop()\n--\n\n"
                               "Stops recording; what was recorded stays for "
                               "_history_entries().");

static PyObject *
history_stop(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(ignored))
{
    cm_history_set_hook(NULL);
    Py_RETURN_NONE;
}

/* One entry as the tuple _history_entries() documents. */
static PyObject *
entry_tuple(const entry *e)
{
    PyObject *frames = PyList_New(e->nframes > 0 ? e->nframes : 0), *t;

    if (frames == NULL) {
        return NULL;
    }
    for (int i = 0; i < e->nframes; i++) {
        PyCodeObject *code = (PyCodeObject *)e->frames[i].code;
        PyObject *f = Py_BuildValue("(OiO)", code->co_filename,
                                    e->frames[i].line, code->co_name);

        if (f == NULL) {
            Py_DECREF(frames);
            return NULL;
        }
        PyList_SET_ITEM(frames, i, f);
    }
    t = Py_BuildValue("(KLkssiKnKNO)", (unsigned long long)e->seq,
                      (long long)e->time_ns, e->tid,
                      action_names[e->ev.action], memory_names[e->ev.memory],
                      e->ev.device, (unsigned long long)e->ev.addr,
                      (Py_ssize_t)e->ev.size, (unsigned long long)e->ev.stream,
                      frames, e->annotation != NULL ? e->annotation : Py_None);
    return t;
}

PyDoc_STRVAR(
    history_entries_doc,
    "_history_entries()\n--\n\n"
    "The recorded events, oldest first, as tuples (seq, time_ns, thread, "
    "action, memory, device, addr, size, stream, frames, annotation); "
    "frames are (filename, line, name), innermost first.");

static PyObject *
history_entries(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(ignored))
{
    PyObject *list;
    char *copy;
    size_t n, size;

    /* Copied out under the lock; the tuples are made without it. */
    pthread_mutex_lock(&ring_lock);
    n = count;
    size = entry_size;
    copy = malloc(n > 0 ? n * size : 1);
    if (copy != NULL) {
        for (size_t i = 0; i < n; i++) {
            memcpy(copy + i * size, slot(i), size);
        }
    }
    pthread_mutex_unlock(&ring_lock);
    if (copy == NULL) {
        return PyErr_NoMemory();
    }
    list = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; list != NULL && i < n; i++) {
        PyObject *t = entry_tuple((const entry *)(copy + i * size));

        if (t == NULL) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, t);
    }
    free(copy);
    return list;
}

PyMethodDef cmpy_history_methods[] = {
    {"_history_start", history_start, METH_VARARGS, history_start_doc},
    {"_history_stop", history_stop, METH_NOARGS, history_stop_doc},
    {"_history_entries", history_entries, METH_NOARGS, history_entries_doc},
    {NULL, NULL, 0, NULL},
};

int
cmpy_history_init(PyObject *module)
{
    if (annotation_var == NULL) {
        annotation_var = PyContextVar_New("cudamem_annotation", NULL);
        if (annotation_var == NULL) {
            return -1;
        }
    }
    return PyModule_AddObjectRef(module, "_history_annotation",
                                 annotation_var);
}

void
cmpy_history_uninstall(void)
{
    reset(0, 0);
    kept_clear();
}
