/* arraycai.c (py/): a device array's CUDA Array Interface (v3) export,
 * its __cuda_array_interface__, with the stream ordering that makes the
 * exported stream safe to use. The import is cai.c's. */
#include "array.h"

#include "../core/memory.h"
#include "stream.h"

/* The stream a CAI export names: the array's, made to wait (events) for
 * the work queued on its memory on other streams; no driver call when
 * there is none. A stream-0 array exports None, whose consumers wait for
 * nothing: work on other streams is ordered into the legacy default
 * stream and waited for on the host first (synchronous, as the array).
 * New reference. */
static PyObject *
export_stream(cmpy_state *st, cmpy_DeviceNDArray *self)
{
    int own = self->stream_async && self->stream_handle != NULL, ordered, rc;
    CUstream into = own ? self->stream_handle : CU_STREAM_LEGACY;
    cm_mem *m = self->gpu_data->mem;
    cm_error err;

    /* Unlocked peek: memory with no work noted costs nothing; only the
     * array's own stream costs the set's lock and no driver call. */
    if (__atomic_load_n(&m->npending, __ATOMIC_RELAXED) == 0) {
        ordered = 0;
    }
    else {
        Py_BEGIN_ALLOW_THREADS
        rc = cm_mem_order_pending(m, into, &ordered, &err);
        CMPY_END_ALLOW_THREADS
        if (rc < 0) {
            return cmpy_raise(st, &err);
        }
    }
    if (own) {
        return PyLong_FromVoidPtr(self->stream_handle);
    }
    if (ordered > 0 && cmpy_stream_wait(st, m->dev, CU_STREAM_LEGACY) < 0) {
        return NULL;
    }
    return Py_NewRef(Py_None);
}

/* The export's keys, by index into st->cai_keys, interned once, and
 * st->cai_template, a dict of the keys before KEY_DESCR (None but version
 * 3) that each export copies: a copy clones the template's key table, so
 * that an export makes no key string and grows no dict. */
enum {
    KEY_SHAPE,
    KEY_STRIDES,
    KEY_DATA,
    KEY_TYPESTR,
    KEY_STREAM,
    KEY_VERSION,
    KEY_DESCR,
    NKEYS
};

static int
cai_init(cmpy_state *st)
{
    static const char *const names[NKEYS] = {
        "shape", "strides", "data", "typestr", "stream", "version", "descr"};
    PyObject *keys, *template, *three;
    int i;

    if (st->cai_template != NULL) {
        return 0;
    }
    if ((keys = PyTuple_New(NKEYS)) == NULL) {
        return -1;
    }
    for (i = 0; i < NKEYS; i++) {
        PyObject *key = PyUnicode_InternFromString(names[i]);

        if (key == NULL) {
            Py_DECREF(keys);
            return -1;
        }
        PyTuple_SET_ITEM(keys, i, key);
    }
    template = PyDict_New();
    three = PyLong_FromLong(3);
    for (i = 0; template != NULL && three != NULL && i < KEY_DESCR; i++) {
        if (PyDict_SetItem(template, PyTuple_GET_ITEM(keys, i),
                           i == KEY_VERSION ? three : Py_None) < 0) {
            break;
        }
    }
    Py_XDECREF(three);
    if (i < KEY_DESCR) {
        Py_XDECREF(template);
        Py_DECREF(keys);
        return -1;
    }
    st->cai_keys = keys;
    st->cai_template = template;
    return 0;
}

/* dtype.str, remembered for the last dtype exported: arrays share NumPy's
 * cached descriptors, so a run of exports computes it once. New
 * reference. */
static PyObject *
typestr_of(cmpy_state *st, PyArray_Descr *dtype)
{
    PyObject *str;

    if ((PyObject *)dtype == st->cai_dtype) {
        return Py_NewRef(st->cai_typestr);
    }
    if ((str = PyObject_GetAttrString((PyObject *)dtype, "str")) == NULL) {
        return NULL;
    }
    Py_XSETREF(st->cai_typestr, Py_NewRef(str));
    Py_XSETREF(st->cai_dtype, Py_NewRef((PyObject *)dtype));
    return str;
}

/* CAI v3 (export). `stream` is None for the default stream's handle 0, as
 * the spec requires (numba emits 0); strides are None when C-contiguous.
 * Work queued on the memory on other streams is ordered into the exported
 * stream first (export_stream). A new dict each time, as numba's, which
 * consumers may change. */
PyObject *
cmpy_array_get_cai(PyObject *op, void *Py_UNUSED(closure))
{
    cmpy_DeviceNDArray *self = (cmpy_DeviceNDArray *)op;
    cmpy_state *st = cmpy_type_state((PyObject *)self);
    PyObject *v[NKEYS] = {NULL}, *cai = NULL, *ptr;
    int i;

    if (cmpy_array_check_alive(st, self) < 0 || cai_init(st) < 0 ||
        (v[KEY_SHAPE] = cmpy_shape_tuple(CMPY_NDIM(self), CMPY_SHAPE(self))) ==
            NULL) {
        return NULL;
    }
    v[KEY_STRIDES] = self->flags & NPY_ARRAY_C_CONTIGUOUS
                         ? Py_NewRef(Py_None)
                         : cmpy_shape_tuple(CMPY_NDIM(self),
                                            CMPY_STRIDES(self));
    if (v[KEY_STRIDES] == NULL ||
        (ptr = PyLong_FromUnsignedLongLong(self->ptr)) == NULL) {
        goto done;
    }
    v[KEY_DATA] = PyTuple_Pack(
        2, ptr, self->gpu_data->mem->readonly ? Py_True : Py_False);
    Py_DECREF(ptr);
    if (v[KEY_DATA] == NULL ||
        (v[KEY_TYPESTR] = typestr_of(st, self->dtype)) == NULL ||
        (v[KEY_STREAM] = export_stream(st, self)) == NULL ||
        (PyDataType_HASFIELDS(self->dtype) &&
         (v[KEY_DESCR] = PyObject_GetAttrString((PyObject *)self->dtype,
                                                "descr")) == NULL) ||
        (cai = PyDict_Copy(st->cai_template)) == NULL) {
        goto done;
    }
    for (i = 0; i < NKEYS; i++) {
        if (v[i] != NULL &&
            PyDict_SetItem(cai, PyTuple_GET_ITEM(st->cai_keys, i), v[i]) < 0) {
            Py_CLEAR(cai);
            break;
        }
    }
done:
    for (i = 0; i < NKEYS; i++) {
        Py_XDECREF(v[i]);
    }
    return cai;
}
