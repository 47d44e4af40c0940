"""The simulator's own driver API, called directly through ctypes: the
reference the tests compare cudamem's answers with. It shares the
simulator's state with cudamem (the same library, the same per-thread
context stack)."""
import ctypes


class SimDriver:
    def __init__(self, path):
        self.lib = ctypes.CDLL(path)

    def call(self, name, *args):
        rc = getattr(self.lib, name)(*args)
        assert rc == 0, "%s returned %d" % (name, rc)

    def rc(self, name, *args):
        """The CUresult of a call, for calls expected to fail."""
        return getattr(self.lib, name)(*args)

    def device(self, ordinal):
        dev = ctypes.c_int()
        self.call("cuDeviceGet", ctypes.byref(dev), ordinal)
        return dev.value

    def attribute(self, attr, ordinal):
        value = ctypes.c_int()
        self.call("cuDeviceGetAttribute", ctypes.byref(value), attr,
                  self.device(ordinal))
        return value.value

    def name(self, ordinal):
        buf = ctypes.create_string_buffer(256)
        self.call("cuDeviceGetName", buf, 256, self.device(ordinal))
        return buf.value.decode()

    def total_mem(self, ordinal):
        total = ctypes.c_size_t()
        self.call("cuDeviceTotalMem_v2", ctypes.byref(total),
                  self.device(ordinal))
        return total.value

    # Contexts.

    def current(self):
        """The current context's handle (an int), or None."""
        ctx = ctypes.c_void_p()
        self.call("cuCtxGetCurrent", ctypes.byref(ctx))
        return ctx.value

    def retain_primary(self, ordinal):
        ctx = ctypes.c_void_p()
        self.call("cuDevicePrimaryCtxRetain", ctypes.byref(ctx),
                  self.device(ordinal))
        return ctx.value

    def release_primary(self, ordinal):
        self.call("cuDevicePrimaryCtxRelease_v2", self.device(ordinal))

    def primary_active(self, ordinal):
        flags, active = ctypes.c_uint(), ctypes.c_int()
        self.call("cuDevicePrimaryCtxGetState", self.device(ordinal),
                  ctypes.byref(flags), ctypes.byref(active))
        return bool(active.value)

    def set_current(self, handle):
        self.call("cuCtxSetCurrent", ctypes.c_void_p(handle))

    def push(self, handle):
        self.call("cuCtxPushCurrent_v2", ctypes.c_void_p(handle))

    def pop(self):
        ctx = ctypes.c_void_p()
        self.call("cuCtxPopCurrent_v2", ctypes.byref(ctx))
        return ctx.value

    def create_context(self, ordinal):
        """A non-primary context, made current (pushed)."""
        ctx = ctypes.c_void_p()
        self.call("cuCtxCreate_v2", ctypes.byref(ctx), 0,
                  self.device(ordinal))
        return ctx.value

    def destroy_context(self, handle):
        self.call("cuCtxDestroy_v2", ctypes.c_void_p(handle))

    def mem_info(self):
        """cuMemGetInfo in the current context: (free, total)."""
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        self.call("cuMemGetInfo_v2", ctypes.byref(free), ctypes.byref(total))
        return free.value, total.value

    def mem_alloc(self, nbytes):
        ptr = ctypes.c_uint64()
        self.call("cuMemAlloc_v2", ctypes.byref(ptr), ctypes.c_size_t(nbytes))
        return ptr.value

    def mem_free(self, ptr):
        self.call("cuMemFree_v2", ctypes.c_uint64(ptr))

    def can_access_peer(self, a, b):
        can = ctypes.c_int()
        self.call("cuDeviceCanAccessPeer", ctypes.byref(can), self.device(a),
                  self.device(b))
        return bool(can.value)

    def host_flags(self, ary):
        """The driver's flags for the page-locked memory under a NumPy
        array (cuMemHostGetFlags)."""
        flags = ctypes.c_uint()
        self.call("cuMemHostGetFlags", ctypes.byref(flags),
                  ctypes.c_void_p(ary.__array_interface__["data"][0]))
        return flags.value
