"""Shared helpers and fixtures for the conformance tests.

Reusable from other test packages too:
    from tests.conformance.conftest import free_port, start_fixture_server, wait_for_port
and fixtures can be pulled into another module's namespace with
    from tests.conformance.conftest import conformance_suite, fixture_backend_url  # noqa: F401
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conformance.runner import PROJECT_ROOT, ConformanceError, ensure_installed

FIXTURE_MODULE = "tests.conformance.fixture_server"


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
def start_fixture_server(host: str = "127.0.0.1", startup_timeout_s: float = 20.0) -> Iterator[str]:
    """Runs the fixture backend on a free port; yields its MCP URL and always stops it afterwards."""
    with tempfile.NamedTemporaryFile(prefix="fixture-server-", suffix=".log", delete=False) as log:
        log_path = Path(log.name)
    last_error: Exception | None = None
    try:
        for _ in range(3):  # a port picked by free_port() can be taken before we bind it
            port = free_port(host)
            with log_path.open("ab") as log_file:
                proc = subprocess.Popen(
                    [sys.executable, "-m", FIXTURE_MODULE, "--host", host, "--port", str(port)],
                    cwd=PROJECT_ROOT,
                    stdin=subprocess.DEVNULL,
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                )
            try:
                try:
                    wait_for_port(host, port, startup_timeout_s, proc)
                except (RuntimeError, TimeoutError) as exc:
                    last_error = exc
                    continue
                yield f"http://{host}:{port}/mcp"
                return
            finally:
                stop_process(proc)
        log_text = log_path.read_text(errors="replace")
        raise RuntimeError(f"fixture server failed to start: {last_error}\n--- log ---\n{log_text}")
    finally:
        log_path.unlink(missing_ok=True)


@pytest.fixture(scope="session")
def conformance_suite() -> tuple[Path, Path]:
    """(node, entry point) of the installed conformance suite; installs it if needed."""
    try:
        return ensure_installed()
    except ConformanceError as exc:
        if shutil.which("npm") is None:
            pytest.skip(f"npm is not available, so the MCP conformance suite cannot be installed ({exc})")
        raise


@pytest.fixture(scope="session")
def fixture_backend_url() -> Iterator[str]:
    """URL (http://127.0.0.1:PORT/mcp) of a running fixture backend, shared by the session."""
    with start_fixture_server() as url:
        yield url
