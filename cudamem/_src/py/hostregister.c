/* hostregister.c (py/): page-locking the caller's NumPy arrays as
 * HostBuffers (cuMemHostRegister through core/hostmem.h), all or none:
 * _host_register for pinned() and mapped(), and register() /
 * deregister() with their registry of arrays by address and size (the
 * module state's `registered`). */
#include "hostbuf.h"

#include "device.h"

/* The bytes an array's elements touch: [*lo, *lo + *n). TypeError or
 * ValueError naming anything that cannot be registered. */
static int
array_extent(PyObject *obj, char **lo, size_t *n)
{
    PyArrayObject *a = (PyArrayObject *)obj;
    Py_ssize_t size, low, high;

    if (!PyArray_Check(obj)) {
        PyErr_Format(PyExc_TypeError,
                     "only NumPy arrays can be page-locked, not %.200s",
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    if (PyDataType_REFCHK(PyArray_DESCR(a))) {
        PyErr_Format(PyExc_TypeError,
                     "an array of dtype %R holds Python objects, which "
                     "cannot be page-locked for the device",
                     (PyObject *)PyArray_DESCR(a));
        return -1;
    }
    if (cmpy_layout_extent(PyArray_NDIM(a), PyArray_DIMS(a),
                           PyArray_STRIDES(a), PyArray_ITEMSIZE(a), &size,
                           &low, &high) < 0) {
        return -1;
    }
    *lo = PyArray_BYTES(a) + low;
    *n = (size_t)(high - low);
    return 0;
}

/* Drops the registrations of buffers[0:n]; the first failure is raised,
 * the others still dropped. */
static int
unregister_all(cmpy_state *st, PyObject *const *buffers, Py_ssize_t n)
{
    cm_error err, later;
    int rc = 0;

    for (Py_ssize_t i = 0; i < n; i++) {
        cm_host *host = ((cmpy_HostBuffer *)buffers[i])->host;
        int one;

        Py_BEGIN_ALLOW_THREADS
        one = cm_host_unregister(host, rc < 0 ? &later : &err);
        CMPY_END_ALLOW_THREADS
        if (one < 0) {
            rc = -1;
        }
    }
    if (rc < 0) {
        cmpy_raise(st, &err);
    }
    return rc;
}

PyDoc_STRVAR(host_register_doc,
             "_host_register($module, arrays, mapped=False)\n--\n\n"
             "Page-locks every array of the sequence (read-only ones "
             "read-only),\nwith a device address when *mapped*: all or "
             "none.");

/* The items of the sequence `arg` as a tuple, a list's copied: the GIL is
 * released while each is registered, and another thread (or a finalizer)
 * could meanwhile change a caller's list under the loop. New reference,
 * or NULL with TypeError `msg`. */
static PyObject *
items_of(PyObject *arg, const char *msg)
{
    PyObject *seq = PySequence_Fast(arg, msg), *items;

    if (seq == NULL || PyTuple_CheckExact(seq)) {
        return seq;
    }
    items = PyList_AsTuple(seq);
    Py_DECREF(seq);
    return items;
}

/* HostBuffers page-locking the arrays of `items` (a tuple, see items_of):
 * a list, or NULL with an exception and nothing registered. */
static PyObject *
register_seq(cmpy_state *st, PyObject *items, int mapped)
{
    Py_ssize_t n = PyTuple_GET_SIZE(items), i;
    PyObject *out = NULL;
    cm_device *dev;

    /* Every array is checked before anything is registered. */
    for (i = 0; i < n; i++) {
        char *lo;
        size_t size;

        if (array_extent(PyTuple_GET_ITEM(items, i), &lo, &size) < 0) {
            return NULL;
        }
    }
    if (cmpy_current_device(st, &dev) < 0 || (out = PyList_New(n)) == NULL) {
        return NULL;
    }
    for (i = 0; i < n; i++) {
        PyObject *obj = PyTuple_GET_ITEM(items, i), *buf;
        int readonly = !PyArray_ISWRITEABLE((PyArrayObject *)obj), rc;
        cm_host *host;
        cm_error err;
        size_t size;
        char *lo;

        /* Checked above, and a tuple's arrays keep their extents. */
        (void)array_extent(obj, &lo, &size);
        Py_BEGIN_ALLOW_THREADS
        /* NOLINTNEXTLINE(clang-analyzer-core.CallAndMessage): lo is set */
        rc = cm_host_register(dev, lo, size, readonly, mapped, &host, &err);
        CMPY_END_ALLOW_THREADS
        if (rc < 0) {
            cmpy_raise(st, &err);
            goto fail;
        }
        buf = cmpy_hostbuf_new(st, host, obj);
        if (buf == NULL) {
            cmpy_hostbuf_discard(st, host);
            goto fail;
        }
        PyList_SET_ITEM(out, i, buf);
    }
    return out;
fail: {
    /* All or none: drop what this call registered. */
    PyObject *exc = cmpy_exc_take();

    if (unregister_all(st, PySequence_Fast_ITEMS(out), i) < 0) {
        PyErr_Clear();
    }
    cmpy_exc_put(exc);
    Py_DECREF(out);
    return NULL;
}
}

static PyObject *
host_register(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
              PyObject *kwnames)
{
    static const char *const names[] = {"arrays", "mapped"};
    cmpy_state *st = cmpy_get_state(module);
    PyObject *argv[2], *seq, *out;
    int mapped = 0;

    if (cmpy_numpy_init() < 0 ||
        cmpy_parse_args("_host_register", names, 2, 1, args, nargs, kwnames,
                        argv) < 0 ||
        (argv[1] != NULL && (mapped = PyObject_IsTrue(argv[1])) < 0)) {
        return NULL;
    }
    seq = items_of(argv[0], "_host_register() needs a sequence");
    if (seq == NULL) {
        return NULL;
    }
    out = register_seq(st, seq, mapped);
    Py_DECREF(seq);
    return out;
}

/* register()'s key of a NumPy array: (data address, nbytes), as numba's
 * ROC register() would see it. A new reference, or NULL with TypeError
 * for anything else. */
static PyObject *
registry_key(PyObject *obj)
{
    PyArrayObject *a = (PyArrayObject *)obj;

    if (!PyArray_Check(obj)) {
        PyErr_Format(PyExc_TypeError,
                     "only NumPy arrays can be page-locked, not %.200s",
                     Py_TYPE(obj)->tp_name);
        return NULL;
    }
    return Py_BuildValue("(Nn)", PyLong_FromVoidPtr(PyArray_DATA(a)),
                         PyArray_NBYTES(a));
}

/* ValueError: "the array of shape (3,) and dtype float64 at 0x... (24
 * bytes) is <what>". Returns -1. */
static int
registry_error(PyObject *obj, const char *what)
{
    PyArrayObject *a = (PyArrayObject *)obj;
    PyObject *shape = PyObject_GetAttrString(obj, "shape");
    char addr[32];

    /* PyUnicode_FromFormat has no %llx. */
    snprintf(addr, sizeof(addr), "0x%llx",
             (unsigned long long)(uintptr_t)PyArray_DATA(a));
    if (shape != NULL) {
        PyErr_Format(PyExc_ValueError,
                     "the array of shape %S and dtype %S at %s (%zd bytes) "
                     "is %s",
                     shape, (PyObject *)PyArray_DESCR(a), addr,
                     PyArray_NBYTES(a), what);
        Py_DECREF(shape);
    }
    return -1;
}

/* The keys of the arrays of `seq`, checked against the registry: each
 * must be in it (`want` 1) or not (`want` 0), and no two alike. A tuple,
 * or NULL with TypeError or ValueError before anything changed. */
static PyObject *
registry_keys(cmpy_state *st, PyObject *seq, int want)
{
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject *keys = PyTuple_New(n);
    /* The keys so far, so that a long sequence is checked in O(n). */
    PyObject *so_far = PySet_New(NULL);

    if (so_far == NULL) {
        Py_CLEAR(keys);
    }
    for (Py_ssize_t i = 0; keys != NULL && i < n; i++) {
        PyObject *obj = PySequence_Fast_GET_ITEM(seq, i);
        PyObject *key = registry_key(obj), *have;
        int seen;

        if (key == NULL) {
            Py_CLEAR(keys);
            break;
        }
        PyTuple_SET_ITEM(keys, i, key);
        have = PyDict_GetItemWithError(st->registered, key); /* borrowed */
        seen = PySet_Contains(so_far, key);
        if (seen == 0 && PySet_Add(so_far, key) < 0) {
            seen = -1;
        }
        if ((have == NULL && PyErr_Occurred()) || seen < 0) {
            Py_CLEAR(keys);
        }
        /* A registration under way (None) counts as present for a new
         * one, absent for deregister(). */
        else if (want ? have == NULL || have == Py_None || seen
                      : have != NULL || seen) {
            registry_error(obj,
                           want ? "not registered" : "registered already");
            Py_CLEAR(keys);
        }
    }
    Py_XDECREF(so_far);
    return keys;
}

static int
registry_ready(cmpy_state *st)
{
    if (st->registered == NULL) {
        st->registered = PyDict_New();
    }
    return st->registered != NULL ? 0 : -1;
}

PyDoc_STRVAR(register_doc,
             "_register($module, arrays)\n--\n\n"
             "register(*arrays): page-locks every NumPy array of the "
             "sequence, all or\nnone, and enters each in the registry by "
             "(address, nbytes); one\nregistered already raises "
             "ValueError first. The list of HostBuffers.");

static PyObject *
register_named(PyObject *module, PyObject *arg)
{
    cmpy_state *st = cmpy_get_state(module);
    PyObject *seq = NULL, *keys = NULL, *out = NULL, *exc;
    Py_ssize_t n = 0, i;

    if (cmpy_numpy_init() < 0 || registry_ready(st) < 0 ||
        (seq = items_of(arg, "_register() needs a sequence")) == NULL ||
        (keys = registry_keys(st, seq, 0)) == NULL) {
        goto done;
    }
    n = PyTuple_GET_SIZE(keys);
    /* Reserved while the GIL is released to register them. */
    for (i = 0; i < n; i++) {
        if (PyDict_SetItem(st->registered, PyTuple_GET_ITEM(keys, i),
                           Py_None) < 0) {
            break;
        }
    }
    out = i == n ? register_seq(st, seq, 0) : NULL;
    exc = cmpy_exc_take();
    for (Py_ssize_t j = 0; j < i; j++) {
        PyObject *key = PyTuple_GET_ITEM(keys, j);
        int rc = out != NULL ? PyDict_SetItem(st->registered, key,
                                              PyList_GET_ITEM(out, j))
                             : PyDict_DelItem(st->registered, key);

        if (rc < 0) {
            /* Out of memory on a dict that holds the key: not seen. */
            PyErr_WriteUnraisable(module);
        }
    }
    cmpy_exc_put(exc);
done:
    Py_XDECREF(keys);
    Py_XDECREF(seq);
    return out;
}

PyDoc_STRVAR(deregister_doc,
             "_deregister($module, arrays)\n--\n\n"
             "deregister(*arrays): ends register()'s page-locking of every "
             "NumPy array\nof the sequence; one not registered raises "
             "ValueError before anything\nis deregistered.");

static PyObject *
deregister_named(PyObject *module, PyObject *arg)
{
    cmpy_state *st = cmpy_get_state(module);
    PyObject *seq = NULL, *keys = NULL, *buffers = NULL, *out = NULL;
    Py_ssize_t n;

    if (cmpy_numpy_init() < 0 || registry_ready(st) < 0 ||
        (seq = PySequence_Fast(arg, "_deregister() needs a sequence")) ==
            NULL ||
        (keys = registry_keys(st, seq, 1)) == NULL) {
        goto done;
    }
    n = PyTuple_GET_SIZE(keys);
    if ((buffers = PyList_New(n)) == NULL) {
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *key = PyTuple_GET_ITEM(keys, i);

        PyList_SET_ITEM(buffers, i,
                        Py_NewRef(PyDict_GetItem(st->registered, key)));
        (void)PyDict_DelItem(st->registered, key);
    }
    if (unregister_all(st, PySequence_Fast_ITEMS(buffers), n) == 0) {
        out = Py_NewRef(Py_None);
    }
done:
    Py_XDECREF(buffers);
    Py_XDECREF(keys);
    Py_XDECREF(seq);
    return out;
}

PyDoc_STRVAR(release_doc,
             "_release($module, buffers)\n--\n\n"
             "The end of a register() block: deregisters those of "
             "_register()'s\n*buffers* the registry still holds (not those "
             "deregister() ended).");

static PyObject *
release_named(PyObject *module, PyObject *arg)
{
    cmpy_state *st = cmpy_get_state(module);
    PyObject *seq = PySequence_Fast(arg, "_release() needs a sequence");
    PyObject *mine = NULL, *key, *value, *out = NULL;
    Py_ssize_t pos = 0;

    if (seq == NULL || registry_ready(st) < 0 ||
        (mine = PyList_New(0)) == NULL) {
        goto done;
    }
    /* The keys whose entry is one of these buffers, then their removal. */
    while (PyDict_Next(st->registered, &pos, &key, &value)) {
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
            if (PySequence_Fast_GET_ITEM(seq, i) == value &&
                PyList_Append(mine, key) < 0) {
                goto done;
            }
        }
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(mine); i++) {
        key = PyList_GET_ITEM(mine, i);
        value = Py_NewRef(PyDict_GetItem(st->registered, key));
        (void)PyDict_DelItem(st->registered, key);
        PyList_SET_ITEM(mine, i, value);
        Py_DECREF(key);
    }
    if (unregister_all(st, PySequence_Fast_ITEMS(mine),
                       PyList_GET_SIZE(mine)) == 0) {
        out = Py_NewRef(Py_None);
    }
done:
    Py_XDECREF(mine);
    Py_XDECREF(seq);
    return out;
}

PyDoc_STRVAR(host_unregister_doc,
             "_host_unregister($module, buffers)\n--\n\n"
             "Drops the registrations of a sequence of HostBuffers now; the "
             "first\nfailure is raised after all are dropped.");

static PyObject *
host_unregister(PyObject *module, PyObject *arg)
{
    cmpy_state *st = cmpy_get_state(module);
    PyObject *seq = items_of(arg, "_host_unregister() needs a "
                                  "sequence of HostBuffers");
    int rc;

    if (seq == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
        if (!Py_IS_TYPE(PySequence_Fast_GET_ITEM(seq, i),
                        (PyTypeObject *)st->HostBufferType)) {
            PyErr_Format(PyExc_TypeError,
                         "_host_unregister() needs HostBuffers, not %.200s",
                         Py_TYPE(PySequence_Fast_GET_ITEM(seq, i))->tp_name);
            Py_DECREF(seq);
            return NULL;
        }
    }
    rc = unregister_all(st, PySequence_Fast_ITEMS(seq),
                        PySequence_Fast_GET_SIZE(seq));
    Py_DECREF(seq);
    if (rc < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(host_extent_doc,
             "_host_extent($module, ary)\n--\n\n"
             "The address of the lowest byte NumPy array *ary*'s elements "
             "touch and\nthe bytes from it to the highest (what pinned() "
             "asks mempin() to lock).");

static PyObject *
host_extent(PyObject *Py_UNUSED(module), PyObject *arg)
{
    size_t size;
    char *lo;

    if (cmpy_numpy_init() < 0 || array_extent(arg, &lo, &size) < 0) {
        return NULL;
    }
    return Py_BuildValue("(Nn)", PyLong_FromVoidPtr(lo), (Py_ssize_t)size);
}

PyMethodDef cmpy_hostregister_methods[] = {
    {"_host_register", (PyCFunction)(void (*)(void))host_register,
     METH_FASTCALL | METH_KEYWORDS, host_register_doc},
    {"_host_unregister", (PyCFunction)host_unregister, METH_O,
     host_unregister_doc},
    {"_host_extent", (PyCFunction)host_extent, METH_O, host_extent_doc},
    {"_register", (PyCFunction)register_named, METH_O, register_doc},
    {"_deregister", (PyCFunction)deregister_named, METH_O, deregister_doc},
    {"_release", (PyCFunction)release_named, METH_O, release_doc},
    {NULL, NULL, 0, NULL},
};
