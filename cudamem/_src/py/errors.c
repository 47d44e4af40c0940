/* errors.c: core status to Python exceptions. The exception classes live in
 * cudamem/errors.py; this file only picks one and builds its arguments. */
#include "module.h"

#include <cuda.h>

PyObject *
cmpy_raise(cmpy_state *st, const cm_error *err)
{
    PyObject *cls, *exc;
    const char *name;

    switch (err->kind) {
    case CM_ERR_DRIVER:
        name = cm_error_name(err->code);
        if (err->code == CUDA_ERROR_OUT_OF_MEMORY) {
            cls = st->CudaOutOfMemoryError;
        }
        else if (cm_error_is_sticky(err->code)) {
            cls = st->CudaStickyError;
        }
        else {
            cls = st->CudaAPIError;
        }
        exc = PyObject_CallFunction(cls, "isz", (int)err->code, err->call,
                                    name);
        if (exc != NULL) {
            PyErr_SetObject(cls, exc);
            Py_DECREF(exc);
        }
        return NULL;
    case CM_ERR_SUPPORT:
        PyErr_SetString(st->CudaSupportError, err->msg);
        return NULL;
    case CM_ERR_FORK:
    case CM_ERR_STATE:
        PyErr_SetString(st->CudaDriverError, err->msg);
        return NULL;
    case CM_ERR_NOMEM:
        return PyErr_NoMemory();
    case CM_ERR_VALUE:
        PyErr_SetString(PyExc_ValueError, err->msg);
        return NULL;
    }
    PyErr_Format(PyExc_SystemError, "cudamem: unknown error kind %d",
                 (int)err->kind);
    return NULL;
}

void
cmpy_warn_release(cmpy_state *st, const cm_error *err)
{
    PyObject *saved = cmpy_exc_take();
    PyObject *exc;

    /* In a forked child a finalizer does nothing (DESIGN rule 10). */
    if (err->kind != CM_ERR_FORK) {
        cmpy_raise(st, err);
        exc = cmpy_exc_take();
        if (PyErr_WarnFormat(st->CudaWarning, 1,
                             "cudamem could not free a resource: %S",
                             exc) < 0) {
            PyErr_WriteUnraisable(exc);
        }
        Py_XDECREF(exc);
    }
    cmpy_exc_put(saved);
}
