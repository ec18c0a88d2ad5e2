"""Helpers every test package shares: free ports, real processes, a gateway started from a config."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (the OS picks it; tiny race until it is bound)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def wait_for_port(host: str, port: int, timeout_s: float = 20.0, proc: subprocess.Popen[bytes] | None = None) -> None:
    """Blocks until host:port accepts TCP connections; fails fast if `proc` exits first."""
    deadline = time.monotonic() + timeout_s
    while True:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with code {proc.returncode} before listening on {host}:{port}")
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            if time.monotonic() >= deadline:
                raise TimeoutError(f"nothing accepted connections on {host}:{port} within {timeout_s}s") from None
            time.sleep(0.05)


def stop_process(proc: subprocess.Popen[bytes], grace_s: float = 5.0) -> None:
    """Terminates `proc` (SIGTERM, then SIGKILL after `grace_s`) and reaps it."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def redis_server(binary: str = "redis-server") -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """(URL, process) of a throwaway redis-server on a free port, without persistence; stopped on exit."""
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="switchboard-redis-") as workdir:
        proc = subprocess.Popen(
            [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", workdir],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_for_port("127.0.0.1", port, 10, proc)
            yield f"redis://127.0.0.1:{port}/0", proc
        finally:
            stop_process(proc)


@dataclass
class RunningGateway:
    url: str  # base URL, e.g. http://127.0.0.1:PORT
    proc: subprocess.Popen[bytes]
    log_path: Path
    config_path: Path

    @property
    def mcp(self) -> str:
        return f"{self.url}/mcp"

    def server(self, name: str) -> str:
        return f"{self.url}/servers/{name}/mcp"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@contextlib.contextmanager
def run_gateway(
    config: dict[str, Any] | None, *, wait_ready: bool = True, timeout_s: float = 30.0
) -> Iterator[RunningGateway]:
    """Start ``python -m gateway run`` as a real process on a free port; always stop it afterwards.

    ``config`` None runs the embedded default. With ``wait_ready`` it waits for /readyz to say 200.
    """
    workdir = Path(tempfile.mkdtemp(prefix="switchboard-test-"))
    log_path = workdir / "gateway.log"
    config_path = workdir / "config.yaml"
    port = free_port()
    args = [sys.executable, "-m", "gateway", "run", "--port", str(port)]
    if config is not None:
        config_path.write_text(yaml.safe_dump({"listen": {"host": "127.0.0.1", "port": port}, **config}))
        args += ["-c", str(config_path)]
    with log_path.open("wb") as log_file:
        proc = subprocess.Popen(
            args, cwd=PROJECT_ROOT, stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT
        )
    running = RunningGateway(f"http://127.0.0.1:{port}", proc, log_path, config_path)
    try:
        wait_for_port("127.0.0.1", port, timeout_s, proc)
        if wait_ready:
            deadline = time.monotonic() + timeout_s
            while True:
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(f"{running.url}/readyz", timeout=2).status_code == 200:
                        break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"gateway not ready within {timeout_s}s\n{running.log()}")
                time.sleep(0.05)
        yield running
    finally:
        stop_process(proc)


def fixture_stdio_backend(**extra: Any) -> dict[str, Any]:
    """Config of the conformance fixture server spawned over stdio."""
    return {
        "transport": "stdio",
        "command": sys.executable,
        "args": ["-m", "tests.conformance.fixture_server", "--stdio"],
        "cwd": str(PROJECT_ROOT),
        **extra,
    }
