# transcript-owner: every target installs what it needs from nothing (venv, packages, Kafka).
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# the baselines of make bench (the `bench` extra: quixstreams, confluent-kafka, orjson) in a venv
# of their own: quixstreams pins pydantic below the worker's, and make test needs none of them
BENCH_VENV := var/venv-bench
BENCH_STAMP := $(BENCH_VENV)/.installed
# the Python connector (connectors/python) in a virtualenv of its own, as a gateway installs it:
# its own dependencies only (no faust, mode, rocksdict, aiokafka); make test runs its suite there
# and tests/integration/test_python_connector.py publishes through it
CONNECTOR_VENV := var/venv-connector
CONNECTOR_STAMP := $(CONNECTOR_VENV)/.installed

.PHONY: help install compile uncompile connector-python kafka-up kafka-down kafka-status kafka-up-secure kafka-down-secure topics topics-check prometheus-tool kcat-tool image image-tools test test-unit faults run demo bench bench-scale schemas lint clean

help:
	@echo "make run        venv + local Kafka + topics + the worker in the foreground"
	@echo "make test       the same set-up, then the whole suite against the real broker"
	@echo "make faults     only the fault suite (kill -9, restarts, rebalances, and the \`scale\`"
	@echo "                measurements make test leaves out; minutes): var/faults/"
	@echo "make demo       publish a scenario covering every rule; print transcripts (beside make run)"
	@echo "make bench      throughput and latency beside raw Kafka (aiokafka, librdkafka), faust and Quix"
	@echo "make bench-scale  the same at a deployment's size (1,000,000 sessions, 64 partitions)"
	@echo "make image      the OCI image (buildah, Debian base by mmdebstrap): localhost/transcript-owner"
	@echo "make kafka-up-secure  a second local broker: SASL_SSL + SCRAM + ACLs on 127.0.0.1:9192;"
	@echo "                 one env file per principal in var/kafka/secure/ (make kafka-down-secure)"
	@echo "make connector-python  the Python connector in var/venv-connector (its own deps only)"
	@echo "make compile    the per-record path compiled with mypyc (make install does it; uncompile)"
	@echo "make kafka-up | kafka-down | topics | schemas | lint"

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11+ is required")'
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

# the per-record path compiled with mypyc, in place (deploy/compile/build.py; the modules:
# workers/compiled.py); rebuilt when a source it reads changes. make uncompile: run the sources
COMPILE_STAMP := build/mypyc/.compiled
$(COMPILE_STAMP): $(STAMP) deploy/compile/build.py $(wildcard workers/*.py workers/core/*.py workers/stream/*.py schemas/*.py connectors/python/src/transcript_connector/*.py)
	$(PY) deploy/compile/build.py
	mkdir -p $(@D) && touch $@

compile: $(COMPILE_STAMP)

uncompile:
	rm -f workers/compiled__mypyc.*.so workers/core/*.so workers/stream/*.so connectors/python/src/transcript_connector/*.so $(COMPILE_STAMP)

install: $(STAMP) $(COMPILE_STAMP)

$(CONNECTOR_STAMP): connectors/python/pyproject.toml
	@python3.11 -c 'pass' || { echo "python3.11 is required for $(CONNECTOR_VENV)"; exit 1; }
	test -x $(CONNECTOR_VENV)/bin/python || python3.11 -m venv $(CONNECTOR_VENV)
	$(CONNECTOR_VENV)/bin/python -m pip install -q --upgrade pip
	$(CONNECTOR_VENV)/bin/python -m pip install -q -e 'connectors/python[dev]'
	touch $@

connector-python: $(CONNECTOR_STAMP)

kafka-up:
	deploy/local/kafka-up.sh

kafka-down:
	deploy/local/kafka-down.sh

kafka-status:
	deploy/local/kafka-status.sh

# the secured broker (SASL_SSL, SCRAM-SHA-512, StandardAuthorizer): var/kafka/secure/<user>.env
kafka-up-secure:
	deploy/local/kafka-up-secure.sh

kafka-down-secure:
	deploy/local/kafka-down-secure.sh

# the prometheus binary for tests/integration/test_prometheus.py (Debian's package; no service)
prometheus-tool:
	deploy/local/prometheus-tool.sh

# kcat (Debian's package: librdkafka's client) for tests/integration/test_codecs.py, which
# publishes gzip, snappy, lz4 and zstd batches through it
kcat-tool:
	deploy/local/kcat-tool.sh

# buildah and mmdebstrap (Debian's packages) when missing; tests/deploy/test_image.py runs `make image`
image-tools:
	deploy/container/image-tools.sh

# deploy/container/Containerfile on a bookworm base made once by mmdebstrap (BASE=… to use another)
image: image-tools
	deploy/container/build-image.sh

topics: install kafka-up
	$(PY) -m workers topics apply

topics-check: install
	$(PY) -m workers topics check

schemas: install
	$(PY) -m schemas.generate

lint: install
	$(VENV)/bin/ruff check workers schemas tests connectors/python

# both kustomize overlays rendered and checked by deploy/k8s/validate (kubectl and go; no cluster)
.PHONY: k8s-check
k8s-check:
	cd deploy/k8s/validate && GOTOOLCHAIN=local go build -o ../../../var/k8s-validate .
	kubectl kustomize deploy/k8s/overlays/dev | var/k8s-validate
	kubectl kustomize deploy/k8s/overlays/production | var/k8s-validate -production

# the TypeScript connector (connectors/typescript): `npm ci` when package.json or the lockfile
# changed, `npm run build` (tsc into dist/ and build/) when a source did. `make test` runs its
# node suites: tests/unit/test_typescript_suite.py, tests/integration/test_typescript_connector.py
CONNECTOR := connectors/typescript
CONNECTOR_SOURCES := $(shell find $(CONNECTOR)/src $(CONNECTOR)/test $(CONNECTOR)/examples $(CONNECTOR)/scripts -type f 2>/dev/null) $(wildcard $(CONNECTOR)/tsconfig*.json schemas/json/*.schema.json)
.PHONY: connector vectors
connector: $(CONNECTOR)/build/.built

$(CONNECTOR)/node_modules/.installed: $(CONNECTOR)/package.json $(CONNECTOR)/package-lock.json
	cd $(CONNECTOR) && headers=$$(node -p 'require("path").resolve(process.execPath, "../..")') && if [ -z "$${npm_config_nodedir:-}" ] && [ -f "$$headers/include/node/node.h" ]; then export npm_config_nodedir="$$headers"; fi && npm ci --no-audit --no-fund
	touch $@

$(CONNECTOR)/build/.built: $(CONNECTOR)/node_modules/.installed $(CONNECTOR_SOURCES)
	cd $(CONNECTOR) && npm run --silent build
	touch $@

# the session-key parity vectors (schemas/vectors/session_keys.json), the hash-chain vectors
# (schemas/vectors/chain.json), the entries topic's record vectors (schemas/vectors/positions.json,
# and the TypeScript suite's extra cases) and the TypeScript port's tables of Python's str
# functions, all from this Python; commit what changed
vectors: install
	$(PY) $(CONNECTOR)/scripts/pyunicode_tables.py
	$(PY) schemas/vectors/generate.py
	$(PY) schemas/vectors/chain.py
	$(PY) schemas/vectors/positions.py
	$(PY) $(CONNECTOR)/scripts/entries_cases.py

test-unit: install
	$(PY) -m pytest tests/unit -q

test: install kafka-up prometheus-tool kcat-tool kafka-up-secure connector connector-python
	$(CONNECTOR_VENV)/bin/python -m pytest -q connectors/python/tests
	$(PY) -m pytest -q -m "not scale"

faults: install kafka-up
	$(PY) -m pytest -q -m faults tests/faults

run: install kafka-up topics
	$(PY) -m workers worker

demo: install kafka-up
	$(PY) -m workers.commands.demo

$(BENCH_STAMP): pyproject.toml | $(STAMP)
	test -x $(BENCH_VENV)/bin/python || $(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -m pip install -q --upgrade pip
	$(PY) -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["bench"]))' > $(BENCH_VENV)/requirements.txt
	$(BENCH_VENV)/bin/python -m pip install -q -r $(BENCH_VENV)/requirements.txt
	touch $@

bench: install kafka-up $(BENCH_STAMP)
	$(PY) bench/run.py $(BENCH_ARGS)

# issue 43: a million sessions on 64 partitions beside make bench's workload, one run (about
# 15 minutes); bench/results/scale.json, which plan --constants reads
bench-scale: install kafka-up $(BENCH_STAMP)
	$(PY) bench/scale.py $(BENCH_ARGS)

clean: uncompile
	rm -rf $(VENV) var build
