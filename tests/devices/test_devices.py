"""Devices: enumeration, identity, attributes by name, gpus, selection,
detect(), profiling, peer access, CUDA_VISIBLE_DEVICES, bad input.

References: the simulator's own driver API through ctypes (simref) and
numba's documented behaviour. Tests that change a thread's context stack
run in a fresh thread (an empty stack) or a fresh process (two devices).
"""
import json
import os
import re

import numpy as np
import pytest

import cudamem
from cudamem import driver
from cudamem.errors import CudaAPIError
from tests.helpers.run import ROOT, in_thread
from tests.helpers.simref import SimDriver

CUATTRS_H = os.path.join(ROOT, "cudamem", "_src", "core", "cuattrs.h")
with open(CUATTRS_H) as _f:
    ATTRIBUTES = re.findall(r"X\((\w+), (\d+)\)", _f.read())
A = {name: int(value) for name, value in ATTRIBUTES}


@pytest.fixture
def ref(sim):
    cudamem.is_available()
    return SimDriver(sim.library_path())


@pytest.mark.simulator
def test_list_devices_match_the_driver(ref):
    devices = cudamem.list_devices()
    info = driver.devices()
    assert [d.id for d in devices] == [i["id"] for i in info] == [0]
    dev = devices[0]
    assert isinstance(dev, cudamem.Device)
    assert dev.name == ref.name(0)
    assert isinstance(dev.name, str)
    assert dev.compute_capability == (
        ref.attribute(A["COMPUTE_CAPABILITY_MAJOR"], 0),
        ref.attribute(A["COMPUTE_CAPABILITY_MINOR"], 0))
    assert dev.uuid == info[0]["uuid"]
    assert re.fullmatch(r"GPU-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}",
                        dev.uuid)
    assert repr(dev) == "<CUDA device 0 '%s'>" % ref.name(0)


def test_device_equality_and_hash():
    a = cudamem.list_devices()[0]
    b = cudamem.get_current_device()
    assert a == b and not (a != b)  # noqa: SIM202 (tests __ne__)
    assert hash(a) == hash(b) == 0
    assert a != 0 and a != "device 0"
    assert {a: 1}[b] == 1


def test_device_is_not_constructible():
    with pytest.raises(TypeError):
        cudamem.Device()
    with pytest.raises(TypeError):
        cudamem.Context()


@pytest.mark.simulator
@pytest.mark.parametrize("name, value", ATTRIBUTES)
def test_every_attribute_by_name(ref, name, value):
    dev = cudamem.list_devices()[0]
    value = int(value)
    try:
        expected = ref.attribute(value, 0)
    except AssertionError:
        with pytest.raises(CudaAPIError) as info:
            getattr(dev, name)
        assert info.value.name == "CUDA_ERROR_INVALID_VALUE"
    else:
        assert getattr(dev, name) == expected


def test_attribute_table_is_complete():
    # Every attribute of cuda.h but CU_DEVICE_ATTRIBUTE_MAX.
    names = [n for n, _ in ATTRIBUTES]
    assert "MULTIPROCESSOR_COUNT" in names and "MAX" not in names
    assert len(names) > 140


def test_unknown_attribute_raises_attribute_error():
    dev = cudamem.list_devices()[0]
    with pytest.raises(AttributeError, match="NOT_AN_ATTRIBUTE"):
        dev.NOT_AN_ATTRIBUTE
    assert not hasattr(dev, "warp_size")
    assert hasattr(dev, "WARP_SIZE")


@pytest.mark.simulator
def test_device_identity(ref):
    dev = cudamem.list_devices()[0]
    assert dev.get_device_identity() == {
        "pci_domain_id": ref.attribute(A["PCI_DOMAIN_ID"], 0),
        "pci_bus_id": ref.attribute(A["PCI_BUS_ID"], 0),
        "pci_device_id": ref.attribute(A["PCI_DEVICE_ID"], 0),
    }


def test_gpus_indexing_len_iteration():
    devices = cudamem.list_devices()
    assert len(cudamem.gpus) == len(devices) == cudamem._cudamem.device_count()
    assert [g.id for g in cudamem.gpus] == [d.id for d in devices]
    assert cudamem.gpus[0].name == devices[0].name
    assert cudamem.gpus[np.int64(0)].id == 0
    assert cudamem.gpus[-1].id == len(devices) - 1
    assert str(cudamem.gpus[0]) == "<Managed Device 0>"
    with pytest.raises(IndexError):
        cudamem.gpus[len(devices)]


@pytest.mark.simulator
def test_gpus_context_manager_pushes_and_restores(ref):
    def body():
        assert ref.current() is None
        assert cudamem.gpus.current is None
        with cudamem.gpus[0] as g:
            primary = cudamem.gpus[0].get_primary_context().handle
            assert ref.current() == primary
            assert cudamem.gpus.current.id == 0 and g.id == 0
            with cudamem.gpus[0]:
                assert ref.current() == primary
            assert ref.current() == primary
        assert ref.current() is None

    in_thread(body)


@pytest.mark.simulator
def test_gpus_exit_with_another_context_on_top_raises(ref):
    def body():
        with pytest.raises(cudamem.CudaDriverError, match="not the current"):
            with cudamem.gpus[0]:
                other = ref.create_context(0)
        assert ref.current() == other
        ref.destroy_context(other)
        # the device's context stays pushed: pop it
        cudamem.current_context().pop()
        assert ref.current() is None

    in_thread(body)


@pytest.mark.simulator
def test_select_then_get_current_device(ref):
    def body():
        dev = cudamem.select_device(0)
        assert isinstance(dev, cudamem.Device) and dev.id == 0
        assert ref.current() == dev.get_primary_context().handle
        assert cudamem.get_current_device() == dev
        # Selecting again replaces: one pop empties the stack.
        cudamem.select_device(np.int32(0))
        ref.pop()
        assert ref.current() is None

    in_thread(body)


@pytest.mark.parametrize("bad, exc, text", [
    ("0", TypeError, "device must be an int ordinal or a Device, not str"),
    (0.0, TypeError, "not float"),
    (True, TypeError, "not bool"),
    (None, TypeError, "not NoneType"),
    (-1, ValueError, "device ordinal -1 out of range: 1 device visible"),
    (1, ValueError, "device ordinal 1 out of range: 1 device visible"),
    (1 << 70, ValueError, "device ordinal %d out of range" % (1 << 70)),
])
def test_bad_device_arguments(bad, exc, text):
    calls = [cudamem.select_device,
             lambda d: cudamem.can_access_peer(0, d),
             lambda d: cudamem.can_access_peer(d, 0),
             lambda d: cudamem.current_context().can_access_peer(d),
             lambda d: cudamem.current_context().enable_peer_access(d)]
    if bad is not None:  # current_context(None) is the current one
        calls.append(cudamem.current_context)
    for fn in calls:
        with pytest.raises(exc, match=re.escape(text)):
            fn(bad)


def test_current_context_arguments():
    with pytest.raises(TypeError, match="devnum"):
        cudamem.current_context(0, 0)
    with pytest.raises(TypeError, match="devnum"):
        cudamem.current_context(device=0)
    assert cudamem.current_context(devnum=0).device.id == 0


@pytest.mark.simulator
def test_detect_output(ref, capsys):
    assert cudamem.detect() is True
    out = capsys.readouterr().out.splitlines()
    dev = cudamem.list_devices()[0]
    assert out[0] == "Found 1 CUDA devices"
    assert out[1] == "id %d    %20s %40s" % (0, ref.name(0), "[SUPPORTED]")
    fields = dict(line.strip().split(": ", 1) for line in out[2:-2])
    assert fields == {
        "Compute Capability": "%d.%d" % dev.compute_capability,
        "PCI Device ID": str(ref.attribute(A["PCI_DEVICE_ID"], 0)),
        "PCI Bus ID": str(ref.attribute(A["PCI_BUS_ID"], 0)),
        "UUID": dev.uuid,
        "Watchdog": ("Enabled" if ref.attribute(A["KERNEL_EXEC_TIMEOUT"], 0)
                     else "Disabled"),
        "FP32/FP64 Performance Ratio": str(ref.attribute(
            A["SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO"], 0)),
        "FP8 Hardware Acceleration": "Yes",
    }
    for line in out[2:-2]:
        assert line.index(":") == 40
    assert out[-2:] == ["Summary:", "\t1/1 devices are supported"]


@pytest.mark.simulator
def test_profiling(sim):
    def calls(name):
        return sim.stats()["calls"][name]["calls"]

    start, stop = calls("cuProfilerStart"), calls("cuProfilerStop")
    with cudamem.profiling():
        assert calls("cuProfilerStart") == start + 1
        assert calls("cuProfilerStop") == stop
    assert calls("cuProfilerStop") == stop + 1
    cudamem.profile_start()
    cudamem.profile_stop()
    assert calls("cuProfilerStart") == start + 2


def test_profiling_stops_on_error(sim):
    stops = sim.stats()["calls"]["cuProfilerStop"]["calls"]
    with pytest.raises(KeyError):
        with cudamem.profiling():
            raise KeyError("x")
    assert sim.stats()["calls"]["cuProfilerStop"]["calls"] == stops + 1


@pytest.mark.simulator
def test_can_access_peer_one_device(ref):
    assert cudamem.can_access_peer(0, 0) is ref.can_access_peer(0, 0)
    dev = cudamem.list_devices()[0]
    assert cudamem.can_access_peer(dev, dev) is False


def test_runtime_version():
    major, minor = cudamem.runtime.get_version()
    assert major >= 11 and 0 <= minor < 100
    built = cudamem._cudamem.CUDA_VERSION
    if not cudamem.runtime.is_runtime_present():
        assert (major, minor) == (built // 1000, built % 1000 // 10)


def test_runtime_version_without_a_runtime(run_py):
    proc = run_py("""
        import cudamem
        from cudamem import runtime
        runtime._NAMES = ("libcudart-none.so",)
        v = cudamem._cudamem.CUDA_VERSION
        assert runtime.get_version() == (v // 1000, v % 1000 // 10)
        assert runtime.is_runtime_present() is False
        print("ok")
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_new_names_touch_no_driver(run_py):
    proc = run_py("""
        import sys
        import cudamem
        cudamem.gpus, cudamem.detect, cudamem.runtime, cudamem.Device
        maps = open('/proc/self/maps').read()
        assert 'libcusim' not in maps and 'libcuda' not in maps
        assert 'ctypes' not in sys.modules
        print('clean')
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "clean"


# ---------------------------------------------------------------------------
# Two devices, in a fresh process each.

TWO = {"CUDAMEM_SIM_DEVICES": "2", "CUDA_VISIBLE_DEVICES": None}

PRELUDE = """
import json, threading
import cudamem
from cudamem import simulator
from tests.helpers.simref import SimDriver
ref = SimDriver(simulator.library_path())
cudamem.is_available()
def done():
    cudamem.close()
    live = simulator.live()
    assert all(v == 0 for v in live.values()), live
    print("ok")
"""


def run_two(run_py, code, env=None):
    full = dict(TWO, PYTHONPATH=ROOT)
    full.update(env or {})
    proc = run_py(PRELUDE + code, env=full)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith("ok"), proc.stdout
    return proc.stdout


@pytest.mark.simulator
def test_two_devices_enumerate_and_select(run_py):
    run_two(run_py, """
devs = cudamem.list_devices()
assert [d.id for d in devs] == [0, 1] and len(cudamem.gpus) == 2
assert devs[0] != devs[1] and devs[0].uuid != devs[1].uuid
assert [d.name for d in devs] == [ref.name(0), ref.name(1)]
assert cudamem.get_current_device().id == 0
assert cudamem.select_device(1).id == 1
assert cudamem.get_current_device().id == 1
assert ref.current() == devs[1].get_primary_context().handle
assert cudamem.current_context().device.id == 1
ctx0 = cudamem.current_context(0)
assert ctx0.device.id == 0 and cudamem.get_current_device().id == 0
assert ctx0 != cudamem.list_devices()[1].get_primary_context()
done()
""")


@pytest.mark.simulator
def test_two_devices_gpus_nesting_restores(run_py):
    run_two(run_py, """
h0 = cudamem.list_devices()[0].get_primary_context().handle
h1 = cudamem.list_devices()[1].get_primary_context().handle
assert ref.current() is None
with cudamem.gpus[1]:
    assert ref.current() == h1 and cudamem.gpus.current.id == 1
    with cudamem.gpus[0]:
        assert ref.current() == h0
        assert cudamem.get_current_device().id == 0
        with cudamem.gpus[1]:
            assert cudamem.get_current_device().id == 1
        assert ref.current() == h0
    assert ref.current() == h1
    # Operations on another device's context restore the current one.
    cudamem.list_devices()[0].get_primary_context().get_memory_info()
    assert ref.current() == h1
assert ref.current() is None and cudamem.gpus.current is None
done()
""")


@pytest.mark.simulator
def test_two_devices_foreign_primary_context(run_py):
    run_two(run_py, """
h = ref.retain_primary(1)
ref.set_current(h)
dev = cudamem.get_current_device()
assert dev.id == 1
ctx = cudamem.current_context()
assert ctx.handle == h and ctx.device.id == 1
assert ref.current() == h  # cudamem pushed nothing on top
ctx.get_memory_info()
assert ref.current() == h
ref.pop()
ref.release_primary(1)
done()
""")


@pytest.mark.simulator
def test_two_devices_new_thread_gets_device_0(run_py):
    run_two(run_py, """
cudamem.select_device(1)
seen = {}
def body():
    seen["before"] = ref.current()
    seen["dev"] = cudamem.get_current_device().id
    seen["after"] = ref.current()
    # a Context made in the main thread works here
    seen["mem"] = ctx1.get_memory_info().total
ctx1 = cudamem.current_context()
t = threading.Thread(target=body); t.start(); t.join()
assert seen["before"] is None and seen["dev"] == 0, seen
assert seen["after"] == cudamem.list_devices()[0].get_primary_context().handle
assert seen["mem"] == ref.total_mem(1)
assert cudamem.get_current_device().id == 1
done()
""")


@pytest.mark.simulator
def test_two_devices_peer_access(run_py):
    run_two(run_py, """
assert cudamem.can_access_peer(0, 1) is ref.can_access_peer(0, 1) is True
assert cudamem.can_access_peer(1, 0) is True
assert cudamem.can_access_peer(0, 0) is ref.can_access_peer(0, 0) is False
ctx0 = cudamem.list_devices()[0].get_primary_context()
assert ctx0.can_access_peer(1) is True
ctx0.enable_peer_access(1)
ctx0.enable_peer_access(cudamem.list_devices()[1])  # already: no error
ctx0.enable_peer_access(cudamem.list_devices()[1].get_primary_context())
ctx0.enable_peer_access(1, flags=0)
try:
    ctx0.enable_peer_access(1, flags=1)
except cudamem.CudaAPIError as exc:
    assert exc.name == "CUDA_ERROR_INVALID_VALUE", exc
else:
    raise SystemExit("flags=1 accepted")
done()
""")


@pytest.mark.simulator
def test_two_devices_no_peer(run_py):
    run_two(run_py, """
assert cudamem.can_access_peer(0, 1) is ref.can_access_peer(0, 1) is False
ctx0 = cudamem.list_devices()[0].get_primary_context()
try:
    ctx0.enable_peer_access(1)
except cudamem.CudaAPIError as exc:
    assert exc.name == "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED", exc
    assert exc.call == "cuCtxEnablePeerAccess"
else:
    raise SystemExit("peer access enabled")
done()
""", env={"CUDAMEM_SIM_NO_PEER": "1"})


@pytest.mark.simulator
def test_visible_devices(run_py):
    out = run_two(run_py, """
print(json.dumps([d.uuid for d in cudamem.list_devices()]))
done()
""", env={"CUDAMEM_SIM_DEVICES": "3"})
    uuids = json.loads(out.splitlines()[0])
    assert len(uuids) == 3
    out = run_two(run_py, """
devs = cudamem.list_devices()
print(json.dumps([d.uuid for d in devs]))
assert cudamem.get_current_device().uuid == devs[0].uuid
assert ref.name(0) == devs[0].name
done()
""", env={"CUDAMEM_SIM_DEVICES": "3", "CUDA_VISIBLE_DEVICES": "2,0"})
    assert json.loads(out.splitlines()[0]) == [uuids[2], uuids[0]]


# ---------------------------------------------------------------------------
# Fork (DESIGN rule 10).

FORK = """
import os
import cudamem
{before}
pid = os.fork()
if pid == 0:
    results = []
    for call in (cudamem.get_current_device, cudamem.list_devices,
                 cudamem.synchronize, lambda: cudamem.select_device(0),
                 lambda: cudamem.gpus[0].get_primary_context(),
                 cudamem.close, cudamem.profile_start):
        try:
            call()
            results.append("ok")
        except cudamem.CudaDriverError as exc:
            results.append(str(exc))
    print("|".join(results), flush=True)
    os._exit(0)
os.waitpid(pid, 0)
"""


def test_fork_after_init_raises(run_py):
    proc = run_py(FORK.format(before="cudamem.current_context()"))
    assert proc.returncode == 0, proc.stderr
    results = proc.stdout.strip().split("|")
    assert results == ["CUDA initialized before forking; use the spawn "
                       "start method"] * 7


def test_fork_of_context_objects_raises(run_py):
    proc = run_py("""
        import os
        import cudamem
        ctx = cudamem.current_context()
        dev = cudamem.get_current_device()
        pid = os.fork()
        if pid == 0:
            out = []
            for call in (ctx.get_memory_info, ctx.synchronize, ctx.push,
                         dev.reset, lambda: dev.MULTIPROCESSOR_COUNT):
                try:
                    call()
                    out.append("ok")
                except cudamem.CudaDriverError as exc:
                    out.append("fork" if "forking" in str(exc) else str(exc))
            print(",".join(out), flush=True)
            os._exit(0)
        os.waitpid(pid, 0)
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == ",".join(["fork"] * 5)


def test_fork_before_init_works(run_py):
    proc = run_py(FORK.format(before="pass"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "|".join(["ok"] * 7)
