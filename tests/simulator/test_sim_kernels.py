"""The simulator's kernel entry points, driven through ctypes as a client
of the bare driver would: exported, found by cuGetProcAddress, and failing
with the errors cuda.h documents for a driver that runs no device code
(cuModuleLoad*: CUDA_ERROR_JIT_COMPILER_NOT_FOUND; cuLibraryLoad* and the
rest: CUDA_ERROR_NOT_SUPPORTED). Also cuGetProcAddress of symbols the
simulator lacks, as cuda.h 12 and 13 describe it."""
import pytest

from tests.helpers.simdriver import run_driver

pytestmark = pytest.mark.simulator

JIT_COMPILER_NOT_FOUND = 221
NOT_SUPPORTED = 801

# name as passed to cuGetProcAddress, its ABI version, the exported symbol.
ENTRY_POINTS = [
    ("cuModuleLoad", 2000, "cuModuleLoad"),
    ("cuModuleLoadData", 2000, "cuModuleLoadData"),
    ("cuModuleLoadDataEx", 2010, "cuModuleLoadDataEx"),
    ("cuModuleLoadFatBinary", 2000, "cuModuleLoadFatBinary"),
    ("cuModuleUnload", 2000, "cuModuleUnload"),
    ("cuModuleGetFunction", 2000, "cuModuleGetFunction"),
    ("cuModuleGetGlobal", 3020, "cuModuleGetGlobal_v2"),
    ("cuLibraryLoadData", 12000, "cuLibraryLoadData"),
    ("cuLibraryLoadFromFile", 12000, "cuLibraryLoadFromFile"),
    ("cuLibraryUnload", 12000, "cuLibraryUnload"),
    ("cuLibraryGetKernel", 12000, "cuLibraryGetKernel"),
    ("cuLibraryGetModule", 12000, "cuLibraryGetModule"),
    ("cuKernelGetFunction", 12000, "cuKernelGetFunction"),
    ("cuKernelGetAttribute", 12000, "cuKernelGetAttribute"),
    ("cuLinkCreate", 6050, "cuLinkCreate_v2"),
    ("cuLinkAddData", 6050, "cuLinkAddData_v2"),
    ("cuLinkAddFile", 6050, "cuLinkAddFile_v2"),
    ("cuLinkComplete", 5050, "cuLinkComplete"),
    ("cuLinkDestroy", 5050, "cuLinkDestroy"),
    ("cuLaunchKernel", 4000, "cuLaunchKernel"),
    ("cuLaunchKernelEx", 11060, "cuLaunchKernelEx"),
    ("cuLaunchCooperativeKernel", 9000, "cuLaunchCooperativeKernel"),
    ("cuOccupancyMaxActiveBlocksPerMultiprocessor", 6050,
     "cuOccupancyMaxActiveBlocksPerMultiprocessor"),
    ("cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags", 7000,
     "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags"),
    ("cuOccupancyMaxPotentialBlockSize", 6050,
     "cuOccupancyMaxPotentialBlockSize"),
    ("cuOccupancyMaxPotentialBlockSizeWithFlags", 7000,
     "cuOccupancyMaxPotentialBlockSizeWithFlags"),
    ("cuOccupancyAvailableDynamicSMemPerBlock", 10020,
     "cuOccupancyAvailableDynamicSMemPerBlock"),
    ("cuFuncGetAttribute", 2020, "cuFuncGetAttribute"),
    ("cuFuncSetAttribute", 9000, "cuFuncSetAttribute"),
    ("cuFuncSetCacheConfig", 3000, "cuFuncSetCacheConfig"),
    ("cuFuncGetModule", 11000, "cuFuncGetModule"),
]

PTDS = [("cuLaunchKernel", 7000, "cuLaunchKernel_ptsz"),
        ("cuLaunchKernelEx", 11060, "cuLaunchKernelEx_ptsz"),
        ("cuLaunchCooperativeKernel", 9000, "cuLaunchCooperativeKernel_ptsz")]


def test_kernel_entry_points_are_found(run_py):
    proc = run_driver(run_py, """
        status = ctypes.c_int()
        for flags, rows in ((1, %r), (2, %r)):  # legacy, per-thread
            for name, version, export in rows:
                pfn = c_void_p()
                ok(lib.cuGetProcAddress_v2(name.encode(), byref(pfn), version,
                                           ctypes.c_uint64(flags),
                                           byref(status)), name)
                assert status.value == 0, (name, status.value)
                exported = ctypes.cast(getattr(lib, export), c_void_p).value
                assert pfn.value == exported, (name, version, export)
        print("done")
    """ % (ENTRY_POINTS, PTDS))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.split() == ["done"]


def test_kernel_entry_points_fail_as_documented(run_py):
    proc = run_driver(run_py, """
        p = c_void_p()
        i = ctypes.c_int()
        results = [
            lib.cuModuleLoad(byref(p), b"kernels.cubin"),
            lib.cuModuleLoadData(byref(p), b"//ptx"),
            lib.cuModuleLoadDataEx(byref(p), b"//ptx", 0, None, None),
            lib.cuModuleLoadFatBinary(byref(p), b"fatbin"),
            lib.cuLibraryLoadData(byref(p), b"//ptx", None, None, 0, None,
                                  None, 0),
            lib.cuLibraryLoadFromFile(byref(p), b"k.cubin", None, None, 0,
                                      None, None, 0),
            lib.cuLinkCreate_v2(0, None, None, byref(p)),
            lib.cuModuleGetFunction(byref(p), None, b"kernel"),
            lib.cuLaunchKernel(None, 1, 1, 1, 1, 1, 1, 0, None, None, None),
            lib.cuLaunchKernel_ptsz(None, 1, 1, 1, 1, 1, 1, 0, None, None,
                                    None),
            lib.cuLaunchCooperativeKernel(None, 1, 1, 1, 1, 1, 1, 0, None,
                                          None),
            lib.cuOccupancyMaxActiveBlocksPerMultiprocessor(
                byref(i), None, 128, c_size_t(0)),
            lib.cuFuncGetAttribute(byref(i), 0, None),
        ]
        print(*results)
        print(p.value)  # no handle was made
        # A NULL out-pointer is the caller's error, before anything else.
        print(lib.cuModuleLoadData(None, b"//ptx"),
              lib.cuLinkCreate_v2(0, None, None, None))
        # Loads and launches act in the current context.
        ok(lib.cuCtxSetCurrent(None), "cuCtxSetCurrent")
        print(lib.cuModuleLoadData(byref(p), b"//ptx"),
              lib.cuLaunchKernel(None, 1, 1, 1, 1, 1, 1, 0, None, None, None))
    """)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results, handle, null_out, no_ctx = proc.stdout.splitlines()
    assert [int(r) for r in results.split()] == \
        [JIT_COMPILER_NOT_FOUND] * 4 + [NOT_SUPPORTED] * 9
    assert handle == "None"
    assert null_out.split() == ["1", "1"]  # CUDA_ERROR_INVALID_VALUE
    assert no_ctx.split() == ["201", "201"]  # CUDA_ERROR_INVALID_CONTEXT


def test_kernel_entry_points_need_cuinit(run_py):
    proc = run_py("""
        import ctypes
        from cudamem import simulator
        lib = ctypes.CDLL(simulator.library_path())
        p = ctypes.c_void_p()
        print(lib.cuModuleLoadData(ctypes.byref(p), b"//ptx"),
              lib.cuLaunchKernel(None, 1, 1, 1, 1, 1, 1, 0, None, None, None))
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["3", "3"]  # CUDA_ERROR_NOT_INITIALIZED


def test_kernel_entry_points_take_injected_faults_and_count(run_py):
    proc = run_driver(run_py, """
        simulator.reset()
        simulator.inject("cuLaunchKernel",
                         "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES")
        print(lib.cuLaunchKernel(None, 1, 1, 1, 1, 1, 1, 0, None, None, None),
              lib.cuLaunchKernel(None, 1, 1, 1, 1, 1, 1, 0, None, None, None))
        print(simulator.stats()["calls"]["cuLaunchKernel"]["calls"])
    """)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    faulted, counted = proc.stdout.splitlines()
    assert faulted.split() == ["701", str(NOT_SUPPORTED)]
    assert counted == "2"


@pytest.mark.parametrize("driver, expect", [
    # cuda.h 12 and 13: CUDA_SUCCESS, pfn NULL, symbolStatus says why.
    ("13000", ["0", "None", "1", "0", "None", "2"]),
    ("12000", ["0", "None", "1", "0", "None", "2"]),
    # The 11.x documentation: CUDA_ERROR_NOT_FOUND.
    ("11080", ["500", "None", "1", "500", "None", "2"]),
])
def test_get_proc_address_of_a_missing_symbol(run_py, driver, expect):
    proc = run_driver(run_py, """
        status = ctypes.c_int(-1)
        pfn = c_void_p(1)
        version = int(os.environ["CUDAMEM_SIM_DRIVER_VERSION"])
        print(lib.cuGetProcAddress_v2(b"cuNoSuchEntryPoint", byref(pfn),
                                      version, ctypes.c_uint64(0),
                                      byref(status)), pfn.value, status.value)
        # Known, but only in a later ABI than the one asked for.
        status.value, pfn.value = -1, 1
        print(lib.cuGetProcAddress_v2(b"cuLibraryLoadData", byref(pfn), 11080,
                                      ctypes.c_uint64(0), byref(status)),
              pfn.value, status.value)
    """, env={"CUDAMEM_SIM_DRIVER_VERSION": driver})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.split() == expect
