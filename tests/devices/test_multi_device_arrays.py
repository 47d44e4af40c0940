"""Arrays across two simulated devices: to_device of another device's array
copies it to the current device (peer to peer when the devices can, staged
through the host when not), copy_to_device and assignment between devices,
checked against NumPy. Each case runs in a fresh interpreter with two
devices."""
import pytest

pytestmark = pytest.mark.simulator

SCRIPT = """
import numpy as np, cudamem
from cudamem import simulator

def calls():
    return {k: v["calls"] for k, v in simulator.stats()["calls"].items()}

rng = np.random.default_rng(1)
h = rng.standard_normal((6, 8))
with cudamem.gpus[1]:
    far = cudamem.to_device(h)
    far_f = cudamem.to_device(np.asfortranarray(h))
    rec = cudamem.to_device(np.zeros(2, [("a", "i4"), ("b", "f8")])[1])
    s1 = cudamem.stream()
assert cudamem.get_current_device().id == 0

cases = {
    "C": (far, h),
    "F": (far_f, h),
    "strided": (far[::2, ::-3], h[::2, ::-3]),
    "transposed": (far.T, h.T),
    "zero-size": (far[:0], h[:0]),
}
for name, (src, want) in cases.items():
    simulator.reset()
    near = cudamem.to_device(src)
    made = calls()
    assert near.gpu_data.context.device.id == 0, name
    assert near is not src, name
    np.testing.assert_array_equal(near.copy_to_host(), want, err_msg=name)
    # The layout: the source's when contiguous, else C order.
    if src.is_c_contiguous() or src.is_f_contiguous():
        assert near.strides == src.strides, name
    else:
        assert near.is_c_contiguous(), name
    peer = made.get("cuMemcpyPeer", 0)
    staged = made.get("cuMemcpyDtoH", 0) + made.get("cuMemcpy2D", 0) + \\
        made.get("cuMemcpy3D", 0)
    if want.size:
        if EXPECT_PEER:
            assert peer == 1, (name, made)
        else:
            assert peer == 0 and staged >= 1, (name, made)

# A record stays a record.
near = cudamem.to_device(rec)
assert type(near) is cudamem.DeviceRecord
assert near.gpu_data.context.device.id == 0

# An array on the current device is returned as it is.
here = cudamem.to_device(h)
assert cudamem.to_device(here) is here

# copy_to_device and assignment from the other device, into strided views.
dst = cudamem.to_device(np.zeros((6, 8)))
dst[1::2, ::-1] = far[::2]
want = np.zeros((6, 8))
want[1::2, ::-1] = h[::2]
np.testing.assert_array_equal(dst.copy_to_host(), want)
dst.copy_to_device(far)
np.testing.assert_array_equal(dst.copy_to_host(), h)

# Asynchronous on a stream of the current device.
s0 = cudamem.stream()
out = cudamem.to_device(far[::-1], stream=s0)
s0.synchronize()
np.testing.assert_array_equal(out.copy_to_host(), h[::-1])
assert out.stream is s0

# A stream of the source's device is not the destination's.
try:
    cudamem.to_device(far, stream=s1)
except ValueError as exc:
    assert "device 1" in str(exc) and "device 0" in str(exc), exc
else:
    raise SystemExit("a stream of device 1 was accepted for device 0")

del far, far_f, rec, s1, near, here, dst, out, s0, cases, src
cudamem.close()
print(simulator.live())
"""


@pytest.mark.parametrize("peer", [True, False], ids=["peer", "no-peer"])
def test_to_device_across_devices(run_py, peer):
    env = {"CUDAMEM_SIM_DEVICES": "2", "CUDA_VISIBLE_DEVICES": None,
           "CUDAMEM_SIM_NO_PEER": None if peer else "1"}
    proc = run_py("EXPECT_PEER = %r\n" % peer + SCRIPT, env=env)
    assert proc.returncode == 0, proc.stderr
    live = eval(proc.stdout)
    assert live["device_allocations"] == 0 and live["streams"] == 0, live
