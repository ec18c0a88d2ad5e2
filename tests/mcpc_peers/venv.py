"""The ``mcpc`` library's own virtual environment (``.cache/peers/mcpc``), built once from the package index.

``mcpc`` 0.2.6 works only with ``mcp`` 1.6.x (later SDKs wrap stream items), ``mcp`` 1.6 does not
import with pydantic 2.12+, and ``mcpc`` declares Python >= 3.12 while running fine on 3.11 (hence
``--ignore-requires-python``); see shared/notes/WIRE.md "MCPC" and TOOLING.md.

Built by the same code as the released SDK peers (tests/e2e/sdk_peers.py: reused only when its
marker names exactly ``REQUIREMENTS`` and its python imports both libraries; builds serialised by a
file lock; bounded). ``make test-deps`` builds it (``python -m tests.mcpc_peers.venv``) so a clean
CI machine has it before the tests run; the ``mcpc_python`` fixture builds it too when missing, and
skips with the reason when the package index cannot be reached.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from tests.e2e.sdk_peers import PeerUnavailable, sdk_python

REQUIREMENTS: tuple[str, ...] = ("mcp==1.6.0", "mcpc==0.2.6", "pydantic>=2.7,<2.12")
_IMPORT_CHECK = "import mcp, mcpc, mcp.server.lowlevel, mcp.client.stdio; from mcpc import MCPCHandler, MCPCHelper"


def ensure_mcpc_venv(timeout_s: float = 600.0) -> Path:
    """The python of the mcpc environment, built if missing or stale; raises PeerUnavailable."""
    return sdk_python(
        "mcpc",
        REQUIREMENTS,
        timeout_s,
        pip_flags=("--ignore-requires-python",),  # mcpc declares Python >= 3.12
        import_check=_IMPORT_CHECK,
        base_python=shutil.which("python3.11") or sys.executable,  # the library is tested there
    )


@pytest.fixture(scope="session")
def mcpc_python() -> Path:
    """Path to the python of the ``mcpc`` 0.2.6 + ``mcp`` 1.6.0 environment (skips when offline)."""
    try:
        return ensure_mcpc_venv()
    except PeerUnavailable as exc:
        if exc.offline:
            pytest.skip(f"the package index is unreachable, so the mcpc library cannot be installed: {exc}")
        raise


if __name__ == "__main__":  # make test-deps
    try:
        print(ensure_mcpc_venv())
    except PeerUnavailable as exc:
        print(f"warning: {exc}; the tests against the mcpc library will be skipped", file=sys.stderr)
        sys.exit(0 if exc.offline else 1)
