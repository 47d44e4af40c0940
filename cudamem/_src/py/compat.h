/* compat.h: one code path for the full C API and the limited one
 * (setup.py's CUDAMEM_LIMITED_API=1 builds with Py_LIMITED_API=0x030B0000,
 * one abi3 module for CPython 3.11 on; 3.11 is the oldest limited API with
 * the buffer protocol). Each helper is the macro or field read of the full
 * API in the normal build, so that build's code is what it was, and the
 * limited API's function call in the abi3 one. Included by module.h only,
 * after Python.h. */
#ifndef CMPY_COMPAT_H
#define CMPY_COMPAT_H

/* Python.h includes these only outside the limited API. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The API compiled against: the running Python's, or the oldest the abi3
 * module runs on; every version test in py/ reads it. */
#ifdef Py_LIMITED_API
#define CMPY_API_HEX Py_LIMITED_API
#else
#define CMPY_API_HEX PY_VERSION_HEX
#endif

#ifdef Py_LIMITED_API
#include <dlfcn.h>

/* The full API's casting forms, which 3.11's limited headers drop (their
 * inline functions take a PyObject * only): callers pass their object
 * structs as they do in the normal build. */
#ifndef Py_SIZE
#define Py_SIZE(ob) Py_SIZE((PyObject *)(ob))
#endif
#ifndef Py_TYPE
#define Py_TYPE(ob) Py_TYPE((PyObject *)(ob))
#endif
#ifndef Py_REFCNT
#define Py_REFCNT(ob) Py_REFCNT((PyObject *)(ob))
#endif
#ifndef Py_IS_TYPE
#define Py_IS_TYPE(ob, type) Py_IS_TYPE((PyObject *)(ob), (type))
#endif
#ifndef Py_INCREF
#define Py_INCREF(ob) Py_INCREF((PyObject *)(ob))
#endif
#ifndef Py_XINCREF
#define Py_XINCREF(ob) Py_XINCREF((PyObject *)(ob))
#endif
#ifndef Py_XDECREF
#define Py_XDECREF(ob) Py_XDECREF((PyObject *)(ob))
#endif
#ifndef PyObject_TypeCheck
#define PyObject_TypeCheck(ob, type)                                          \
    PyObject_TypeCheck((PyObject *)(ob), (type))
#endif
/* 3.11's limited Py_NewRef and Py_XNewRef are macros without the cast. */
static inline PyObject *
cmpy_new_ref(PyObject *ob)
{
    Py_INCREF(ob);
    return ob;
}

static inline PyObject *
cmpy_xnew_ref(PyObject *ob)
{
    Py_XINCREF(ob);
    return ob;
}

#undef Py_NewRef
#undef Py_XNewRef
#define Py_NewRef(ob) cmpy_new_ref((PyObject *)(ob))
#define Py_XNewRef(ob) cmpy_xnew_ref((PyObject *)(ob))

/* Object.h's full-API macros, as CPython defines them. */
#ifndef Py_SETREF
#define Py_SETREF(dst, src)                                                   \
    do {                                                                      \
        PyObject **cmpy_dst_ = (PyObject **)&(dst);                           \
        PyObject *cmpy_tmp_ = *cmpy_dst_;                                     \
        *cmpy_dst_ = (PyObject *)(src);                                       \
        Py_DECREF(cmpy_tmp_);                                                 \
    } while (0)
#define Py_XSETREF(dst, src)                                                  \
    do {                                                                      \
        PyObject **cmpy_dst_ = (PyObject **)&(dst);                           \
        PyObject *cmpy_tmp_ = *cmpy_dst_;                                     \
        *cmpy_dst_ = (PyObject *)(src);                                       \
        Py_XDECREF(cmpy_tmp_);                                                \
    } while (0)
#endif
#endif /* Py_LIMITED_API */

/* Item i of a tuple or a list, borrowed, i in range; its size. */
static inline PyObject *
cmpy_tuple_item(PyObject *tuple, Py_ssize_t i)
{
#ifdef Py_LIMITED_API
    return PyTuple_GetItem(tuple, i);
#else
    return PyTuple_GET_ITEM(tuple, i);
#endif
}

static inline Py_ssize_t
cmpy_tuple_size(PyObject *tuple)
{
#ifdef Py_LIMITED_API
    return PyTuple_Size(tuple);
#else
    return PyTuple_GET_SIZE(tuple);
#endif
}

/* Fills slot i of a new tuple (stealing `item`), as PyTuple_SET_ITEM. */
static inline void
cmpy_tuple_set(PyObject *tuple, Py_ssize_t i, PyObject *item)
{
#ifdef Py_LIMITED_API
    (void)PyTuple_SetItem(tuple, i, item);
#else
    PyTuple_SET_ITEM(tuple, i, item);
#endif
}

static inline PyObject *
cmpy_list_item(PyObject *list, Py_ssize_t i)
{
#ifdef Py_LIMITED_API
    return PyList_GetItem(list, i);
#else
    return PyList_GET_ITEM(list, i);
#endif
}

static inline Py_ssize_t
cmpy_list_size(PyObject *list)
{
#ifdef Py_LIMITED_API
    return PyList_Size(list);
#else
    return PyList_GET_SIZE(list);
#endif
}

/* Fills slot i of a new list (stealing `item`), as PyList_SET_ITEM. */
static inline void
cmpy_list_set(PyObject *list, Py_ssize_t i, PyObject *item)
{
#ifdef Py_LIMITED_API
    (void)PyList_SetItem(list, i, item);
#else
    PyList_SET_ITEM(list, i, item);
#endif
}

/* Item i and size of PySequence_Fast's result (a list or a tuple). */
static inline PyObject *
cmpy_fast_item(PyObject *seq, Py_ssize_t i)
{
#ifdef Py_LIMITED_API
    return PyList_Check(seq) ? PyList_GetItem(seq, i)
                             : PyTuple_GetItem(seq, i);
#else
    return PySequence_Fast_GET_ITEM(seq, i);
#endif
}

static inline Py_ssize_t
cmpy_fast_size(PyObject *seq)
{
#ifdef Py_LIMITED_API
    return PySequence_Size(seq);
#else
    return PySequence_Fast_GET_SIZE(seq);
#endif
}

/* The slots of a type that py/ reads. */
static inline freefunc
cmpy_tp_free(PyTypeObject *type)
{
#ifdef Py_LIMITED_API
    return (freefunc)PyType_GetSlot(type, Py_tp_free);
#else
    return type->tp_free;
#endif
}

static inline allocfunc
cmpy_tp_alloc(PyTypeObject *type)
{
#ifdef Py_LIMITED_API
    return (allocfunc)PyType_GetSlot(type, Py_tp_alloc);
#else
    return type->tp_alloc;
#endif
}

static inline PyTypeObject *
cmpy_tp_base(PyTypeObject *type)
{
#ifdef Py_LIMITED_API
    return (PyTypeObject *)PyType_GetSlot(type, Py_tp_base);
#else
    return type->tp_base;
#endif
}

/* The module of a heap type (borrowed; NULL, no exception, where it has
 * none: a Python class). */
static inline PyObject *
cmpy_heap_type_module(PyTypeObject *type)
{
#ifdef Py_LIMITED_API
    PyObject *module = PyType_GetModule(type);

    if (module == NULL) {
        PyErr_Clear();
    }
    return module;
#else
    return ((PyHeapTypeObject *)type)->ht_module;
#endif
}

/* The type's tp_name, for messages (valid until this thread's next call).
 * The limited API has no tp_name: there it is rebuilt as CPython makes it,
 * __module__.__qualname__ for a static type (__qualname__ for a builtin)
 * and for cudamem's own types, __name__ for another heap type; which
 * differs from tp_name only for a heap type another extension made from a
 * dotted spec name (its bare name). */
#ifdef Py_LIMITED_API
const char *cmpy_tp_name(PyTypeObject *type);
#else
static inline const char *
cmpy_tp_name(PyTypeObject *type)
{
    return type->tp_name;
}
#endif

/* A slot of a type: the field in the normal build, PyType_GetSlot's
 * answer (of C type ftype) in the limited one. */
#ifdef Py_LIMITED_API
#define CMPY_SLOT(type, ftype, id, field) ((ftype)PyType_GetSlot((type), (id)))
#else
#define CMPY_SLOT(type, ftype, id, field) ((type)->field)
#endif

/* The size of a type's instances (__basicsize__), or -1 with an
 * exception. */
static inline Py_ssize_t
cmpy_tp_basicsize(PyTypeObject *type)
{
#ifdef Py_LIMITED_API
    PyObject *size = PyObject_GetAttrString((PyObject *)type, "__basicsize__");
    Py_ssize_t out = size != NULL ? PyLong_AsSsize_t(size) : -1;

    Py_XDECREF(size);
    return out;
#else
    return type->tp_basicsize;
#endif
}

/* Bytes' size and data (a bytes object's, unchecked in the normal
 * build). */
static inline Py_ssize_t
cmpy_bytes_size(PyObject *bytes)
{
#ifdef Py_LIMITED_API
    return PyBytes_Size(bytes);
#else
    return PyBytes_GET_SIZE(bytes);
#endif
}

static inline const char *
cmpy_bytes_data(PyObject *bytes)
{
#ifdef Py_LIMITED_API
    return PyBytes_AsString(bytes);
#else
    return PyBytes_AS_STRING(bytes);
#endif
}

/* Memory that may be freed without the GIL: PyMem_Raw's domain (which
 * tracemalloc sees), plain calloc in the limited API, which lacks it. */
static inline void *
cmpy_raw_calloc(size_t n, size_t size)
{
#ifdef Py_LIMITED_API
    return calloc(n, size);
#else
    return PyMem_RawCalloc(n, size);
#endif
}

static inline void
cmpy_raw_free(void *p)
{
#ifdef Py_LIMITED_API
    free(p);
#else
    PyMem_RawFree(p);
#endif
}

/* Borrowed UTF-8 of a str, or NULL with an exception. */
static inline const char *
cmpy_utf8(PyObject *str)
{
#ifdef Py_LIMITED_API
    return PyUnicode_AsUTF8AndSize(str, NULL);
#else
    return PyUnicode_AsUTF8(str);
#endif
}

/* func(arg), func(*args) without a tuple where the API allows. */
static inline PyObject *
cmpy_call_one(PyObject *func, PyObject *arg)
{
#ifdef Py_LIMITED_API
    return PyObject_CallFunctionObjArgs(func, arg, NULL);
#else
    return PyObject_CallOneArg(func, arg);
#endif
}

#ifdef Py_LIMITED_API
/* PyObject_Vectorcall is in the limited API from 3.12. */
PyObject *cmpy_vectorcall(PyObject *func, PyObject *const *args, size_t nargsf,
                          PyObject *kwnames);
#else
static inline PyObject *
cmpy_vectorcall(PyObject *func, PyObject *const *args, size_t nargsf,
                PyObject *kwnames)
{
    return PyObject_Vectorcall(func, args, nargsf, kwnames);
}
#endif

/* Whether the interpreter is shutting down. The limited API of 3.11 has no
 * such call: there the running interpreter's own function is looked up
 * (3.13's Py_IsFinalizing, _Py_IsFinalizing before), never linked to. */
static inline int
cmpy_is_finalizing(void)
{
#if defined(Py_LIMITED_API)
    int (*fn)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "Py_IsFinalizing");

    if (fn == NULL) {
        fn = (int (*)(void))dlsym(RTLD_DEFAULT, "_Py_IsFinalizing");
    }
    return fn != NULL && fn();
#elif CMPY_API_HEX >= 0x030D0000
    return Py_IsFinalizing();
#else
    return _Py_IsFinalizing();
#endif
}

#endif /* CMPY_COMPAT_H */
