# The two commands: `make demo` and `make test`. Each sets up everything on a fresh machine:
# .venv/ with pinned torch and tools, then builds eml_ops (again only when C++ changed).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
TORCH_PIN := torch==2.13.0
DEPS_STAMP := $(VENV)/.deps-installed
BUILD_STAMP := $(VENV)/.eml_ops-built
CXX_SOURCES := $(shell find csrc -type f \( -name '*.cpp' -o -name '*.h' \))
export MAX_JOBS ?= $(shell nproc)

.PHONY: demo test test-torch bench docs lint cpp-test cpp-demo sanitize clean

demo: $(BUILD_STAMP)
	$(PY) -m eml_ops demo

test: $(BUILD_STAMP)
	$(PY) -m pytest -n $(MAX_JOBS) $(PYTEST_ARGS)

# The suite against another torch release: `make test-torch TORCH_VERSION=2.14.1`. Builds a
# copy of the tree in build/torch-<version>/ with its own venv .venv-torch<version>/ (the first
# run installs that torch, ~5.5 GB for a CUDA wheel); the main .venv and build stay as they are.
test-torch:
	bash tests/other_torch.sh "$(TORCH_VERSION)" $(PYTEST_ARGS)

# Three whole passes over the suite: the results are their geometric means (a noisy machine).
bench: $(BUILD_STAMP)
	$(PY) -m eml_ops bench --runs 3 $(BENCH_ARGS)

# The documentation site (Sphinx + MyST, docs/) into build/docs: warnings are errors (-W),
# references are checked (-n), every problem is reported before it fails (--keep-going), and
# every page is read again (-E), so an incremental build cannot hide an old warning. It
# imports eml_ops for the API reference, so it needs the build.
docs: $(BUILD_STAMP)
	$(PY) -m sphinx -b html -W -n -E --keep-going -q docs build/docs
	@echo "docs: build/docs/index.html"

lint: $(DEPS_STAMP)
	$(PY) -m ruff check .

# The GEMM library on its own (no torch): plain g++ builds, both ISAs.
cpp-test:
	bash tests/cpp/run.sh
	if pkg-config --exists libxsmm; then bash tests/cpp/run_tpp.sh; fi

# Deploy without Python: builds examples/cpp (CMake, against libeml_ops.so and libtorch) into
# build/cpp-example, trains and runs a scripted model there and checks it against Python.
cpp-demo: $(BUILD_STAMP)
	$(PY) examples/cpp/demo.py

# ASan + UBSan build into build/sanitize (the release build is untouched), then the kernel
# and op tests against it.
sanitize: $(BUILD_STAMP)
	bash tests/sanitize.sh $(PYTEST_ARGS)

$(PY):
	$(PYTHON) -m venv $(VENV)

$(DEPS_STAMP): requirements-dev.txt | $(PY)
	$(PY) -m pip install $(TORCH_PIN)
	$(PY) -m pip install -r requirements-dev.txt
	touch $@

# pip builds against the venv's torch (no build isolation); object files stay in build/.
$(BUILD_STAMP): $(DEPS_STAMP) $(CXX_SOURCES) $(wildcard csrc/cmake/*) setup.py pyproject.toml
	$(PY) -m pip install --no-build-isolation --no-deps -e .
	touch $@

clean:
	rm -rf build eml_ops/*.so eml_ops/_build_info.json eml_ops/include eml_ops/share $(BUILD_STAMP) *.egg-info
