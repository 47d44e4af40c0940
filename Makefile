# cudamem. `make demo` and `make test` do all set-up themselves on a fresh
# clone (a .venv from the package index); VENV=none uses the interpreter as it
# is (a GPU machine with NumPy and pytest but no index).
SHELL := /bin/bash
.DEFAULT_GOAL := test

VENV ?= .venv
ifeq ($(VENV),none)
PY ?= python3
VENV_STAMP :=
else
PY := $(VENV)/bin/python
VENV_STAMP := $(VENV)/.stamp
endif
PYTHON ?= python3
RESULTS ?= results

# The CUDA headers the extension builds with (setup.py's find_cuda_include:
# CUDA_HOME, the nvidia-cuda-runtime wheel, the toolkit), asked once, when
# first used: the C tests, the floor and clang-tidy compile against them too.
CUDA_INC_DIR = $(eval CUDA_INC_DIR := $$(shell $(PY) setup.py --cuda-include))$(CUDA_INC_DIR)
# The warnings every C file passes: the development builds and the C tests
# make them errors (`pip install .` never does). The simulator adds
# -Wno-missing-prototypes (setup.py): it defines the driver's exports.
WARN_CFLAGS := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wformat=2 \
	-Wconversion -Wpointer-arith -Wvla -Wold-style-definition \
	-Wnested-externs -Wlogical-op -Wduplicated-cond
DEV_CFLAGS := $(WARN_CFLAGS) -Wmissing-prototypes -Werror -O2 -g
# lib/: dependency-free data structures, built into both libraries.
LIB_SRC := $(wildcard cudamem/_src/lib/*.c)
LIB_HDR := $(wildcard cudamem/_src/lib/*.h)
SIM_SRC := $(wildcard cudamem/_src/sim/*.c) $(LIB_SRC)
SIM_HDR := $(wildcard cudamem/_src/sim/*.h cudamem/_src/core/cuerrors.h) \
	$(LIB_HDR)
EXT_SRC := $(wildcard cudamem/_src/core/*.[ch] cudamem/_src/py/*.[ch]) $(SIM_SRC) $(SIM_HDR) setup.py
CTEST_SRC := $(wildcard tests/c/test_*.c)
CTEST_CFLAGS = -std=c11 -D_GNU_SOURCE -DCUDAMEM_DEBUG -g -O1 $(WARN_CFLAGS) \
	-Werror -pthread \
	-fvisibility=hidden -I$(CUDA_INC_DIR) -Icudamem/_src/sim -Icudamem/_src/core \
	-Icudamem/_src/lib -Itests/c
ASAN_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
LIBASAN = $(shell $(CC) -print-file-name=libasan.so)
# test-tsan: ThreadSanitizer over a CUDAMEM_DEBUG build (lock-order and
# refcount asserts on; the C tests are always built so), the C tests and
# the Python tests that use threads or take core's locks in their unusual
# orders: teardown, out-of-memory recovery, fault injection (about 4
# minutes in all on a shared 2-core machine today).
TSAN_FLAGS := -fsanitize=thread -fno-omit-frame-pointer
LIBTSAN = $(shell $(CC) -print-file-name=libtsan.so)
TSAN_TESTS = $(addprefix tests/, \
	lifecycle/test_thread_stress.py streams/test_streams.py \
	streams/test_callbacks.py memmgr/test_deallocations.py \
	streams/test_events.py lifecycle/test_teardown.py \
	lifecycle/test_lifecycle.py memmgr/test_oom.py memmgr/test_pool.py \
	hostmem/test_staging.py hostmem/test_hostpool.py \
	hostmem/test_registration.py hostmem/test_host_lifetimes.py \
	faults/test_error_paths_more.py)
# Time budgets (seconds) that keep `.ci/run` well inside CI's 90 minutes.
BUDGET_PYTEST ?= 1200
BUDGET_ASAN ?= 1800
BUDGET_TSAN ?= 900
BUDGET_CTEST ?= 600
BUDGET_STRESS ?= 600
BUDGET_FUZZ ?= 1200
BUDGET_DOCS ?= 600
BUDGET_NOTEBOOK ?= 300
BUDGET_TYPECHECK ?= 300
BUDGET_NUMBA ?= 360
BUDGET_LINT ?= 600
PYTEST_ARGS ?=
# test-stress: the array suites with the simulator's stream-order hazard
# checker on and every stream operation delayed by STRESS_DELAY_US, which
# exposes missing synchronization, and with its strict pitches, which
# refuse the device-to-device cuMemcpy2D(Async) a driver may refuse (about
# 60 s today at 5000).
STRESS_DELAY_US ?= 5000
STRESS_TESTS = $(addprefix tests/, \
	arrays/test_arrays.py arrays/test_views.py arrays/test_fuzz_copies.py \
	arrays/test_copy_pitch.py streams/test_streams.py streams/test_events.py \
	streams/test_callbacks.py streams/test_stream_semantics.py \
	hostmem/test_pinned.py hostmem/test_mapped.py hostmem/test_managed.py \
	hostmem/test_registration.py interop/test_cai_import.py \
	interop/test_dlpack_host.py lifecycle/test_thread_stress.py)
# test-numba: numba-cuda's own host-side tests against cudamem, in a venv of
# their own (see tools/numba_tests.py). numba-cuda goes in with --target and
# no dependencies: it is only the source of the test modules, and installed
# into the venv its .pth would redirect `numba.cuda` to numba-cuda's own
# code. cuda-core is what test_events imports at module level.
NUMBA_VENV ?= build/numba-venv
NUMBA_CUDA_VERSION ?= 0.30.4
NUMBA_TEST_PKGS ?= "numpy>=2" pytest cuda-core==0.5.1 cuda-bindings==12.9.4 \
	cuda-pathfinder==1.9.1
# test-peers: the real numba-cuda and cuda.core on the simulator, in a venv
# of their own (see tools/numba_tests.py --profile peers and tests/peers/).
# cuda-bindings stays below 13.4, whose IPC handles lost the `reserved`
# field numba-cuda 0.30.4 pickles; filecheck and cffi are what numba-cuda's
# test modules import. No CUDA toolkit: kernels are expected failures.
PEERS_VENV ?= build/peers-venv
PEERS_PKGS ?= numba-cuda==$(NUMBA_CUDA_VERSION) numba==0.68.1 \
	cuda-core==1.2.2 cuda-bindings==13.3.1 cuda-pathfinder==1.9.1 \
	numpy==2.4.6 pytest==9.2.0 filecheck==1.0.6 cffi==2.1.1
BUDGET_PEERS ?= 360
# PyTorch's memory-snapshot script (torch/cuda/_memory_viz.py, standard
# library only) for tests/peers/test_memory_viz.py, taken from the CPU-only
# torch wheel the package index serves (the macOS arm64 one: the Linux
# wheel is the CUDA build, gigabytes with its dependencies). About 80 MB,
# downloaded without dependencies; only the one file is kept.
TORCH_VIZ_VERSION ?= 2.11.0
# test-pythons: cudamem built (-Werror) and tested on each other CPython
# (tools/test_pythons.py); the main Python runs the whole suite in `make test`.
PYTHONS ?= 3.10.13,3.12.1,3.13.0
BUDGET_PYTHONS ?= 1200
# make wheel / test-wheel: the build front end and auditwheel in their own
# venv; the wheels go to DIST.
WHEEL_VENV ?= build/wheel-venv
DIST ?= build/dist
BUDGET_WHEEL ?= 600
# bench-peers: benchmarks/peers.py in the peers venv on the simulator; the
# budget covers the venv and a full run (CI's --quick takes under 3 minutes).
BUDGET_BENCH_PEERS ?= 1500
# fuzz: examples per hypothesis test (about 7 minutes for 10000 today).
FUZZ_EXAMPLES ?= 10000

.PHONY: all lint demo test test-asan test-stress fuzz coverage gpu-check \
	gpu-check-dry clean \
	build build-asan build-coverage ctest ctest-valgrind ctest-asan pytest \
	test-tsan build-tsan ctest-tsan build-debug \
	bench-floor bench bench-staging venv docs notebook typecheck test-numba \
	test-peers peers-run bench-peers bench-peers-run wheel test-wheel test-pythons

all: build

venv: $(VENV_STAMP)
$(VENV)/.stamp:
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q "numpy>=2" pytest hypothesis ml_dtypes \
	  setuptools wheel sphinx nbformat nbclient ipykernel mypy \
	  "nvidia-cuda-runtime==13.0.*" "nvidia-cuda-profiler-api==13.0.*"
	touch $@

# The linters, pinned in requirements-lint.txt; with VENV=none they are
# expected on PATH.
ifeq ($(VENV),none)
LINT_BIN :=
LINT_STAMP :=
else
LINT_BIN := $(VENV)/bin/
LINT_STAMP := $(VENV)/.lint-stamp
endif
$(VENV)/.lint-stamp: requirements-lint.txt $(VENV_STAMP)
	$(VENV)/bin/pip install -q -r requirements-lint.txt
	touch $@

# Every C file of the extension, the simulator and the C tests; the
# generated headers are in .clang-format-ignore.
LINT_C_SRC = $(wildcard cudamem/_src/*/*.c cudamem/_src/*/*.h tests/c/*.c \
	tests/c/*.h)
TIDY_SRC = $(wildcard cudamem/_src/*/*.c tests/c/*.c)
PY_INC = $(shell $(PY) -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
NP_INC = $(shell $(PY) -c 'import numpy; print(numpy.get_include())')
TIDY_FLAGS = -std=c11 -D_GNU_SOURCE -pthread -I$(CUDA_INC_DIR) -I$(PY_INC) \
	-I$(NP_INC) -Icudamem/_src/core -Icudamem/_src/sim -Icudamem/_src/lib \
	-Itests/c \
	-DNPY_NO_DEPRECATED_API=NPY_1_24_API_VERSION

# clang-format (as a check), ruff, then clang-tidy on two processes (about
# 80 s on CI's 2 cores) within BUDGET_LINT.
lint: $(LINT_STAMP)
	$(LINT_BIN)clang-format --dry-run -Werror $(LINT_C_SRC)
	$(LINT_BIN)ruff check .
	printf '%s\n' $(TIDY_SRC) | timeout $(BUDGET_LINT) xargs -P 2 -n 4 \
	  sh -c '$(LINT_BIN)clang-tidy --quiet "$$@" -- $(TIDY_FLAGS)' tidy \
	  2>&1 | grep -v -E '^[0-9]+ warnings? generated' ; \
	  exit $${PIPESTATUS[1]}

# One in-place build at a time; a stamp records which flavour it is so that
# switching flavours rebuilds everything.
build/flavor-%: $(VENV_STAMP) $(EXT_SRC)
	@mkdir -p build
	@rm -f build/flavor-*
	$(BUILD_ENV) $(PY) setup.py -q build_ext --inplace --force --build-temp build/tmp-$*
	touch $@

build: BUILD_ENV = CUDAMEM_DEV_CFLAGS="$(DEV_CFLAGS)"
build: build/flavor-dev
build-asan: BUILD_ENV = CUDAMEM_DEV_CFLAGS="$(DEV_CFLAGS)" CUDAMEM_SANITIZE=1
build-asan: build/flavor-asan
build-debug: BUILD_ENV = CUDAMEM_DEV_CFLAGS="$(DEV_CFLAGS)" CUDAMEM_DEBUG=1
build-debug: build/flavor-debug
build-tsan: BUILD_ENV = CUDAMEM_DEV_CFLAGS="$(DEV_CFLAGS)" \
	CUDAMEM_SANITIZE=thread CUDAMEM_DEBUG=1
build-tsan: build/flavor-tsan
build-coverage: BUILD_ENV = CUDAMEM_DEV_CFLAGS="$(WARN_CFLAGS) -Werror" \
	CUDAMEM_COVERAGE=1
build-coverage: build/flavor-coverage

demo: build
	$(PY) -m cudamem demo

pytest: build
	timeout $(BUDGET_PYTEST) $(PY) -m pytest -q $(PYTEST_ARGS) tests

test: lint build ctest-valgrind typecheck
	timeout $(BUDGET_PYTEST) $(PY) -m pytest -q $(PYTEST_ARGS) tests
	$(MAKE) --no-print-directory test-stress
	$(MAKE) --no-print-directory docs
	$(MAKE) --no-print-directory notebook

# The documentation: HTML with every warning an error and every reference
# resolved, then its examples run as doctests on the simulator.
docs: build
	CUDAMEM_SIMULATOR=1 timeout $(BUDGET_DOCS) $(PY) -m sphinx -W -n -q \
	  -b html docs build/docs
	CUDAMEM_SIMULATOR=1 timeout $(BUDGET_DOCS) $(PY) -m sphinx -W -n -q \
	  -b doctest docs build/doctest

# The tour notebook, executed on the simulator; any error fails.
notebook: build
	CUDAMEM_SIMULATOR=1 timeout $(BUDGET_NOTEBOOK) $(PY) tools/run_notebook.py \
	  docs/examples/tour.ipynb

# The extension's stubs and a typed example under mypy --strict. Imports of
# cudamem's own (untyped) Python modules are followed silently, as mypy
# treats an installed package.
typecheck: $(VENV_STAMP)
	timeout $(BUDGET_TYPECHECK) $(PY) -m mypy --strict --follow-imports=silent \
	  --no-incremental cudamem/_cudamem.pyi docs/examples/typed_example.py

# A test during which the hazard checker reported a race fails (see
# tests/conftest.py); the simulator reads the variables at cuInit. The
# strict modes are the worst case the driver's documentation allows:
# pitches, pageable sources read late, device-to-pageable copies that
# return early (docs/guide/simulator.rst).
test-stress: build
	CUDAMEM_SIM_HAZARDS=1 CUDAMEM_SIM_DELAY_US=$(STRESS_DELAY_US) \
	  CUDAMEM_SIM_STRICT_PITCH=1 CUDAMEM_SIM_STRICT_STAGING=1 \
	  CUDAMEM_SIM_STRICT_DTOH=1 CUDAMEM_SIM_STRICT_HTOD=1 \
	  timeout $(BUDGET_STRESS) $(PY) -m pytest -q \
	  $(PYTEST_ARGS) $(STRESS_TESTS)

$(NUMBA_VENV)/.stamp: Makefile
	rm -rf $(NUMBA_VENV)
	$(PY) -m venv $(NUMBA_VENV)
	$(NUMBA_VENV)/bin/pip install -q --upgrade pip
	$(NUMBA_VENV)/bin/pip install -q $(NUMBA_TEST_PKGS)
	$(NUMBA_VENV)/bin/pip install -q --no-deps --target $(NUMBA_VENV)/numba-cuda \
	  numba-cuda==$(NUMBA_CUDA_VERSION)
	touch $@

# Fails when a test fails that tests/numba_expected.txt does not list, or a
# listed one passes; prints pass/fail/expected/skip counts per module.
test-numba: build $(NUMBA_VENV)/.stamp
	timeout $(BUDGET_NUMBA) $(NUMBA_VENV)/bin/python tools/numba_tests.py \
	  --tests $(NUMBA_VENV)/numba-cuda/numba_cuda/numba/cuda/tests \
	  --expected tests/numba_expected.txt --out build/numba-tests

$(PEERS_VENV)/.stamp: Makefile
	rm -rf $(PEERS_VENV)
	$(PY) -m venv $(PEERS_VENV)
	$(PEERS_VENV)/bin/pip install -q --upgrade pip
	$(PEERS_VENV)/bin/pip install -q $(PEERS_PKGS)
	$(PEERS_VENV)/bin/pip download -q --no-deps --only-binary=:all: \
	  --platform macosx_11_0_arm64 --python-version 3.11 \
	  -d $(PEERS_VENV)/torch-wheel torch==$(TORCH_VIZ_VERSION)
	mkdir -p $(PEERS_VENV)/memory_viz
	$(PEERS_VENV)/bin/python -c 'import glob, zipfile; \
	  w = zipfile.ZipFile(glob.glob("$(PEERS_VENV)/torch-wheel/*.whl")[0]); \
	  open("$(PEERS_VENV)/memory_viz/_memory_viz.py", "wb").write( \
	  w.read("torch/cuda/_memory_viz.py"))'
	rm -rf $(PEERS_VENV)/torch-wheel
	touch $@

# numba-cuda's driver-level tests, unchanged, against the expected failures
# in tests/peers_expected.txt; then cudamem with numba-cuda and cuda.core in
# one process, launched on the simulator with its hazard checker on (a test
# during which it reported a race fails). BUDGET_PEERS covers the venv and
# both runs (about 40 s with pip's cache today).
test-peers: build
	timeout $(BUDGET_PEERS) $(MAKE) --no-print-directory peers-run

peers-run: $(PEERS_VENV)/.stamp
	$(PEERS_VENV)/bin/python tools/numba_tests.py --profile peers \
	  --tests "$$($(PEERS_VENV)/bin/python -c 'import importlib.util as u; \
	  print(u.find_spec("numba_cuda").submodule_search_locations[0])')/numba/cuda/tests"
	PYTHONPATH=$(CURDIR) $(PEERS_VENV)/bin/python -m cudamem.simulator run \
	  --hazards --delay-us 2000 -- $(PEERS_VENV)/bin/python -m pytest -q \
	  -p no:cacheprovider $(PYTEST_ARGS) tests/peers

# Not part of `make test`: every hypothesis test (tests/conftest.py marks
# them `fuzz`) under the "fuzz" profile, FUZZ_EXAMPLES examples each, with
# the hazard checker on. Failures print a @reproduce_failure blob.
fuzz: build
	CUDAMEM_SIM_HAZARDS=1 CUDAMEM_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) \
	  timeout $(BUDGET_FUZZ) $(PY) -m pytest -q -m fuzz \
	  --hypothesis-profile=fuzz --hypothesis-show-statistics \
	  $(PYTEST_ARGS) tests

# Reports go to files as well: pytest captures stderr, and a halted
# process takes its captured output with it.
test-asan: build-asan ctest-asan
	@rm -f build/sanitizer.*
	ASAN_OPTIONS=detect_leaks=0:abort_on_error=0:exitcode=86:log_path=$(CURDIR)/build/sanitizer \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:log_path=$(CURDIR)/build/sanitizer \
	LD_PRELOAD=$(LIBASAN) PYTHONMALLOC=malloc PYTHONUNBUFFERED=1 CUDAMEM_TEST_ASAN=1 \
	  timeout $(BUDGET_ASAN) $(PY) -m pytest -q -p no:cacheprovider $(PYTEST_ARGS) tests \
	  || { cat build/sanitizer.* 2>/dev/null; exit 1; }
	@if ls build/sanitizer.* >/dev/null 2>&1; then cat build/sanitizer.*; exit 1; fi

# Python is not instrumented: libtsan is preloaded, and what it reports
# of CPython or of patterns TSan cannot see is in tools/tsan.supp, each
# entry with its reason. A report fails the run (exitcode), as does a
# debug assert (abort).
TSAN_ENV = TSAN_OPTIONS="suppressions=$(CURDIR)/tools/tsan.supp \
	  exitcode=66 halt_on_error=0 second_deadlock_stack=1 \
	  log_path=$(CURDIR)/build/tsan"
test-tsan: build-tsan ctest-tsan
	@rm -f build/tsan.*
	$(TSAN_ENV) LD_PRELOAD=$(LIBTSAN) PYTHONUNBUFFERED=1 \
	  timeout $(BUDGET_TSAN) $(PY) -m pytest -q -p no:cacheprovider \
	  $(PYTEST_ARGS) $(TSAN_TESTS) || { cat build/tsan.* 2>/dev/null; exit 1; }
	@if ls build/tsan.* >/dev/null 2>&1; then cat build/tsan.*; exit 1; fi

coverage: build-coverage
	find build/tmp-coverage -name '*.gcda' -delete
	$(PY) -m pytest -q $(PYTEST_ARGS) tests
	$(PY) tools/error_labels.py build/tmp-coverage cudamem/_src/core cudamem/_src/py

# The C tests: tests/c/test_sim_*.c with every simulator source, and
# tests/c/test_core_*.c with the parts of core that need no driver
# (test_core_layout.c: layout.c alone; test_core_stats.c: stats.c alone,
# the leaf of docs/architecture.rst's floors), tests/c/test_lib_*.c with
# their lib/ file alone, except test_core_copy.c:
# core's copy engine with the driver gate, which loads the simulator as cudamem
# does, from a libcusim.so built next to the test. Each program runs each
# of its tests in a process of its own (tests/c/check.h);
# `build/ctest/test_x NAME` runs one in the foreground, `--list` names them.
CORE_UNIT_SRC := cudamem/_src/core/pending.c cudamem/_src/core/errors.c \
	cudamem/_src/core/lockorder.c cudamem/_src/core/env.c
CORE_LAYOUT_SRC := cudamem/_src/core/layout.c cudamem/_src/core/errors.c
CORE_COPY_SRC := $(addprefix cudamem/_src/core/,driver.c context.c device.c \
	release.c pending.c memory.c ipc.c pool.c event.c stream.c stats.c history.c \
	copy.c copyarray.c layout.c errors.c hostmem.c hostpool.c staging.c \
	lockorder.c oom.c env.c asyncpool.c) $(LIB_SRC)
CTEST_DEPS = $(SIM_SRC) $(SIM_HDR) $(CORE_UNIT_SRC) $(CORE_LAYOUT_SRC) \
	cudamem/_src/core/stats.c \
	tests/c/check.h $(wildcard cudamem/_src/core/*.h)
CTEST_LINK_test_core_layout := $(CORE_LAYOUT_SRC)
CTEST_LINK_test_core_stats := cudamem/_src/core/stats.c \
	cudamem/_src/core/lockorder.c
CTEST_LINK_test_core_env := cudamem/_src/core/env.c
CTEST_LINK_test_lib_addrtree := cudamem/_src/lib/addrtree.c
ctest_sources = $(or $(CTEST_LINK_$(basename $(notdir $(1)))),$(if \
	$(filter test_core_%,$(notdir $(1))),$(CORE_UNIT_SRC),$(SIM_SRC)))
build/ctest/%: tests/c/%.c $(CTEST_DEPS)
	@mkdir -p build/ctest
	$(CC) $(CTEST_CFLAGS) -o $@ $< $(call ctest_sources,$<) -lrt -ldl
build/ctest-asan/%: tests/c/%.c $(CTEST_DEPS)
	@mkdir -p build/ctest-asan
	$(CC) $(CTEST_CFLAGS) $(ASAN_FLAGS) -o $@ $< $(call ctest_sources,$<) -lrt -ldl
build/ctest-tsan/%: tests/c/%.c $(CTEST_DEPS)
	@mkdir -p build/ctest-tsan
	$(CC) $(CTEST_CFLAGS) $(TSAN_FLAGS) -o $@ $< $(call ctest_sources,$<) -lrt -ldl
build/ctest/libcusim.so: $(SIM_SRC) $(SIM_HDR)
	@mkdir -p build/ctest
	$(CC) $(CTEST_CFLAGS) -shared -fPIC -Wl,-z,nodelete -o $@ $(SIM_SRC) -lrt -ldl
build/ctest-asan/libcusim.so: $(SIM_SRC) $(SIM_HDR)
	@mkdir -p build/ctest-asan
	$(CC) $(CTEST_CFLAGS) $(ASAN_FLAGS) -shared -fPIC -Wl,-z,nodelete -o $@ $(SIM_SRC) -lrt -ldl
build/ctest-tsan/libcusim.so: $(SIM_SRC) $(SIM_HDR)
	@mkdir -p build/ctest-tsan
	$(CC) $(CTEST_CFLAGS) $(TSAN_FLAGS) -shared -fPIC -Wl,-z,nodelete -o $@ $(SIM_SRC) -lrt -ldl
build/ctest/test_core_copy: tests/c/test_core_copy.c $(CTEST_DEPS) \
		$(CORE_COPY_SRC) build/ctest/libcusim.so
	$(CC) $(CTEST_CFLAGS) -o $@ $< $(CORE_COPY_SRC) -ldl
build/ctest-asan/test_core_copy: tests/c/test_core_copy.c $(CTEST_DEPS) \
		$(CORE_COPY_SRC) build/ctest-asan/libcusim.so
	$(CC) $(CTEST_CFLAGS) $(ASAN_FLAGS) -o $@ $< $(CORE_COPY_SRC) -ldl

build/ctest-tsan/test_core_copy: tests/c/test_core_copy.c $(CTEST_DEPS) \
		$(CORE_COPY_SRC) build/ctest-tsan/libcusim.so
	$(CC) $(CTEST_CFLAGS) $(TSAN_FLAGS) -o $@ $< $(CORE_COPY_SRC) -ldl

ctest: $(patsubst tests/c/%.c,build/ctest/%,$(CTEST_SRC))
	@set -e; for t in $^; do echo "== $$t"; timeout $(BUDGET_CTEST) $$t; done

ctest-valgrind: $(patsubst tests/c/%.c,build/ctest/%,$(CTEST_SRC))
	@set -e; for t in $^; do echo "== valgrind $$t"; \
	  timeout $(BUDGET_CTEST) valgrind -q --error-exitcode=99 --leak-check=full \
	    --errors-for-leak-kinds=definite --show-leak-kinds=definite $$t; done

ctest-asan: $(patsubst tests/c/%.c,build/ctest-asan/%,$(CTEST_SRC))
	@set -e; for t in $^; do echo "== asan $$t"; \
	  ASAN_OPTIONS=detect_leaks=1 timeout $(BUDGET_CTEST) $$t; done

ctest-tsan: $(patsubst tests/c/%.c,build/ctest-tsan/%,$(CTEST_SRC))
	@rm -f build/tsan.*
	@set -e; for t in $^; do echo "== tsan $$t"; $(TSAN_ENV) \
	  timeout $(BUDGET_CTEST) $$t || { cat build/tsan.* 2>/dev/null; exit 1; }; \
	  if ls build/tsan.* >/dev/null 2>&1; then cat build/tsan.*; exit 1; fi; done

build/floor: benchmarks/floor.c
	@mkdir -p build
	$(CC) -std=c11 -D_GNU_SOURCE -O2 -Wall -Wextra -Werror -I$(CUDA_INC_DIR) -o $@ $< -ldl -lpthread

# The same latency rows as a library, timed inside bench-peers' and the
# runner's own process (benchmarks/floorlib.py); the program's table,
# bandwidth and output code goes unused there.
build/libfloor.so: benchmarks/floor.c
	@mkdir -p build
	$(CC) -std=c11 -D_GNU_SOURCE -DFLOOR_LIBRARY -O2 -Wall -Wextra -Werror \
	  -Wno-unused-function -fPIC -shared -fvisibility=hidden \
	  -I$(CUDA_INC_DIR) -o $@ $< -ldl -lpthread

bench-floor: build build/floor
	CUDAMEM_DRIVER=$${CUDAMEM_DRIVER:-$$( [ -e /dev/nvidiactl ] && echo libcuda.so.1 || echo $$PWD/cudamem/libcusim.so )} \
	  build/floor

# The runner: cudamem and every importable peer against floor.c, written to
# $(BENCH_OUT) (results.json, results.md, plots); BENCH_ARGS=--quick etc.
BENCH_OUT ?= build/bench
BENCH_ARGS ?=
bench: build build/floor
	CUDAMEM_SIMULATOR=$${CUDAMEM_SIMULATOR:-$$( [ -e /dev/nvidiactl ] && echo 0 || echo 1 )} \
	  $(PY) -m benchmarks --out $(BENCH_OUT) $(BENCH_ARGS)

# The staging pipeline's host side (issue 23): pageable copies 4 MiB to 1 GiB
# through each CUDAMEM_STAGING_* setting, the driver's own pageable path and
# memcpy, interleaved rounds; $(BENCH_OUT)/staging.md and .json.
# BENCH_ARGS=--quick is a smoke run.
bench-staging: build
	@mkdir -p $(BENCH_OUT)
	CUDAMEM_SIMULATOR=$${CUDAMEM_SIMULATOR:-$$( [ -e /dev/nvidiactl ] && echo 0 || echo 1 )} \
	  $(PY) -m benchmarks.staging_host --out $(BENCH_OUT)/staging $(BENCH_ARGS)

# cudamem, numba-cuda, cuda.core and raw cuda.bindings in one process on the
# simulator, interleaved, beside floor.c; system calls (strace), driver calls
# and instructions outside the driver (callgrind) per op. A full run records
# benchmarks/results/<date>-simulator.md and .json; BENCH_ARGS=--quick is
# CI's smoke run. strace and valgrind are required, not optional.
bench-peers: build build/floor build/libfloor.so
	@for t in strace valgrind; do command -v $$t >/dev/null || { \
	  echo "bench-peers: $$t is not installed (apt-get install $$t)" >&2; \
	  exit 1; }; done
	timeout $(BUDGET_BENCH_PEERS) $(MAKE) --no-print-directory bench-peers-run

bench-peers-run: $(PEERS_VENV)/.stamp
	PYTHONPATH=$(CURDIR) $(PEERS_VENV)/bin/python -m cudamem.simulator run \
	  -- $(PEERS_VENV)/bin/python -m benchmarks.peers \
	  --out $(BENCH_OUT)/peers $(BENCH_ARGS)

# On a GPU machine: build in place with the machine's Python, run the suite on
# the real driver, then the benchmarks; logs and results go to $(RESULTS).
GPU_PY ?= python3
gpu-check:
	GPU_PY=$(GPU_PY) tests/gpu/check.sh $(RESULTS)

# Its dry run (CI): the same script on the simulator, in copies of the tree,
# under the GPU machine's conditions (VENV=none, no index), once with the
# peers venv's Python and once with a Python without peers (see
# tests/gpu/dry_run.sh); 3.5 to 5.3 minutes on a shared 2-core machine.
BUDGET_GPU_DRY ?= 420
gpu-check-dry: | $(VENV_STAMP) $(PEERS_VENV)/.stamp
	GPU_DRY_PEERS=$(abspath $(PEERS_VENV))/bin/python \
	  GPU_DRY_DEV=$(if $(VENV_STAMP),$(abspath $(PY)),$(shell \
	    command -v $(PY))) \
	  timeout $(BUDGET_GPU_DRY) tests/gpu/dry_run.sh $(RESULTS)

test-pythons: $(VENV_STAMP)
	CUDAMEM_DEV_CFLAGS="$(DEV_CFLAGS)" timeout $(BUDGET_PYTHONS) \
	  $(PY) tools/test_pythons.py --versions $(PYTHONS) $(PYTEST_ARGS)
	cat build/pythons/summary.md

$(WHEEL_VENV)/.stamp: requirements-wheel.txt
	rm -rf $(WHEEL_VENV)
	$(PYTHON) -m venv $(WHEEL_VENV)
	$(WHEEL_VENV)/bin/pip install -q -r requirements-wheel.txt
	touch $@

# An sdist, then a wheel built from it in isolation (pip brings the build
# requirements, the CUDA headers among them), retagged manylinux by
# auditwheel, which fails if the wheel needs more than glibc at run time.
wheel: $(WHEEL_VENV)/.stamp
	rm -rf $(DIST)
	timeout $(BUDGET_WHEEL) $(WHEEL_VENV)/bin/python -m build \
	  --outdir $(DIST)/raw .
	$(WHEEL_VENV)/bin/auditwheel show $(DIST)/raw/*.whl
	PATH=$(abspath $(WHEEL_VENV))/bin:$$PATH $(WHEEL_VENV)/bin/auditwheel \
	  repair --wheel-dir $(DIST) $(DIST)/raw/*.whl
	mv $(DIST)/raw/*.tar.gz $(DIST)/
	rm -rf $(DIST)/raw

# Installs the wheel and the sdist into new venvs, without the toolkit's
# variables, and runs `cudamem info`, the demo and every import there.
test-wheel: wheel
	timeout $(BUDGET_WHEEL) $(PYTHON) tools/wheel_check.py $(DIST) \
	  build/wheel-check

clean:
	rm -rf build cudamem/*.so cudamem/__pycache__ tests/__pycache__ tests/*/__pycache__ .pytest_cache .hypothesis
