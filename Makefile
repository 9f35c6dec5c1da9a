# Two commands set everything up on a fresh machine:
#   make run    - the web app on the embedded default model (http://127.0.0.1:7860)
#   make test   - the whole test suite (what CI runs)
# Both create or reuse .venv from the pinned requirements; re-running is a no-op.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
LLAMA_STAMP := $(VENV)/.llamacpp-installed

.PHONY: setup run test browser cli clean

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

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
