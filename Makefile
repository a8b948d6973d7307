# DeltaMQ — the two commands of the quick start: `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test typecheck install bench bench-spark fuzz clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/deltamq serve

typecheck: $(STAMP)
	$(BIN)/mypy broker lakehouse mgmt

# pytest exits 5 when it collects no tests: that must fail, never pass silently.
# tools/ensure-browser installs Chromium and playwright-core for the web console's
# browser test (DELTAMQ_SKIP_BROWSER=1 skips both); tools/ensure-amqp1-clients fetches rhea
# and Qpid JMS for the AMQP 1.0 client tests (DELTAMQ_SKIP_AMQP1_CLIENTS=1 skips it);
# tools/ensure-compose installs Docker Compose for the docker-compose.yml checks.
test: $(STAMP) typecheck
	bash tools/ensure-browser
	bash tools/ensure-amqp1-clients
	bash tools/ensure-compose
	$(BIN)/python -m pytest $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests" >&2; exit 1; fi; exit $$rc

# the core suite against RabbitMQ, then Spark as a participant (drain, sink latency, dead-letter lag)
bench: $(STAMP)
	$(BIN)/python -m bench.compare
	$(BIN)/python -m bench.spark_participant

bench-spark: $(STAMP)
	$(BIN)/python -m bench.spark_participant

# coverage-guided fuzzing of every decoder (docs/fuzzing.md): FUZZ_SECONDS per harness
FUZZ_SECONDS ?= 60
fuzz: $(STAMP)
	$(BIN)/python -m fuzz.run --seconds $(FUZZ_SECONDS) $(FUZZ_ARGS)

clean:
	rm -rf $(VENV) data .pytest_cache
