"""Worker processes: ``switchboard run --workers N`` serves one port from N processes.

One Python process runs one event loop on one core; N workers use N cores. Each worker is a whole
gateway (its own backend connections, so a stdio backend runs once per worker; its own sessions,
streams, metrics), exactly like a replica behind a load balancer: ``/metrics``, ``/healthz`` (which
names its ``pid``) and ``/readyz`` answer for the worker the connection lands on. The workers share
state the way replicas do: through ``bus: {kind: redis}``. With the memory bus each worker would be
an island (every rate limit N times as generous, pins and grants known to one worker only), so
``--workers > 1`` is refused before anything starts (:func:`refusal`).

How N processes share one port: SO_REUSEPORT, one listening socket per worker. The kernel (Linux)
spreads new connections over the listening sockets of one host:port by a hash of the connection,
evenly and without waking every worker for every connection. The alternative, one socket bound by
the supervisor and inherited by every worker, makes every worker's event loop race to ``accept`` the
same queue; the winner is whichever is idle at that instant, which leaves long-lived MCP connections
unevenly spread, and wakes N loops per connection. SO_REUSEPORT balances only on Linux (macOS and the
BSDs accept the option without spreading connections, FreeBSD has a separate SO_REUSEPORT_LB; Windows
has no such option), so ``--workers > 1`` is refused elsewhere. A worker's socket listens only once
its gateway has started (uvicorn listens after the lifespan startup), so no connection waits in the
queue of a worker that cannot answer yet.

The supervisor serves nothing. Before any worker starts it binds host:port once *without*
SO_REUSEPORT (a port that anything already listens on, even another gateway's workers, is refused
here with a clear message: exit 1), learns the port when it was 0, then at once keeps a bound,
non-listening SO_REUSEPORT socket on it for its whole life. That socket takes no connections (only listening
sockets do) but keeps the port reserved between worker restarts.

Invariants:
- Worker ``i/N`` (1-based) is re-executed as ``python -m gateway run ... --worker i/N:READY:LIFELINE``:
  the same CLI and config file, the resolved host and port, and two pipe ends. It writes one byte on
  READY once it serves, and treats the end of LIFELINE (the supervisor's end closes when the
  supervisor dies, even by SIGKILL) as SIGTERM: no worker outlives its supervisor.
- A worker that exits while the supervisor is not stopping is restarted, after a delay that doubles
  with each consecutive failure (0.5 s up to 10 s). A run is a failure when the worker exits before
  it is ready or within ``STABLE_S`` of being ready. After ``MAX_FAILURES`` consecutive failures of one
  worker the supervisor stops every worker and exits 1 (a port that cannot be served, a backend that
  cannot start: restarting forever would hide it).
- SIGTERM or SIGINT to the supervisor: SIGTERM to every worker (each drains as a single gateway does:
  uvicorn stops accepting, finishes requests for up to 5 s, then the gateway stops), then up to
  ``DRAIN_S`` for all of them to exit, then SIGKILL for the rest. A second signal kills them at once.
  SIGHUP is forwarded (each worker reloads its config). The supervisor exits 0 after a requested stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("switchboard.workers")

DRAIN_S = 20.0  # uvicorn's 5 s for open requests, then the gateway's own stop (backends, bus)
STABLE_S = 10.0  # a worker that served this long and then died had started fine: its failures reset
MAX_FAILURES = 5
BACKOFF_FIRST_S = 0.5
BACKOFF_MAX_S = 10.0
REDIS_FIX = "bus: {kind: redis, url: redis://HOST:6379/0}"


# ----------------------------------------------------------------------------- how many, and whether


def parse_workers(text: str) -> int | str:
    """argparse type of ``--workers``: a count ≥ 1, or ``auto``."""
    import argparse

    if text == "auto":
        return "auto"
    try:
        count = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of processes or 'auto', not {text!r}") from None
    if count < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {count}")
    return count


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity, capped by a cgroup CPU quota (a container's
    CPU limit), at least 1."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    quota = cgroup_cpu_quota()
    if quota is not None:
        cores = min(cores, quota)
    return max(1, cores)


def cgroup_cpu_quota(root: str = "/sys/fs/cgroup") -> int | None:
    """A cgroup's CPU limit in whole cores, rounded up (v2 ``cpu.max``, else v1 CFS quota); None if unlimited."""
    import math

    def read(name: str) -> str | None:
        try:
            with open(os.path.join(root, name), encoding="ascii") as fh:
                return fh.read().strip()
        except OSError:
            return None

    try:
        v2 = read("cpu.max")
        if v2 is not None:
            quota, _, period = v2.partition(" ")
            if quota == "max" or not period:
                return None
            return max(1, math.ceil(int(quota) / int(period)))
        v1_quota, v1_period = read("cpu/cpu.cfs_quota_us"), read("cpu/cpu.cfs_period_us")
        if v1_quota is None or v1_period is None or int(v1_quota) <= 0:
            return None
        return max(1, math.ceil(int(v1_quota) / int(v1_period)))
    except (ValueError, ZeroDivisionError):  # a format we do not know: no cap rather than a crash
        return None


def resolve(requested: int | str) -> int:
    return usable_cores() if requested == "auto" else int(requested)


def refusal(requested: int | str, count: int, bus_kind: str) -> str | None:
    """Why ``count`` workers cannot run here, or None. Checked before anything starts."""
    if count <= 1:
        return None
    asked = f"--workers {requested}" + (f" (= {count} cores here)" if requested == "auto" else "")
    if bus_kind != "redis":
        return (
            f"{asked} needs a shared bus: with bus kind {bus_kind!r} every worker process would keep its own "
            f"sessions, rate limits, pins and grants. Add to the config: {REDIS_FIX} "
            "(or run one process: --workers 1)"
        )
    if not sys.platform.startswith("linux"):
        return f"{asked}: worker processes share the port with SO_REUSEPORT, which balances only on Linux"
    return None


# ----------------------------------------------------------------------------- sockets


def listening_socket(host: str, port: int, *, reuse_port: bool = False) -> socket.socket:
    """A TCP socket bound to host:port, not yet listening (uvicorn listens once the app has started)."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        # Accepted sockets inherit TCP_NODELAY on Linux. uvloop does not set it on connections accepted
        # from a socket handed in by us, and without it a response written in two parts (headers, then
        # body) waits for the client's delayed ACK: 40 ms per request.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def reserve_port(host: str, port: int) -> socket.socket:
    """The supervisor's hold on host:port (see the module docstring); OSError if it is taken."""
    with contextlib.closing(listening_socket(host, port)) as probe:
        port = int(probe.getsockname()[1])
    return listening_socket(host, port, reuse_port=True)


# ----------------------------------------------------------------------------- the worker's side


@dataclass(frozen=True, slots=True)
class WorkerRole:
    """What the hidden ``--worker i/N:READY:LIFELINE`` flag tells a worker process."""

    index: int
    count: int
    ready_fd: int
    lifeline_fd: int

    @classmethod
    def parse(cls, spec: str) -> WorkerRole:
        slot, ready, lifeline = spec.split(":")
        index, count = slot.split("/")
        return cls(int(index), int(count), int(ready), int(lifeline))

    def spec(self) -> str:
        return f"{self.index}/{self.count}:{self.ready_fd}:{self.lifeline_fd}"

    @property
    def label(self) -> str:
        return f"worker {self.index}/{self.count} pid {os.getpid()}"

    def announce_ready(self) -> None:
        with contextlib.suppress(OSError):  # a supervisor that is gone learns nothing; the lifeline ends us
            os.write(self.ready_fd, b"r")
            os.close(self.ready_fd)

    async def watch_lifeline(self, lost: Callable[[], None]) -> None:
        """Calls ``lost`` when the supervisor's end of the lifeline closes (it exited, however)."""
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(self.lifeline_fd, "rb", buffering=0)
        )
        try:
            await reader.read()  # the supervisor never writes: this returns at the end
            log.warning("%s: the supervisor is gone; stopping", self.label)
            lost()
        finally:
            transport.close()


def gateway_server(config: Any, on_started: Callable[[], None] | None = None) -> Any:
    """The uvicorn.Server that serves the gateway (one process, or one worker).

    A SIGTERM drains like uvicorn's and then the process exits 0: uvicorn raises the signal again
    once it has shut down, so a process that stopped cleanly died by SIGTERM (exit 143), which
    Kubernetes reports as an error and a process manager as a crash. SIGINT keeps uvicorn's
    behaviour (a second Ctrl-C forces the exit). With ``on_started``, it is called once the server
    accepts connections (the app has started)."""
    import uvicorn

    class _Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            if sig == signal.SIGTERM:
                self.should_exit = True  # drained, then a normal return: not re-raised
                return
            super().handle_exit(sig, frame)

        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            if self.started and not self.should_exit and on_started is not None:
                on_started()

    return _Server(config)


# ----------------------------------------------------------------------------- the supervisor


@dataclass(slots=True)
class _Slot:
    index: int
    proc: asyncio.subprocess.Process | None = None
    failures: int = 0
    ever_ready: bool = False


@dataclass(slots=True)
class Supervisor:
    """Runs ``count`` workers of ``command`` (the worker's argv, to which ``--worker SPEC`` is appended)."""

    count: int
    command: Sequence[str]
    on_all_ready: Callable[[], None] = lambda: None
    drain_s: float = DRAIN_S
    stable_s: float = STABLE_S
    max_failures: int = MAX_FAILURES
    _slots: list[_Slot] = field(default_factory=list, init=False)
    _stopping: asyncio.Event = field(default_factory=asyncio.Event, init=False)
    _signals: int = field(default=0, init=False)
    _exit_code: int = field(default=0, init=False)
    _ready: set[int] = field(default_factory=set, init=False)

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self._on_stop_signal, signum)
        loop.add_signal_handler(signal.SIGHUP, self._forward, signal.SIGHUP)
        self._slots = [_Slot(i) for i in range(1, self.count + 1)]
        log.info("supervisor pid %d: starting %d workers", os.getpid(), self.count)
        keepers = [asyncio.create_task(self._keep(slot)) for slot in self._slots]
        try:
            await self._stopping.wait()
            await self._drain(keepers)
        finally:
            for task in keepers:
                task.cancel()  # only if something went wrong: a drained keeper has returned
            await asyncio.gather(*keepers, return_exceptions=True)
            for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                loop.remove_signal_handler(signum)
        return self._exit_code

    def _on_stop_signal(self, signum: int) -> None:
        self._signals += 1
        if self._signals == 1:
            log.info("supervisor: %s, stopping %d workers", signal.Signals(signum).name, self.count)
            self._stopping.set()
        else:
            log.warning("supervisor: second %s, killing the workers now", signal.Signals(signum).name)
            self._forward(signal.SIGKILL)

    def _forward(self, signum: int) -> None:
        for slot in self._slots:
            if slot.proc is not None and slot.proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    slot.proc.send_signal(signum)

    async def _drain(self, keepers: list[asyncio.Task[None]]) -> None:
        """Every keeper returns once its worker has exited (a worker spawned meanwhile is stopped at once)."""
        self._forward(signal.SIGTERM)
        _, late = await asyncio.wait(keepers, timeout=self.drain_s)
        if late:
            pids = [s.proc.pid for s in self._slots if s.proc is not None and s.proc.returncode is None]
            log.error("supervisor: workers %s still running after %.0f s; killing them", pids, self.drain_s)
            self._forward(signal.SIGKILL)
            await asyncio.wait(late)
        log.info("supervisor: every worker has stopped")

    async def _keep(self, slot: _Slot) -> None:
        """Runs slot's worker again and again until the supervisor stops or gives up on it."""
        while not self._stopping.is_set():
            started = time.monotonic()
            ready_at = await self._run_once(slot)
            if self._stopping.is_set():
                return
            stable = ready_at is not None and time.monotonic() - ready_at >= self.stable_s
            slot.failures = 0 if stable else slot.failures + 1
            code = slot.proc.returncode if slot.proc is not None else None
            what = _exit_text(code)
            tag = f"worker {slot.index}/{self.count} pid {slot.proc.pid if slot.proc else '-'}"
            if slot.failures >= self.max_failures:
                log.error(
                    "%s %s %s; %d failures in a row: giving up, stopping every worker",
                    tag,
                    "failed to start:" if ready_at is None else "died again:",
                    what,
                    slot.failures,
                )
                self._exit_code = 1
                self._stopping.set()
                return
            delay = min(BACKOFF_FIRST_S * 2 ** max(0, slot.failures - 1), BACKOFF_MAX_S)
            log.warning(
                "%s %s after %.1f s (%s); restarting in %.1f s",
                tag,
                "exited before it was ready" if ready_at is None else "exited",
                time.monotonic() - started,
                what,
                delay,
            )
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._stopping.wait()

    async def _run_once(self, slot: _Slot) -> float | None:
        """Starts slot's worker and waits for it to exit; when it became ready (monotonic), or None."""
        ready_r, ready_w = os.pipe()
        life_r, life_w = os.pipe()
        loop = asyncio.get_running_loop()
        spec = WorkerRole(slot.index, self.count, ready_w, life_r).spec()
        reader = asyncio.StreamReader()
        transport = None
        try:
            try:
                slot.proc = await asyncio.create_subprocess_exec(
                    *self.command, "--worker", spec, pass_fds=(ready_w, life_r)
                )
            except OSError as exc:
                log.error("worker %d/%d: cannot start %s: %s", slot.index, self.count, self.command[0], exc)
                slot.proc = None
                return None
            finally:
                os.close(ready_w)
                os.close(life_r)
            proc = slot.proc
            log.info("worker %d/%d pid %d started", slot.index, self.count, proc.pid)
            if self._stopping.is_set():  # the stop began while it was being spawned: it missed the SIGTERM
                proc.send_signal(signal.SIGTERM)
            transport, _ = await loop.connect_read_pipe(
                lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(ready_r, "rb", buffering=0)
            )
            ready_r = -1  # the transport owns it now
            ready_at = None
            if await reader.read(1):  # b"" means the worker exited (its end closed) before it was ready
                ready_at = time.monotonic()
                log.info("worker %d/%d pid %d ready", slot.index, self.count, proc.pid)
                self._mark_ready(slot)
            await proc.wait()
            return ready_at
        finally:
            if transport is not None:
                transport.close()
            for fd in (ready_r, life_w):
                if fd >= 0:
                    with contextlib.suppress(OSError):
                        os.close(fd)

    def _mark_ready(self, slot: _Slot) -> None:
        if slot.ever_ready:
            return
        slot.ever_ready = True
        self._ready.add(slot.index)
        if len(self._ready) == self.count:
            self.on_all_ready()


def _exit_text(code: int | None) -> str:
    if code is None:
        return "not started"
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
        return f"killed by signal {-code}"
    return f"exit code {code}"
