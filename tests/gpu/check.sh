#!/usr/bin/env bash
# The GPU check in one lease: build, interop, suite, floor, benchmarks.
#
#   tests/gpu/check.sh RESULTS_DIR [CHECK_ARGS...]
#                                       (make gpu-check RESULTS=DIR)
#
# A lent GPU comes with a few minutes of device time, so every step has its
# own time budget: a step that hangs loses its own results, not the others'.
# steps.txt lists each step's exit status and seconds (124: over budget);
# tests/gpu/check_results.py (given CHECK_ARGS) then checks that every
# results file is there and every step passed; its status is this script's.
#
# GPU_PY: the machine's Python (default python3). GPU_CHECK_DRY=1: the same
# steps on the simulated driver (tests/gpu/dry_run.sh runs it so, in a copy
# of the tree, as CI's `make gpu-check-dry`): the suite on the simulator
# instead of CUDAMEM_TEST_DRIVER=real, the floor and the peers loading the
# simulator as libcuda.so.1, the benchmarks in --quick mode.
# GPU_CHECK_TESTS: the suite's paths (default: tests, less tests/gpu).
set -u
R=${1:?usage: check.sh RESULTS_DIR [CHECK_ARGS...]}
shift
mkdir -p "$R"
R=$(cd "$R" && pwd)
# Every path below is the repository's, wherever this is called from.
cd "$(dirname "$0")/../.."
PY=${GPU_PY:-python3}
DRY=${GPU_CHECK_DRY:-0}
JOBS=$(nproc)
: > "$R/steps.txt"

step() {
    local name=$1 budget=$2 t0 rc
    shift 2
    t0=$(date +%s)
    timeout -k 5 "$budget" "$@" > "$R/$name.log" 2>&1
    rc=$?
    echo "$name rc=$rc $(($(date +%s) - t0))s (budget ${budget}s)" |
        tee -a "$R/steps.txt"
}

{
    date -u
    if [ "$DRY" = 1 ]; then
        echo "dry run: the simulated driver stands in for a GPU"
    fi
    if command -v nvidia-smi > /dev/null; then
        nvidia-smi
    else
        echo "nvidia-smi: not on PATH"
    fi
    $PY - <<'EOF'
import importlib.metadata as md, sys
print(sys.executable, sys.version)
for name in ("numpy", "numba-cuda", "cupy-cuda13x", "torch", "cuda-core",
             "cuda-bindings", "jax", "pytest", "pytest-xdist", "hypothesis"):
    try:
        print(name, md.version(name))
    except md.PackageNotFoundError:
        print(name, "absent")
EOF
} > "$R/machine.txt" 2>&1

# Parallel, in place, with the development warnings as errors.
step build 90 env CUDAMEM_DEV_CFLAGS="-Wall -Wextra -Werror -O2 -g" \
    $PY setup.py -q build_ext --inplace --force -j "$JOBS"

if [ "$DRY" = 1 ]; then
    # What loads libcuda.so.1 by name (the floor, numba-cuda, cuda.core)
    # finds the simulator first on LD_LIBRARY_PATH; cudamem and the tests
    # use it too. The peers are measured on it as on a GPU.
    DRIVER=sim
    FLOOR_MODE=(--quick)
    BENCH_MODE=(--quick --peers all)
    SIM_DIR=$($PY -c "import cudamem.simulator as s; print(s.libcuda_dir())")
    export LD_LIBRARY_PATH="$SIM_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export CUDAMEM_SIMULATOR=1
else
    DRIVER=real
    FLOOR_MODE=(--max-bytes 256M)
    BENCH_MODE=(--max-bytes 268435456)
fi
read -r -d "" -a TESTS <<< "${GPU_CHECK_TESTS:-tests}"

step info 20 $PY -m cudamem info
# Before the suite: tests/tools/test_benchmarks.py runs the floor and both
# it and test_bench_peers.py load it as a library; built here, where make's
# default VENV (for the CUDA headers) does not exist.
step floor-build 20 make -s VENV=none build/floor build/libfloor.so
step interop 60 env CUDAMEM_TEST_DRIVER=$DRIVER $PY -m pytest -q -rs \
    -p no:cacheprovider --junitxml="$R/interop.xml" tests/gpu
PAR=()
if $PY -c "import xdist" 2>/dev/null; then
    PAR=(-n 8 --dist loadfile)
fi
step pytest 240 env CUDAMEM_TEST_DRIVER=$DRIVER $PY -m pytest -q -rs \
    -p no:cacheprovider ${PAR[@]+"${PAR[@]}"} --junitxml="$R/pytest.xml" \
    --ignore=tests/gpu "${TESTS[@]}"
step floor 40 env CUDAMEM_DRIVER=libcuda.so.1 build/floor \
    "${FLOOR_MODE[@]}" --json "$R/floor.json"
step bench 120 $PY -m benchmarks --out "$R/bench" --floor build/floor \
    --record "${BENCH_MODE[@]}"
tail -n 3 "$R"/pytest.log "$R"/interop.log
cat "$R/steps.txt"
$PY tests/gpu/check_results.py "$R" "$@"
