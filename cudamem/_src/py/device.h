/* device.h (py/): the Device and Context objects shared by py/device.c and
 * py/context.c. Core state (retains, generations) stays in core/context.c;
 * these objects only point at it. */
#ifndef CMPY_DEVICE_H
#define CMPY_DEVICE_H

#include "module.h"

#include <stdint.h>

#include "../core/context.h"

typedef struct cmpy_Device {
    PyObject_HEAD
    cm_device *dev;
    PyObject *name; /* str */
    PyObject *uuid; /* str, "GPU-..." */
    int cc_major, cc_minor;
    PyObject *context; /* the Context last handed out, or NULL */
} cmpy_Device;

/* Who allocates a context's memory: exported as _cudamem.MANAGER_NATIVE
 * and MANAGER_PLUGIN, which cudamem.memory._manager_mode returns. */
typedef enum cmpy_manager_mode {
    CMPY_MANAGER_NATIVE = 0, /* cudamem's allocator, no Python call */
    CMPY_MANAGER_PLUGIN = 1  /* an EMM plugin: its methods are called */
} cmpy_manager_mode;

typedef struct cmpy_Context {
    PyObject_HEAD
    cmpy_Device *device;
    CUcontext handle;
    uint64_t generation;      /* the device's when this object was made */
    PyObject *memory_manager; /* made on first use, or NULL */
    cmpy_manager_mode manager_mode; /* of memory_manager */
    PyObject *weakreflist;          /* plugins hold weakref.proxy(context) */
    PyObject *allocations;          /* numba's Context.allocations, or NULL */
    PyObject *deallocations; /* assigned to ctx.deallocations, or NULL */
} cmpy_Context;

/* Every visible device's object, made on first use (loads the driver);
 * borrowed tuple, or NULL with an exception set. */
PyObject *cmpy_devices(cmpy_state *st);
/* A Device, or an int ordinal naming one (TypeError / ValueError naming
 * the value otherwise). Borrowed reference. */
int cmpy_device_parse(cmpy_state *st, PyObject *arg, cmpy_Device **out);
/* The core device a `device=` argument names, as cmpy_device_parse; None
 * (or a missing argument, NULL) is the calling thread's device when
 * `none_is_current`, else refused as any other non-device. */
int cmpy_device_arg(cmpy_state *st, PyObject *arg, int none_is_current,
                    cm_device **out);
/* A module function `fname(device, enabled)` that switches something of
 * a device on or off: parses its arguments, then calls `set` with the GIL
 * released. None, or NULL with an exception set. */
PyObject *cmpy_device_switch(PyObject *module, const char *fname,
                             PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames,
                             int (*set)(cm_device *, int, cm_error *));
/* The calling thread's device (DESIGN rule 6), loading the driver; 0, or
 * -1 with an exception set. */
int cmpy_current_device(cmpy_state *st, cm_device **dev);
/* The same, entering its context for an operation (cm_ctx_enter_current:
 * one question to the driver for both); the operation's own enters of
 * that device inside ask nothing. Run no Python code that may change the
 * current context in between. cmpy_ctx_leave leaves it and returns
 * `status`, or -1 with an exception set when the leave failed. */
int cmpy_current_enter(cmpy_state *st, cm_device **dev, cm_ctx_guard *guard);
int cmpy_ctx_leave(cmpy_state *st, cm_ctx_guard *guard, int status);
/* The Device object of a core device; borrowed. */
cmpy_Device *cmpy_device_of(cmpy_state *st, cm_device *dev);
/* fn(dev, err), without the GIL, for every device in ordinal order,
 * until one fails: 0, or -1 with that error raised. Nothing before the
 * driver is loaded. */
int cmpy_each_device(cmpy_state *st, int (*fn)(cm_device *, cm_error *));

/* The device's primary context as a Context: the same object while the
 * device's generation is unchanged. New reference. */
PyObject *cmpy_context_of(cmpy_state *st, cmpy_Device *device);
/* emm.c: Context.memory_manager (get and assign), the context's manager
 * when it is an EMM plugin (new reference; NULL without an exception
 * when cudamem allocates for it, with one on failure), and
 * Context._set_memory_manager(manager, mode). */
PyObject *cmpy_context_get_memory_manager(cmpy_Context *self, void *closure);
int cmpy_context_assign_memory_manager(cmpy_Context *self, PyObject *value,
                                       void *closure);
PyObject *cmpy_context_plugin(cmpy_Context *self, cmpy_state *st);
PyObject *cmpy_context_set_memory_manager(PyObject *self,
                                          PyObject *const *args,
                                          Py_ssize_t nargs, PyObject *kwnames);
extern const char cmpy_context_set_memory_manager_doc[];
/* 0 while ctx is still its device's context, else -1 with the
 * CudaDriverError saying it was reset or closed. */
int cmpy_context_check(cmpy_state *st, cmpy_Context *ctx);
int cmpy_context_type_init(PyObject *module, cmpy_state *st);

#endif
