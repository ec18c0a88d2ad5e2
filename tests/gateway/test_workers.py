"""``switchboard run --workers N``: N real worker processes on one port, a real redis-server between them.

Calls use the stateless 2026-07-28 era, so any worker can answer any request without shared sessions.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from gateway.workers import cgroup_cpu_quota, usable_cores
from tests.support import (
    PROJECT_ROOT,
    free_port,
    modern_headers,
    modern_meta,
    redis_server,
    wait_for_port,
)
from tools.procs import alive, descendants, scan_procs

pytestmark = [pytest.mark.timeout(90)]

DEMO = {"demo": {"transport": "builtin", "required": True}}


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    with redis_server() as (url, _):
        yield url


@dataclass
class Supervised:
    proc: subprocess.Popen[bytes]
    url: str
    log_path: Path
    config_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def workers(self) -> list[int]:
        """The supervisor's live children: its workers."""
        procs = scan_procs()
        return sorted(pid for pid, st in procs.items() if st.ppid == self.proc.pid and alive(pid))


def _config(tmp: Path, port: int, bus: dict[str, Any] | None) -> Path:
    path = tmp / "config.yaml"
    config: dict[str, Any] = {"listen": {"host": "127.0.0.1", "port": port}, "backends": DEMO}
    if bus is not None:
        config["bus"] = bus
    path.write_text(yaml.safe_dump(config))
    return path


def _wait(predicate: Any, timeout_s: float, what: str, log: Any = lambda: "") -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} within {timeout_s}s\n{log()}")
        time.sleep(0.05)


@contextlib.contextmanager
def supervised(tmp: Path, redis_url: str, workers: str = "2") -> Iterator[Supervised]:
    """``python -m gateway run --workers N`` with a redis bus, up once every worker is ready."""
    port = free_port()
    config_path = _config(tmp, port, {"kind": "redis", "url": redis_url, "prefix": f"t{port}:"})
    log_path = tmp / "gateway.log"
    argv = [sys.executable, "-m", "gateway", "run", "-c", str(config_path), "--workers", workers]
    with log_path.open("wb") as log_file:
        proc = subprocess.Popen(
            argv, cwd=PROJECT_ROOT, stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT
        )
    running = Supervised(proc, f"http://127.0.0.1:{port}", log_path, config_path)
    try:
        wait_for_port("127.0.0.1", port, 30, proc)
        _wait(lambda: "listening on" in running.log(), 30, "every worker ready", running.log)
        yield running
    finally:
        # Everything this test started: the supervisor and whatever is left of its workers.
        leftovers = descendants(proc.pid, scan_procs())
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for pid in leftovers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _healthz_pid(url: str) -> int:
    # A new connection each time: the kernel spreads connections, not requests, over the workers.
    with httpx.Client(trust_env=False, timeout=5) as http:
        answer = http.get(f"{url}/healthz")
    assert answer.status_code == 200
    return int(answer.json()["pid"])


def _pids_answering(url: str, want: set[int], tries: int = 400) -> set[int]:
    seen: set[int] = set()
    for _ in range(tries):
        seen.add(_healthz_pid(url))
        if want <= seen:
            break
    return seen


def _call_echo(url: str, text: str) -> dict[str, Any]:
    body = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": text}, "_meta": modern_meta()},
    }
    with httpx.Client(trust_env=False, timeout=10) as http:
        answer = http.post(f"{url}/mcp", json=body, headers=modern_headers("tools/call", "echo"))
    assert answer.status_code == 200, answer.text
    result: dict[str, Any] = answer.json()
    return result


def test_two_workers_serve_one_port(tmp_path: Path, redis_url: str) -> None:
    with supervised(tmp_path, redis_url) as gw:
        workers = gw.workers()
        assert len(workers) == 2, gw.log()
        assert _pids_answering(gw.url, set(workers)) == set(workers), "one worker never answered"
        assert gw.proc.pid not in workers
        for i in range(6):  # MCP through whichever worker each new connection lands on
            answer = _call_echo(gw.url, f"hello {i}")
            assert answer["result"]["content"][0]["text"] == f"hello {i}", answer
        log = gw.log()
        for index, pid in enumerate(sorted(workers, key=lambda p: log.index(f"pid {p} started")), start=1):
            assert f"worker {index}/2 pid {pid} started" in log
        assert log.count("listening on") == 1  # one banner, from the supervisor


def test_sigterm_stops_every_worker(tmp_path: Path, redis_url: str) -> None:
    with supervised(tmp_path, redis_url) as gw:
        workers = gw.workers()
        assert len(workers) == 2
        started = time.monotonic()
        gw.proc.send_signal(signal.SIGTERM)
        assert gw.proc.wait(timeout=25) == 0, gw.log()
        assert time.monotonic() - started < 20
        assert not any(alive(pid) for pid in workers)
        assert "every worker has stopped" in gw.log()


def test_sigterm_lets_calls_in_flight_finish(tmp_path: Path, redis_url: str) -> None:
    with supervised(tmp_path, redis_url) as gw:
        body = {
            "jsonrpc": "2.0",
            "id": 9,
            "method": "tools/call",
            "params": {"name": "slow_count", "arguments": {"n": 4, "delay_s": 0.5}, "_meta": modern_meta()},
        }
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            call = pool.submit(
                httpx.post,
                f"{gw.url}/mcp",
                json=body,
                headers=modern_headers("tools/call", "slow_count"),
                timeout=15,
                trust_env=False,
            )
            time.sleep(0.7)  # the call is under way (it takes 2 s)
            gw.proc.send_signal(signal.SIGTERM)
            answer = call.result(timeout=15)
        assert answer.status_code == 200
        assert '"result"' in answer.text and '"error"' not in answer.text, answer.text
        assert gw.proc.wait(timeout=25) == 0, gw.log()


def test_sighup_reloads_every_worker(tmp_path: Path, redis_url: str) -> None:
    with supervised(tmp_path, redis_url) as gw:
        workers = gw.workers()
        gw.proc.send_signal(signal.SIGHUP)
        for pid in workers:
            _wait(lambda pid=pid: f"pid {pid}] gateway.core: config reloaded" in gw.log(), 20, "a reload", gw.log)


def test_a_killed_worker_is_replaced(tmp_path: Path, redis_url: str) -> None:
    with supervised(tmp_path, redis_url) as gw:
        first = gw.workers()
        victim = first[0]
        os.kill(victim, signal.SIGKILL)
        _wait(lambda: len(set(gw.workers()) - set(first)) == 1, 30, "a new worker", gw.log)
        (replacement,) = set(gw.workers()) - set(first)
        _wait(lambda: f"pid {replacement} ready" in gw.log(), 30, "the new worker ready", gw.log)
        survivors = {replacement, first[1]}
        assert _pids_answering(gw.url, survivors) == survivors
        log = gw.log()
        assert f"pid {victim} exited" in log and "killed by SIGKILL" in log
        assert _call_echo(gw.url, "still here")["result"]["content"][0]["text"] == "still here"


def test_workers_stop_when_the_supervisor_is_killed(tmp_path: Path, redis_url: str) -> None:
    with supervised(tmp_path, redis_url) as gw:
        workers = gw.workers()
        gw.proc.kill()
        gw.proc.wait(timeout=10)
        # Their lifeline pipe ends: each drains and exits like on SIGTERM.
        _wait(lambda: not any(alive(pid) for pid in workers), 20, "orphaned workers gone", gw.log)


def test_supervisor_gives_up_when_workers_keep_failing(tmp_path: Path, redis_url: str) -> None:
    with supervised(tmp_path, redis_url) as gw:
        gw.config_path.unlink()  # a restarted worker cannot load its config any more
        os.kill(gw.workers()[0], signal.SIGKILL)
        # 5 failures in a row, 0.5 + 1 + 2 + 4 s of backoff between them, then every worker stops.
        assert gw.proc.wait(timeout=40) == 1, gw.log()
        log = gw.log()
        assert "failures in a row: giving up" in log
        assert gw.workers() == []


def test_auto_runs_one_worker_per_usable_core(tmp_path: Path, redis_url: str) -> None:
    cores = usable_cores()
    if cores < 2:
        pytest.skip("one usable core: auto means the single-process path")
    with supervised(tmp_path, redis_url, workers="auto") as gw:
        assert len(gw.workers()) == cores
        assert f"({cores} worker processes)" in gw.log()


@pytest.mark.parametrize(
    ("files", "cores"),
    [
        ({"cpu.max": "max 100000\n"}, None),
        ({"cpu.max": "150000 100000\n"}, 2),  # a Kubernetes limit of 1500m: two workers
        ({"cpu.max": "50000 100000\n"}, 1),
        ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),
        ({"cpu/cpu.cfs_quota_us": "400000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 4),
        ({"cpu.max": "garbage"}, None),
        ({}, None),
    ],
)
def test_auto_respects_a_cgroup_cpu_limit(tmp_path: Path, files: dict[str, str], cores: int | None) -> None:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert cgroup_cpu_quota(str(tmp_path)) == cores


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway", *argv],
        cwd=PROJECT_ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_memory_bus_refuses_more_than_one_worker(tmp_path: Path) -> None:
    port = free_port()
    config = _config(tmp_path, port, None)
    done = _run(["run", "-c", str(config), "--workers", "2"])
    assert done.returncode == 2
    assert "--workers 2 needs a shared bus" in done.stderr
    assert "bus: {kind: redis, url:" in done.stderr
    assert "listening" not in done.stdout
    with socket.socket() as probe:  # nothing was started: the port is free
        probe.bind(("127.0.0.1", port))
    checked = _run(["check", "-c", str(config), "--workers", "2"])
    assert checked.returncode == 1 and "needs a shared bus" in checked.stderr
    assert _run(["check", "-c", str(config), "--workers", "1"]).returncode == 0


@pytest.mark.parametrize("bad", ["0", "-3", "many"])
def test_workers_must_be_a_positive_count_or_auto(tmp_path: Path, bad: str) -> None:
    done = _run(["run", "-c", str(_config(tmp_path, free_port(), None)), "--workers", bad])
    assert done.returncode == 2
    assert "--workers" in done.stderr


def test_a_busy_port_is_refused_before_any_worker_starts(tmp_path: Path, redis_url: str) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        config = _config(tmp_path, port, {"kind": "redis", "url": redis_url})
        done = _run(["run", "-c", str(config), "--workers", "2"])
    assert done.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr
    assert "started" not in done.stderr
