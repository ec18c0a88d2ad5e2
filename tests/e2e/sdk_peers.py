"""Released MCP SDKs as peers: each in its own virtualenv under ``.cache/peers/``, built once.

Servers built on old SDKs are common in the wild and behave differently from ours:
SDK 1.6 needs ``pydantic<2.12`` and dies on unknown methods; SDK 1.x answers a refused request with
``"id": "server-error"``. They cannot share the project's virtualenv (it has the SDK 2.x client),
hence one virtualenv per pinned requirement set. Invariants: a virtualenv is reused only when its
marker file names exactly the requested requirements; builds are serialized by a file lock, so
parallel test processes never install into the same directory at once.
"""

from __future__ import annotations

import fcntl
import shutil
import subprocess
import sys
from pathlib import Path

from tests.support import PROJECT_ROOT

PEERS = PROJECT_ROOT / ".cache" / "peers"
SERVER_SCRIPT = PROJECT_ROOT / "tests" / "e2e" / "backends" / "sdk1_server.py"
SDK1_LATEST: tuple[str, ...] = ("mcp>=1.27,<2",)
SDK1_6: tuple[str, ...] = ("mcp==1.6.0", "pydantic>=2.7,<2.12")
_OFFLINE_SIGNS = (
    "NewConnectionError",
    "Max retries exceeded",
    "Temporary failure in name resolution",
    "Could not fetch URL",
    "No matching distribution found",
    "Network is unreachable",
    "Connection refused",
)


class PeerUnavailable(Exception):
    """The virtualenv could not be built; ``offline`` says whether the package index was unreachable."""

    def __init__(self, message: str, offline: bool) -> None:
        super().__init__(message)
        self.offline = offline


def sdk_python(
    name: str,
    requirements: tuple[str, ...],
    timeout_s: float = 600.0,
    *,
    pip_flags: tuple[str, ...] = (),
    import_check: str | None = None,
    base_python: str = sys.executable,
) -> Path:
    """The python of virtualenv ``.cache/peers/NAME`` holding ``requirements``, built if needed.

    ``import_check``: code the virtualenv's python must run for it to count as usable (checked on
    reuse too); ``pip_flags`` go to ``pip install``; ``base_python`` makes the virtualenv."""
    root = PEERS / name
    python = root / "bin" / "python"
    marker = root / "requirements.txt"
    wanted = "\n".join(requirements) + "\n"

    def usable() -> bool:
        if not (python.exists() and marker.exists() and marker.read_text() == wanted):
            return False
        if import_check is None:
            return True
        try:
            proc = subprocess.run([str(python), "-c", import_check], capture_output=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            return False
        return proc.returncode == 0

    if usable():
        return python
    PEERS.mkdir(parents=True, exist_ok=True)
    with (PEERS / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if usable():
            return python
        shutil.rmtree(root, ignore_errors=True)
        subprocess.run([base_python, "-m", "venv", str(root)], check=True, timeout=120)
        try:
            proc = subprocess.run(
                [
                    str(python),
                    "-m",
                    "pip",
                    "install",
                    "--quiet",
                    "--disable-pip-version-check",
                    *pip_flags,
                    *requirements,
                ],
                capture_output=True,
                text=True,
                timeout=timeout_s,
            )
        except subprocess.TimeoutExpired:
            raise PeerUnavailable(f"pip install {' '.join(requirements)} took over {timeout_s:g}s", True) from None
        if proc.returncode != 0:
            output = (proc.stdout + proc.stderr)[-3000:]
            offline = any(sign in output for sign in _OFFLINE_SIGNS)
            raise PeerUnavailable(f"pip install {' '.join(requirements)} failed:\n{output}", offline)
        marker.write_text(wanted)
        if not usable():
            raise PeerUnavailable(f"{root} was built but fails its check: {import_check}", False)
    return python
