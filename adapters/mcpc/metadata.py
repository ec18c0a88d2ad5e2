"""Per-call MCPC metadata in tool arguments: which session and task a call belongs to.

Two forms (shared/notes/WIRE.md "MCPC"; ``mcpc`` 0.2.6 ``MCPCHandler.add_metadata``):

- ``mcpc_params: {"session_id": S, "task_id": T}`` from 0.2.5 (the library's ``MCPCToolParameters``);
- ``_metadata: {"mcpc_session_id": S, "mcpc_task_id": T}`` before.

Invariants: readers never raise; an id that is not a string reads as None. ``mcpc_params`` wins
when both forms are present. ``_metadata`` counts as MCPC only when it holds one of the ``mcpc_``
keys, and removal takes only those keys (other keys of a ``_metadata`` object stay). Builders and
removal never modify their input: they return a new dict (or the input itself when nothing changes).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

from adapters.mcpc.versions import PARAMS_SINCE, at_least

PARAMS_KEY: Final = "mcpc_params"
LEGACY_KEY: Final = "_metadata"
LEGACY_SESSION_KEY: Final = "mcpc_session_id"
LEGACY_TASK_KEY: Final = "mcpc_task_id"
METADATA_KEYS: Final = frozenset({PARAMS_KEY, LEGACY_KEY})
"""Argument (and input-schema property) names that carry MCPC metadata."""


class MetadataForm(StrEnum):
    PARAMS = PARAMS_KEY
    """``mcpc_params {session_id, task_id}`` (0.2.5+)."""
    LEGACY = LEGACY_KEY
    """``_metadata {mcpc_session_id, mcpc_task_id}`` (before 0.2.5)."""


@dataclass(frozen=True, slots=True)
class TaskRef:
    """The session and task a call names, and the form it named them in."""

    session_id: str | None
    task_id: str | None
    form: MetadataForm


def metadata_form(version: Any) -> MetadataForm:
    """The form a peer of ``version`` uses (unknown version: the newest form)."""
    return MetadataForm.PARAMS if at_least(version, PARAMS_SINCE) else MetadataForm.LEGACY


def build_metadata(session_id: str, task_id: str, form: MetadataForm) -> dict[str, Any]:
    """The one-key dict to merge into a call's arguments."""
    if form is MetadataForm.PARAMS:
        return {PARAMS_KEY: {"session_id": session_id, "task_id": task_id}}
    return {LEGACY_KEY: {LEGACY_SESSION_KEY: session_id, LEGACY_TASK_KEY: task_id}}


def with_metadata(arguments: Any, session_id: str, task_id: str, version: Any = None) -> dict[str, Any]:
    """A copy of ``arguments`` (a non-dict counts as ``{}``) carrying the metadata in ``version``'s form,
    any metadata already there replaced."""
    base = without_metadata(arguments) if isinstance(arguments, dict) else {}
    return {**base, **build_metadata(session_id, task_id, metadata_form(version))}


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _legacy(arguments: dict[str, Any]) -> dict[str, Any] | None:
    """The ``_metadata`` object when it carries MCPC keys."""
    value = arguments.get(LEGACY_KEY)
    if isinstance(value, dict) and (LEGACY_SESSION_KEY in value or LEGACY_TASK_KEY in value):
        return value
    return None


def read_metadata(arguments: Any) -> TaskRef | None:
    """The MCPC metadata of a call's arguments in either form, or None when there is none."""
    if not isinstance(arguments, dict):
        return None
    params = arguments.get(PARAMS_KEY)
    if isinstance(params, dict):
        return TaskRef(_str_or_none(params.get("session_id")), _str_or_none(params.get("task_id")), MetadataForm.PARAMS)
    legacy = _legacy(arguments)
    if legacy is not None:
        return TaskRef(
            _str_or_none(legacy.get(LEGACY_SESSION_KEY)), _str_or_none(legacy.get(LEGACY_TASK_KEY)), MetadataForm.LEGACY
        )
    return None


def without_metadata(arguments: Any) -> Any:
    """``arguments`` without MCPC metadata (``mcpc_params``; the ``mcpc_`` keys of ``_metadata``, and
    ``_metadata`` itself when nothing else is left). Non-dicts are returned as they are."""
    if not isinstance(arguments, dict):
        return arguments
    legacy = _legacy(arguments)
    if PARAMS_KEY not in arguments and legacy is None:
        return arguments
    out = {key: value for key, value in arguments.items() if key != PARAMS_KEY}
    if legacy is not None:
        rest = {key: value for key, value in legacy.items() if key not in (LEGACY_SESSION_KEY, LEGACY_TASK_KEY)}
        if rest:
            out[LEGACY_KEY] = rest
        else:
            del out[LEGACY_KEY]
    return out
