"""Property tests of element moves between any two layouts, with NumPy
doing the same thing on host arrays as the reference, compared bit for bit
(NaN payloads, NaT, -0.0, byte order and all).

tests/arrays/test_views.py covers views (indexing, reshape, transpose, ...),
to_device of any host layout, contiguous host data into a device view, a
contiguous device array into a strided host destination, and assignment of
same-shaped or last-axis-broadcast values, over ten fixed dtypes. This file
covers what it does not:

- dtypes drawn at random: bool, signed and unsigned ints, float16/32/64,
  complex, datetime64 and timedelta64 of any unit, both byte orders,
  structured (nested, sub-arrays, padding), bytes and void;
- both sides strided at once: a strided device view into a strided host
  destination (axes permuted, steps of either sign, gaps), a strided or
  broadcast host source into a strided device view, a strided device view
  into another, and overlapping copies within one array;
- numba's squeezed-shape rule (destinations with extra length-1 axes);
- assignment with general broadcasting (any axes of length 1, fewer
  dimensions) from host (strided, cast from another dtype), device and
  scalar values;
- every operation on stream 0 and on a stream.

The "ci" hypothesis profile runs them in the suite; ``make fuzz`` runs them
(they are hypothesis tests, so marked ``fuzz``) with many more examples.
"""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as hst
from hypothesis.extra import numpy as hnp

import cudamem

MAX_BUFFER = 60_000  # elements of a strided buffer, to keep examples fast

SCALAR_DTYPES = hst.one_of(
    hnp.boolean_dtypes(),
    hnp.integer_dtypes(endianness="?"),
    hnp.unsigned_integer_dtypes(endianness="?"),
    hnp.floating_dtypes(endianness="?", sizes=(16, 32, 64)),
    hnp.complex_number_dtypes(endianness="?"),
    hnp.datetime64_dtypes(endianness="?"),
    hnp.timedelta64_dtypes(endianness="?"),
)
PADDED = [
    np.dtype([("a", "u1"), ("b", "<f8")], align=True),
    np.dtype({"names": ["x"], "formats": ["<i2"], "offsets": [2],
              "itemsize": 8}),
    np.dtype([("p", [("q", "?"), ("r", ">c8")]), ("s", "<i4", (2, 3))]),
    np.dtype("S5"),
    np.dtype("V3"),
]
DTYPES = hst.one_of(
    SCALAR_DTYPES,
    hnp.array_dtypes(subtype_strategy=SCALAR_DTYPES, min_size=1, max_size=3,
                     allow_subarrays=True),
    hst.sampled_from(PADDED),
)
NUMERIC = "biufc"
CAST_SOURCES = [np.dtype(order + code) for order in "<>" for code in
                ["?", "i1", "u1", "i2", "u2", "i4", "u4", "i8", "u8", "f2",
                 "f4", "f8", "c8", "c16"]]


# ---------------------------------------------------------------------------
# Values and layouts.


def _fix_bools(arr):
    """Random bytes as bool are not 0 or 1: make them so (NumPy would
    normalize them in some copies and not others)."""
    if arr.dtype.names:
        for name in arr.dtype.names:
            _fix_bools(arr[name])
    elif arr.dtype.subdtype is not None:
        _fix_bools(arr.view(arr.dtype.subdtype[0]))
    elif arr.dtype.kind == "b":
        arr[...] = (arr.view(np.uint8) & 1).astype(bool)


def random_array(dtype, shape, seed, order="C"):
    """Random bytes as `dtype`: every bit pattern, NaNs and NaT included."""
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape, dtype=np.int64))
    raw = rng.integers(0, 256, size=n * dtype.itemsize, dtype=np.uint8)
    arr = raw.view(dtype).reshape(shape) if n else np.empty(shape, dtype)
    arr = np.asarray(arr, order=order).copy(order=order)
    _fix_bools(arr)
    return arr


def canon(a):
    """What two arrays must share to be equal bit for bit: the named
    fields' bytes (padding between fields is no element's)."""
    a = np.asarray(a)
    if a.dtype.names:
        return tuple(canon(a[name]) for name in a.dtype.names)
    return (a.shape, a.dtype.str, np.ascontiguousarray(a).tobytes())


def assert_same(got, want):
    assert got.shape == want.shape, (got.shape, want.shape)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert canon(got) == canon(want)


@hst.composite
def layouts(draw, shape):
    """A way to see `shape` inside a bigger buffer: (buffer shape, order,
    index, axes) such that buffer[index].transpose(axes) has `shape`, with
    the axes permuted, steps of either sign up to 3, offsets, gaps and
    maybe an extra axis taken by an integer."""
    nd = len(shape)
    axes = tuple(draw(hst.permutations(range(nd))))
    inverse = [0] * nd
    for i, a in enumerate(axes):
        inverse[a] = i
    sliced = [shape[inverse[j]] for j in range(nd)]
    total = int(np.prod(shape, dtype=np.int64))
    big = total * 3 ** nd > MAX_BUFFER
    bshape, index = [], []
    for n in sliced:
        step = 1 if big else draw(hst.integers(1, 3))
        offset = 0 if big else draw(hst.integers(0, 1))
        extra = 0 if big else draw(hst.integers(0, 1))
        if n == 0:
            bshape.append(draw(hst.integers(0, 2)))
            index.append(slice(0, 0))
            continue
        length = offset + (n - 1) * step + 1 + extra
        bshape.append(length)
        if draw(hst.booleans()):
            index.append(slice(offset, offset + (n - 1) * step + 1, step))
        else:
            start = length - 1 - offset
            stop = start - n * step
            index.append(slice(start, stop if stop >= 0 else None, -step))
    if not big and draw(hst.booleans()):
        where = draw(hst.integers(0, nd))
        size = draw(hst.integers(1, 3))
        bshape.insert(where, size)
        index.insert(where, draw(hst.integers(-size, size - 1)))
    order = draw(hst.sampled_from("CF"))
    return tuple(bshape), order, tuple(index), axes


def apply_layout(buf, layout):
    _, _, index, axes = layout
    return buf[index + (Ellipsis,)].transpose(axes)  # 0-d: a view, too


@hst.composite
def host_views(draw, shape, dtype):
    """(buffer, view): a random host buffer and a view of it of `shape`."""
    layout = draw(layouts(shape))
    buf = random_array(dtype, layout[0], draw(hst.integers(0, 2 ** 32)),
                       layout[1])
    view = apply_layout(buf, layout)
    assert view.shape == tuple(shape)
    return buf, view, layout


@hst.composite
def broadcastable_shapes(draw, shape):
    """A shape NumPy broadcasts to `shape`: some trailing axes (maybe
    none), each either the same or 1. No extra leading axes of length 1:
    see test_setitem_value_with_leading_unit_axes."""
    keep = draw(hst.integers(0, len(shape)))
    tail = shape[len(shape) - keep:]
    return tuple(n if draw(hst.booleans()) else 1 for n in tail)


@hst.composite
def device_bases(draw, max_dims=5, min_dims=0, min_first=0):
    dtype = draw(DTYPES)
    shape = draw(hnp.array_shapes(min_dims=min_dims, max_dims=max_dims,
                                  min_side=0, max_side=5))
    if shape and shape[0] < min_first:
        shape = (min_first,) + shape[1:]
    order = draw(hst.sampled_from("CF"))
    host = random_array(dtype, shape, draw(hst.integers(0, 2 ** 32)), order)
    return host


@hst.composite
def keys(draw, shape):
    """A basic index of `shape` that leaves an array (not a scalar)."""
    key = draw(hnp.basic_indices(shape, min_dims=0, allow_newaxis=True,
                                 allow_ellipsis=True))
    if not isinstance(key, tuple):
        key = (key,)
    if Ellipsis not in key:
        key = key + (Ellipsis,)  # never a scalar: a 0-d view at least
    return key


def streams(draw):
    """0 or a new stream; the caller synchronizes."""
    return draw(hst.sampled_from([0, 1])) and cudamem.stream()


def sync(stream):
    if stream:
        stream.synchronize()


def run(stream, fn):
    """fn(stream) on the stream drawn, then wait for it."""
    fn(stream)
    sync(stream)


# ---------------------------------------------------------------------------
# The properties.


@given(hst.data())
def test_round_trip_of_any_dtype_and_layout(data):
    host = data.draw(device_bases())
    stream = streams(data.draw)
    source = host
    if host.ndim and data.draw(hst.booleans()):
        # A view with negative steps, or a broadcast source.
        source = host[data.draw(keys(host.shape))]
        if source.ndim and source.size and data.draw(hst.booleans()):
            source = np.broadcast_to(source[..., :1], source.shape)
    dev = cudamem.to_device(source, stream=stream)
    back = dev.copy_to_host(stream=stream)
    sync(stream)
    assert_same(back, source)
    if source.size and (source.flags.c_contiguous or
                        source.flags.f_contiguous):
        # The layout is kept (the stride of an axis of length 1, and any
        # stride of an empty array, are free).
        assert [st for st, n in zip(back.strides, back.shape) if n > 1] == \
            [st for st, n in zip(source.strides, source.shape) if n > 1]
    assert dev.dtype == source.dtype


@given(hst.data())
def test_strided_device_view_into_strided_host_destination(data):
    host = data.draw(device_bases())
    key = data.draw(keys(host.shape))
    ref = host[key]
    dev = cudamem.to_device(host)
    dbuf, dview, layout = data.draw(host_views(ref.shape, host.dtype))
    expect = dbuf.copy()
    target = apply_layout(expect, layout)
    if data.draw(hst.booleans()):
        # numba's rule: the shapes need only match without axes of 1.
        axis = data.draw(hst.integers(0, dview.ndim))
        dview = np.expand_dims(dview, axis)
        target = np.expand_dims(target, axis)
    target[...] = ref.reshape(target.shape)
    stream = streams(data.draw)
    run(stream, lambda s: dev[key].copy_to_host(dview, stream=s))
    assert_same(dbuf, expect)


@given(hst.data())
def test_strided_host_source_into_strided_device_view(data):
    host = data.draw(device_bases())
    key = data.draw(keys(host.shape))
    shape = host[key].shape
    _, source, _ = data.draw(host_views(shape, host.dtype))
    if source.ndim and source.size and data.draw(hst.booleans()):
        # A broadcast source: one axis of the view seen with stride 0.
        axis = data.draw(hst.integers(0, source.ndim - 1))
        one = source[(slice(None),) * axis + (slice(0, 1),)]
        source = np.broadcast_to(one, shape)
    dev = cudamem.to_device(host)
    expect = host.copy()
    expect[key] = source
    stream = streams(data.draw)
    run(stream, lambda s: dev[key].copy_to_device(source, stream=s))
    assert_same(dev.copy_to_host(), expect)


@given(hst.data())
def test_strided_device_view_into_strided_device_view(data):
    host = data.draw(device_bases())
    key = data.draw(keys(host.shape))
    shape = host[key].shape
    sbuf, sview, layout = data.draw(host_views(shape, host.dtype))
    source = apply_layout(cudamem.to_device(sbuf), layout)
    dev = cudamem.to_device(host)
    expect = host.copy()
    expect[key] = sview
    stream = streams(data.draw)
    run(stream, lambda s: dev[key].copy_to_device(source, stream=s))
    assert_same(dev.copy_to_host(), expect)


@given(hst.data())
def test_overlapping_copies_within_one_array(data):
    host = data.draw(device_bases(max_dims=4, min_dims=1, min_first=2))
    dev = cudamem.to_device(host)
    kind = data.draw(hst.sampled_from(["shift-up", "shift-down", "flip"]))
    expect = host.copy()
    if kind == "flip":
        # The destination reversed along some axes, onto itself.
        flips = tuple(slice(None, None, -1) if data.draw(hst.booleans())
                      else slice(None) for _ in range(host.ndim))
        dst, src = (Ellipsis,), flips
    elif kind == "shift-up":
        dst, src = (slice(1, None),), (slice(None, -1),)
    else:
        dst, src = (slice(None, -1),), (slice(1, None),)
    expect[dst] = expect[src].copy()
    how = data.draw(hst.sampled_from(["copy_to_device", "setitem"]))
    stream = streams(data.draw)
    if how == "setitem":
        target = dev.bind(stream) if stream else dev
        run(stream, lambda s: target.__setitem__(dst, dev[src]))
    else:
        run(stream, lambda s: dev[dst].copy_to_device(dev[src], stream=s))
    assert_same(dev.copy_to_host(), expect)


@given(hst.data())
def test_setitem_with_broadcasting(data):
    host = data.draw(device_bases())
    key = data.draw(keys(host.shape))
    target_shape = host[key].shape
    vshape = data.draw(broadcastable_shapes(target_shape))
    dtype = host.dtype
    numeric = dtype.kind in NUMERIC and not dtype.names
    kind = data.draw(hst.sampled_from(["host", "device", "scalar"] +
                                      ["cast"] * numeric))
    if kind == "cast":
        # Host values of another dtype, cast as NumPy does; only safe
        # casts, whose results do not depend on the platform.
        dtype = data.draw(hst.sampled_from(
            [d for d in CAST_SOURCES if np.can_cast(d, dtype, "safe")]))
    if kind == "scalar":
        value = random_array(dtype, (), data.draw(hst.integers(0, 2 ** 32)))
        value = value[()]  # a NumPy scalar (np.void for records)
        host_value = value
    else:
        buf, host_value, layout = data.draw(host_views(vshape, dtype))
        value = host_value
        if kind == "device":
            value = apply_layout(cudamem.to_device(buf), layout)
    expect = host.copy()
    expect[key] = host_value
    stream = streams(data.draw)
    dev = cudamem.to_device(host)
    target = dev.bind(stream) if stream else dev
    run(stream, lambda s: target.__setitem__(key, value))
    assert_same(dev.copy_to_host(), expect)


@pytest.mark.parametrize("device", [False, True], ids=["host", "device"])
def test_setitem_value_with_leading_unit_axes(device):
    dev = cudamem.to_device(np.zeros((2, 3)))
    value = np.arange(3.0).reshape(1, 1, 3)
    expect = np.zeros((2, 3))
    expect[0] = value
    dev[0] = cudamem.to_device(value) if device else value
    np.testing.assert_array_equal(dev.copy_to_host(), expect)
