"""What is measured: each target's processes (Switchboard, its peers, the echo backends) on free ports."""

from __future__ import annotations

import os
import shlex
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from bench.roundtrip.client import Era
from bench.roundtrip.common import (
    BENCH,
    EVERYTHING_ECHO,
    EVERYTHING_JS,
    LOG_DIR,
    MCP_PROXY_VENV,
    PEER_NODE,
    PROJECT_PYTHON,
    ROOT,
    SUPERGATEWAY_JS,
    SWITCHBOARD_TEMPLATE,
    TEXT_ECHO,
    EchoTool,
    StartError,
)
from bench.roundtrip.services import Service
from tools.procs import free_port

# The canonical order (a run measures its targets in it): baselines first; the two eras of Switchboard
# in front of the same backend next to each other, so that the ratio between them is taken close in time.
ALL_TARGETS = [
    "direct",
    "switchboard",
    "switchboard-modern",
    "python-floor",
    "python-floor-json",
    "supergateway",
    "mcp-proxy",
    "sdk-direct",
    "switchboard-sdk",
    "everything-direct",
    "switchboard-everything",
]
BASELINE_OF = {
    "direct": None,
    "switchboard": "direct",
    "switchboard-modern": "direct",
    "python-floor": "direct",
    "python-floor-json": "direct",
    "supergateway": "direct",
    "mcp-proxy": "direct",
    "sdk-direct": None,
    "switchboard-sdk": "sdk-direct",
    "everything-direct": None,
    "switchboard-everything": "everything-direct",
}


@dataclass
class TargetSpec:
    name: str
    description: str
    services: list[Service]
    url: str
    era: Era = "legacy"  # how clients talk to it: a 2025-11-25 session, or stateless 2026-07-28 requests
    echo: EchoTool = TEXT_ECHO  # its echo tool's argument and answer (the backend's, through a proxy too)
    startup_timeout: float = 30.0


def node_binary() -> str:
    if env_node := os.environ.get("BENCH_NODE"):
        return env_node
    if PEER_NODE.exists():
        return str(PEER_NODE)
    node = shutil.which("node")
    if node is None:
        raise StartError("node not found (run bench/run.sh to install peers)")
    return node


def _log(target: str, service: str) -> Path:
    return LOG_DIR / f"{target}.{service}.log"


def echo_http(target: str) -> Service:
    """The fast echo backend (echo_backend.py, HTTP) on a free port, its log named after `target`."""
    port = free_port()
    return Service(
        "echo-backend",
        [PROJECT_PYTHON, str(BENCH / "echo_backend.py"), "--host", "127.0.0.1", "--port", str(port)],
        port,
        "backend",
        _log(target, "echo-backend"),
    )


def _sdk_server(target: str, json_response: bool) -> Service:
    port = free_port()
    argv = [PROJECT_PYTHON, str(BENCH / "sdk_echo_server.py"), "--host", "127.0.0.1", "--port", str(port)]
    if json_response:
        argv.append("--json-response")
    return Service("sdk-echo-server", argv, port, "backend", _log(target, "sdk-echo-server"))


# server-everything listens on every interface (`app.listen(PORT)`, no host option). This preload makes a
# listen() given a port and no host bind 127.0.0.1, like every other process of the benchmark.
_LOOPBACK_ONLY = (
    "data:text/javascript,"
    'import net from "node:net";'
    "const listen = net.Server.prototype.listen;"
    "net.Server.prototype.listen = function (...a) {"
    ' if (a.length && typeof a[0] !== "object" && typeof a[0] !== "function" && typeof a[1] !== "string")'
    ' a.splice(1, 0, "127.0.0.1");'
    " return listen.apply(this, a);"
    "};"
)


def _everything(target: str) -> Service:
    """@modelcontextprotocol/server-everything over Streamable HTTP at /mcp (port from env PORT).

    Stateful (a session per initialize, kept in a map), SSE answers with an in-memory event store
    (resumability: every answer gets an event id and a priming event). Its get-env tool returns its
    environment to any caller, so it gets a minimal one.
    """
    if not EVERYTHING_JS.exists():
        raise StartError(f"server-everything not installed at {EVERYTHING_JS} (run bench/run.sh)")
    port = free_port()
    argv = [node_binary(), "--import", _LOOPBACK_ONLY, str(EVERYTHING_JS), "streamableHttp"]
    return Service(
        "server-everything",
        argv,
        port,
        "backend",
        _log(target, "server-everything"),
        env={"PORT": str(port)},
        inherit_env=False,
    )


def _switchboard(target: str, backend: Service, tmpdir: Path) -> Service:
    port = free_port()
    config = yaml.safe_load(SWITCHBOARD_TEMPLATE.read_text())
    config["listen"] = {"host": "127.0.0.1", "port": port}
    config["backends"]["echo"]["url"] = f"http://127.0.0.1:{backend.port}/mcp"
    cfg_path = tmpdir / f"{target}.yaml"
    cfg_path.write_text(yaml.safe_dump(config, sort_keys=False))
    argv = [*switchboard_command(), "run", "-c", str(cfg_path), "--port", str(port)]
    return Service("switchboard", argv, port, "proxy", _log(target, "switchboard"))


def switchboard_command() -> list[str]:
    """How to launch Switchboard (the driver appends `run -c FILE --port P`).

    `python -m gateway`, or the `switchboard` console script while gateway/__main__.py
    is missing; env BENCH_SWITCHBOARD_CMD overrides both (e.g. another build).
    """
    if override := os.environ.get("BENCH_SWITCHBOARD_CMD"):
        return shlex.split(override)
    script = Path(PROJECT_PYTHON).parent / "switchboard"
    if not (ROOT / "gateway" / "__main__.py").exists() and script.exists():
        return [str(script)]
    return [PROJECT_PYTHON, "-m", "gateway"]


def _stdio_backend_cmd() -> list[str]:
    return [PROJECT_PYTHON, str(BENCH / "echo_backend.py"), "--stdio"]


def _stdio_proxy(target: str, proxy: str, argv: Callable[[int], list[str]]) -> Service:
    """A proxy in front of echo_backend.py --stdio (its child), listening on the port `argv` is given."""
    port = free_port()
    return Service(proxy, argv(port), port, "proxy", _log(target, proxy))


def _supergateway(target: str) -> Service:
    if not SUPERGATEWAY_JS.exists():
        raise StartError(f"supergateway not installed at {SUPERGATEWAY_JS} (run bench/run.sh)")
    node = node_binary()
    return _stdio_proxy(
        target,
        "supergateway",
        lambda port: [
            node,
            str(SUPERGATEWAY_JS),
            "--stdio",
            " ".join(_stdio_backend_cmd()),
            "--outputTransport",
            "streamableHttp",
            "--stateful",
            "--port",
            str(port),
            "--streamableHttpPath",
            "/mcp",
            "--logLevel",
            "none",
        ],
    )


def _mcp_proxy(target: str) -> Service:
    exe = MCP_PROXY_VENV / "bin" / "mcp-proxy"
    if not exe.exists():
        raise StartError(f"mcp-proxy not installed at {exe} (run bench/run.sh)")
    return _stdio_proxy(
        target,
        "mcp-proxy",
        lambda port: [
            str(exe),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--log-level",
            "WARNING",
            "--",
            *_stdio_backend_cmd(),
        ],
    )


def _floor(target: str, backend: Service, reencode: bool) -> Service:
    """bench/floor_proxy.py: the least a CPython proxy does per call (no gateway work at all)."""
    port = free_port()
    argv = [PROJECT_PYTHON, str(BENCH / "floor_proxy.py"), "--port", str(port)]
    argv += ["--backend", f"http://127.0.0.1:{backend.port}/mcp", *(["--json"] if reencode else [])]
    return Service("floor-proxy", argv, port, "proxy", _log(target, "floor-proxy"))


def _spec(
    name: str, description: str, *services: Service, era: Era = "legacy", echo: EchoTool = TEXT_ECHO
) -> TargetSpec:
    """Clients talk to the last of `services` (the others stand behind it)."""
    url = f"http://127.0.0.1:{services[-1].port}/mcp"
    return TargetSpec(name, description, list(services), url, era, echo=echo)


def build_target(name: str, tmpdir: Path, sdk_json: bool) -> TargetSpec:
    if name == "direct":
        return _spec(name, "bench/echo_backend.py (raw ASGI + orjson, uvicorn httptools/uvloop)", echo_http(name))
    if name == "switchboard":
        be = echo_http(name)
        return _spec(name, "Switchboard (HTTP) -> echo_backend.py (HTTP)", be, _switchboard(name, be, tmpdir))
    if name == "switchboard-modern":
        be = echo_http(name)
        description = "Switchboard (HTTP, stateless 2026-07-28 requests) -> echo_backend.py (HTTP)"
        return _spec(name, description, be, _switchboard(name, be, tmpdir), era="modern")
    if name in ("python-floor", "python-floor-json"):
        be = echo_http(name)
        reencode = name == "python-floor-json"
        what = "decodes and re-encodes both bodies" if reencode else "passes bytes"
        description = f"bench/floor_proxy.py (uvloop + httptools callbacks, {what}) -> echo_backend.py (HTTP)"
        return _spec(name, description, be, _floor(name, be, reencode))
    if name == "supergateway":
        return _spec(
            name, "supergateway --stateful (Streamable HTTP) -> echo_backend.py --stdio (child)", _supergateway(name)
        )
    if name == "mcp-proxy":
        return _spec(
            name, "mcp-proxy (Streamable HTTP /mcp, stateful) -> echo_backend.py --stdio (child)", _mcp_proxy(name)
        )
    if name == "sdk-direct":
        return _spec(
            name,
            "bench/sdk_echo_server.py (official SDK 2.x MCPServer, stateful sessions)",
            _sdk_server(name, sdk_json),
        )
    if name == "switchboard-sdk":
        be = _sdk_server(name, sdk_json)
        return _spec(name, "Switchboard (HTTP) -> sdk_echo_server.py (HTTP)", be, _switchboard(name, be, tmpdir))
    if name == "everything-direct":
        description = "@modelcontextprotocol/server-everything (streamableHttp, TypeScript SDK, stateful, SSE answers)"
        return _spec(name, description, _everything(name), echo=EVERYTHING_ECHO)
    if name == "switchboard-everything":
        be = _everything(name)
        description = "Switchboard (HTTP) -> server-everything (HTTP)"
        return _spec(name, description, be, _switchboard(name, be, tmpdir), echo=EVERYTHING_ECHO)
    raise ValueError(f"unknown target {name!r}")
