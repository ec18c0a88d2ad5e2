"""MCPC task messages in the shapes of other dialects, and ordinary results as MCPC messages.

What a gateway shows a client that does not speak MCPC when it calls a tool of an MCPC backend
(issue 13, "plain MCP clients"), and what it shows an MCPC client that calls an ordinary tool:

- an ``update`` is an MCP ``notifications/progress`` (when the client gave a progress token; the
  progress counts the updates, the message is the update's result as text) and a
  ``notifications/message`` at level ``info`` whose ``data`` is the update;
- ``complete`` is a ``tools/call`` result whose one text block is the message's result (a string
  as it is, anything else as compact JSON); ``failed`` is the same with ``isError: true``;
- an ordinary tool result is ``complete`` with the result's text (one text block) or the whole
  result (anything else); an error or an ``isError`` result is ``failed`` with its text.

Invariant: nothing here raises on hostile values; texts are bounded by what they were given.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from adapters.mcpc import jsontext
from adapters.mcpc.message import COMPLETE, CREATED, FAILED, TASK, UPDATE, McpcMessage, parse_block

LOG_LEVEL: Final = "info"
LOG_LEVELS: Final = frozenset({"debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"})
_PROGRESS_KEYS: Final = frozenset({"progress", "total", "message"})
_LOG_KEYS: Final = frozenset({"level", "logger", "data"})
_PLAIN_RESULT_KEYS: Final = frozenset({"content", "isError"})


def as_text(value: Any) -> str:
    """A message's result as text: a string as it is, anything else as compact JSON."""
    return value if isinstance(value, str) else jsontext.dumps(value)


def progress_params(message: McpcMessage, token: Any, count: int) -> dict[str, Any]:
    """``notifications/progress`` params for the ``count``-th update of a task. An update that is
    itself MCP progress (``{progress, total?, message?}``, as a gateway running a plain tool as a
    task reports it) keeps its numbers and text; any other counts the updates."""
    result = message.result
    if _is_progress(result):
        params = {"progressToken": token, "progress": result["progress"]}
        if _is_number(result.get("total")):
            params["total"] = result["total"]
        if isinstance(result.get("message"), str):
            params["message"] = result["message"]
        return params
    return {"progressToken": token, "progress": count, "message": as_text(result)}


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_progress(result: Any) -> bool:
    return isinstance(result, dict) and _is_number(result.get("progress")) and set(result) <= _PROGRESS_KEYS


def as_log_line(result: Any) -> dict[str, Any] | None:
    """An update that is itself an MCP log line (``{level, logger?, data}``): its params, else None."""
    if isinstance(result, dict) and result.get("level") in LOG_LEVELS and "data" in result and set(result) <= _LOG_KEYS:
        return dict(result)
    return None


def update_notifications(
    message: McpcMessage, token: Any, count: int, logger: str, tool: str
) -> list[tuple[str, dict[str, Any]]]:
    """The MCP notifications an ``update`` becomes for a held call: a log line as itself; MCP progress
    as progress (a log line too when there is no token to carry it); anything else as progress (with
    a token) and a log line."""
    line = as_log_line(message.result)
    if line is not None:
        return [("notifications/message", line)]
    out: list[tuple[str, dict[str, Any]]] = []
    if token is not None:
        out.append(("notifications/progress", progress_params(message, token, count)))
    if token is None or not _is_progress(message.result):
        out.append(("notifications/message", log_params(message, logger, tool)))
    return out


def log_params(message: McpcMessage, logger: str, tool: str) -> dict[str, Any]:
    """``notifications/message`` params for a task message or server event, shown under ``tool``
    (the client's name for it; None for a server event)."""
    data: dict[str, Any] = {"mcpc": message.type, "event": message.event, "result": message.result}
    if message.type == TASK:
        data["tool"] = tool
    return {"level": LOG_LEVEL, "logger": logger, "data": data}


def final_result(message: McpcMessage) -> dict[str, Any]:
    """The ``tools/call`` result a plain client gets for a task's last message: the message's result
    as the one text block, or, when the result is itself a ``tools/call`` result (``content`` a list,
    as a gateway running a plain tool as a task reports it), that result (structured content kept)."""
    failed = message.event != COMPLETE
    result = message.result
    if isinstance(result, dict) and isinstance(result.get("content"), list):
        return {**result, "isError": failed}
    return {"content": [{"type": "text", "text": as_text(result)}], "isError": failed}


def failed_result(reason: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": reason}], "isError": True}


def _texts(result: dict[str, Any]) -> list[str] | None:
    content = result.get("content")
    if not isinstance(content, list) or not content:
        return None
    texts = [b.get("text") for b in content if isinstance(b, dict) and b.get("type") == "text"]
    if len(texts) != len(content) or not all(isinstance(t, str) for t in texts):
        return None
    return texts  # type: ignore[return-value]  # checked: every item is a str


def outcome_of_result(result: Any) -> tuple[str, Any]:
    """(``complete`` or ``failed``, the message's result) for an ordinary ``tools/call`` result: its
    one text when that is all it holds, else the whole result (nothing lost: structured content,
    several blocks, images)."""
    if not isinstance(result, dict):
        return COMPLETE, result
    event = FAILED if result.get("isError") is True else COMPLETE
    texts = _texts(result)
    if texts is not None and len(texts) == 1 and set(result) <= _PLAIN_RESULT_KEYS:
        return event, texts[0]
    return event, result


def outcome_of_error(error: Any) -> tuple[str, Any]:
    """(``failed``, the reason) for a JSON-RPC error answer."""
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return FAILED, error["message"]
    return FAILED, "the call failed"


def task_message(event: str, session_id: str | None, task_id: str | None, tool: str | None, result: Any) -> McpcMessage:
    return McpcMessage(type=TASK, event=event, session_id=session_id, task_id=task_id, tool_name=tool, result=result)


__all__ = [
    "COMPLETE",
    "CREATED",
    "FAILED",
    "LOG_LEVEL",
    "UPDATE",
    "as_text",
    "event_payload",
    "failed_result",
    "final_result",
    "log_params",
    "map_messages",
    "outcome_of_error",
    "outcome_of_result",
    "progress_params",
    "task_message",
    "update_notifications",
]


def map_messages(result: Any, change: Callable[[McpcMessage], McpcMessage | None]) -> Any:
    """``result`` with every MCPC message of its content replaced by ``change(message)`` (None: kept
    as it is). The input is never modified; a result without MCPC messages is returned as it is."""
    if not isinstance(result, dict) or not isinstance(result.get("content"), list):
        return result
    content = result["content"]
    out: list[Any] = []
    changed = False
    for block in content:
        message = parse_block(block)
        new = change(message) if message is not None else None
        if new is None:
            out.append(block)
        else:
            out.append({**block, "text": new.to_json()})
            changed = True
    return {**result, "content": out} if changed else result


def event_payload(message: McpcMessage) -> dict[str, Any]:
    """An MCPL ``push/event`` payload carrying ``message`` (MCPL 0.4 §9.2: ``content`` is required):
    its JSON text as the one text block, and the message itself under ``mcpc`` for hosts that read it."""
    return {"content": [{"type": "text", "text": message.to_json()}], "mcpc": message.to_dict()}
