# Two entry points on a fresh machine: `make run` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: run test lint clean docker-base

$(BIN)/anvil: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

run: $(BIN)/anvil
	$(BIN)/anvil run tasks/taskboard tasks/checkout tasks/booking tasks/notify --submissions examples

test: $(BIN)/anvil
	$(BIN)/ruff check engine plugins mocks telemetry tests bench
	$(BIN)/mypy engine plugins mocks telemetry
	$(BIN)/python -m pytest

lint: $(BIN)/anvil
	$(BIN)/ruff check engine plugins mocks telemetry tests bench
	$(BIN)/mypy engine plugins mocks telemetry

# The offline Python base image for the docker runtime (needs dockerd and debootstrap).
docker-base: $(BIN)/anvil
	$(BIN)/anvil docker bootstrap

clean:
	rm -rf $(VENV) .anvil
