/* compat.c: the limited-API forms of compat.h's helpers too long to
 * inline; empty in the normal build. */
#include "module.h"

#ifdef Py_LIMITED_API
/* Long enough for any tp_name cudamem's messages print (%.200s). */
#define CMPY_TP_NAME_MAX 256

const char *
cmpy_tp_name(PyTypeObject *type)
{
    static _Thread_local char buf[CMPY_TP_NAME_MAX];
    PyObject *exc = cmpy_exc_take(), *module = NULL, *name = NULL;
    const char *utf8;

    if (PyType_HasFeature(type, Py_TPFLAGS_HEAPTYPE) &&
        cmpy_own_module(type) == NULL) {
        name = PyType_GetName(type);
    }
    else if ((module = PyObject_GetAttrString((PyObject *)type,
                                              "__module__")) != NULL &&
             (name = PyType_GetQualName(type)) != NULL &&
             PyUnicode_Check(module) &&
             PyUnicode_CompareWithASCIIString(module, "builtins") != 0) {
        Py_SETREF(name, PyUnicode_FromFormat("%U.%U", module, name));
    }
    utf8 = name != NULL ? PyUnicode_AsUTF8AndSize(name, NULL) : NULL;
    snprintf(buf, sizeof(buf), "%s", utf8 != NULL ? utf8 : "?");
    Py_XDECREF(name);
    Py_XDECREF(module);
    PyErr_Clear();
    cmpy_exc_put(exc);
    return buf;
}

PyObject *
cmpy_vectorcall(PyObject *func, PyObject *const *args, size_t nargsf,
                PyObject *kwnames)
{
    /* py/ never sets PY_VECTORCALL_ARGUMENTS_OFFSET (3.12's limited API) */
    Py_ssize_t nargs = (Py_ssize_t)nargsf;
    Py_ssize_t nkw = kwnames != NULL ? PyTuple_Size(kwnames) : 0;
    PyObject *tuple = PyTuple_New(nargs), *kwargs = NULL, *out = NULL;

    if (tuple == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < nargs; i++) {
        PyTuple_SetItem(tuple, i, Py_NewRef(args[i]));
    }
    if (nkw > 0 && (kwargs = PyDict_New()) == NULL) {
        goto done;
    }
    for (Py_ssize_t i = 0; i < nkw; i++) {
        if (PyDict_SetItem(kwargs, PyTuple_GetItem(kwnames, i),
                           args[nargs + i]) < 0) {
            goto done;
        }
    }
    out = PyObject_Call(func, tuple, kwargs);
done:
    Py_XDECREF(kwargs);
    Py_DECREF(tuple);
    return out;
}
#endif
