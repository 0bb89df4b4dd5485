# pyserver: the commands people type.
#
#   make run        install what building needs, build, serve the demo on 127.0.0.1:8000
#   make test       also install the test tools and extras; run the C unit tests and pytest
#   make test-pythons  build and run pytest on Python 3.10, 3.12 and 3.13 (pyenv), each in
#                   its own .venv-X.Y (TEST_PYTHONS=..., TEST_PYTHONS_ARGS=... to change)
#   make test-asyncio-cpython  CPython's asyncio test suite on pyserver's loop and the stock one
#   make test-c     C unit tests of the core (tests/c) and the fuzz seeds replayed, ASan+UBSan
#   make test-asan  the pytest suite against an ASan/UBSan build of the extension
#   make fuzz       run every fuzzer in tests/fuzz (HTTP/1, HTTP/2, uwsgi, static, WebSocket,
#                   whole connections), FUZZ_SECONDS each (default 60)
#   make bench      benchmarks/run.py (BENCH_ARGS=...)
#   make lint       clang-format, ruff, mypy, and "only csrc/py includes Python.h"
#   make dist       sdist and wheel of the distribution pyserver-ev in dist/
#   make clean      remove build outputs (distclean also removes .venv)

SHELL := /bin/bash
.DEFAULT_GOAL := build

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check -q

# Debian packages, by what needs them. A|B: the first of them this Debian release has
# (scripts/apt-deps.sh asks apt-cache policy): Debian 13 has llhttp as a library and no
# nginx-light. Building and `make run` need only APT_PACKAGES.
APT_PACKAGES := build-essential pkg-config libev-dev libssl-dev libnghttp2-dev \
	'libllhttp-dev|node-llhttp' libwslay-dev zlib1g-dev libisal-dev libbrotli-dev libzstd-dev \
	libdeflate-dev
# The test suite's tools: curl, nginx (proxy and uwsgi tests, with its stream module),
# h2load and nghttp (nghttp2-client), promtool (prometheus), redis-server (the Channels
# layer shared by workers).
TEST_APT_PACKAGES := curl 'nginx-light|nginx' libnginx-mod-stream nghttp2-client prometheus \
	redis-server
BENCH_APT_PACKAGES := wrk apache2-utils 'nginx-light|nginx' nghttp2-client curl
LINT_APT_PACKAGES := clang-format
FUZZ_APT_PACKAGES := clang libclang-rt-dev
# Debian's own python3 needs its venv and headers packages; pyenv-style builds do not.
ifeq ($(shell $(PYTHON) -c 'import sys; print(sys.base_prefix)' 2>/dev/null),/usr)
APT_PACKAGES += python3-dev python3-venv
endif

CSRC := $(wildcard csrc/*/*.c csrc/*/*.h)
EXT_SUFFIX := $(shell $(PYTHON) -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
EXT := pyserver/_core$(EXT_SUFFIX)

ASAN_CFLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -O1 -g -DPS_DEBUG_ASSERTS
ASAN_LDFLAGS := -fsanitize=address,undefined

# The flags the extension is built with; build/core-flags changes only when
# they do, so switching between normal and sanitizer builds rebuilds it.
CORE_FLAGS = $(PYSERVER_CFLAGS)|$(PYSERVER_LDFLAGS)|$(PYSERVER_WERROR)

PYTEST := $(PY) -m pytest -q -p no:cacheprovider
# What pytest runs: `make test-asan TESTS=tests/test_body_buffering.py` runs one file.
TESTS ?= tests
# `make test` runs pytest in PYTEST_JOBS processes (pytest-xdist), a whole test file to one
# process (--dist loadfile: a file's module-scoped servers are started once); most of a
# test's time is spent waiting on its servers, so two processes on a 2-core machine save
# much of it. The tests marked `serial` (CPU-heavy: a million HTTP/2 streams, 100k requests,
# 1000 clients at once) then run alone, in one process. PYTEST_JOBS=0: the first pass in
# one process too.
PYTEST_JOBS ?= 2

.PHONY: deps apt-deps test-deps apt-test-deps deps-fuzz build run test test-pythons test-asyncio-cpython test-c test-asan fuzz bench autobahn lint \
	dist clean distclean FORCE

# ---- dependencies -----------------------------------------------------------

deps: apt-deps $(VENV)/.deps-stamp
# What the test suite needs on top: its tools and the [test] extras.
test-deps: deps apt-test-deps $(VENV)/.test-stamp

# Debian packages: apt is asked only when one is missing.
apt-deps:
	@scripts/apt-deps.sh $(APT_PACKAGES)

apt-test-deps:
	@scripts/apt-deps.sh $(TEST_APT_PACKAGES)

deps-fuzz:
	@scripts/apt-deps.sh $(FUZZ_APT_PACKAGES)

$(PY):
	$(PYTHON) -m venv $(VENV)

# The editable install also builds the extension in place; re-run only when
# the packaging files change. No extras: serving needs none.
$(VENV)/.deps-stamp: pyproject.toml setup.py | $(PY) apt-deps build/core-flags
	$(PIP) install --upgrade pip 'setuptools>=64' wheel
	$(PIP) install --no-build-isolation -e .
	@touch $@

# The test suite's frameworks and clients (pyproject.toml's [test] extra).
$(VENV)/.test-stamp: $(VENV)/.deps-stamp
	$(PIP) install --no-build-isolation -e '.[test]'
	@touch $@

# ---- build ------------------------------------------------------------------

build: deps $(EXT)

build/core-flags: FORCE
	@mkdir -p build
	@echo '$(CORE_FLAGS)' | cmp -s - $@ || echo '$(CORE_FLAGS)' > $@

$(EXT): $(CSRC) setup.py build/core-flags | deps
	PYSERVER_CFLAGS='$(PYSERVER_CFLAGS)' PYSERVER_LDFLAGS='$(PYSERVER_LDFLAGS)' \
		$(PY) setup.py -q build_ext --inplace --force
	@touch $@

# ---- run and test -----------------------------------------------------------

run: build
	$(PY) -m pyserver pyserver.demo:app --host 127.0.0.1 --port 8000 $(RUN_ARGS)

# Both passes run whatever the first one's outcome. Exit status 5 (no tests) of one pass is
# fine (TESTS may hold no serial test, or only serial ones); of both, it fails like any other.
test: build test-deps test-c
	@a=0; b=0; \
	echo '$(PYTEST) -n $(PYTEST_JOBS) --dist loadfile -m "not serial" $(TESTS) $(PYTEST_ARGS)'; \
	$(PYTEST) -n $(PYTEST_JOBS) --dist loadfile -m "not serial" $(TESTS) $(PYTEST_ARGS) || a=$$?; \
	echo '$(PYTEST) -m serial $(TESTS) $(PYTEST_ARGS)'; \
	$(PYTEST) -m serial $(TESTS) $(PYTEST_ARGS) || b=$$?; \
	if [ $$a = 5 ] && [ $$b = 5 ]; then exit 5; fi; \
	for s in $$a $$b; do [ $$s = 0 ] || [ $$s = 5 ] || exit $$s; done

# The other Python versions `make test` does not run (it uses $(PYTHON), 3.11 here).
# The subset below takes about 3.5 minutes per version on this 2-core machine (the whole
# suite, TEST_PYTHONS_ARGS=tests, about 13) when run alone; the versions are built and run
# side by side (scripts/test-pythons.sh; TEST_PYTHONS_JOBS=1 runs one at a time).
TEST_PYTHONS ?= 3.10 3.12 3.13
# What depends on the Python version: the C bridge (WSGI, ASGI, the selector, the loop),
# the CLI and config loading, the frameworks. Left to `make test` alone: the process,
# resource, hostile-client, gunicorn and packaging files (slow, version-independent C).
TEST_PYTHONS_SUBSET := $(addprefix tests/test_,$(addsuffix .py,cli config_file lifecycle \
	environ responses wsgi_input errors http1 body_buffering rfc9112 evselector evloop \
	asgi_detect asgi_http asgi_lifespan lifespan flask bottle asgi_starlette asgi_fastapi \
	hybrid_channels))
TEST_PYTHONS_ARGS ?= $(TEST_PYTHONS_SUBSET)
test-pythons: apt-deps apt-test-deps
	scripts/test-pythons.sh $(TEST_PYTHONS) -- $(TEST_PYTHONS_ARGS)

# CPython's own asyncio tests (test.test_asyncio) on EvEventLoop against the stock loop.
test-asyncio-cpython: build test-deps
	$(PY) tests/asyncio_cpython.py compare

test-c: apt-deps
	scripts/test-c.sh

# Rebuild the extension with sanitizers, run the suite with a Python that has
# the ASan/UBSan runtimes preloaded (only Python: see scripts/asan-python.sh;
# server subprocesses started with sys.executable get them too), then rebuild
# the extension normally whatever the outcome. Python leaks at exit by design:
# no LeakSanitizer. verify_asan_link_order=0 lets a Python started without
# the wrapper (the console script) still load the extension. Tests can look
# at PYSERVER_ASAN=1 to relax memory-growth bounds.
test-asan: test-deps test-c
	$(MAKE) build PYSERVER_CFLAGS='$(ASAN_CFLAGS)' PYSERVER_LDFLAGS='$(ASAN_LDFLAGS)'
	scripts/asan-python.sh $(VENV) >/dev/null
	@status=0; \
	ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:verify_asan_link_order=0 \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	PYTHONMALLOC=malloc \
		$(VENV)/bin/python-asan -m pytest -q -p no:cacheprovider $(TESTS) $(PYTEST_ARGS) \
		|| status=$$?; \
	$(MAKE) build || status=1; \
	exit $$status

fuzz: deps-fuzz apt-deps
	scripts/fuzz.sh

bench: build test-deps
	@scripts/apt-deps.sh $(BENCH_APT_PACKAGES)
	$(PY) benchmarks/run.py $(BENCH_ARGS)

# The Autobahn WebSocket cases (kosoku) against an echo app: sections 1-7, 9, 12 and 13 by
# default, AUTOBAHN_CASES='1.1.*' for a selection; the report goes to benchmarks/results/autobahn/.
autobahn: build test-deps
	scripts/autobahn.sh $(VENV) $(AUTOBAHN_CASES)

# ---- distribution -----------------------------------------------------------

# The wheel is built from the unpacked sdist, so this also checks the sdist builds.
dist: deps
	@$(PY) -c 'import build' 2>/dev/null || $(PIP) install build
	rm -rf dist
	$(PY) -m build --no-isolation --outdir dist .

# ---- lint -------------------------------------------------------------------

C_LINT_FILES = $(wildcard csrc/*/*.[ch] tests/c/*.[ch] tests/fuzz/*.[ch])
PY_LINT_DIRS = pyserver setup.py $(wildcard tests benchmarks)

# Runs every check, then fails if any did.
lint: | $(PY)
	@scripts/apt-deps.sh $(LINT_APT_PACKAGES)
	@$(PY) -m ruff --version >/dev/null 2>&1 || $(PIP) install ruff
	@$(PY) -m mypy --version >/dev/null 2>&1 || $(PIP) install mypy
	@status=0; \
	if [ -n "$(C_LINT_FILES)" ]; then \
		clang-format --dry-run --Werror $(C_LINT_FILES) || status=1; \
	fi; \
	$(PY) -m ruff check $(PY_LINT_DIRS) || status=1; \
	$(PY) -m ruff format --check $(PY_LINT_DIRS) || status=1; \
	$(PY) -m mypy || status=1; \
	bad=$$(grep -rlE '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]Python\.h[>"]' \
		csrc tests/c tests/fuzz 2>/dev/null | grep -v '^csrc/py/' || true); \
	if [ -n "$$bad" ]; then \
		echo "Python.h is included outside csrc/py/: $$bad"; status=1; \
	fi; \
	exit $$status

# ---- clean ------------------------------------------------------------------

clean:
	rm -rf build dist *.egg-info .ruff_cache
	rm -f pyserver/_core*.so
	find . \( -name '.venv*' -o -name .git \) -prune -o -name __pycache__ -type d -prune \
		-exec rm -rf {} +

distclean: clean
	rm -rf $(VENV) $(wildcard .venv-3.*)

FORCE:
