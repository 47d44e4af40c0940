/* device.c (py/): the Device type (identity, every CU_DEVICE_ATTRIBUTE_* by
 * name, reset) and the module's device functions (select_device, close,
 * synchronize, profiler, peer access, require_context's attachment,
 * pointer ranges). The Context type is py/context.c. */
#include "device.h"

#include <limits.h>

#include "../core/ctxsync.h"
#include "../core/cuattrs.h"
#include "../core/device.h"
#include "../core/driver.h"
#include "../core/memory.h"
#include "html.h"
#include "stream.h"

PyObject *
cmpy_devices(cmpy_state *st)
{
    PyObject *tuple;
    cm_error err;
    int count;

    if (st->devices != NULL) {
        /* Made before a fork: the child must still get the fork error. */
        return cm_fork_check(&err) < 0 ? cmpy_raise(st, &err) : st->devices;
    }
    if (cmpy_ensure_driver(st) < 0) {
        return NULL;
    }
    if (cm_devices_count(&count, &err) < 0) {
        return cmpy_raise(st, &err);
    }
    tuple = PyTuple_New(count);
    if (tuple == NULL) {
        return NULL;
    }
    for (int i = 0; i < count; i++) {
        cm_device_info info;
        cmpy_Device *obj;
        cm_device *dev;

        if (cm_device_get(i, &dev, &err) < 0 ||
            cm_device_info_get(i, &info, &err) < 0) {
            cmpy_raise(st, &err);
            goto error;
        }
        obj = PyObject_GC_New(cmpy_Device, (PyTypeObject *)st->DeviceType);
        if (obj == NULL) {
            goto error;
        }
        obj->dev = dev;
        obj->cc_major = info.cc_major;
        obj->cc_minor = info.cc_minor;
        obj->context = NULL;
        obj->name = PyUnicode_DecodeUTF8(
            info.name, (Py_ssize_t)strlen(info.name), "replace");
        obj->uuid = PyUnicode_FromString(info.uuid);
        PyTuple_SET_ITEM(tuple, i, (PyObject *)obj);
        PyObject_GC_Track(obj);
        if (obj->name == NULL || obj->uuid == NULL) {
            goto error;
        }
    }
    st->devices = tuple;
    return tuple;
error:
    Py_DECREF(tuple);
    return NULL;
}

cmpy_Device *
cmpy_device_of(cmpy_state *st, cm_device *dev)
{
    PyObject *devices = cmpy_devices(st);

    if (devices == NULL) {
        return NULL;
    }
    return (cmpy_Device *)PyTuple_GET_ITEM(devices, dev->ordinal);
}

int
cmpy_each_device(cmpy_state *st, int (*fn)(cm_device *, cm_error *))
{
    cm_device *dev;
    cm_error err;
    int count;

    if (!cm_driver_ready()) {
        return 0;
    }
    if (cm_devices_count(&count, &err) < 0) {
        cmpy_raise(st, &err);
        return -1;
    }
    for (int i = 0; i < count; i++) {
        int rc;

        if (cm_device_get(i, &dev, &err) < 0) {
            cmpy_raise(st, &err);
            return -1;
        }
        Py_BEGIN_ALLOW_THREADS
        rc = fn(dev, &err);
        CMPY_END_ALLOW_THREADS
        if (rc < 0) {
            cmpy_raise(st, &err);
            return -1;
        }
    }
    return 0;
}

int
cmpy_device_arg(cmpy_state *st, PyObject *arg, int none_is_current,
                cm_device **out)
{
    cmpy_Device *device;

    if (none_is_current && (arg == NULL || arg == Py_None)) {
        return cmpy_current_device(st, out);
    }
    if (cmpy_device_parse(st, arg, &device) < 0) {
        return -1;
    }
    *out = device->dev;
    return 0;
}

PyObject *
cmpy_device_switch(PyObject *module, const char *fname, PyObject *const *args,
                   Py_ssize_t nargs, PyObject *kwnames,
                   int (*set)(cm_device *, int, cm_error *))
{
    static const char *const names[] = {"device", "enabled"};
    cmpy_state *st = cmpy_get_state(module);
    PyObject *argv[2];
    cm_device *dev;
    cm_error err;
    int enabled, rc;

    if (cmpy_parse_args(fname, names, 2, 2, args, nargs, kwnames, argv) < 0 ||
        cmpy_device_arg(st, argv[0], 0, &dev) < 0) {
        return NULL;
    }
    enabled = PyObject_IsTrue(argv[1]);
    if (enabled < 0) {
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    rc = set(dev, enabled, &err);
    CMPY_END_ALLOW_THREADS
    if (rc < 0) {
        return cmpy_raise(st, &err);
    }
    Py_RETURN_NONE;
}

int
cmpy_device_parse(cmpy_state *st, PyObject *arg, cmpy_Device **out)
{
    PyObject *devices, *index;
    long value;
    int overflow;

    if (Py_IS_TYPE(arg, (PyTypeObject *)st->DeviceType)) {
        *out = (cmpy_Device *)arg;
        return 0;
    }
    if (PyBool_Check(arg) || !PyIndex_Check(arg)) {
        PyErr_Format(PyExc_TypeError,
                     "device must be an int ordinal or a Device, not "
                     "%.200s",
                     Py_TYPE(arg)->tp_name);
        return -1;
    }
    index = PyNumber_Index(arg);
    if (index == NULL) {
        return -1;
    }
    value = PyLong_AsLongAndOverflow(index, &overflow);
    if (value == -1 && PyErr_Occurred()) {
        Py_DECREF(index);
        return -1;
    }
    devices = cmpy_devices(st);
    if (devices == NULL) {
        Py_DECREF(index);
        return -1;
    }
    if (overflow || value < 0 || value >= PyTuple_GET_SIZE(devices)) {
        Py_ssize_t n = PyTuple_GET_SIZE(devices);
        PyErr_Format(PyExc_ValueError,
                     "device ordinal %R out of range: %zd device%s visible",
                     index, n, n == 1 ? "" : "s");
        Py_DECREF(index);
        return -1;
    }
    Py_DECREF(index);
    *out = (cmpy_Device *)PyTuple_GET_ITEM(devices, value);
    return 0;
}

/* ------------------------------------------------------------------------
 * The Device type. */

static int
device_traverse(cmpy_Device *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->context);
    return 0;
}

static int
device_clear(cmpy_Device *self)
{
    Py_CLEAR(self->context);
    Py_CLEAR(self->name);
    Py_CLEAR(self->uuid);
    return 0;
}

static void
device_dealloc(cmpy_Device *self)
{
    PyTypeObject *type = Py_TYPE(self);

    PyObject_GC_UnTrack(self);
    device_clear(self);
    type->tp_free(self);
    Py_DECREF(type);
}

static PyObject *
device_repr(cmpy_Device *self)
{
    return PyUnicode_FromFormat("<CUDA device %d '%U'>", self->dev->ordinal,
                                self->name);
}

static Py_hash_t
device_hash(cmpy_Device *self)
{
    return self->dev->ordinal; /* never -1 */
}

static PyObject *
device_richcompare(PyObject *self, PyObject *other, int op)
{
    int equal;

    if ((op != Py_EQ && op != Py_NE) || !Py_IS_TYPE(other, Py_TYPE(self))) {
        Py_RETURN_NOTIMPLEMENTED;
    }
    equal = ((cmpy_Device *)self)->dev == ((cmpy_Device *)other)->dev;
    return PyBool_FromLong(op == Py_EQ ? equal : !equal);
}

/* Any CU_DEVICE_ATTRIBUTE_* by its name without the prefix, as numba's
 * Device.__getattr__ does. */
/* The attributes read by name are the device's facts: setting one says so
 * rather than that it does not exist. */
static int
device_setattro(PyObject *self, PyObject *name, PyObject *value)
{
    cmpy_state *st = cmpy_type_state(self);
    int known = PyUnicode_Check(name) && st->attr_ids != NULL &&
                PyDict_Contains(st->attr_ids, name) == 1;

    if (known) {
        PyErr_Format(PyExc_AttributeError, "device attribute %R is read-only",
                     name);
        return -1;
    }
    return PyObject_GenericSetAttr(self, name, value);
}

static PyObject *
device_getattro(PyObject *self, PyObject *name)
{
    PyObject *res = PyObject_GenericGetAttr(self, name);
    PyObject *type, *value, *tb, *id;
    cmpy_state *st;
    cm_error err;
    int result;

    if (res != NULL || !PyErr_ExceptionMatches(PyExc_AttributeError)) {
        return res;
    }
    st = cmpy_type_state(self);
    PyErr_Fetch(&type, &value, &tb);
    id = PyDict_GetItemWithError(st->attr_ids, name);
    if (id == NULL) {
        if (PyErr_Occurred()) {
            Py_XDECREF(type);
            Py_XDECREF(value);
            Py_XDECREF(tb);
        }
        else {
            PyErr_Restore(type, value, tb);
        }
        return NULL;
    }
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    if (cm_device_attribute(((cmpy_Device *)self)->dev->ordinal,
                            (int)PyLong_AsLong(id), &result, &err) < 0) {
        return cmpy_raise(st, &err);
    }
    return PyLong_FromLong(result);
}

static PyObject *
device_get_id(cmpy_Device *self, void *Py_UNUSED(closure))
{
    return PyLong_FromLong(self->dev->ordinal);
}

static PyObject *
device_get_name(cmpy_Device *self, void *Py_UNUSED(closure))
{
    return Py_NewRef(self->name);
}

static PyObject *
device_get_uuid(cmpy_Device *self, void *Py_UNUSED(closure))
{
    return Py_NewRef(self->uuid);
}

static PyObject *
device_get_cc(cmpy_Device *self, void *Py_UNUSED(closure))
{
    return Py_BuildValue("(ii)", self->cc_major, self->cc_minor);
}

/* Capabilities numba derives from the compute capability. */
static PyObject *
cc_at_least(cmpy_Device *self, int major, int minor)
{
    return PyBool_FromLong(
        self->cc_major > major ||
        (self->cc_major == major && self->cc_minor >= minor));
}

static PyObject *
device_get_fp16(cmpy_Device *self, void *Py_UNUSED(closure))
{
    return cc_at_least(self, 5, 3);
}

static PyObject *
device_get_bf16(cmpy_Device *self, void *Py_UNUSED(closure))
{
    return cc_at_least(self, 8, 0);
}

static PyObject *
device_get_fp8(cmpy_Device *self, void *Py_UNUSED(closure))
{
    return cc_at_least(self, 8, 9);
}

static PyGetSetDef device_getset[] = {
    {"id", (getter)device_get_id, NULL, "The device's ordinal (int).", NULL},
    {"name", (getter)device_get_name, NULL, "The device's name (str).", NULL},
    {"uuid", (getter)device_get_uuid, NULL,
     "The device's UUID as nvidia-smi prints it: 'GPU-xxxxxxxx-...'.", NULL},
    {"compute_capability", (getter)device_get_cc, NULL,
     "(major, minor) compute capability.", NULL},
    {"supports_float16", (getter)device_get_fp16, NULL,
     "True from compute capability 5.3.", NULL},
    {"supports_bfloat16", (getter)device_get_bf16, NULL,
     "True from compute capability 8.0.", NULL},
    {"accelerates_fp8", (getter)device_get_fp8, NULL,
     "True from compute capability 8.9.", NULL},
    {"supports_fp8", (getter)device_get_fp8, NULL,
     "True from compute capability 8.9 (numba's name of accelerates_fp8).",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyDoc_STRVAR(device_get_primary_context_doc,
             "get_primary_context($self)\n--\n\n"
             "The device's primary context, retained by cudamem on first "
             "use.\nDoes not make it current.");

static PyObject *
device_get_primary_context(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    return cmpy_context_of(cmpy_type_state(self), (cmpy_Device *)self);
}

PyDoc_STRVAR(device_reset_doc,
             "reset($self)\n--\n\n"
             "Waits for the calls other threads have in flight in the "
             "context\n(refusing new ones with CudaDriverError meanwhile) "
             "and for the device's\nwork, then destroys its primary "
             "context:\nevery allocation, stream and event in it is gone, "
             "and Context\nobjects made before raise CudaDriverError. The "
             "next use creates\na fresh context. After a sticky error "
             "(see context_is_poisoned)\nthe wait is skipped and the "
             "driver says whether the new context\nworks: the driver "
             "keeps the error until the process restarts\n(the "
             "simulator until cudamem.simulator.reset()), and reset()\n"
             "then raises CudaStickyError.");

/* reset() or release_primary_context(): `end` without the GIL, as it
 * waits for other threads' calls. */
static PyObject *
device_end_context(PyObject *self, int (*end)(cm_device *, cm_error *))
{
    cm_device *dev = ((cmpy_Device *)self)->dev;
    cm_error err;
    int rc;

    Py_BEGIN_ALLOW_THREADS
    rc = end(dev, &err);
    CMPY_END_ALLOW_THREADS
    if (rc < 0) {
        return cmpy_raise(cmpy_type_state(self), &err);
    }
    Py_RETURN_NONE;
}

static PyObject *
device_reset(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    return device_end_context(self, cm_device_reset);
}

PyDoc_STRVAR(device_release_doc,
             "release_primary_context($self)\n--\n\n"
             "Drops cudamem's retain of the device's primary context, as "
             "close()\ndoes for every device, once the calls other threads "
             "have in flight\nin it have left: Context objects made before, "
             "and memory, streams\nand events made in it, raise "
             "CudaDriverError after; the driver\ndestroys the context when "
             "no one else retains it. The next use\nretains it again "
             "(numba's Device.release_primary_context).");

static PyObject *
device_release(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    return device_end_context(self, cm_device_release);
}

PyDoc_STRVAR(device_live_context_doc,
             "_live_context($self)\n--\n\n"
             "The Context last handed out for this device while the "
             "context it names\nis still the device's (not reset or closed "
             "since), else None. Makes\nand retains nothing.");

static PyObject *
device_live_context(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    cmpy_Device *device = (cmpy_Device *)self;
    cmpy_Context *ctx = (cmpy_Context *)device->context;
    cm_error ignored;

    if (ctx == NULL ||
        cm_ctx_check(device->dev, ctx->generation, &ignored) < 0) {
        Py_RETURN_NONE;
    }
    return Py_NewRef(ctx);
}

PyDoc_STRVAR(device_identity_doc,
             "get_device_identity($self)\n--\n\n"
             "numba's identity of the device: 'pci_domain_id', "
             "'pci_bus_id'\nand 'pci_device_id'.");

static PyObject *
device_get_identity(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    static const struct {
        const char *key;
        CUdevice_attribute attr;
    } keys[] = {
        {"pci_domain_id", CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID},
        {"pci_bus_id", CU_DEVICE_ATTRIBUTE_PCI_BUS_ID},
        {"pci_device_id", CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID},
    };
    int ordinal = ((cmpy_Device *)self)->dev->ordinal, values[3];
    cm_error err;

    for (int i = 0; i < 3; i++) {
        if (cm_device_attribute(ordinal, keys[i].attr, &values[i], &err) < 0) {
            return cmpy_raise(cmpy_type_state(self), &err);
        }
    }
    return Py_BuildValue("{s:i,s:i,s:i}", keys[0].key, values[0], keys[1].key,
                         values[1], keys[2].key, values[2]);
}

PyDoc_STRVAR(device_from_identity_doc,
             "from_identity($type, identity)\n--\n\n"
             "The visible device whose get_device_identity() equals "
             "*identity*\n(numba's Device.from_identity); RuntimeError "
             "when there is none.");

static PyObject *
device_from_identity(PyObject *cls, PyObject *const *args, Py_ssize_t nargs,
                     PyObject *kwnames)
{
    static const char *const names[] = {"identity"};
    cmpy_state *st = cmpy_state_of((PyTypeObject *)cls);
    PyObject *devices, *mine, *identity;
    int equal;

    if (st == NULL ||
        cmpy_parse_args("from_identity", names, 1, 1, args, nargs, kwnames,
                        &identity) < 0 ||
        (devices = cmpy_devices(st)) == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(devices); i++) {
        PyObject *device = PyTuple_GET_ITEM(devices, i);

        mine = device_get_identity(device, NULL);
        if (mine == NULL) {
            return NULL;
        }
        equal = PyObject_RichCompareBool(mine, identity, Py_EQ);
        Py_DECREF(mine);
        if (equal < 0) {
            return NULL;
        }
        if (equal) {
            return Py_NewRef(device);
        }
    }
    return PyErr_Format(PyExc_RuntimeError,
                        "No device of %R is found. Target device may not be "
                        "visible in this process.",
                        identity);
}

PyDoc_STRVAR(device_repr_html_doc,
             "_repr_html_($self)\n--\n\n"
             "The device as an HTML table for Jupyter: id, name, compute "
             "capability,\nmemory, multiprocessors, UUID and PCI bus id.");

static PyObject *
device_repr_html(PyObject *op, PyObject *Py_UNUSED(ignored))
{
    static const char *const labels[] = {
        "id",   "name",      "compute capability", "memory", "multiprocessors",
        "UUID", "PCI bus id"};
    cmpy_Device *self = (cmpy_Device *)op;
    PyObject *values[7] = {NULL};
    cm_device_info info;
    cm_error err;
    int sms;

    if (cm_device_info_get(self->dev->ordinal, &info, &err) < 0 ||
        cm_device_attribute(self->dev->ordinal,
                            CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, &sms,
                            &err) < 0) {
        return cmpy_raise(cmpy_type_state(op), &err);
    }
    values[0] = PyLong_FromLong(self->dev->ordinal);
    values[1] = Py_NewRef(self->name);
    values[2] = PyUnicode_FromFormat("%d.%d", self->cc_major, self->cc_minor);
    values[3] = cmpy_html_size(info.total_memory);
    values[4] = PyLong_FromLong(sms);
    values[5] = Py_NewRef(self->uuid);
    values[6] = PyUnicode_FromString(info.pci_bus_id);
    return cmpy_html_table("cudamem.Device", 7, labels, values, NULL);
}

static PyMethodDef device_methods[] = {
    {"get_primary_context", device_get_primary_context, METH_NOARGS,
     device_get_primary_context_doc},
    {"reset", device_reset, METH_NOARGS, device_reset_doc},
    {"release_primary_context", device_release, METH_NOARGS,
     device_release_doc},
    {"_live_context", device_live_context, METH_NOARGS,
     device_live_context_doc},
    {"get_device_identity", device_get_identity, METH_NOARGS,
     device_identity_doc},
    {"from_identity", (PyCFunction)(void (*)(void))device_from_identity,
     METH_FASTCALL | METH_KEYWORDS | METH_CLASS, device_from_identity_doc},
    {"_repr_html_", device_repr_html, METH_NOARGS, device_repr_html_doc},
    {NULL, NULL, 0, NULL},
};

PyDoc_STRVAR(device_doc,
             "Device\n\n"
             "A CUDA device (numba.cuda.cudadrv.driver.Device). Every\n"
             "CU_DEVICE_ATTRIBUTE_* is readable by its name without the "
             "prefix,\ne.g. dev.MULTIPROCESSOR_COUNT. Compares and hashes "
             "by id. Made by\ncudamem, not by user code.");

static PyType_Slot device_slots[] = {
    {Py_tp_doc, (void *)device_doc},
    {Py_tp_dealloc, device_dealloc},
    {Py_tp_traverse, device_traverse},
    {Py_tp_clear, device_clear},
    {Py_tp_repr, device_repr},
    {Py_tp_hash, device_hash},
    {Py_tp_richcompare, device_richcompare},
    {Py_tp_getattro, device_getattro},
    {Py_tp_setattro, device_setattro},
    {Py_tp_getset, device_getset},
    {Py_tp_methods, device_methods},
    {0, NULL},
};

static PyType_Spec device_spec = {
    .name = "cudamem.Device",
    .basicsize = sizeof(cmpy_Device),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC |
             Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = device_slots,
};

static int
attr_table(cmpy_state *st)
{
    static const struct {
        const char *name;
        int value;
    } attrs[] = {
#define CMPY_ATTR(name, value) {#name, value},
        CM_CUDA_ATTRIBUTES(CMPY_ATTR)
#undef CMPY_ATTR
    };
    PyObject *dict = PyDict_New();

    if (dict == NULL) {
        return -1;
    }
    for (size_t i = 0; i < sizeof(attrs) / sizeof(attrs[0]); i++) {
        PyObject *value = PyLong_FromLong(attrs[i].value);
        int rc = value != NULL
                     ? PyDict_SetItemString(dict, attrs[i].name, value)
                     : -1;

        Py_XDECREF(value);
        if (rc < 0) {
            Py_DECREF(dict);
            return -1;
        }
    }
    st->attr_ids = dict;
    return 0;
}

int
cmpy_device_types_init(PyObject *module, cmpy_state *st)
{
    st->DeviceType = PyType_FromModuleAndSpec(module, &device_spec, NULL);
    if (st->DeviceType == NULL || attr_table(st) < 0) {
        return -1;
    }
    if (PyModule_AddObjectRef(module, "Device", st->DeviceType) < 0) {
        return -1;
    }
    return cmpy_context_type_init(module, st);
}

/* ------------------------------------------------------------------------
 * Module functions. */

/* The device whose context a require_context() call on this thread
 * attached (numba's _Runtime attached context), or NULL: selecting
 * another one inside that call is refused as numba refuses it. */
static _Thread_local cm_device *tls_attached;

static int
check_switch(cm_device *dev)
{
    if (tls_attached != NULL && tls_attached != dev) {
        PyErr_SetString(PyExc_RuntimeError, "Cannot switch CUDA-context.");
        return -1;
    }
    return 0;
}

/* cm_device_select behind the check of a require_context() call. */
static int
select_checked(cmpy_state *st, cm_device *dev)
{
    cm_error err;

    if (check_switch(dev) < 0) {
        return -1;
    }
    if (cm_device_select(dev, &err) < 0) {
        cmpy_raise(st, &err);
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(attach_device_doc,
             "_attach_device($module, device)\n--\n\n"
             "Attaches *device* (a Device, or None to detach) to this "
             "thread for\nrequire_context(): selecting another device "
             "(select_device,\ncurrent_context(devnum), gpus[i]) raises "
             "RuntimeError until it is\ndetached. Returns the device "
             "attached before, or None.");

static PyObject *
attach_device(PyObject *module, PyObject *arg)
{
    cmpy_state *st = cmpy_get_state(module);
    cm_device *previous = tls_attached;
    cmpy_Device *device = NULL;
    PyObject *res;

    if (arg != Py_None && cmpy_device_parse(st, arg, &device) < 0) {
        return NULL;
    }
    res = previous == NULL
              ? Py_NewRef(Py_None)
              : Py_XNewRef((PyObject *)cmpy_device_of(st, previous));
    if (res != NULL) {
        tls_attached = device != NULL ? device->dev : NULL;
    }
    return res;
}

PyDoc_STRVAR(check_switch_doc,
             "_check_switch($module, device)\n--\n\n"
             "RuntimeError('Cannot switch CUDA-context.') when a "
             "require_context()\ncall on this thread attached another "
             "device than *device* (a\nDevice or an int ordinal).");

static PyObject *
check_switch_fn(PyObject *module, PyObject *arg)
{
    cmpy_Device *device;

    if (cmpy_device_parse(cmpy_get_state(module), arg, &device) < 0 ||
        check_switch(device->dev) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(select_device_doc,
             "select_device($module, device_id)\n--\n\n"
             "Makes the primary context of device *device_id* current on "
             "this\nthread (replacing the one cudamem made current before) "
             "and returns\nthe Device. Loads the driver.");

static PyObject *
select_device_one(PyObject *module, PyObject *arg)
{
    cmpy_state *st = cmpy_get_state(module);
    cmpy_Device *device;

    if (cmpy_device_parse(st, arg, &device) < 0 ||
        select_checked(st, device->dev) < 0) {
        return NULL;
    }
    return Py_NewRef(device);
}

static PyObject *
select_device(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
              PyObject *kwnames)
{
    static const char *const names[] = {"device_id"};
    PyObject *argv[1];

    if (cmpy_parse_args("select_device", names, 1, 1, args, nargs, kwnames,
                        argv) < 0) {
        return NULL;
    }
    return select_device_one(self, argv[0]);
}

int
cmpy_current_device(cmpy_state *st, cm_device **dev)
{
    cm_error err;

    if (cmpy_ensure_driver(st) < 0) {
        return -1;
    }
    if (cm_current_device(dev, &err) < 0) {
        cmpy_raise(st, &err);
        return -1;
    }
    return 0;
}

int
cmpy_current_enter(cmpy_state *st, cm_device **dev, cm_ctx_guard *guard)
{
    cm_error err;

    if (cmpy_ensure_driver(st) < 0) {
        return -1;
    }
    if (cm_ctx_enter_current(dev, guard, &err) < 0) {
        cmpy_raise(st, &err);
        return -1;
    }
    return 0;
}

int
cmpy_ctx_leave(cmpy_state *st, cm_ctx_guard *guard, int status)
{
    cm_error err;

    /* The operation's errors were its own enters' to report. */
    if (cm_ctx_leave(guard, 0, &err) < 0 && status == 0) {
        cmpy_raise(st, &err);
        return -1;
    }
    return status;
}

/* The current device's object; borrowed. */
static cmpy_Device *
current_device(cmpy_state *st)
{
    cm_device *dev;

    return cmpy_current_device(st, &dev) < 0 ? NULL : cmpy_device_of(st, dev);
}

PyDoc_STRVAR(get_current_device_doc,
             "get_current_device($module)\n--\n\n"
             "The device of this thread's current context; with none "
             "current,\nthe selected device (else device 0), whose primary "
             "context is\nmade current. Loads the driver.");

static PyObject *
get_current_device(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    cmpy_Device *device = current_device(cmpy_get_state(module));

    return device != NULL ? Py_NewRef(device) : NULL;
}

PyDoc_STRVAR(list_devices_doc, "list_devices($module)\n--\n\n"
                               "Every visible device. Loads the driver.");

static PyObject *
list_devices(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    PyObject *devices = cmpy_devices(cmpy_get_state(module));

    return devices != NULL ? PySequence_List(devices) : NULL;
}

PyDoc_STRVAR(current_context_doc,
             "current_context($module, devnum=None)\n--\n\n"
             "With devnum, selects that device (see select_device) and "
             "returns\nits primary context; without, the context of "
             "get_current_device().");

static PyObject *
current_context(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                PyObject *kwnames)
{
    cmpy_state *st = cmpy_get_state(module);
    Py_ssize_t nkw = kwnames != NULL ? PyTuple_GET_SIZE(kwnames) : 0;
    PyObject *devnum = Py_None;
    cmpy_Device *device;

    if (nargs + nkw > 1 ||
        (nkw == 1 && PyUnicode_CompareWithASCIIString(
                         PyTuple_GET_ITEM(kwnames, 0), "devnum") != 0)) {
        PyErr_SetString(PyExc_TypeError,
                        "current_context() takes one optional argument, "
                        "devnum");
        return NULL;
    }
    if (nargs + nkw == 1) {
        devnum = args[0];
    }
    if (devnum == Py_None) {
        device = current_device(st);
        if (device == NULL) {
            return NULL;
        }
    }
    else {
        if (cmpy_device_parse(st, devnum, &device) < 0 ||
            select_checked(st, device->dev) < 0) {
            return NULL;
        }
    }
    return cmpy_context_of(st, device);
}

PyDoc_STRVAR(synchronize_doc,
             "synchronize($module)\n--\n\n"
             "Waits for all work in the current context, with the GIL "
             "released;\nCtrl-C interrupts the wait (the work goes on).");

static PyObject *
synchronize(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    cmpy_state *st = cmpy_get_state(module);
    uint64_t generation;
    CUcontext ctx;
    cm_device *dev;
    cm_error err;

    if (cmpy_current_device(st, &dev) < 0) {
        return NULL;
    }
    if (cm_device_primary(dev, &ctx, &generation, &err) < 0) {
        return cmpy_raise(st, &err);
    }
    if (cmpy_ctx_wait(st, dev, generation) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

/* 1 on the interpreter's main thread, 0 elsewhere, -1 with an exception. */
static int
on_main_thread(void)
{
    PyObject *threading = PyImport_ImportModule("threading");
    PyObject *main = NULL, *ident = NULL;
    int rc = -1;

    if (threading == NULL) {
        return -1;
    }
    main = PyObject_CallMethod(threading, "main_thread", NULL);
    if (main == NULL) {
        goto done;
    }
    ident = PyObject_GetAttrString(main, "ident");
    if (ident == NULL) {
        goto done;
    }
    rc = PyLong_AsUnsignedLong(ident) == PyThread_get_thread_ident();
    if (PyErr_Occurred()) {
        rc = -1;
    }
done:
    Py_XDECREF(ident);
    Py_XDECREF(main);
    Py_DECREF(threading);
    return rc;
}

PyDoc_STRVAR(close_doc,
             "close($module)\n--\n\n"
             "numba's close(): pops the contexts cudamem made current on "
             "this\nthread; on the main thread also releases every primary "
             "context\ncudamem retained, so Context objects made before "
             "raise. Later\ncalls create fresh contexts. Each context is "
             "released once the calls\nother threads have in flight in "
             "it are done (Device.reset()'s rule).");

static PyObject *
close_(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    cmpy_state *st = cmpy_get_state(module);
    cm_error err;
    int main_thread, rc;

    if (!cm_driver_ready()) {
        Py_RETURN_NONE; /* nothing was ever opened */
    }
    main_thread = on_main_thread();
    if (main_thread < 0 || cmpy_ensure_driver(st) < 0) {
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    rc = cm_devices_close(main_thread, &err);
    CMPY_END_ALLOW_THREADS
    if (rc < 0) {
        return cmpy_raise(st, &err);
    }
    Py_RETURN_NONE;
}

static PyObject *
profiler(PyObject *module, int (*fn)(cm_error *))
{
    cmpy_state *st = cmpy_get_state(module);
    cm_error err;

    if (cmpy_ensure_driver(st) < 0) {
        return NULL;
    }
    if (fn(&err) < 0) {
        return cmpy_raise(st, &err);
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(profile_start_doc,
             "profile_start($module)\n--\n\n"
             "Enables profile collection in the current context.");

static PyObject *
profile_start(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    return profiler(module, cm_profiler_start);
}

PyDoc_STRVAR(profile_stop_doc,
             "profile_stop($module)\n--\n\n"
             "Disables profile collection in the current context.");

static PyObject *
profile_stop(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    return profiler(module, cm_profiler_stop);
}

PyDoc_STRVAR(can_access_peer_doc,
             "can_access_peer($module, device, peer)\n--\n\n"
             "Whether *device* can access *peer*'s memory (ints or "
             "Devices).");

static PyObject *
can_access_peer(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                PyObject *kwnames)
{
    static const char *const names[] = {"device", "peer"};
    cmpy_state *st = cmpy_get_state(module);
    PyObject *argv[2];
    cmpy_Device *a, *b;
    cm_error err;
    int can;

    if (cmpy_parse_args("can_access_peer", names, 2, 2, args, nargs, kwnames,
                        argv) < 0 ||
        cmpy_device_parse(st, argv[0], &a) < 0 ||
        cmpy_device_parse(st, argv[1], &b) < 0) {
        return NULL;
    }
    if (cm_peer_can_access(a->dev, b->dev, &can, &err) < 0) {
        return cmpy_raise(st, &err);
    }
    return PyBool_FromLong(can);
}

PyDoc_STRVAR(context_is_poisoned_doc,
             "context_is_poisoned($module, device=None)\n--\n\n"
             "Whether a sticky error (CudaStickyError) left the primary "
             "context\nof *device* (an int or a Device; the current "
             "device when None)\nunusable. Once it is, every operation on "
             "the device raises\nCudaStickyError without calling the "
             "driver, until the process\nrestarts. Loads the driver.");

static PyObject *
context_is_poisoned(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                    PyObject *kwnames)
{
    static const char *const names[] = {"device"};
    cmpy_state *st = cmpy_get_state(module);
    PyObject *argv[1];
    cm_device *dev;
    cm_error err;

    if (cmpy_parse_args("context_is_poisoned", names, 1, 0, args, nargs,
                        kwnames, argv) < 0 ||
        cmpy_device_arg(st, argv[0], 1, &dev) < 0) {
        return NULL;
    }
    return PyBool_FromLong(cm_device_poisoned(dev, &err) < 0);
}

PyDoc_STRVAR(active_device_doc,
             "_active_device($module)\n--\n\n"
             "The device of this thread's current context, of any kind, or\n"
             "None when no context is current. Makes nothing current.");

static PyObject *
active_device(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    cmpy_state *st = cmpy_get_state(module);
    cm_device *dev;
    cm_error err;

    if (cmpy_ensure_driver(st) < 0) {
        return NULL;
    }
    if (cm_active_device(&dev, &err) < 0) {
        return cmpy_raise(st, &err);
    }
    if (dev == NULL) {
        Py_RETURN_NONE;
    }
    return Py_XNewRef((PyObject *)cmpy_device_of(st, dev));
}

PyDoc_STRVAR(pointer_range_doc,
             "_pointer_range($module, pointer)\n--\n\n"
             "(base, size) of the allocation the device address *pointer* "
             "lies in\n(one cuPointerGetAttributes call, in any "
             "context).");

static PyObject *
pointer_range(PyObject *module, PyObject *arg)
{
    cmpy_state *st = cmpy_get_state(module);
    unsigned long long value;
    CUdeviceptr base;
    cm_device *dev;
    size_t size;
    cm_error err;
    int rc;

    if (PyBool_Check(arg) || !PyLong_Check(arg)) {
        PyErr_Format(PyExc_TypeError,
                     "a device pointer must be an int, not %.200s",
                     Py_TYPE(arg)->tp_name);
        return NULL;
    }
    value = PyLong_AsUnsignedLongLong(arg);
    if (value == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "invalid device pointer %R", arg);
        return NULL;
    }
    if (cmpy_ensure_driver(st) < 0) {
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    rc = cm_pointer_device((CUdeviceptr)value, &dev, &base, &size, &err);
    CMPY_END_ALLOW_THREADS
    /* `!= 0`: core returns 0 or -1, and only a 0 fills base. */
    if (rc != 0) {
        return cmpy_raise(st, &err);
    }
    return Py_BuildValue("(Kn)", (unsigned long long)base, (Py_ssize_t)size);
}

PyDoc_STRVAR(sync_probe_ready_doc,
             "_sync_probe_ready($module)\n--\n\n"
             "Makes the event synchronize() probes an idle context with, "
             "for every\ndevice whose primary context cudamem holds; for "
             "tests that compare\nlive driver objects.");

static PyObject *
sync_probe_ready(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    if (cmpy_each_device(cmpy_get_state(module), cm_ctx_sync_prepare) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

PyMethodDef cmpy_device_methods[] = {
    {"_pointer_range", pointer_range, METH_O, pointer_range_doc},
    {"select_device", (PyCFunction)(void (*)(void))select_device,
     METH_FASTCALL | METH_KEYWORDS, select_device_doc},
    {"get_current_device", get_current_device, METH_NOARGS,
     get_current_device_doc},
    {"list_devices", list_devices, METH_NOARGS, list_devices_doc},
    {"current_context", (PyCFunction)(void (*)(void))current_context,
     METH_FASTCALL | METH_KEYWORDS, current_context_doc},
    {"synchronize", synchronize, METH_NOARGS, synchronize_doc},
    {"close", close_, METH_NOARGS, close_doc},
    {"profile_start", profile_start, METH_NOARGS, profile_start_doc},
    {"profile_stop", profile_stop, METH_NOARGS, profile_stop_doc},
    {"can_access_peer", (PyCFunction)(void (*)(void))can_access_peer,
     METH_FASTCALL | METH_KEYWORDS, can_access_peer_doc},
    {"context_is_poisoned", (PyCFunction)(void (*)(void))context_is_poisoned,
     METH_FASTCALL | METH_KEYWORDS, context_is_poisoned_doc},
    {"_active_device", active_device, METH_NOARGS, active_device_doc},
    {"_attach_device", attach_device, METH_O, attach_device_doc},
    {"_check_switch", check_switch_fn, METH_O, check_switch_doc},
    {"_sync_probe_ready", sync_probe_ready, METH_NOARGS, sync_probe_ready_doc},
    {NULL, NULL, 0, NULL},
};
