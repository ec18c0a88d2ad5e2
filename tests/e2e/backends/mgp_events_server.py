"""An MGP 0.8 server over stdio (raw JSON lines) with event channels and callbacks, for tests
(MGP_COMMUNICATION.md §13.2-§13.4), written from the spec.

- ``mgp/events/subscribe`` confirms the channels it has (``system.alerts``, ``model.tokens``) and
  lists the rest as unsupported; ``mgp/events/unsubscribe`` ends a subscription.
- tool ``emit {channel, text}`` pushes ``notifications/mgp.event`` on that channel (with its own flat
  ``_mgp.seq``) and answers.
- tool ``confirm {message}`` sends ``notifications/mgp.callback.request`` for this call, twice (the
  second as the retry §13.4 asks servers to make, same ``callback_id``), and answers the call only
  when ``mgp/callback/respond`` brings the answer: the call's result is that answer.
- tool ``log`` returns every method received, in order, and the ``mgp/callback/respond`` params.

``python -m tests.e2e.backends.mgp_events_server``
"""

from __future__ import annotations

import json
import sys
from typing import Any

CHANNELS = {"system.alerts", "model.tokens"}
TOOLS = [
    {
        "name": "emit",
        "description": "Push an event on a channel",
        "inputSchema": {"type": "object", "properties": {"channel": {"type": "string"}, "text": {"type": "string"}}},
    },
    {
        "name": "confirm",
        "description": "Ask the kernel to confirm, and return its answer",
        "inputSchema": {"type": "object", "properties": {"message": {"type": "string"}}},
    },
    {"name": "log", "description": "What this server received", "inputSchema": {"type": "object", "properties": {}}},
]


def send(message: dict[str, Any]) -> None:
    print(json.dumps(message), flush=True)


def text(value: Any) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": value if isinstance(value, str) else json.dumps(value)}]}


def main() -> None:
    received: list[str] = []
    responds: list[Any] = []
    subscriptions: dict[str, str] = {}  # subscription id -> channel
    waiting: dict[str, Any] = {}  # callback id -> the id of the tools/call it belongs to
    seq = 0
    for line in sys.stdin:
        if not line.strip():
            continue
        message = json.loads(line)
        method = message.get("method")
        received.append(method if isinstance(method, str) else "(response)")
        if "id" not in message or method is None:
            continue
        params = message.get("params") or {}
        result: Any
        if method == "initialize":
            mgp = {"version": "0.8.0", "extensions": ["events", "callbacks"], "server_id": "events-test"}
            result = {
                "protocolVersion": params["protocolVersion"],
                "capabilities": {"tools": {}, "mgp": mgp},
                "serverInfo": {"name": "mgp-events-test", "version": "1"},
            }
        elif method == "mgp/events/subscribe":
            asked = params.get("channels") or []
            ok = [c for c in asked if c in CHANNELS]
            sub_id = f"up-{len(subscriptions) + 1}"
            for channel in ok:
                subscriptions[sub_id] = channel
            result = {
                "subscribed": ok,
                "unsupported": [c for c in asked if c not in CHANNELS],
                "subscription_id": sub_id,
            }
        elif method == "mgp/events/unsubscribe":
            subscriptions.pop(params.get("subscription_id"), None)
            result = {}
        elif method == "mgp/callback/respond":
            responds.append(params)
            call_id = waiting.pop(params.get("callback_id"), None)
            if call_id is not None:
                send({"jsonrpc": "2.0", "id": call_id, "result": text({"answer": params.get("response")})})
            result = {"acknowledged": True}
        elif method == "tools/list":
            result = {"tools": TOOLS}
        elif method == "tools/call":
            name = params.get("name")
            arguments = params.get("arguments") or {}
            if name == "emit":
                seq += 1
                channel = arguments.get("channel", "system.alerts")
                sub_id = next((s for s, c in subscriptions.items() if c == channel), None)
                event = {
                    "subscription_id": sub_id,
                    "channel": channel,
                    "timestamp": "2026-11-23T00:00:00.000Z",
                    "_mgp.seq": seq,
                    "data": {"text": arguments.get("text", ""), "severity": "warning"},
                }
                send({"jsonrpc": "2.0", "method": "notifications/mgp.event", "params": event})
                result = text("emitted")
            elif name == "confirm":
                callback_id = f"cb-{message['id']}"
                waiting[callback_id] = message["id"]
                request = {
                    "callback_id": callback_id,
                    "request_id": message["id"],
                    "type": "confirmation",
                    "message": arguments.get("message", "Continue?"),
                    "options": ["confirm", "cancel"],
                    "timeout_ms": 10000,
                }
                for attempt in (1, 2):
                    send(
                        {
                            "jsonrpc": "2.0",
                            "method": "notifications/mgp.callback.request",
                            "params": {**request, "_mgp.attempt": attempt},
                        }
                    )
                continue  # answered when mgp/callback/respond comes
            else:
                result = text({"received": received, "responds": responds, "subscriptions": subscriptions})
        elif method == "ping":
            result = {}
        else:
            send({"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32601, "message": "Method not found"}})
            continue
        send({"jsonrpc": "2.0", "id": message["id"], "result": result})


if __name__ == "__main__":
    main()
