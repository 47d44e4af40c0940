#!/usr/bin/env bash
# The GPU check in one lease: build, interop, suite, floor, benchmarks.
#
#   tests/gpu/check.sh RESULTS_DIR      (make gpu-check RESULTS=DIR)
#
# A lent GPU comes with a few minutes of device time, so every step has its
# own time budget: a step that hangs loses its own results, not the others'.
# steps.txt lists each step's exit status and seconds (124: over budget).
set -u
R=${1:?usage: check.sh RESULTS_DIR}
PY=${GPU_PY:-python3}
JOBS=$(nproc)
mkdir -p "$R"
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
    nvidia-smi
    $PY - <<'EOF'
import importlib.metadata as md, sys
print(sys.version)
for name in ("numpy", "numba-cuda", "cupy-cuda13x", "torch", "cuda-core",
             "cuda-bindings", "jax", "pytest", "pytest-xdist"):
    try:
        print(name, md.version(name))
    except md.PackageNotFoundError:
        print(name, "absent")
EOF
} > "$R/machine.txt" 2>&1

# Parallel, in place, with the development warnings as errors.
step build 90 env CUDAMEM_DEV_CFLAGS="-Wall -Wextra -Werror -O2 -g" \
    $PY setup.py -q build_ext --inplace --force -j "$JOBS"
step info 20 $PY -m cudamem info
step interop 60 env CUDAMEM_TEST_DRIVER=real $PY -m pytest -q -rs \
    -p no:cacheprovider --junitxml="$R/interop.xml" tests/gpu
PAR=()
if $PY -c "import xdist" 2>/dev/null; then
    PAR=(-n 8 --dist loadfile)
fi
step pytest 240 env CUDAMEM_TEST_DRIVER=real $PY -m pytest -q -rs \
    -p no:cacheprovider "${PAR[@]}" --junitxml="$R/pytest.xml" \
    --ignore=tests/gpu tests
step floor-build 20 make -s VENV=none build/floor
step floor 40 env CUDAMEM_DRIVER=libcuda.so.1 build/floor \
    --max-bytes 256M --json "$R/floor.json"
step bench 120 $PY -m benchmarks --out "$R/bench" --max-bytes 268435456 \
    --floor build/floor --record
tail -n 3 "$R"/pytest.log "$R"/interop.log
cat "$R/steps.txt"
