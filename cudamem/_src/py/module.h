/* module.h: the extension's module state and the helpers every py/ file
 * shares. Owns no driver object. */
#ifndef CMPY_MODULE_H
#define CMPY_MODULE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "../core/status.h"

typedef struct cmpy_state {
    PyObject *CudaSupportError;
    PyObject *CudaDriverError;
    PyObject *CudaAPIError;
    PyObject *CudaOutOfMemoryError;
    PyObject *CudaStickyError;
    PyObject *CudaWarning;
    PyObject *DeviceType;  /* py/device.c */
    PyObject *ContextType; /* py/device.c */
    PyObject *devices;     /* tuple of Device, made on first use, or NULL */
    PyObject *attr_ids;    /* {"WARP_SIZE": 10, ...}: every attribute */
    PyObject *MemoryInfo;  /* cudamem.devices.MemoryInfo, loaded lazily */
    char *sim_path; /* the bundled simulator, next to this module's file */
} cmpy_state;

static inline cmpy_state *
cmpy_get_state(PyObject *module)
{
    return (cmpy_state *)PyModule_GetState(module);
}

/* Sets the Python exception for a core failure; returns NULL. */
PyObject *cmpy_raise(cmpy_state *st, const cm_error *err);
/* Loads the driver (once per process); 0, or -1 with an exception set. */
int cmpy_ensure_driver(cmpy_state *st);

/* Method tables of the other py/ files, merged by module.c. */
extern PyMethodDef cmpy_driver_methods[];
extern PyMethodDef cmpy_device_methods[];

/* py/device.c: creates the Device and Context types and the attribute
 * table in the module state; 0, or -1 with an exception set. */
int cmpy_device_types_init(PyObject *module, cmpy_state *st);

#endif
