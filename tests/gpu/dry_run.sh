#!/usr/bin/env bash
# The dry run of `make gpu-check` (make gpu-check-dry RESULTS=DIR): check.sh
# on the simulated driver, under a lent GPU machine's conditions, so that the
# check works the first time a GPU comes.
#
#   tests/gpu/dry_run.sh RESULTS_DIR
#
# Like the device machine, each run gets a copy of the tree (tracked files
# and untracked files git does not ignore: no .venv, no build/, no .so),
# VENV=none, no package index (pip and every proxy point at a closed port,
# so an install fails loudly), and a Python that is there already, first
# on PATH as python3. Two machines, each in RESULTS_DIR/<name>:
#   peers: GPU_DRY_PEERS (the peers venv: numba-cuda and cuda.core present,
#          measured by the benchmarks on the simulator);
#   bare:  GPU_DRY_BARE (default: a Python 3.12 with NumPy and pytest if
#          pyenv or PATH has one, else GPU_DRY_DEV, the development
#          venv's): no peers.
# Each must pass tests/gpu/check_results.py, which also checks that
# machine.txt lists the peers as present or absent. GPU_CHECK_TESTS: the
# suite's subset (the whole suite on the simulator does not fit CI's
# budget).
set -u
R=${1:?usage: dry_run.sh RESULTS_DIR}
mkdir -p "$R"
R=$(cd "$R" && pwd)
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PEERS=(numba-cuda cuda-core)
# One file of most areas, about a minute on CI's 2 cores (none that needs
# hypothesis, which the peers venv lacks and the GPU machine has).
DEFAULT_TESTS="tests/arrays/test_arrays.py tests/streams/test_streams.py
tests/hostmem/test_pinned.py tests/hostmem/test_managed.py
tests/memmgr/test_emm.py tests/interop/test_dlpack_host.py
tests/devices/test_contexts.py tests/ipc/test_ipc.py tests/tools/test_cli.py"

die() {
    echo "dry_run: $*" >&2
    exit 2
}

# A Python 3.12 that can build and test (the GPU machine's version), if any.
python312() {
    local py
    for py in "$(pyenv root 2>/dev/null)"/versions/3.12*/bin/python3.12 \
        "$(command -v python3.12)"; do
        if [ -x "$py" ] &&
            "$py" -c "import numpy, pytest, setuptools" 2>/dev/null; then
            echo "$py"
            return
        fi
    done
}

# run_one NAME PYTHON CHECK_ARGS...: check.sh in a fresh copy of the tree;
# CHECK_ARGS say which packages this machine has (check_results.py).
run_one() {
    local name=$1 py=$2 tree
    shift 2
    [ -x "$py" ] || die "$name: no Python at $py"
    tree=$(mktemp -d "${TMPDIR:-/tmp}/cudamem-gpu-dry.XXXXXX")
    TREES+=("$tree")
    git -C "$ROOT" ls-files -z -co --exclude-standard |
        tar -C "$ROOT" --null --ignore-failed-read -T - -cf - |
        tar -C "$tree" -xf - || die "$name: cannot copy the tree"
    echo "== dry run '$name': $py in $tree"
    # The machine's environment: nothing of the caller's driver choice.
    env -u CUDAMEM_SIMULATOR -u CUDAMEM_DRIVER -u CUDAMEM_TEST_DRIVER \
        -u PYTHONPATH -u VIRTUAL_ENV -u PYENV_VERSION \
        PATH="$(dirname "$py"):$PATH" VENV=none GPU_PY=python3 \
        GPU_CHECK_DRY=1 GPU_CHECK_TESTS="${GPU_CHECK_TESTS:-$DEFAULT_TESTS}" \
        PIP_NO_INDEX=1 PIP_INDEX_URL=http://127.0.0.1:9/simple \
        PIP_CONFIG_FILE=/dev/null \
        http_proxy=http://127.0.0.1:9 https_proxy=http://127.0.0.1:9 \
        HTTP_PROXY=http://127.0.0.1:9 HTTPS_PROXY=http://127.0.0.1:9 \
        "$tree/tests/gpu/check.sh" "$R/$name" "$@" || FAILED+=("$name")
}

TREES=()
FAILED=()
trap 'rm -rf "${TREES[@]}"' EXIT
trap 'exit 143' TERM INT
[ -d "$ROOT/.git" ] || [ -f "$ROOT/.git" ] ||
    die "$ROOT is not a git checkout: the copy is git's list of files"
PEERS_PY=${GPU_DRY_PEERS:?set GPU_DRY_PEERS to a Python with the peers}
BARE_PY=${GPU_DRY_BARE:-$(python312)}
BARE_PY=${BARE_PY:-${GPU_DRY_DEV:?set GPU_DRY_BARE or GPU_DRY_DEV}}

run_one peers "$PEERS_PY" "${PEERS[@]/#/--present=}"
run_one bare "$BARE_PY" "${PEERS[@]/#/--absent=}"
if [ ${#FAILED[@]} -ne 0 ]; then
    echo "dry_run: failed: ${FAILED[*]} (logs in $R)"
    exit 1
fi
echo "dry_run: both machines passed (results in $R)"
