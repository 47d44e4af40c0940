"""Copies between a host array and a device array over the same memory:
mapped memory's host and device sides, arrays registered with mapped(),
and imports of them. The driver does not check that such a copy's sides
are disjoint (the result would be undefined; the simulator refuses it),
so cudamem finds the shared bytes and goes through a temporary. Each
result is NumPy's ``dst[...] = src.copy()``."""
import numpy as np
import pytest

import cudamem

pytestmark = pytest.mark.simulator

REF = np.arange(24.0)


def made(sim):
    """Calls per copy entry point since sim.reset()."""
    return {k: v["calls"] for k, v in sim.stats()["calls"].items()
            if k.startswith("cuMemcpy") and v["calls"]}


def expect(host, dkey, hkey, to_host):
    """NumPy's result in a copy of `host`: device view dkey onto host view
    hkey (to_host), or the reverse."""
    want = host.copy()
    if to_host:
        want[hkey] = want[dkey].copy()
    else:
        want[dkey] = want[hkey].copy()
    return want


# (device view, host view): overlapping shifted, reversed, strided and
# transposed pairs of a 24-element buffer seen as (24,) or (4, 6).
CASES = {
    "shifted": ((slice(1, None),), (slice(None, -1),)),
    "shifted back": ((slice(None, -1),), (slice(1, None),)),
    "reversed": ((slice(None, None, -1),), (slice(None),)),
    "strided": ((slice(1, 13, 2),), (slice(2, 8),)),
}


def mapped_pair(shape=24):
    m = cudamem.mapped_array(shape, np.float64)
    m[...] = REF.reshape(m.shape)
    return np.asarray(m), m.device_array()


@pytest.mark.parametrize("on_stream", [False, True])
@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("to_host", [False, True])
def test_mapped_host_view_and_its_device_side(case, to_host, on_stream):
    host, dev = mapped_pair()
    dkey, hkey = CASES[case]
    want = expect(host, dkey, hkey, to_host)
    stream = cudamem.stream() if on_stream else 0
    if to_host:
        dev[dkey].copy_to_host(host[hkey], stream=stream)
    else:
        dev[dkey].copy_to_device(host[hkey], stream=stream)
    if on_stream:
        stream.synchronize()
    np.testing.assert_array_equal(host, want)


def test_transposed_assignment_in_place():
    host, dev = mapped_pair((4, 6))
    square = dev[:, :4]
    want = host.copy()
    want[:, :4] = host[:, :4].T.copy()
    square[...] = host[:, :4].T
    np.testing.assert_array_equal(host, want)


def test_registered_array_and_its_mapped_device_side():
    a = REF.copy()
    with cudamem.mapped(a) as d:
        want = expect(a, (slice(2, None),), (slice(None, -2),), False)
        d[2:].copy_to_device(a[:-2])
        np.testing.assert_array_equal(a, want)
        want = expect(a, (slice(None, None, -1),), (slice(None),), True)
        d[::-1].copy_to_host(a)
        np.testing.assert_array_equal(a, want)


def test_an_import_of_mapped_memory():
    m = cudamem.mapped_array(24, np.float64)
    m[...] = REF
    dev = cudamem.as_cuda_array(m)
    want = expect(np.asarray(m), (slice(3, None),), (slice(None, -3),), True)
    dev[3:].copy_to_host(np.asarray(m)[:-3])
    np.testing.assert_array_equal(m, want)


def test_disjoint_views_of_one_buffer_stay_one_copy(sim):
    # The host view shares the buffer, not the bytes: no temporary.
    host, dev = mapped_pair()
    sim.reset()
    dev[:12].copy_to_host(host[12:])
    assert made(sim) == {"cuMemcpyDtoH": 1}
    sim.reset()
    dev[12:].copy_to_device(host[:12])
    assert made(sim) == {"cuMemcpyHtoD": 1}
    np.testing.assert_array_equal(host, np.concatenate([REF[:12]] * 2))


def test_shared_bytes_go_through_a_host_temporary(sim):
    # One copy into a host temporary and one out of it on the host: the
    # device side is read completely before the host view is written.
    host, dev = mapped_pair()
    sim.reset()
    dev[:-1].copy_to_host(host[1:])
    assert made(sim) == {"cuMemcpyDtoH": 1}
    assert sim.stats()["calls"]["cuMemcpyDtoH"]["bytes"] == 23 * 8
    np.testing.assert_array_equal(host, np.r_[REF[0], REF[:-1]])
