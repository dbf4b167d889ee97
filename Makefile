# The two commands of README.md: `make demo` and `make test`. Each creates (or reuses) the
# virtual environment, installs what is missing from PyPI, builds the ops incrementally, runs.
VENV ?= .venv
PYTHON := $(VENV)/bin/python
export OMPI_ALLOW_RUN_AS_ROOT := 1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM := 1
export TF_CPP_MIN_LOG_LEVEL ?= 2

# The suite's TensorFlow (tfring itself takes any 2.16-2.21: README, 'TensorFlow versions').
# Another release, in a venv of its own:
#   make test VENV=.venv-2.18 TF_VERSION=2.18.1 TF_KERAS_VERSION=2.18.0
TF_VERSION ?= 2.21.0
TF_KERAS_VERSION ?= 2.21.0
# The versions the suite compiles the GPU path against (the gpu-build extra), pinned like its
# TensorFlow: a run does not fetch whatever NCCL wheel PyPI has newest.
GPU_BUILD_PINS ?= nvidia-nccl-cu13==2.30.7 nvidia-cuda-runtime==13.0.96 nvidia-cuda-crt==13.0.88 \
                  nvidia-cuda-cccl==13.0.85
# ml_dtypes (TensorFlow's dtypes beyond numpy's; TF 2.21 takes 0.5.1 to 1.0): 0.7.0's import
# costs 0.5 s of CPU more than 0.6.0's (3.35 s against 2.8 s for `import tensorflow`,
# measured 2026-12-02), which each of the suite's ~200 TensorFlow processes pays. Older
# TensorFlows take older ml_dtypes (2.16-2.18: below 0.5): pip chooses there.
SUITE_SPEED_PINS ?= $(if $(filter 2.19.% 2.20.% 2.21.%,$(TF_VERSION)),ml_dtypes==0.6.0)

.PHONY: demo test test-full build build-sanitized bench bench-keras bench-autotune bench-native compat clean

$(VENV)/.installed: pyproject.toml
	test -x $(PYTHON) || python3 -m venv $(VENV)
	$(PYTHON) -m pip install -q --upgrade pip
	# cpu: tensorflow-cpu. gpu-build: NCCL and CUDA headers from PyPI, so the GPU path is
	# compiled (and CI checks that it compiles) even where no GPU is present; its tests skip
	# there.
	$(PYTHON) -m pip install -q -e ".[test,cpu,gpu-build]" tensorflow-cpu==$(TF_VERSION) \
		$(GPU_BUILD_PINS) $(SUITE_SPEED_PINS)
	# tf_keras (Keras 2, for TF_USE_LEGACY_KERAS=1): without --no-deps it pulls in the full
	# tensorflow package on top of tensorflow-cpu.
	$(PYTHON) -m pip install -q --no-deps tf_keras==$(TF_KERAS_VERSION)
	touch $@

build: $(VENV)/.installed
	$(PYTHON) -m tfring.build --tests

# The native tests again under AddressSanitizer+UBSan and ThreadSanitizer (no TF, no GPU
# path), for the suite.
build-sanitized: $(VENV)/.installed
	$(PYTHON) tfring/build --native-only --sanitize address
	$(PYTHON) tfring/build --native-only --sanitize thread

demo: build
	$(VENV)/bin/mpirun --oversubscribe -np 2 $(PYTHON) examples/keras_fit.py

# The sanitized native tests are built by the suite itself, in the background while the
# plain native tests run (tests/run_suite.py, SanitizerBuilds); build-sanitized builds them
# alone.
test: build
	$(PYTHON) tests/run_suite.py

# What `make test` leaves out as repetition, too: every parallel and tf_keras test at 3 ranks,
# every native test under both sanitizers, the failure tests marked full_only
# (tests/run_suite.py, FULL). Not CI's.
test-full: export TFRING_SUITE_FULL := 1
test-full: build
	$(PYTHON) tests/run_suite.py

bench: build
	$(PYTHON) bench/allreduce.py

bench-keras: build
	$(PYTHON) bench/keras_fit.py

bench-autotune: build
	$(PYTHON) bench/autotune.py

# The runtime's bookkeeping per tensor, on in-process ranks (bench/native/coordinator_bookkeeping.cc).
bench-native: build
	build/bench/coordinator_bookkeeping

# Not part of `make test`: a venv per TensorFlow 2.16-2.21 (downloads each), tfring installed
# from its sdist, built at first import, smoke-tested on 2 ranks; prints README's table.
compat: $(VENV)/.installed
	$(PYTHON) tools/compat.py

clean:
	rm -rf build
