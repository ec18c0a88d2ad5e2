"""The ``mcpc`` library's own virtual environment, ``.cache/mcpc-venv``, built once from the package index.

``mcpc`` 0.2.6 works only with ``mcp`` 1.6.x (later SDKs wrap stream items), ``mcp`` 1.6 does not
import with pydantic 2.12+, and ``mcpc`` declares Python >= 3.12 while running fine on 3.11 (hence
``--ignore-requires-python``); see shared/notes/WIRE.md "MCPC" and TOOLING.md.

Invariants: the environment is reused only when its marker file names exactly ``REQUIREMENTS`` and
its python imports both libraries; builds are serialised by a file lock (parallel test processes
never install into one directory at once); every step is bounded by a timeout. ``make test-deps``
builds it (``python -m tests.mcpc_peers.venv``), like the conformance suite, so a clean CI machine
has it before the tests run; the ``mcpc_python`` fixture builds it too when missing, and skips
with the reason when the package index cannot be reached.
"""

from __future__ import annotations

import fcntl
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

PROJECT_ROOT = Path(__file__).resolve().parents[2]
VENV = PROJECT_ROOT / ".cache" / "mcpc-venv"
REQUIREMENTS: tuple[str, ...] = ("mcp==1.6.0", "mcpc==0.2.6", "pydantic>=2.7,<2.12")
_PIP_FLAGS = ("--disable-pip-version-check", "--ignore-requires-python")  # mcpc declares Python >= 3.12
_MARKER = VENV / "requirements.txt"
_LOCK = PROJECT_ROOT / ".cache" / "mcpc-venv.lock"
_IMPORT_CHECK = "import mcp, mcpc, mcp.server.lowlevel, mcp.client.stdio; from mcpc import MCPCHandler, MCPCHelper"
_OFFLINE_SIGNS = (
    "NewConnectionError",
    "Max retries exceeded",
    "Temporary failure in name resolution",
    "Could not fetch URL",
    "No matching distribution found",
    "Network is unreachable",
    "Connection refused",
)


class McpcVenvUnavailable(Exception):
    """The environment could not be built; ``offline`` says whether the package index was unreachable."""

    def __init__(self, message: str, offline: bool) -> None:
        super().__init__(message)
        self.offline = offline


def _base_python() -> str:
    """python3.11 when on PATH (the library is tested there), else the interpreter running this."""
    return shutil.which("python3.11") or sys.executable


def _python() -> Path:
    return VENV / "bin" / "python"


def _usable(timeout_s: float = 60.0) -> bool:
    python = _python()
    wanted = "\n".join(REQUIREMENTS) + "\n"
    if not (python.exists() and _MARKER.exists() and _MARKER.read_text() == wanted):
        return False
    try:
        proc = subprocess.run([str(python), "-c", _IMPORT_CHECK], capture_output=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0


def ensure_mcpc_venv(timeout_s: float = 600.0) -> Path:
    """The python of ``.cache/mcpc-venv``, built if missing or stale; raises McpcVenvUnavailable."""
    if _usable():
        return _python()
    _LOCK.parent.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout_s
    with _LOCK.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _usable():
            return _python()
        shutil.rmtree(VENV, ignore_errors=True)
        try:
            subprocess.run([_base_python(), "-m", "venv", str(VENV)], check=True, capture_output=True, timeout=120)
            proc = subprocess.run(
                [str(_python()), "-m", "pip", "install", "--quiet", *_PIP_FLAGS, *REQUIREMENTS],
                capture_output=True,
                text=True,
                timeout=max(deadline - time.monotonic(), 1.0),
            )
        except subprocess.TimeoutExpired:
            raise McpcVenvUnavailable(f"building {VENV} took over {timeout_s:g}s", True) from None
        except subprocess.CalledProcessError as exc:
            raise McpcVenvUnavailable(f"python -m venv {VENV} failed: {exc.stderr!r}", False) from None
        if proc.returncode != 0:
            output = (proc.stdout + proc.stderr)[-3000:]
            offline = any(sign in output for sign in _OFFLINE_SIGNS)
            raise McpcVenvUnavailable(f"pip install {' '.join(REQUIREMENTS)} failed:\n{output}", offline)
        _MARKER.write_text("\n".join(REQUIREMENTS) + "\n")
        if not _usable():
            raise McpcVenvUnavailable(f"{VENV} was built but does not import mcp and mcpc", False)
    return _python()


@pytest.fixture(scope="session")
def mcpc_python() -> Path:
    """Path to the python of the ``mcpc`` 0.2.6 + ``mcp`` 1.6.0 environment (skips when offline)."""
    try:
        return ensure_mcpc_venv()
    except McpcVenvUnavailable as exc:
        if exc.offline:
            pytest.skip(f"the package index is unreachable, so the mcpc library cannot be installed: {exc}")
        raise


if __name__ == "__main__":  # make test-deps
    try:
        print(ensure_mcpc_venv())
    except McpcVenvUnavailable as exc:
        print(f"warning: {exc}; the tests against the mcpc library will be skipped", file=sys.stderr)
        sys.exit(0 if exc.offline else 1)
