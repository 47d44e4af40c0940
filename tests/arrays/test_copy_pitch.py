"""Device-to-device copies at pitches a driver may refuse. cuda.h: on
intra-device copies cuMemcpy2D and cuMemcpy2DAsync "may fail for pitches
not computed by cuMemAllocPitch()", whose pitches are multiples of the
device's CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT. The simulator's
strict pitches (CUDAMEM_SIM_STRICT_PITCH=1) refuse the others, as a driver
may; under it each copy is checked against NumPy and for the calls that
made it: synchronous rows on the device are cuMemcpy2DUnaligned, rows on
a stream cuMemcpy2DAsync at aligned pitches and otherwise one slice of
cuMemcpy3DAsync."""
import ctypes

import numpy as np
import pytest

import cudamem
from tests.helpers.simref import SimDriver

pytestmark = pytest.mark.simulator

CU_MEMORYTYPE_DEVICE = 2
CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT = 51
CUDA_ERROR_INVALID_VALUE = 1


class CUDA_MEMCPY2D(ctypes.Structure):
    _fields_ = [(side + name, kind)
                for side in ("src", "dst")
                for name, kind in (("XInBytes", ctypes.c_size_t),
                                   ("Y", ctypes.c_size_t),
                                   ("MemoryType", ctypes.c_int),
                                   ("Host", ctypes.c_void_p),
                                   ("Device", ctypes.c_uint64),
                                   ("Array", ctypes.c_void_p),
                                   ("Pitch", ctypes.c_size_t))] + [
        ("WidthInBytes", ctypes.c_size_t), ("Height", ctypes.c_size_t)]


@pytest.fixture
def strict(sim):
    """Strict pitches on for the test; yields the simulator's control
    module. Afterwards they are as CUDAMEM_SIM_STRICT_PITCH set them."""
    before = sim.get_strict_pitch()
    sim.set_strict_pitch(True)
    try:
        yield sim
    finally:
        sim.set_strict_pitch(before)


def made(sim):
    """(calls, bytes) per copy entry point called since sim.reset()."""
    return {k: (v["calls"], v["bytes"])
            for k, v in sim.stats()["calls"].items()
            if k.startswith("cuMemcpy") and v["calls"]}


def raw_2d(sim, dst, dpitch, src, spitch, width, height, name):
    """The CUresult of the simulator's own 2-D copy `name` between device
    arrays, in the current context."""
    p = CUDA_MEMCPY2D(srcMemoryType=CU_MEMORYTYPE_DEVICE,
                      srcDevice=src.device_ctypes_pointer.value,
                      srcPitch=spitch,
                      dstMemoryType=CU_MEMORYTYPE_DEVICE,
                      dstDevice=dst.device_ctypes_pointer.value,
                      dstPitch=dpitch, WidthInBytes=width, Height=height)
    drv = SimDriver(sim.library_path())
    return drv.rc(name, ctypes.byref(p))


def test_strict_pitches_refuse_what_cuda_h_lets_a_driver_refuse(strict):
    drv = SimDriver(strict.library_path())
    assert drv.attribute(CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT, 0) == 32
    src = cudamem.to_device(np.arange(1000, dtype=np.int8))
    dst = cudamem.device_array(1000, np.int8)
    assert raw_2d(strict, dst, 1, src, 10, 1, 100,
                  "cuMemcpy2D_v2") == CUDA_ERROR_INVALID_VALUE
    assert raw_2d(strict, dst, 32, src, 64, 1, 10, "cuMemcpy2D_v2") == 0
    assert raw_2d(strict, dst, 1, src, 10, 1, 100,
                  "cuMemcpy2DUnaligned_v2") == 0
    cudamem.synchronize()
    np.testing.assert_array_equal(dst.copy_to_host()[:100],
                                  np.arange(1000, dtype=np.int8)[::10])
    strict.set_strict_pitch(False)
    assert raw_2d(strict, dst, 1, src, 10, 1, 100, "cuMemcpy2D_v2") == 0
    cudamem.synchronize()


def test_strict_pitches_are_read_at_cuinit(run_py):
    code = """
        import numpy as np
        import cudamem
        from cudamem import simulator
        c8 = cudamem.to_device(np.arange(100, dtype=np.int8).reshape(10, 10))
        col = cudamem.device_array(10, np.int8)
        col[...] = c8[:, 3]
        print(simulator.get_strict_pitch(), col.copy_to_host().tolist())
        """
    column = str(list(range(3, 100, 10)))
    for value, on in (("1", "True"), ("0", "False"), (None, "False")):
        proc = run_py(code, env={"CUDAMEM_SIM_STRICT_PITCH": value})
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert proc.stdout.split(None, 1) == [on, column + "\n"]


def test_column_of_int8_into_a_packed_array(strict):
    # A column of an int8 (100, 10) array: pitches 10 (source) and 1
    # (destination).
    host = np.arange(1000, dtype=np.int8).reshape(100, 10)
    c8 = cudamem.to_device(host)
    col = cudamem.device_array(100, np.int8)
    strict.reset()
    col[...] = c8[:, 3]
    assert made(strict) == {"cuMemcpy2DUnaligned": (1, 100)}
    np.testing.assert_array_equal(col.copy_to_host(), host[:, 3])

    stream = cudamem.stream()
    back = cudamem.device_array((100, 10), np.int8)
    back.copy_to_device(host[::-1].copy())
    strict.reset()
    back[:, 3].copy_to_device(col, stream=stream)
    stream.synchronize()
    assert made(strict) == {"cuMemcpy3DAsync": (1, 100)}
    ref = host[::-1].copy()
    ref[:, 3] = host[:, 3]
    np.testing.assert_array_equal(back.copy_to_host(), ref)


@pytest.mark.parametrize("on_stream", [False, True])
def test_unaligned_columns_of_uint8(strict, on_stream):
    # d[:, 1:4] of a (100, 7) uint8 array: pitches 7 and 3, the source one
    # byte off alignment.
    host = (np.arange(700) * 7 % 251).astype(np.uint8).reshape(100, 7)
    d = cudamem.to_device(host)
    out = cudamem.device_array((100, 3), np.uint8)
    stream = cudamem.stream() if on_stream else 0
    strict.reset()
    out.copy_to_device(d[:, 1:4], stream=stream)
    if on_stream:
        stream.synchronize()
    name = "cuMemcpy3DAsync" if on_stream else "cuMemcpy2DUnaligned"
    assert made(strict) == {name: (1, 300)}
    np.testing.assert_array_equal(out.copy_to_host(), host[:, 1:4])


@pytest.mark.parametrize("on_stream", [False, True])
def test_aligned_pitches_stay_one_2d_copy(strict, on_stream):
    # [::2, 64:192] of (64, 256) float32: pitches 2048 and 512 bytes, both
    # multiples of the alignment, so cuMemcpy2DAsync on a stream.
    host = np.arange(64 * 256, dtype=np.float32).reshape(64, 256)
    d = cudamem.to_device(host)
    view = d[::2, 64:192]
    out = cudamem.device_array(view.shape, view.dtype)
    stream = cudamem.stream() if on_stream else 0
    strict.reset()
    out.copy_to_device(view, stream=stream)
    if on_stream:
        stream.synchronize()
    name = "cuMemcpy2DAsync" if on_stream else "cuMemcpy2DUnaligned"
    assert made(strict) == {name: (1, view.nbytes)}
    np.testing.assert_array_equal(out.copy_to_host(), host[::2, 64:192])


@pytest.mark.parametrize("on_stream", [False, True])
def test_layout_changes_on_the_device(strict, on_stream):
    # Copies the engine makes of several 2-D or 3-D calls, doublings and
    # temporaries, on int16 so that most pitches are unaligned: a call a
    # driver may refuse would raise here. The results are NumPy's.
    rng = np.random.default_rng(19)
    host = rng.integers(-999, 999, size=(12, 9, 10)).astype(np.int16)
    d = cudamem.to_device(host)
    stream = cudamem.stream() if on_stream else 0
    for key in (lambda a: a[::2, 1:8, ::3], lambda a: a[:, ::-1, 2:5],
                lambda a: a.transpose(2, 0, 1)[:, ::3]):
        want = key(host)
        out = cudamem.device_array(want.shape, np.int16)
        out.copy_to_device(key(d), stream=stream)
        tiled = cudamem.device_array((5,) + want.shape, np.int16)
        (tiled.bind(stream) if on_stream else tiled)[...] = out
        if on_stream:
            stream.synchronize()
        np.testing.assert_array_equal(out.copy_to_host(), want)
        np.testing.assert_array_equal(
            tiled.copy_to_host(), np.broadcast_to(want, (5,) + want.shape))
