#!/usr/bin/env bash
# Build the MCPx reference gateway (Node) that bench/mcpx_fanout.py measures side by side with Switchboard.
#
# The reference is packages/gateway of rjcorwin/mew-protocol at its last v0.1 commit (ac6fce6, 2025-08-29,
# "Send all messages to all participants in a topic": the last change to the gateway before the v0.2/MEUP
# rework deleted it; it speaks the mcpx/v0.1 envelope). The tree is exported with `git archive` into
# bench/.peers/mew-reference (git-ignored), its npm dependencies come from the npm registry (`npm install`, its
# own package-lock.json), and `tsc` builds dist/index.js. Idempotent: does nothing when dist/index.js exists.
#
#   bash bench/mcpx_reference/setup.sh                 # clones the repository from GitHub when needed
#   MEW_REPO=/path/to/mew-protocol.git bash bench/mcpx_reference/setup.sh   # or uses a local clone
set -euo pipefail

COMMIT=ac6fce69b4e1e7a84630bfe45a6e44e3e30211e6
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
PEERS="$ROOT/bench/.peers"
DEST="$PEERS/mew-reference"

if [[ -f "$DEST/dist/index.js" ]]; then
  echo "mew reference gateway already built: $DEST/dist/index.js"
  exit 0
fi
command -v node >/dev/null && command -v npm >/dev/null || { echo "node and npm are needed" >&2; exit 1; }

REPO="${MEW_REPO:-$PEERS/mew-protocol.git}"
if ! git --git-dir="$REPO" cat-file -e "$COMMIT^{commit}" 2>/dev/null; then
  if [[ -n "${MEW_REPO:-}" ]]; then
    echo "$MEW_REPO has no commit $COMMIT" >&2
    exit 1
  fi
  rm -rf "$REPO"
  if ! git clone --bare --quiet https://github.com/rjcorwin/mew-protocol.git "$REPO"; then
    echo "cannot clone rjcorwin/mew-protocol from GitHub (no network to it?): point MEW_REPO at a local clone" >&2
    echo "or bare repository that has commit $COMMIT, or run bench/mcpx_fanout.py --no-reference" >&2
    exit 1
  fi
fi

rm -rf "$DEST"
mkdir -p "$DEST"
git --git-dir="$REPO" archive "$COMMIT" packages/gateway | tar -x -C "$DEST" --strip-components=2
cd "$DEST"
# Its lock file lags its package.json (vitest 2 is missing from it): `npm ci` refuses, so `npm install`
# (the lock still pins everything it lists, the runtime dependencies included).
npm install --no-audit --no-fund --loglevel=error
npx --no-install tsc -p tsconfig.json
echo "built $DEST/dist/index.js ($COMMIT)"
