"""Instructions per operation as what is live grows (issue 23, item 3):
pooled alloc+free with n free blocks, pooled alloc+free on a live stream
after n streams that freed pooled memory died, pinned_array+free with n
live registrations, and driver calls of a CAI export after an unrelated
stream died. Deterministic whatever the machine's load: the loop runs
under callgrind, collected only between two client requests, and the
self cost is split by object (cudamem's extension, the simulator, the
rest).

    python -m benchmarks.scale CASE N [ITERS]      # one point, in-process
    python -m benchmarks.scale --callgrind CASE N [ITERS]
    python -m benchmarks.scale --curve CASE [MAX]  # N = 1, 10, ... MAX

CASE is arrays (alloc+free 8 B, pool off, N live arrays), history (the
same with the memory history recording), pool (alloc+free
8 B, N free blocks), streams (pooled alloc+free on a live stream after N
streams, all made first, each freed pooled memory and died), batches (the
same with one temporary stream per batch, made and released in turn),
busy (an 8 B pinned copy on a stream and a synchronize, N other streams
alive that each ran a copy), idle-streams (alloc, a copy back on the
legacy stream and free, beside N such streams), register
(pinned_array+free with N live registrations, the op's pages below them
all, where fresh mappings go), register-middle (the same in a hole amid
them) or export (export prints call counts and needs no callgrind).
Runs on the simulator.
"""
import ctypes
import os
import subprocess
import sys
import tempfile
import threading

TOGGLE_C = r"""
#include <valgrind/callgrind.h>
void cg_start(void) { CALLGRIND_ZERO_STATS; CALLGRIND_TOGGLE_COLLECT; }
void cg_stop(void) { CALLGRIND_TOGGLE_COLLECT; }
"""


def _toggles():
    d = tempfile.mkdtemp(prefix="cmscale")
    src, lib = os.path.join(d, "t.c"), os.path.join(d, "t.so")
    with open(src, "w") as f:
        f.write(TOGGLE_C)
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-o", lib, src],
                   check=True)
    return ctypes.CDLL(lib)


def streams_that_ran_a_copy(n):
    """n live streams, each of which copied 8 B from pinned host memory
    to the same device array, all finished; returns them with the host
    and device arrays at the end, and the two arrays."""
    import numpy as np

    import cudamem
    host = cudamem.pinned_array(8, np.uint8)
    dev = cudamem.device_array(8, np.uint8)
    streams = [cudamem.stream() for _ in range(n)]
    # Each copy follows the one before it on the same memory, so a stream
    # holds a worker thread until its predecessor ran: a hundred at a
    # time keeps within callgrind's --max-threads.
    for i, s in enumerate(streams):
        dev.copy_to_device(host, stream=s)
        if i % 100 == 99:
            cudamem.synchronize()
    cudamem.synchronize()
    return streams + [host, dev], host, dev


def setup(case, n):

    import cudamem
    from cudamem import _cudamem
    keep = []
    if case in ("arrays", "history"):
        keep = [cudamem.device_array(1) for _ in range(n)]
        if case == "history":
            # The memory history on, with its default stack depth.
            from cudamem import memory
            memory.record_history(max_entries=100_000)

        def op():
            a = cudamem.device_array(1)
            del a
    elif case == "pool":
        _cudamem._pool_enable(0, True)
        arrays = [cudamem.device_array(1) for _ in range(2 * n + 1)]
        keep = arrays[::2]  # the others become n free blocks
        del arrays

        def op():
            a = cudamem.device_array(1)
            del a
    elif case in ("streams", "batches"):
        batches = case == "batches"
        _cudamem._pool_enable(0, True)
        # The live stream's list first: a walk of the lists finds it last.
        live = cudamem.stream()
        a = cudamem.device_array(1, stream=live)
        del a
        if batches:
            # A pipeline's temporary stream per batch.
            for _ in range(n):
                s = cudamem.stream()
                a = cudamem.device_array(1, stream=s)
                del a, s
        else:
            # All alive at once: no handle is reused.
            streams = [cudamem.stream() for _ in range(n)]
            for s in streams:
                a = cudamem.device_array(1, stream=s)
                del a
            del streams, s
        cudamem.current_context().deallocations.clear()
        keep.append(live)

        def op():
            a = cudamem.device_array(1, stream=live)
            del a
    elif case == "busy":
        # N streams alive throughout, each of which ran a copy; the op is
        # a copy on one more live stream and a synchronize (through a
        # simulator worker, as every stream's work is). run() calls it
        # off the main thread, where the synchronize is one blocking call:
        # on the main thread a wait polls (for Ctrl-C), and its count
        # would follow the worker's timing.
        keep, host, dev = streams_that_ran_a_copy(n)
        live = cudamem.stream()
        keep.append(live)

        def op():
            dev.copy_to_device(host, stream=live)
            cudamem.synchronize()
    elif case == "idle-streams":
        # N streams alive and idle, each of which ran a copy (as in
        # busy); the op is what a default-stream program does beside
        # them: an array made, copied back on the legacy stream (which
        # follows every blocking stream) and freed (which waits for the
        # memory's work).
        import numpy as np
        keep, host, _ = streams_that_ran_a_copy(n)

        def op():
            a = cudamem.device_array(8, np.uint8)
            a.copy_to_host(host)
            del a
    elif case in ("register", "register-middle"):
        keep = [cudamem.pinned_array(1) for _ in range(n + 1)]
        if case == "register-middle":
            # A hole amid the registrations, which the op's new mapping
            # takes (mmap fills the highest gap): its lookups start in
            # the middle of the table rather than at an end.
            del keep[(n + 1) // 2]
        else:
            del keep[-1]

        def op():
            a = cudamem.pinned_array(1)
            del a
    else:
        raise SystemExit(f"unknown case {case!r}")
    op()
    return keep, op


def run(case, n, iters, toggles=None):
    keep, op = setup(case, n)

    def loop():
        # Callgrind collects per thread: what the calling thread runs.
        if toggles is not None:
            toggles.cg_start()
        for _ in range(iters):
            op()
        if toggles is not None:
            toggles.cg_stop()

    if case == "busy":
        worker = threading.Thread(target=loop)
        worker.start()
        worker.join()
    else:
        loop()
    return keep


def export_calls(n_dead):
    import numpy as np

    import cudamem
    import cudamem.simulator as sim
    a, own = cudamem.stream(), cudamem.stream()
    d = cudamem.device_array(1024, stream=own)
    d.copy_to_device(np.ones(1024), stream=a)
    for _ in range(n_dead):
        s = cudamem.stream()
        del s
    cudamem.current_context().deallocations.clear()
    sim.reset()
    d.__cuda_array_interface__  # noqa: B018 (the export is the operation)
    c = {k: v["calls"] for k, v in sim.stats()["calls"].items() if v["calls"]}
    cudamem.synchronize()
    return c


def split(path):
    """Self cost (Ir) by object from a callgrind output file."""
    names, by_obj, ob = {}, {}, None
    with open(path) as f:
        for line in f:
            if line.startswith(("ob=", "cob=")):
                key, _, name = line.partition("=")[2].strip().partition(")")
                if name.strip():
                    names[key] = name.strip()
                if line.startswith("ob="):
                    ob = key
            elif line.startswith("calls="):
                next(f, None)  # the call's inclusive cost
            elif line[:1].isdigit() or line[:1] in "+-*":
                parts = line.split()
                if len(parts) >= 2 and ob is not None:
                    by_obj[ob] = by_obj.get(ob, 0) + int(parts[1])
    out = {"cudamem": 0, "simulator": 0, "other": 0}
    for key, ir in by_obj.items():
        base = os.path.basename(names.get(key, ""))
        kind = ("cudamem" if base.startswith("_cudamem") else
                "simulator" if base.startswith("libcusim") else "other")
        out[kind] += ir
    return out


def callgrind(case, n, iters):
    d = tempfile.mkdtemp(prefix="cmscale")
    out = os.path.join(d, "cg.out")
    env = dict(os.environ, CUDAMEM_SIMULATOR="1", PYTHONMALLOC="malloc")
    subprocess.run(["valgrind", "--tool=callgrind", "--collect-atstart=no",
                    "--max-threads=5000",
                    f"--callgrind-out-file={out}", sys.executable,
                    os.path.abspath(__file__), "--inside", case, str(n),
                    str(iters)],
                   env=env, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    costs = split(out)
    return {k: v // iters for k, v in costs.items()}


def main(argv):
    os.environ.setdefault("CUDAMEM_SIMULATOR", "1")
    if argv[0] == "--inside":
        run(argv[1], int(argv[2]), int(argv[3]), _toggles())
    elif argv[0] == "--callgrind":
        case, n = argv[1], int(argv[2])
        iters = int(argv[3]) if len(argv) > 3 else 200
        per = callgrind(case, n, iters)
        print(f"{case} n={n}: instructions per op: cudamem {per['cudamem']}"
              f", simulator {per['simulator']}, other {per['other']}")
    elif argv[0] == "--curve":
        case = argv[1]
        top = int(argv[2]) if len(argv) > 2 else 100_000
        n = 1
        while n <= top:
            per = callgrind(case, n, 200)
            print(f"| {case} | {n:,} | {per['cudamem']:,} | "
                  f"{per['simulator']:,} | {per['other']:,} |", flush=True)
            n *= 10
    elif argv[0] == "export":
        print(f"export after {argv[1]} dead streams:",
              export_calls(int(argv[1])))
    else:
        run(argv[0], int(argv[1]), int(argv[2]) if len(argv) > 2 else 200)


if __name__ == "__main__":
    main(sys.argv[1:])
