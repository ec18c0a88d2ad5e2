"""MCPC (asynchronous task callbacks): detection and facets.

MCPC has no capability of its own on the wire: a client shows itself by calling the handshake tool
(``_mcpc_init``, ``_is_mcpc_enabled``, ``is_mcpc_enabled``) and by per-call metadata in tool
arguments (``mcpc_params`` in 0.2.5+, ``_metadata`` before, as the ``mcpc`` library of each version sends them).
"""

from __future__ import annotations

from typing import Any

from gateway.events import Dialect, Event

DIALECT = Dialect.MCPC
HANDSHAKE_TOOLS = frozenset({"_mcpc_init", "_is_mcpc_enabled", "is_mcpc_enabled"})


def speaks(initialize_params: dict[str, Any]) -> bool:
    return False  # MCPC is only recognisable per call, never at initialize


def task_info(arguments: dict[str, Any]) -> dict[str, Any] | None:
    params = arguments.get("mcpc_params")
    if isinstance(params, dict):
        return {"session_id": params.get("session_id"), "task_id": params.get("task_id")}
    legacy = arguments.get("_metadata")
    if isinstance(legacy, dict) and ("mcpc_task_id" in legacy or "mcpc_session_id" in legacy):
        return {"session_id": legacy.get("mcpc_session_id"), "task_id": legacy.get("mcpc_task_id")}
    return None


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
