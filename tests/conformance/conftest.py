"""Shared helpers and fixtures for the conformance tests.

Reusable from other test packages too:
    from tests.conformance.conftest import free_port, start_fixture_server, wait_for_port
and fixtures can be pulled into another module's namespace with
    from tests.conformance.conftest import conformance_suite, fixture_backend_url  # noqa: F401

`start_fixture_server(era=...)` picks the protocol eras the fixture serves: "dual" (default,
both on one endpoint), "legacy" (initialize handshake only) or "modern" (2026-07-28 only); see
tests/conformance/fixture/__init__.py. The session-scoped fixtures `fixture_backend_url`,
`legacy_fixture_url` and `modern_fixture_url` (tests/conftest.py) run one of each.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from tests.conformance.runner import PROJECT_ROOT
from tests.support import free_port, stop_process, wait_for_port

FIXTURE_MODULE = "tests.conformance.fixture_server"


FIXTURE_ERAS = ("dual", "legacy", "modern")


@contextlib.contextmanager
def start_fixture_server(
    host: str = "127.0.0.1", startup_timeout_s: float = 20.0, *, era: str = "dual"
) -> Iterator[str]:
    """Runs the fixture backend on a free port; yields its MCP URL and always stops it afterwards.

    `era` is passed as `--era`: "dual" (default), "legacy" or "modern".
    """
    if era not in FIXTURE_ERAS:
        raise ValueError(f"era must be one of {FIXTURE_ERAS}, got {era!r}")
    with tempfile.NamedTemporaryFile(prefix="fixture-server-", suffix=".log", delete=False) as log:
        log_path = Path(log.name)
    last_error: Exception | None = None
    try:
        for _ in range(3):  # a port picked by free_port() can be taken before we bind it
            port = free_port(host)
            with log_path.open("ab") as log_file:
                proc = subprocess.Popen(
                    [sys.executable, "-m", FIXTURE_MODULE, "--host", host, "--port", str(port), "--era", era],
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
