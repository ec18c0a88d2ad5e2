#!/bin/bash
# Instructions per tools/call of a whole gateway process (uvicorn, the door, the router, the backend
# client, the cyclic collector) under callgrind, for A/B of what bench/door_cpu.py leaves out (issue 15,
# ADR 0017): the difference of a 1300-call and a 300-call run (after 200 warm-up calls each), / 1000.
# The echo backend and the client (bench/fixed_calls.py) run outside valgrind. GATEWAY_IR_CONNECTIONS (default 1):
# one connection makes each call's path the same every time; at 8 how many calls share a loop iteration varies.
# usage: bash bench/gateway_ir.sh [legacy|modern]   (from the root of the tree to measure; 5-8 minutes)
# Ports: GATEWAY_IR_PORT (default 18681) and GATEWAY_IR_BACKEND_PORT (18666). GATEWAY_IR_PYTHON: the
# interpreter that runs the gateway (default .venv/bin/python; another one needs the runtime dependencies,
# e.g. a venv bench/interpreters.py made under .cache/interpreters/), on this tree's source.
set -euo pipefail
# One string-hash seed for every run: dict and set layouts (and so the instruction count) then repeat.
export PYTHONHASHSEED=${PYTHONHASHSEED:-0}
ERA=${1:-legacy}
PORT=${GATEWAY_IR_PORT:-18681}
BPORT=${GATEWAY_IR_BACKEND_PORT:-18666}
CONNECTIONS=${GATEWAY_IR_CONNECTIONS:-1}
WORK=$(mktemp -d)
.venv/bin/python bench/echo_backend.py --port "$BPORT" >"$WORK/backend.log" 2>&1 &
BP=$!
trap 'kill $BP 2>/dev/null; rm -rf "$WORK"' EXIT
cat >"$WORK/sb.yaml" <<EOC
listen: {host: 127.0.0.1, port: $PORT}
backends:
  echo: {transport: http, url: "http://127.0.0.1:$BPORT/mcp"}
EOC
instructions() {
  PYTHONPATH=$PWD valgrind --tool=callgrind --callgrind-out-file=/dev/null "${GATEWAY_IR_PYTHON:-.venv/bin/python}" -m gateway run -c "$WORK/sb.yaml" \
    --port "$PORT" >"$WORK/gw.log" 2>&1 &
  local gp=$!
  for _ in $(seq 900); do curl -s "localhost:$PORT/healthz" >/dev/null && break; sleep 0.2; done
  .venv/bin/python bench/fixed_calls.py "$PORT" 200 --era "$ERA" --connections "$CONNECTIONS"
  .venv/bin/python bench/fixed_calls.py "$PORT" "$1" --era "$ERA" --connections "$CONNECTIONS"
  kill "$gp"
  wait "$gp" || true
  grep "Collected" "$WORK/gw.log" | awk '{print $4}'
}
short=$(instructions 300)
long=$(instructions 1300)
python3 -c "print('$PWD ${GATEWAY_IR_PYTHON:-.venv/bin/python} $ERA c=$CONNECTIONS instructions per call (whole gateway process):', ($long - $short) / 1000)"
