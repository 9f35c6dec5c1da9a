# Two commands set everything up on a fresh machine:
#   make run    - the web app on the embedded default model (http://127.0.0.1:7860)
#   make test   - the whole test suite (what CI runs)
# Both create or reuse .venv from the pinned requirements; re-running is a no-op.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
LLAMA_STAMP := $(VENV)/.llamacpp-installed

.PHONY: setup run test browser cli clean train-large

$(STAMP): requirements.txt requirements-nodeps.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q --no-deps -r requirements-nodeps.txt
	touch $(STAMP)

# llama.cpp (the CPU runtime and its server): compiled from source on the first install, then
# reused from pip's wheel cache. `nice` keeps the compile from starving whatever else runs.
$(LLAMA_STAMP): $(STAMP) requirements-llamacpp.txt
	nice -n 5 $(PY) -m pip install -q -r requirements-llamacpp.txt
	touch $(LLAMA_STAMP)

setup: $(STAMP) $(LLAMA_STAMP)

# Browser tests drive Debian's chromium (Playwright's own browser download cannot work offline).
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "installing Debian chromium for the browser tests"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

run: setup
	$(PY) -m app $(ARGS)

test: setup browser
	$(PY) -m pytest $(PYTEST_ARGS)

# A larger training run, one command for a machine with a CUDA GPU (bf16 there; it runs on a CPU too,
# for hours): the training data (made if missing; sha256s as in adapters/smollm2-135m-cad/data-manifest.json),
# a run from the base model on every example up to LARGE_TOKENS tokens, then the held-out dev split.
# Override any variable, e.g. `make train-large LARGE_STEPS=6000 LARGE_PROMPT=instruction-first`
# (LARGE_EVAL: extra evaluate flags, e.g. --limit 80).
LARGE_DATA   ?= var/training-data-20k
LARGE_OUT    ?= var/train-large
LARGE_STEPS  ?= 3000
LARGE_TOKENS ?= 2048
LARGE_PROMPT ?= zero-shot
LARGE_EVAL   ?=
train-large: setup
	test -f $(LARGE_DATA)/train.jsonl || $(PY) -m backend make-data --out $(LARGE_DATA) --train 20000
	$(PY) -m backend train --data $(LARGE_DATA)/train.jsonl --out $(LARGE_OUT) --max-steps $(LARGE_STEPS) \
	  --max-tokens $(LARGE_TOKENS) --examples-per-step 8 --lr 3e-4 --checkpoint-every 100 --prompt $(LARGE_PROMPT) \
	  $(if $(wildcard $(LARGE_OUT)/checkpoint/state.pt),--resume)
	$(PY) -m backend evaluate $(LARGE_DATA)/dev.jsonl --model $(LARGE_OUT) --out $(LARGE_OUT)/eval-dev.jsonl $(LARGE_EVAL)

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
