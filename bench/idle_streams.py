#!/usr/bin/env python3
"""`make bench-idle`: what idle clients cost one gateway process (issue 15): memory per idle legacy
session and per idle SSE stream, CPU while they idle, and tools/call speed with them held open.

Topology: this driver → one gateway process (`python -m gateway run`, workers=1) → bench/echo_backend.py.
Each kind of idle stream gets a fresh gateway (one socket per stream on each side: 10,000 of one kind
fit under a 20,000 file limit; both kinds at once would not, see ``run``). Each phase is measured as
the growth of the gateway's memory:

1. ``--sessions`` idle legacy Streamable HTTP sessions (``initialize`` + ``notifications/initialized``,
   no stream): bytes per session;
2. ``--streams`` standalone GET streams on ``/mcp``, each on a session of its own (opened the same
   way): bytes per stream *including* its session, and the stream's share (minus a session);
3. (the second gateway) ``--streams`` legacy ``GET /sse`` streams, each initialized through its
   ``/messages`` endpoint (the session is the stream's): bytes per stream including its session.

Memory is read from /proc/PID/status (VmRSS) and /proc/PID/smaps_rollup (USS = Private_Clean +
Private_Dirty) two seconds after each phase. The clients are plain asyncio protocols that discard
what they receive (and count keep-alive comments), so a socket costs the driver little; the driver
raises its RLIMIT_NOFILE soft limit toward the hard one (the gateway inherits it).

Then, with a kind's streams open: the gateway's CPU over ``--idle-s`` seconds (/proc/PID/stat)
against the keep-alives the clients received meanwhile (each stream gets one per ``sse_keepalive_s``,
15 s by default as in production), and a wrk run of ``tools/call`` (c=``--concurrency``, a legacy
session of its own) compared with the same run before the idle clients were opened and after they
were closed: req/s, p50/p99 and gateway CPU µs per call (the steadiest of the three on a shared machine).

The bench config raises ``limits.max_sessions`` (default 10,000 per replica: every stream here holds
a session) and ``session_idle_s`` (so nothing expires mid-run); nothing else differs from defaults.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import resource
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.roundtrip.client import McpSession, open_session
from bench.roundtrip.common import log
from bench.roundtrip.wrk import WrkResult, run_wrk
from tests.support import http_server, run_gateway

VERSION = "2025-11-25"
INIT = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {"protocolVersion": VERSION, "capabilities": {}, "clientInfo": {"name": "bench-idle", "version": "1"}},
}
INITIALIZED = orjson.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"})
CLK_TCK = os.sysconf("SC_CLK_TCK")
KEEPALIVE = b": keep-alive"


@dataclass(slots=True)
class Memory:
    rss: int  # bytes
    uss: int

    @staticmethod
    def of(pid: int) -> Memory:
        rss = uss = 0
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith(("Private_Clean:", "Private_Dirty:")):
                uss += int(line.split()[1]) * 1024
        return Memory(rss, uss)


def cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat(5))


def raise_fd_limit(need: int) -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < need:
        with contextlib.suppress(ValueError, OSError):  # only root may raise the hard limit
            resource.setrlimit(resource.RLIMIT_NOFILE, (need, need))
            return need
        need = hard
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


# ---- the idle clients ------------------------------------------------------------------------------


class IdleStream(asyncio.Protocol):
    """One GET of an SSE stream: sends its request, waits for the headers and the first event, then
    only counts keep-alive comments (everything else is dropped)."""

    def __init__(self, request: bytes) -> None:
        self.request = request
        self.head = b""
        self.first: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self.keepalives = 0
        self.closed = False
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        if not self.first.done():
            self.head += data
            head, sep, body = self.head.partition(b"\r\n\r\n")
            if not sep:
                return
            if not head.startswith(b"HTTP/1.1 200"):
                self.first.set_exception(RuntimeError(head.split(b"\r\n")[0].decode(errors="replace")))
            elif b"\n\n" in body:  # the first event (endpoint, priming id or keep-alive) has come
                self.first.set_result(body)
                self.head = b""
            return
        self.keepalives += data.count(KEEPALIVE)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if not self.first.done():
            self.first.set_exception(ConnectionError("closed before the first event"))


class Poster:
    """One kept-alive connection for the set-up POSTs (initialize and friends). The server closes a
    connection idle for 5 s (uvicorn's keep-alive timeout): one idle nearly that long is replaced."""

    IDLE_S = 3.0

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.used = 0.0

    async def post(self, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
        if self.writer is not None and time.monotonic() - self.used > self.IDLE_S:
            self.close()
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        lines = [f"POST {path} HTTP/1.1", f"host: {self.host}:{self.port}", f"content-length: {len(body)}"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        self.writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        head = (await self.reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        status = int(head[0].split()[1])
        found = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in head[1:] if h)}
        data = await self.reader.readexactly(int(found.get("content-length", "0")))
        self.used = time.monotonic()
        return status, found, data

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.reader = self.writer = None


JSON_HEADERS = {"content-type": "application/json", "accept": "application/json, text/event-stream"}


async def new_session(poster: Poster) -> str:
    status, headers, body = await poster.post("/mcp", orjson.dumps(INIT), JSON_HEADERS)
    session_id = headers.get("mcp-session-id")
    if status != 200 or not session_id:
        raise RuntimeError(f"initialize: HTTP {status} {body[:200]!r}")
    more = {**JSON_HEADERS, "mcp-session-id": session_id, "mcp-protocol-version": VERSION}
    status, _, body = await poster.post("/mcp", INITIALIZED, more)
    if status != 202:
        raise RuntimeError(f"notifications/initialized: HTTP {status} {body[:200]!r}")
    return session_id


class Clients:
    """The idle sessions and streams this driver holds open."""

    def __init__(self, host: str, port: int, parallel: int) -> None:
        self.host, self.port, self.parallel = host, port, parallel
        self.streams: list[IdleStream] = []

    async def _open_stream(self, request: bytes) -> IdleStream:
        loop = asyncio.get_running_loop()
        _, stream = await loop.create_connection(lambda: IdleStream(request), self.host, self.port)
        async with asyncio.timeout(30):
            await stream.first
        self.streams.append(stream)
        return stream

    def _get(self, path: str, extra: str = "") -> bytes:
        head = f"GET {path} HTTP/1.1\r\nhost: {self.host}:{self.port}\r\naccept: text/event-stream\r\n{extra}\r\n"
        return head.encode()

    async def _each(self, count: int, one: Callable[[Poster], Awaitable[object]]) -> None:
        """Run ``one(poster)`` ``count`` times over ``parallel`` kept-alive connections."""
        left = iter(range(count))

        async def worker() -> None:
            poster = Poster(self.host, self.port)
            try:
                for _ in left:
                    await one(poster)
            finally:
                poster.close()

        async with asyncio.TaskGroup() as group:
            for _ in range(min(self.parallel, count)):
                group.create_task(worker())

    async def sessions(self, count: int) -> None:  # idle sessions: no socket held
        await self._each(count, new_session)

    async def mcp_streams(self, count: int) -> None:
        async def one(poster: Poster) -> None:
            session_id = await new_session(poster)
            extra = f"mcp-session-id: {session_id}\r\nmcp-protocol-version: {VERSION}\r\n"
            await self._open_stream(self._get("/mcp", extra))

        await self._each(count, one)

    async def sse_streams(self, count: int) -> None:
        async def one(poster: Poster) -> None:
            stream = await self._open_stream(self._get("/sse"))
            first = await stream.first
            start = first.index(b"data: ") + len(b"data: ")
            endpoint = first[start : first.index(b"\n", start)].strip().decode()
            for body in (orjson.dumps(INIT), INITIALIZED):
                status, _, answer = await poster.post(endpoint, body, JSON_HEADERS)
                if status != 202:
                    raise RuntimeError(f"POST {endpoint}: HTTP {status} {answer[:200]!r}")

        await self._each(count, one)

    def keepalives(self) -> int:
        return sum(s.keepalives for s in self.streams)

    def closed(self) -> int:
        return sum(s.closed for s in self.streams)

    def close(self) -> None:
        for stream in self.streams:
            if stream.transport is not None:
                stream.transport.close()


# ---- the run -----------------------------------------------------------------------------------------


@dataclass(slots=True)
class Load:
    label: str
    wrk: WrkResult
    gateway_us_per_call: float


@dataclass(slots=True)
class Run:
    """One gateway process, one kind of idle client."""

    kind: str
    fd_limit: str
    start: Memory
    phases: list[tuple[str, int, Memory]]  # (what was opened, how many, the gateway's memory after)
    idle_s: float
    idle_cpu_s: float
    keepalives: int
    dropped: int
    loads: list[Load]


def load(label: str, session: McpSession, pid: int, args: argparse.Namespace) -> Load:
    before = cpu_ticks(pid)
    result = run_wrk(session, args.concurrency, args.load_s, threads=1)
    used_s = (cpu_ticks(pid) - before) / CLK_TCK
    if result.error_total:
        log(f"{label}: {result.error_total} errors")
    return Load(label, result, used_s * 1e6 / max(1, result.requests))


def settled(pid: int, wait_s: float = 2.0) -> Memory:
    time.sleep(wait_s)  # let the last answers leave and the loop go idle
    return Memory.of(pid)


def kb(n: float) -> str:
    return f"{n / 1024:.1f}"


@contextlib.contextmanager
def event_loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    try:
        yield loop
    finally:
        loop.close()


def measure(kind: str, backend: str, args: argparse.Namespace) -> Run:
    """A fresh gateway: idle clients of one kind opened (after ``--sessions`` idle sessions, for
    ``mcp``), its memory after each phase, its CPU while they idle, wrk before/with/after them."""
    config = {
        "backends": {"echo": {"transport": "http", "url": backend}},
        "limits": {"max_sessions": args.sessions + args.streams + 100, "session_idle_s": 86400.0},
    }
    if args.keepalive_s is not None:
        config["limits"]["sse_keepalive_s"] = args.keepalive_s
    with run_gateway(config) as gateway, event_loop() as loop:
        pid = gateway.proc.pid
        limits = Path(f"/proc/{pid}/limits").read_text()
        fd_limit = next(ln.split()[3] for ln in limits.splitlines() if ln.startswith("Max open files"))
        port = int(gateway.url.rsplit(":", 1)[1])
        session = open_session(gateway.mcp, 20)
        run_wrk(session, args.concurrency, 2, threads=1)  # warm-up: the call path's code and caches
        start = settled(pid)
        loads = [load("before (no idle clients)", session, pid, args)]
        clients = Clients("127.0.0.1", port, args.parallel)
        phases: list[tuple[str, int, Memory]] = [("start", 0, settled(pid))]
        plan: list[tuple[str, int, Callable[[int], Awaitable[None]]]] = (
            [
                ("idle legacy sessions (no stream)", args.sessions, clients.sessions),
                ("idle GET /mcp streams (each with its session)", args.streams, clients.mcp_streams),
            ]
            if kind == "mcp"
            else [("idle GET /sse streams (each with its session)", args.streams, clients.sse_streams)]
        )
        for label, count, opener in plan:
            started = time.monotonic()
            loop.run_until_complete(opener(count))
            log(f"opened {count} {label} in {time.monotonic() - started:.1f} s")
            phases.append((label, count, settled(pid)))
        # Idle: what the gateway spends while the clients only hold their sockets open.
        k0, t0, w0 = clients.keepalives(), cpu_ticks(pid), time.monotonic()
        loop.run_until_complete(asyncio.sleep(args.idle_s))
        k1, t1, w1 = clients.keepalives(), cpu_ticks(pid), time.monotonic()
        loads.append(load(f"with {args.streams} idle streams", session, pid, args))
        loop.run_until_complete(asyncio.sleep(0.5))
        dropped = clients.closed()
        clients.close()
        loop.run_until_complete(asyncio.sleep(2))
        loads.append(load("after closing them", session, pid, args))
    return Run(kind, fd_limit, start, phases, w1 - w0, (t1 - t0) / CLK_TCK, k1 - k0, dropped, loads)


def report(runs: list[Run], args: argparse.Namespace) -> None:
    print(f"\nidle clients held by one gateway process ({os.cpu_count()} cores), a fresh gateway per kind")
    print("| what | count | KB RSS each | KB USS each |\n|---|---|---|---|")
    for run in runs:
        for (_, _, prev), (label, count, now) in itertools.pairwise(run.phases):
            per_rss, per_uss = (now.rss - prev.rss) / max(1, count), (now.uss - prev.uss) / max(1, count)
            print(f"| {label} | {count} | {kb(per_rss)} | {kb(per_uss)} |")
    mcp = next((r for r in runs if r.kind == "mcp"), None)
    if mcp is not None and args.sessions and args.streams:
        (_, _, m0), (_, _, m1), (_, _, m2) = mcp.phases
        own = (m2.uss - m1.uss) / args.streams - (m1.uss - m0.uss) / args.sessions
        print(f"a GET /mcp stream's own share (minus one idle session): {kb(own)} KB USS")
    for run in runs:
        start = run.start
        print(
            f"\n{run.kind}: gateway at start RSS {start.rss / 2**20:.1f} MiB, USS {start.uss / 2**20:.1f} MiB; "
            f"fd limit {run.fd_limit}"
        )
        print(
            f"idle {run.idle_s:.1f} s with {args.streams} streams: gateway CPU {run.idle_cpu_s * 1000:.0f} ms "
            f"({run.idle_cpu_s / run.idle_s * 100:.2f} % of a core); keep-alives received {run.keepalives} "
            f"({run.keepalives / run.idle_s:.0f}/s): {run.idle_cpu_s * 1e6 / max(1, run.keepalives):.0f} µs "
            f"of gateway CPU per keep-alive; streams the gateway closed: {run.dropped}"
        )
        print(f"tools/call, wrk -c{args.concurrency} {args.load_s:.0f} s, one legacy session")
        print("| run | req/s | p50 ms | p99 ms | errors | gateway CPU µs/call |\n|---|---|---|---|---|---|")
        for row in run.loads:
            w = row.wrk
            print(
                f"| {row.label} | {w.rps:.0f} | {w.p50_ms:.2f} | {w.p99_ms:.2f} | {w.error_total} | "
                f"{row.gateway_us_per_call:.0f} |"
            )


def run(args: argparse.Namespace) -> None:
    # One socket per stream on each side; the streams of one kind at a time (a fresh gateway per
    # kind), so that 10,000 fit under a 20,000 hard limit that only root-with-CAP_SYS_RESOURCE lifts.
    raise_fd_limit(args.streams + 2048)
    root = Path(__file__).resolve().parent.parent
    echo = [sys.executable, str(root / "bench" / "echo_backend.py")]
    with http_server(lambda port: [*echo, "--port", str(port)]) as backend:
        runs = [measure(kind, backend, args) for kind in args.kinds.split(",")]
    report(runs, args)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--streams", type=int, default=10000, help="idle streams of each kind (default 10000)")
    parser.add_argument("--sessions", type=int, default=2000, help="idle legacy sessions (default 2000)")
    parser.add_argument("--idle-s", type=float, default=20.0, help="the idle CPU window (default 20 s)")
    parser.add_argument("--load-s", type=float, default=5.0, help="each wrk run (default 5 s)")
    parser.add_argument("--concurrency", type=int, default=16, help="wrk connections (default 16)")
    parser.add_argument("--parallel", type=int, default=32, help="clients opened at once (default 32)")
    parser.add_argument("--kinds", default="mcp,sse", help="which streams: mcp, sse or both (default mcp,sse)")
    parser.add_argument("--keepalive-s", type=float, help="limits.sse_keepalive_s (default: the gateway's, 15 s)")
    parser.add_argument(
        "--quick", action="store_true", help="small N: 500 streams, 200 sessions, 5 s idle, 3 s load, 2 s keep-alives"
    )
    args = parser.parse_args()
    if not args.kinds or not set(args.kinds.split(",")) <= {"mcp", "sse"}:
        parser.error("--kinds takes mcp, sse or mcp,sse")
    if args.quick:
        args.streams, args.sessions, args.idle_s, args.load_s = 500, 200, 5.0, 3.0
        args.keepalive_s = args.keepalive_s or 2.0
    run(args)


if __name__ == "__main__":
    main()
