"""The MCPC message: one step of a task (``created``/``update``/``complete``/``failed``) or a
``server_event``, carried as the JSON text of a text content block.

Shape (shared/notes/WIRE.md "MCPC"; ``mcpc`` 0.2.6 ``models.MCPCMessage``), keys in this order and
nulls present: ``{"type","event","session_id","task_id","tool_name","result","protocol":"mcpc"}``.
:meth:`McpcMessage.to_json` writes exactly what ``MCPCMessage.model_dump_json()`` writes.

Reading is lenient but never raises (junk gives None / ``[]``):

- the text must be a JSON object with ``"protocol": "mcpc"`` (the library also takes an object
  without ``protocol``, defaulting it; we do not, so that ordinary tool output is never mistaken);
- a missing ``type`` is ``"task"`` (the library's default); any type but ``task``/``server_event``
  is refused; ``event`` must be a string;
- ids and ``tool_name`` that are not strings read as None. Whether a task message names its
  session, task and tool (the library client drops it otherwise) is :attr:`McpcMessage.routable`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Literal

from adapters.mcpc import jsontext

PROTOCOL: Final = "mcpc"
TASK: Final = "task"
SERVER_EVENT: Final = "server_event"
CREATED: Final = "created"
UPDATE: Final = "update"
COMPLETE: Final = "complete"
FAILED: Final = "failed"
TASK_EVENTS: Final = frozenset({CREATED, UPDATE, COMPLETE, FAILED})
FINAL_EVENTS: Final = frozenset({COMPLETE, FAILED})

MessageType = Literal["task", "server_event"]


@dataclass(frozen=True, slots=True)
class McpcMessage:
    """One MCPC message. ``result`` is any JSON value."""

    type: MessageType
    event: str
    session_id: str | None = None
    task_id: str | None = None
    tool_name: str | None = None
    result: Any = None
    protocol: str = PROTOCOL

    @property
    def routable(self) -> bool:
        """True for a server event, and for a task message naming its session, task and tool (the
        messages the library's client delivers)."""
        return self.type == SERVER_EVENT or bool(self.session_id and self.task_id and self.tool_name)

    @property
    def final(self) -> bool:
        """A task message that ends its task (``complete`` or ``failed``)."""
        return self.type == TASK and self.event in FINAL_EVENTS

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "event": self.event,
            "session_id": self.session_id,
            "task_id": self.task_id,
            "tool_name": self.tool_name,
            "result": self.result,
            "protocol": self.protocol,
        }

    def to_json(self) -> str:
        """The message's text, byte for byte as the library writes it."""
        return jsontext.dumps(self.to_dict())

    def text_block(self) -> dict[str, Any]:
        """A text content block carrying this message (as an SDK server writes it: no nulls)."""
        return {"type": "text", "text": self.to_json()}


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def message_from_dict(obj: Any) -> McpcMessage | None:
    """An MCPC message from a decoded JSON object, or None."""
    if not isinstance(obj, dict) or obj.get("protocol") != PROTOCOL:
        return None
    kind = obj.get("type", TASK)
    event = obj.get("event")
    if kind not in (TASK, SERVER_EVENT) or not isinstance(event, str):
        return None
    return McpcMessage(
        type=TASK if kind == TASK else SERVER_EVENT,
        event=event,
        session_id=_str_or_none(obj.get("session_id")),
        task_id=_str_or_none(obj.get("task_id")),
        tool_name=_str_or_none(obj.get("tool_name")),
        result=obj.get("result"),
    )


def parse_text(text: Any) -> McpcMessage | None:
    """An MCPC message from a text block's text, or None."""
    if not isinstance(text, str) or PROTOCOL not in text:  # cheap test before decoding
        return None
    return message_from_dict(jsontext.loads(text))


def parse_block(block: Any) -> McpcMessage | None:
    """An MCPC message from a content block (a text block whose text is one), or None."""
    if not isinstance(block, dict) or block.get("type", "text") != "text":
        return None
    return parse_text(block.get("text"))


def messages_in_content(content: Any) -> list[McpcMessage]:
    """Every MCPC message in a content list, in order."""
    if not isinstance(content, list):
        return []
    return [message for message in map(parse_block, content) if message is not None]


def messages_in_result(result: Any) -> list[McpcMessage]:
    """Every MCPC message in a ``tools/call`` result's content (the ``created`` reply, the fallback's
    whole run, a callback's one message)."""
    return messages_in_content(result.get("content")) if isinstance(result, dict) else []


def result_of_messages(messages: list[McpcMessage], is_error: bool = False) -> dict[str, Any]:
    """A ``tools/call`` result with one text block per message (the fallback for a client that never
    ran the handshake: the server runs the task to its end and returns every message)."""
    return {"content": [message.text_block() for message in messages], "isError": is_error}
