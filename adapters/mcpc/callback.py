"""The MCPC callback: an unsolicited JSON-RPC *response* with the fixed id ``"MCPC_CALLBACK"``.

Wire (shared/notes/WIRE.md "MCPC"; ``mcpc`` 0.2.6 ``MCPCHelper.send``, which writes it straight
to stdout, one line per message)::

    {"jsonrpc":"2.0","id":"MCPC_CALLBACK","result":{"content":[{"type":"text","text":"<message JSON>",
     "annotations":null}],"isError":false}}

Every callback has the same id, so it can never be matched to a request: a gateway must take it
out before id remapping. :func:`callback_line` writes the line exactly as the library does
(without the newline); :func:`is_callback` / :func:`callback_messages` recognise one, never raising.
"""

from __future__ import annotations

from typing import Any, Final

from adapters.mcpc import jsontext
from adapters.mcpc.message import McpcMessage, messages_in_result

MCPC_CALLBACK: Final = "MCPC_CALLBACK"


def callback_envelope(message: McpcMessage) -> dict[str, Any]:
    """The JSON-RPC response object carrying ``message`` as a callback."""
    block = {"type": "text", "text": message.to_json(), "annotations": None}
    return {"jsonrpc": "2.0", "id": MCPC_CALLBACK, "result": {"content": [block], "isError": False}}


def callback_line(message: McpcMessage) -> str:
    """The callback as the library writes it (compact JSON, that key order), without the newline."""
    return jsontext.dumps(callback_envelope(message))


def is_callback(obj: Any) -> bool:
    """Whether a decoded JSON-RPC message is an MCPC callback (a response with the callback id)."""
    return isinstance(obj, dict) and obj.get("id") == MCPC_CALLBACK and "method" not in obj and "result" in obj


def callback_messages(obj: Any) -> list[McpcMessage]:
    """The MCPC messages of a callback (``[]`` when ``obj`` is not one)."""
    return messages_in_result(obj.get("result")) if is_callback(obj) else []
