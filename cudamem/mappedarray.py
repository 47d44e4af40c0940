"""MappedNDArray, numba's array over mapped host memory: a NumPy array
whose device side is computed on demand. Imported on first use (it
subclasses numpy.ndarray, and ``import cudamem`` does not load NumPy)."""
import numpy as np

from cudamem import _cudamem

__all__ = ["MappedNDArray"]


class MappedNDArray(np.ndarray):
    """MappedNDArray

    A NumPy array in mapped page-locked host memory (numba's
    MappedNDArray), made by mapped_array(). The host side is the NumPy
    array; the device side (``gpu_data``, ``device_ctypes_pointer``,
    ``__cuda_array_interface__``, ``copy_to_host``, ``copy_to_device``)
    is a device array over the same bytes. Views and slices are
    MappedNDArrays whose device side starts at their own first element."""

    def __array_finalize__(self, obj):
        self._stream = getattr(obj, "_stream", 0)

    def _device_side(self, stream=None):
        return _cudamem._host_device_array(
            self, stream=self._stream if stream is None else stream)

    @property
    def stream(self):
        """The stream device-side operations use by default."""
        return self._stream

    @property
    def gpu_data(self):
        """The device memory (a MemoryPointer over the mapped bytes)."""
        return self._device_side().gpu_data

    @property
    def device_ctypes_pointer(self):
        """The device address of the first element, a ctypes.c_void_p."""
        return self._device_side().device_ctypes_pointer

    @property
    def __cuda_array_interface__(self):
        """The CUDA Array Interface of the device side."""
        return self._device_side().__cuda_array_interface__

    def device_array(self):
        """device_array() -> DeviceNDArray

        The device side as a DeviceNDArray over the same memory."""
        return self._device_side()

    def copy_to_host(self, ary=None, stream=0):
        """copy_to_host(ary=None, stream=0) -> numpy.ndarray

        Copies the device side into ``ary`` or a new NumPy array, as
        DeviceNDArray.copy_to_host does."""
        return self._device_side().copy_to_host(ary, stream=stream)

    def copy_to_device(self, ary, stream=0):
        """copy_to_device(ary, stream=0)

        Copies ``ary`` into the device side, as DeviceNDArray.copy_to_device
        does."""
        self._device_side().copy_to_device(ary, stream=stream)
