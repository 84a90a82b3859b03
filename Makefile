# gpulab: one Makefile for learners, instructors and CI.
#   make lab      set everything up (in .venv) and open the course in JupyterLab
#   make test     set everything up and run the whole test suite (what CI runs: Triton 3.6 and 3.9; 3.7.1's compiles)
#   make book     build the course as a static website into book/_build/html (open its index.html)
# Other targets: setup, lint, format, notebooks (re-execute in place), figures (redraw from records), exercises
# (regenerate), grade, bench-NN, book-test (the site read in headless Chromium).

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# CPU machines get the CPU build of torch and Triton 3.6 for its interpreter; a machine with nvidia-smi gets CUDA torch.
HAS_GPU := $(shell command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && echo 1)
REQUIREMENTS ?= requirements/$(if $(HAS_GPU),gpu,cpu).txt
# torch's CPU build (torch==2.13.0+cpu) is on PyTorch's CPU index, not on PyPI. Where that index answers, pip is
# pointed at it; where it does not (CI, the course machines), pip finds the wheel in its find-links or cache.
TORCH_CPU_INDEX := https://download.pytorch.org/whl/cpu
REACHES_TORCH_INDEX = $(shell $(PYTHON) -c "import socket; socket.create_connection(('download.pytorch.org', 443), 3)" >/dev/null 2>&1 && echo 1)
# Extra pip arguments for torch (evaluated only when installing), e.g. TORCH_PIP_ARGS='--index-url .../whl/cu128'.
TORCH_PIP_ARGS ?= $(if $(HAS_GPU),,$(if $(REACHES_TORCH_INDEX),--extra-index-url $(TORCH_CPU_INDEX)))
STAMP := $(VENV)/.gpulab-installed
# The second CPU environment `make test` runs: the newest Triton (3.9) and numpy (2.4) with torch 2.13's CPU build.
VENV_NEWEST ?= .venv-newest
REQUIREMENTS_NEWEST ?= requirements/cpu-newest.txt
STAMP_NEWEST := $(VENV_NEWEST)/.gpulab-installed
BOOK_STAMP := $(VENV)/.gpulab-book-installed

.PHONY: setup setup-newest lab test test-newest test-triton371 lint format notebooks figures exercises grade clean book book-test
.DEFAULT_GOAL := help

help:
	@sed -n '2,7p' Makefile

$(STAMP): pyproject.toml $(REQUIREMENTS)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q $(TORCH_PIP_ARGS) -r $(REQUIREMENTS)
	$(BIN)/python -m pip install -q -c $(REQUIREMENTS) -e '.[test,grading,lab]'
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 >/dev/null
	touch $(STAMP)

setup: $(STAMP)

$(STAMP_NEWEST): pyproject.toml $(REQUIREMENTS_NEWEST)
	test -x $(VENV_NEWEST)/bin/python || $(PYTHON) -m venv $(VENV_NEWEST)
	$(VENV_NEWEST)/bin/python -m pip install -q --upgrade pip
	$(VENV_NEWEST)/bin/python -m pip install -q $(TORCH_PIP_ARGS) -r $(REQUIREMENTS_NEWEST)
	$(VENV_NEWEST)/bin/python -m pip install -q -c $(REQUIREMENTS_NEWEST) -e '.[test,grading]'
	$(VENV_NEWEST)/bin/python -m ipykernel install --sys-prefix --name python3 >/dev/null
	touch $(STAMP_NEWEST)

setup-newest: $(STAMP_NEWEST)

# JupyterLab on notebooks/ with the course's nbgrader configuration (nbgrader_config.py); --allow-root only for root.
lab: setup
	$(BIN)/python -m gpulab.course.lab

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: setup
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# The whole suite: lint, package tests (3-minute budget), the course pipeline (nbgrader round trip, the lab server),
# lesson and solution notebooks under nbval, exercise pipeline checks; then the same package tests and one run of the
# lesson notebooks (outputs not compared) on the newest Triton (test-newest).
test: lint
	$(BIN)/python -m pytest -q tests/ -m "not pipeline and not book" -p no:nbval -n auto --maxprocesses=4 --timeout=180 --session-timeout=600
	$(BIN)/python -m pytest -q -m pipeline tests/course/ -p no:cacheprovider
	$(BIN)/python -m pytest -q --nbval notebooks/ solutions/ --nbval-sanitize-with .ci/nbval-sanitize.cfg --nbval-current-env -p no:cacheprovider
	$(BIN)/python -m gpulab exercises --check
	$(MAKE) --no-print-directory test-newest
	$(MAKE) --no-print-directory test-triton371
	$(MAKE) --no-print-directory book-test

# Triton 3.9 and numpy 2.4 (requirements/cpu-newest.txt): the package tests, and every lesson notebook executed once
# (--nbval-lax: a cell that raises fails, outputs are not compared; requirements/cpu.txt's Triton 3.6 made them), in
# one session so the notebooks' kernels fill the cores beside the tests (--dist loadfile: a notebook on one worker).
test-newest: setup-newest
	$(VENV_NEWEST)/bin/python -m pytest -q tests/ notebooks/ -m "not pipeline and not book" --nbval-lax --nbval-current-env -n auto --maxprocesses=4 --dist loadfile --timeout=180 --session-timeout=600 -p no:cacheprovider

# Triton 3.7.1 (what torch 2.12 and 2.13 bring): the Gluon kernels' offline sm_90 compiles only (version 3's forward and
# backward, the fused RNN's), with 3.7.1 installed beside .venv's torch (--no-deps, into $(TRITON371)); test-newest
# covers 3.9 and requirements/cpu.txt 3.6. A few minutes.
TRITON371 ?= .triton-3.7.1
TRITON371_TESTS := tests/test_gluon_compat.py tests/attention/v3/test_v3_compile.py \
	tests/attention/v3/test_v3_backward_compile.py \
	tests/rnn/fused/test_split_gluon.py::test_compiles_for_sm90_with_r_in_registers \
	tests/rnn/fused/test_split_gluon_backward.py::test_compiles_for_sm90_with_r_in_registers
test-triton371: setup
	test -d $(TRITON371)/triton || $(BIN)/python -m pip install -q --no-deps --target $(TRITON371) triton==3.7.1
	GPULAB_EXPECT_TRITON=3.7.1 PYTHONPATH=$(abspath $(TRITON371)):$(CURDIR) $(BIN)/python -m pytest -q $(TRITON371_TESTS) -p no:nbval -p no:cacheprovider -n 2 --dist loadfile --timeout=600

# The course as a static website (Sphinx + myst-nb): notebooks read as executed, never re-executed; MathJax and the
# theme ship with the site, so it opens offline: book/_build/html/index.html, or python -m http.server -d book/_build/html
$(BOOK_STAMP): $(STAMP) pyproject.toml
	$(BIN)/python -m pip install -q -c $(REQUIREMENTS) -e '.[book]'
	touch $(BOOK_STAMP)

book: $(BOOK_STAMP)
	$(BIN)/python -m gpulab.course.book

# Every page of the built site opened in headless Chromium, offline (skipped without Chromium unless
# GPULAB_REQUIRE_BROWSER=1, as CI sets): links, figures, math, no errors; screenshots of failures in book/_build/failures.
book-test: book
	$(BIN)/python -m pytest -q -m book tests/course/test_book.py -p no:cacheprovider -p no:nbval

# Build every lesson and solution notebook from notebooks/src/ and execute it in place (CPU interpreter unless a GPU is here).
notebooks: setup
	$(BIN)/python -m gpulab notebooks

# Redraw every stored GPU figure (benchmarks/**/<gpu>-<date>.png) from its records, and the README's generated blocks.
figures: setup
	$(BIN)/python -m gpulab.course.figures
	$(BIN)/python -m gpulab.course.readme

# Regenerate exercises/ from solutions/.
exercises: setup
	$(BIN)/python -m gpulab exercises

# Grade your exercise notebook: make grade NB=exercises/00_memory_hierarchy.ipynb
grade: setup
	$(BIN)/python -m gpulab grade --speed $(NB)

bench-%: setup
	$(BIN)/python -m gpulab bench $*

clean:
	rm -rf $(VENV) $(VENV_NEWEST) $(TRITON371) .pytest_cache course
