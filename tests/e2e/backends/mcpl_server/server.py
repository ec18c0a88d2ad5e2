"""The MCPL test server's protocol logic: one connection's handlers and records, independent of the transport."""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import os
import re
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from tests.e2e.backends.mcpl_server.catalog import (
    COMMON_TOOLS,
    DEFAULT_FEATURE_SET,
    HOOK_FEATURE_SET,
    ROLE_CAPABILITIES,
    ROLE_TOOLS,
    JsonObj,
    channel_descriptor,
)
from tests.support import PeerError

log = logging.getLogger("mcpl_server")

Sender = Callable[[JsonObj], Awaitable[None]]
AfterResponse = Callable[[], Awaitable[None]]

SECRET_PATTERN = re.compile(r"sk-[A-Za-z0-9]+")


RpcError = PeerError  # raised inside a handler to answer the request with a JSON-RPC error


@dataclass
class Options:
    role: str
    name: str
    hook_delay: float = 0.0
    tag: str | None = None
    infer_in_hook: bool = False
    redact: list[str] = field(default_factory=list)
    ask_timeout: float = 10.0
    mcpl_version: str | None = None


@dataclass
class Reply:
    """The response to one request, plus work to do once the response is on the wire."""

    message: JsonObj
    after: list[AfterResponse] = field(default_factory=list)


def now_iso() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def text_content(value: Any) -> JsonObj:
    text = value if isinstance(value, str) else json.dumps(value)
    return {"content": [{"type": "text", "text": text}]}


class McplServer:
    """One MCPL server connection: protocol logic and records, independent of the transport.

    ``send`` delivers server-initiated messages (requests and notifications) to the host. The transport
    feeds incoming messages to :meth:`handle_request`, :meth:`handle_notification` and
    :meth:`handle_response`, and delivers each :class:`Reply` itself.
    """

    def __init__(self, options: Options, send: Sender) -> None:
        self.options = options
        self.role = options.role
        self.send = send
        self.mcpl = False
        self.record: JsonObj = {
            "initialize": None,
            "featureSetUpdates": [],
            "notifications": [],
            "hooks": [],
            "toolCalls": [],
            "chunks": [],
            "published": [],
            "observed": [],
            "requests": [],
            "inferInHook": None,
            "registerAnswer": None,
        }
        self._next_ask = 0
        self._waiting: dict[str, asyncio.Future[JsonObj]] = {}
        self._chunk_sinks: dict[str, list[JsonObj]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self.memories: list[tuple[str, str]] = []
        self.checkpoints: list[str] = []
        self.current_checkpoint: str | None = None
        self.channels: dict[str, JsonObj] = {}
        self._published = 0
        self._incoming = 0

    # ------------------------------------------------------------------------------------ plumbing

    def spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def new_ask_id(self) -> str:
        self._next_ask += 1
        return f"s-{self._next_ask}"

    async def ask_host(self, method: str, params: JsonObj | None = None, *, rpc_id: str | None = None) -> JsonObj:
        """Sends a request to the host; returns ``{"result": ...}`` or ``{"error": ...}`` (never hangs)."""
        rpc_id = rpc_id or self.new_ask_id()
        future: asyncio.Future[JsonObj] = asyncio.get_running_loop().create_future()
        self._waiting[rpc_id] = future
        message: JsonObj = {"jsonrpc": "2.0", "id": rpc_id, "method": method}
        if params is not None:
            message["params"] = params
        try:
            await self.send(message)
            answer = await asyncio.wait_for(future, self.options.ask_timeout)
        except TimeoutError:
            log.warning("no answer to %s %s within %ss", rpc_id, method, self.options.ask_timeout)
            return {
                "error": {
                    "code": -32000,
                    "message": f"No answer from the host within {self.options.ask_timeout}s",
                    "data": {"id": rpc_id, "method": method, "timeout": True},
                }
            }
        finally:
            self._waiting.pop(rpc_id, None)
        if "error" in answer:
            return {"error": answer["error"]}
        return {"result": answer.get("result")}

    async def notify_host(self, method: str, params: JsonObj | None = None) -> None:
        message: JsonObj = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        await self.send(message)

    def close(self) -> None:
        for future in self._waiting.values():
            if not future.done():
                future.set_result({"error": {"code": -32000, "message": "Session closed"}})
        for task in list(self._tasks):
            task.cancel()

    # ------------------------------------------------------------------------------------ dispatch

    def handle_response(self, message: JsonObj) -> None:
        future = self._waiting.get(str(message.get("id")))
        if future is None or future.done():
            log.warning("answer to an unknown or finished request: %s", message)
            return
        future.set_result(message)

    async def handle_notification(self, message: JsonObj) -> None:
        method, params = message.get("method"), message.get("params")
        self.record["notifications"].append({"method": method, "params": params})
        params = params if isinstance(params, dict) else {}
        if method == "featureSets/update":
            self.record["featureSetUpdates"].append(params)
        elif method == "context/afterInference":
            self.record["hooks"].append(params)  # memory.extraction: learning happens here
        elif method == "context/beforeInference":
            self.record["hooks"].append(params)
        elif method == "inference/chunk":
            self.record["chunks"].append(params)
            sink = self._chunk_sinks.get(str(params.get("requestId")))
            if sink is not None:
                sink.append(params)
        elif method in ("channels/outgoing/chunk", "channels/outgoing/complete"):
            self.record["observed"].append({"method": method, "params": params})
        elif method == "channels/publish":
            self.record["published"].append(params)
        elif method == "notifications/initialized" and self.role == "channels" and self.mcpl:
            self.spawn(self._register_channels())

    async def handle_request(self, message: JsonObj) -> Reply:
        rpc_id, method = message.get("id"), message.get("method")
        params = message.get("params")
        self.record["requests"].append({"method": method, "params": params})
        params = params if isinstance(params, dict) else {}
        after: list[AfterResponse] = []
        try:
            result = await self._dispatch(str(method), params, after)
        except RpcError as exc:
            return Reply({"jsonrpc": "2.0", "id": rpc_id, "error": exc.to_json()})
        except Exception as exc:
            log.exception("handler for %s failed", method)
            return Reply({"jsonrpc": "2.0", "id": rpc_id, "error": {"code": -32603, "message": str(exc)}})
        return Reply({"jsonrpc": "2.0", "id": rpc_id, "result": result}, after)

    async def _dispatch(self, method: str, params: JsonObj, after: list[AfterResponse]) -> JsonObj:
        if method == "initialize":
            return self._initialize(params)
        if method == "ping":
            return {}
        if method == "tools/list":
            return {"tools": COMMON_TOOLS + ROLE_TOOLS[self.role]}
        if method == "tools/call":
            self.record["toolCalls"].append(params)
            return await self._call_tool(params)
        if method == "featureSets/update":  # a request in MCPL 0.5
            self.record["featureSetUpdates"].append({**params, "asRequest": True})
            return {}
        if method == "context/beforeInference":
            self.record["hooks"].append(params)
            return await self._before_inference(params)
        if method == "context/afterInference":
            self.record["hooks"].append(params)
            return await self._after_inference(params)
        if method == "state/rollback" and self.role == "notes":
            return self._rollback(params)
        if method == "channels/list" and self.role in ("channels", "files"):
            return {"channels": list(self.channels.values())}
        if self.role == "channels":
            if method == "channels/open":
                return self._open_channel(params, after)
            if method == "channels/close":
                return self._close_channel(params)
            if method == "channels/publish":
                self.record["published"].append(params)
                self._published += 1
                return {"delivered": True, "messageId": f"msg_{self._published}"}
        raise RpcError(-32601, f"Method not found: {method}")

    def _initialize(self, params: JsonObj) -> JsonObj:
        self.record["initialize"] = params
        capabilities = params.get("capabilities")
        experimental = capabilities.get("experimental") if isinstance(capabilities, dict) else None
        host_mcpl = experimental.get("mcpl") if isinstance(experimental, dict) else None
        self.mcpl = host_mcpl is not None and host_mcpl is not False
        ours: JsonObj = {"tools": {}}
        if self.mcpl:
            ours["experimental"] = {"mcpl": copy.deepcopy(ROLE_CAPABILITIES[self.role])}
            if self.options.mcpl_version:
                ours["experimental"]["mcpl"]["version"] = self.options.mcpl_version
        return {
            "protocolVersion": params.get("protocolVersion") or "2025-11-25",
            "capabilities": ours,
            "serverInfo": {"name": self.options.name, "version": "1"},
        }

    # ------------------------------------------------------------------------------------ tools

    async def _call_tool(self, params: JsonObj) -> JsonObj:
        name = params.get("name")
        args = params.get("arguments")
        args = args if isinstance(args, dict) else {}
        if name == "stats":
            return text_content(self.record)
        if name == "ask":
            return text_content(await self.ask_host(str(args["method"]), args.get("params")))
        if name == "notify":
            await self.notify_host(str(args["method"]), args.get("params"))
            return text_content({"sent": True})
        if name == "push":
            feature_set = args.get("featureSet") or DEFAULT_FEATURE_SET[self.role]
            event = {
                "featureSet": feature_set,
                "eventId": args.get("eventId") or f"evt_{uuid.uuid4().hex[:8]}",
                "timestamp": now_iso(),
                "origin": {"server": self.options.name},
                "payload": {"content": [{"type": "text", "text": str(args.get("text", ""))}]},
            }
            return text_content(await self.ask_host("push/event", event))
        if name == "infer":
            return text_content(await self._infer(args))
        if name == "exit":
            asyncio.get_running_loop().call_later(0.05, os._exit, 3)
            return text_content("bye")
        if name == "remember" and self.role == "memory":
            memory_id = f"mem_{len(self.memories) + 1}"
            self.memories.append((memory_id, str(args.get("text", ""))))
            return text_content(f"Remembered {memory_id}")
        if name == "add_note" and self.role == "notes":
            return self._add_note(str(args.get("text", "")))
        if name == "edit_file" and self.role == "files":
            return text_content(f"edited {args.get('path')}")
        if name == "incoming" and self.role == "channels":
            return text_content(await self._incoming_messages(args))
        raise RpcError(-32602, f"Unknown tool: {name}")

    async def _infer(self, args: JsonObj) -> JsonObj:
        sent: JsonObj = {"featureSet": args.get("featureSet") or "memory.consolidation"}
        if args.get("conversationId") is not None:
            sent["conversationId"] = args["conversationId"]
        sent["stream"] = bool(args.get("stream", False))
        sent["messages"] = [{"role": "user", "content": "Summarize these memories: " + self._memory_text()}]
        sent["preferences"] = {"maxTokens": 500, "temperature": 0.7}
        chunks: list[JsonObj] = []
        rpc_id = self.new_ask_id()
        self._chunk_sinks[rpc_id] = chunks  # filled by inference/chunk notifications with this requestId
        try:
            answer = await self.ask_host("inference/request", sent, rpc_id=rpc_id)
        finally:
            self._chunk_sinks.pop(rpc_id, None)
        return {"answer": answer, "chunks": chunks, "sentParams": sent}

    def _memory_text(self) -> str:
        return "; ".join(text for _, text in self.memories) or "(none)"

    def _add_note(self, text: str) -> JsonObj:
        number = len(self.checkpoints) + 1
        checkpoint = f"chk_{number}"
        parent = self.current_checkpoint
        self.checkpoints.append(checkpoint)
        self.current_checkpoint = checkpoint
        return {
            "content": [{"type": "text", "text": "Note added"}],
            "state": {
                "checkpoint": checkpoint,
                "parent": parent,
                "patch": [{"op": "add", "path": "/notes/-", "value": {"id": number, "text": text}}],
            },
        }

    def _rollback(self, params: JsonObj) -> JsonObj:
        checkpoint = params.get("checkpoint")
        if checkpoint not in self.checkpoints:
            raise RpcError(-32005, "Checkpoint not found", {"checkpoint": checkpoint})
        self.current_checkpoint = str(checkpoint)
        return {"checkpoint": checkpoint, "success": True}

    # ------------------------------------------------------------------------------------ hooks

    async def _before_inference(self, params: JsonObj) -> JsonObj:
        if self.options.infer_in_hook:
            self.record["inferInHook"] = await self.ask_host(
                "inference/request",
                {
                    "featureSet": "memory.consolidation",
                    "messages": [{"role": "user", "content": "Summarize these memories: " + self._memory_text()}],
                },
            )
        if self.options.hook_delay:
            await asyncio.sleep(self.options.hook_delay)
        tag = self.options.tag or HOOK_FEATURE_SET[self.role][0]
        if self.role != "memory":
            return {"featureSet": tag, "contextInjections": []}
        texts = [text for _, text in self.memories]
        return {
            "featureSet": tag,
            "contextInjections": [
                {
                    "namespace": "memory",
                    "position": "system",
                    "content": [{"type": "text", "text": "<memories>\n" + "\n".join(texts) + "\n</memories>"}],
                    "metadata": {"memoryIds": [memory_id for memory_id, _ in self.memories]},
                }
            ],
        }

    async def _after_inference(self, params: JsonObj) -> JsonObj:
        if self.options.hook_delay:
            await asyncio.sleep(self.options.hook_delay)
        tag = self.options.tag or HOOK_FEATURE_SET[self.role][1]
        if self.role != "compliance":
            return {"featureSet": tag}
        redactions: list[JsonObj] = []
        modified = self._redact(params.get("assistantMessage"), redactions)
        return {"featureSet": tag, "modifiedResponse": modified, "metadata": {"redactions": redactions}}

    def _redact(self, value: Any, redactions: list[JsonObj]) -> Any:
        """Redacts a string, or the text blocks of a content-block list (the message shape is a string in 0.4)."""
        if isinstance(value, list):
            return [
                {**block, "text": self._redact(block["text"], redactions)}
                if isinstance(block, dict) and isinstance(block.get("text"), str)
                else block
                for block in value
            ]
        if not isinstance(value, str):
            return value

        def secret(match: re.Match[str]) -> str:
            redactions.append({"type": "api_key"})
            return "[REDACTED]"

        value = SECRET_PATTERN.sub(secret, value)
        for word in self.options.redact:
            if word:
                count = value.count(word)
                redactions.extend({"type": "custom", "word": word} for _ in range(count))
                value = value.replace(word, "[REDACTED]")
        return value

    # ------------------------------------------------------------------------------------ channels

    async def _register_channels(self) -> None:
        for channel in ("#general", "#random"):
            descriptor = channel_descriptor(channel)
            self.channels[descriptor["id"]] = descriptor
        answer = await self.ask_host("channels/register", {"channels": list(self.channels.values())})
        self.record["registerAnswer"] = answer

    def _open_channel(self, params: JsonObj, after: list[AfterResponse]) -> JsonObj:
        address = params.get("address")
        channel = address.get("channel") if isinstance(address, dict) else None
        if not isinstance(channel, str) or channel == "#broken":
            raise RpcError(-32024, "Channel open failed", {"address": address})
        descriptor = channel_descriptor(channel)
        if isinstance(address, dict):
            descriptor["address"] = address
        self.channels[descriptor["id"]] = descriptor

        async def announce() -> None:
            await self.notify_host("channels/changed", {"added": [descriptor]})

        after.append(announce)
        return {"channel": descriptor}

    def _close_channel(self, params: JsonObj) -> JsonObj:
        channel_id = params.get("channelId")
        if channel_id not in self.channels:
            raise RpcError(-32023, "Unknown channel", {"channelId": channel_id})
        del self.channels[str(channel_id)]
        return {"closed": True}

    async def _incoming_messages(self, args: JsonObj) -> JsonObj:
        messages = []
        for text in args.get("texts") or []:
            self._incoming += 1
            messages.append(
                {
                    "channelId": args.get("channelId"),
                    "messageId": f"dmsg_{self._incoming}",
                    "threadId": "t_1",
                    "author": {"id": "u_1", "name": "Alice"},
                    "timestamp": now_iso(),
                    "content": [{"type": "text", "text": str(text)}],
                    "metadata": {},
                }
            )
        return await self.ask_host("channels/incoming", {"messages": messages})


def classify(message: Any) -> str:
    """'request', 'notification', 'response' or 'invalid'."""
    if not isinstance(message, dict):
        return "invalid"
    if isinstance(message.get("method"), str):
        return "request" if "id" in message and message["id"] is not None else "notification"
    if "id" in message and ("result" in message or "error" in message):
        return "response"
    return "invalid"
