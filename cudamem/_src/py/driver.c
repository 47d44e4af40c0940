/* driver.c (py/): the Python face of the driver gate: loading, version,
 * which library, device enumeration and the table's rows. Device and
 * context objects are not here. */
#include "module.h"

#include "../core/device.h"
#include "../core/driver.h"
#include "device.h"

int
cmpy_ensure_driver(cmpy_state *st)
{
    PyObject *hook, *done;
    cm_error err;

    if (cm_driver_ready()) {
        return cm_fork_check(&err) < 0 ? (cmpy_raise(st, &err), -1) : 0;
    }
    if (cm_driver_load(st->sim_path, &err) < 0) {
        cmpy_raise(st, &err);
        return -1;
    }
    /* The driver loads once per process: the package's lazy names are
     * bound now, at the first use, rather than looked up ever after. An
     * extension loaded without its package has nothing to complete. */
    hook = st->hooks[CMPY_HOOK_COMPLETE];
    if (hook != NULL) {
        done = PyObject_CallNoArgs(hook);
        if (done == NULL) {
            return -1;
        }
        Py_DECREF(done);
    }
    return 0;
}

PyDoc_STRVAR(is_available_doc,
             "is_available($module)\n--\n\n"
             "True when a CUDA driver loads, initializes and has at least\n"
             "one device. Loads the driver on first use; never raises.");

static PyObject *
is_available(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    cmpy_state *st = cmpy_get_state(module);
    cm_error err;
    int count = 0;

    if (cmpy_ensure_driver(st) < 0) {
        PyErr_Clear();
        Py_RETURN_FALSE;
    }
    if (cm_device_count(&count, &err) < 0) {
        Py_RETURN_FALSE;
    }
    return PyBool_FromLong(count > 0);
}

PyDoc_STRVAR(driver_info_doc,
             "driver_info($module)\n--\n\n"
             "The loaded driver: 'path', 'version' (e.g. 12040 for 12.4),\n"
             "'simulator' and 'per_thread_default_stream'. Loads the driver;\n"
             "raises CudaSupportError when it cannot be used.");

static PyObject *
driver_info(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    if (cmpy_ensure_driver(cmpy_get_state(module)) < 0) {
        return NULL;
    }
    return Py_BuildValue("{s:s,s:i,s:O,s:O}", "path", cm_driver_path(),
                         "version", cm_driver_version(), "simulator",
                         cm_driver_is_simulator() ? Py_True : Py_False,
                         "per_thread_default_stream",
                         cm_driver_ptds() ? Py_True : Py_False);
}

PyDoc_STRVAR(device_count_doc,
             "device_count($module)\n--\n\n"
             "Number of visible CUDA devices. Loads the driver.");

static PyObject *
device_count(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    cmpy_state *st = cmpy_get_state(module);
    cm_error err;
    int count;

    if (cmpy_ensure_driver(st) < 0) {
        return NULL;
    }
    if (cm_device_count(&count, &err) < 0) {
        return cmpy_raise(st, &err);
    }
    return PyLong_FromLong(count);
}

/* A device argument (an int ordinal or a Device), as everywhere else. */
static int
checked_ordinal(cmpy_state *st, PyObject *arg, int *ordinal)
{
    cmpy_Device *device;

    if (cmpy_device_parse(st, arg, &device) < 0) {
        return -1;
    }
    *ordinal = device->dev->ordinal;
    return 0;
}

PyDoc_STRVAR(device_info_doc,
             "device_info($module, ordinal)\n--\n\n"
             "Identity of one device: 'id', 'name', 'compute_capability',\n"
             "'total_memory', 'uuid' and 'pci_bus_id'. Loads the driver.");

static PyObject *
device_info(PyObject *module, PyObject *arg)
{
    cmpy_state *st = cmpy_get_state(module);
    cm_device_info info;
    cm_error err;
    int ordinal;

    if (checked_ordinal(st, arg, &ordinal) < 0) {
        return NULL;
    }
    if (cm_device_info_get(ordinal, &info, &err) < 0) {
        return cmpy_raise(st, &err);
    }
    return Py_BuildValue("{s:i,s:s,s:(ii),s:K,s:s,s:s}", "id", ordinal, "name",
                         info.name, "compute_capability", info.cc_major,
                         info.cc_minor, "total_memory", info.total_memory,
                         "uuid", info.uuid, "pci_bus_id", info.pci_bus_id);
}

PyDoc_STRVAR(device_attribute_doc,
             "device_attribute($module, ordinal, attribute)\n--\n\n"
             "The value of one CU_DEVICE_ATTRIBUTE_* (by number) of a "
             "device.");

static PyObject *
device_attribute(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    cmpy_state *st = cmpy_get_state(module);
    cm_error err;
    int ordinal, value;
    long attribute;

    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError,
                     "device_attribute() takes 2 arguments (%zd given)",
                     nargs);
        return NULL;
    }
    if (checked_ordinal(st, args[0], &ordinal) < 0) {
        return NULL;
    }
    attribute = PyLong_AsLong(args[1]);
    if (attribute == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (attribute < 0 || attribute > INT_MAX) {
        PyErr_Format(PyExc_ValueError, "invalid device attribute %ld",
                     attribute);
        return NULL;
    }
    if (cm_device_attribute(ordinal, (int)attribute, &value, &err) < 0) {
        return cmpy_raise(st, &err);
    }
    return PyLong_FromLong(value);
}

PyDoc_STRVAR(driver_rows_doc,
             "_driver_rows($module)\n--\n\n"
             "The driver table: (name, ABI version, required, has a\n"
             "per-thread variant, resolved). For tests and diagnostics;\n"
             "does not load the driver.");

static PyObject *
driver_rows(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(ignored))
{
    PyObject *list = PyList_New(0);
    const char *name;
    int version, flags, present;

    if (list == NULL) {
        return NULL;
    }
    for (size_t i = 0; !cm_driver_row(i, &name, &version, &flags, &present);
         i++) {
        PyObject *row = Py_BuildValue(
            "(siOOO)", name, version,
            (flags & CM_ROW_REQUIRED) ? Py_True : Py_False,
            (flags & CM_ROW_PTDS) ? Py_True : Py_False,
            present ? Py_True : Py_False);
        if (row == NULL || PyList_Append(list, row) < 0) {
            Py_XDECREF(row);
            Py_DECREF(list);
            return NULL;
        }
        Py_DECREF(row);
    }
    return list;
}

PyDoc_STRVAR(error_names_doc,
             "_error_names($module)\n--\n\n"
             "Every CUresult code cudamem knows, with its name.");

static PyObject *
error_names(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(ignored))
{
    PyObject *list = PyList_New(0);
    CUresult code;
    const char *name;

    if (list == NULL) {
        return NULL;
    }
    for (size_t i = 0; !cm_error_table(i, &code, &name); i++) {
        PyObject *row = Py_BuildValue("(is)", (int)code, name);
        if (row == NULL || PyList_Append(list, row) < 0) {
            Py_XDECREF(row);
            Py_DECREF(list);
            return NULL;
        }
        Py_DECREF(row);
    }
    return list;
}

PyMethodDef cmpy_driver_methods[] = {
    {"_error_names", error_names, METH_NOARGS, error_names_doc},
    {"is_available", is_available, METH_NOARGS, is_available_doc},
    {"driver_info", driver_info, METH_NOARGS, driver_info_doc},
    {"device_count", device_count, METH_NOARGS, device_count_doc},
    {"device_info", device_info, METH_O, device_info_doc},
    {"device_attribute", (PyCFunction)(void (*)(void))device_attribute,
     METH_FASTCALL, device_attribute_doc},
    {"_driver_rows", driver_rows, METH_NOARGS, driver_rows_doc},
    {NULL, NULL, 0, NULL},
};
