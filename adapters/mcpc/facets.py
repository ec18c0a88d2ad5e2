"""MCPC detection on events: which calls are handshakes and which carry task metadata.

MCPC has no capability of its own on the wire: a client shows itself by calling a handshake tool
(``_mcpc_init``, ``_is_mcpc_enabled``, ``is_mcpc_enabled``) and by per-call metadata in tool
arguments (``mcpc_params`` in 0.2.5+, ``_metadata`` before), so :func:`speaks` is always False and
:func:`annotate` marks single ``tools/call`` events with ``facets["mcpc"]``:
``{"handshake": True}`` or ``{"session_id", "task_id"}`` (see ``metadata``).
"""

from __future__ import annotations

from typing import Any

from adapters.mcpc.handshake import HANDSHAKE_TOOLS
from adapters.mcpc.metadata import read_metadata
from gateway.events import Dialect, Event

DIALECT = Dialect.MCPC


def speaks(initialize_params: dict[str, Any]) -> bool:
    return False  # MCPC is only recognisable per call, never at initialize


def task_info(arguments: dict[str, Any]) -> dict[str, Any] | None:
    """``{"session_id", "task_id"}`` of a call's MCPC metadata (either form), or None."""
    ref = read_metadata(arguments)
    return None if ref is None else {"session_id": ref.session_id, "task_id": ref.task_id}


def annotate(event: Event) -> None:
    if event.method != "tools/call":
        return
    params = event.params
    name = params.get("name")
    # A client's tool name may be any JSON value; only a string can be a handshake tool (and be hashed).
    if isinstance(name, str) and name in HANDSHAKE_TOOLS:
        event.facets["mcpc"] = {"handshake": True}
        return
    arguments = params.get("arguments")
    if isinstance(arguments, dict):
        info = task_info(arguments)
        if info is not None:
            event.facets["mcpc"] = info
