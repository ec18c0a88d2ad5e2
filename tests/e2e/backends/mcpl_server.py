"""A configurable MCPL 0.4 server for the gateway's e2e tests (raw JSON-RPC, no SDK, fully asyncio).

The gateway sits between MCPL hosts and MCPL servers; to test it we need a server that exercises every
server-side lane of the spec (push events, context hooks, server-initiated inference with streaming,
scopes, checkpoints/rollback, channels) and that records everything it receives, so a test can check
what the gateway forwarded. One process plays one role (``--role memory|compliance|notes|files|channels``).

Run as ``python -m tests.e2e.backends.mcpl_server --role ROLE [--http PORT] [options]`` with cwd at the
project root. Without ``--http`` it speaks newline-delimited JSON-RPC on stdin/stdout; with it, legacy
Streamable HTTP at ``http://127.0.0.1:PORT/mcp`` (sessions, JSON answers, a standalone GET SSE stream that
carries every server-initiated message). Only JSON-RPC ever goes to stdout; logs go to stderr.

Messages are handled concurrently: a tool call waiting for the host's answer to a server→host request
(ids ``s-1``, ``s-2``...) does not stop the other incoming messages, that answer included. Every such
wait has a timeout (``--ask-timeout``, 10 s) that yields an error object instead of hanging.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import json
import logging
import os
import re
import sys
import uuid
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from tests.support import PeerError

log = logging.getLogger("mcpl_server")

JsonObj = dict[str, Any]
Sender = Callable[[JsonObj], Awaitable[None]]
AfterResponse = Callable[[], Awaitable[None]]

ROLES = ("memory", "compliance", "notes", "files", "channels")
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


def tool(name: str, description: str, properties: JsonObj | None = None, required: list[str] | None = None) -> JsonObj:
    schema: JsonObj = {"type": "object", "properties": properties or {}}
    if required:
        schema["required"] = required
    return {"name": name, "description": description, "inputSchema": schema}


STRING = {"type": "string"}
OBJECT = {"type": "object"}

COMMON_TOOLS = [
    tool("stats", "Everything this server has received so far, as JSON"),
    tool(
        "ask",
        "Send any request to the host and return its whole answer",
        {"method": STRING, "params": OBJECT},
        ["method"],
    ),
    tool(
        "push",
        "Send push/event to the host and return its answer",
        {"eventId": STRING, "text": STRING, "featureSet": STRING},
        ["eventId", "text"],
    ),
    tool(
        "infer",
        "Send inference/request to the host; return its answer and the streamed chunks",
        {"featureSet": STRING, "stream": {"type": "boolean"}, "conversationId": STRING},
    ),
    tool("notify", "Send any notification to the host", {"method": STRING, "params": OBJECT}, ["method"]),
    tool("exit", "Exit the process at once (a crash, for restart tests)"),
]

ROLE_TOOLS: dict[str, list[JsonObj]] = {
    "memory": [tool("remember", "Store a memory", {"text": STRING}, ["text"])],
    "compliance": [],
    "notes": [tool("add_note", "Add a note (creates a checkpoint)", {"text": STRING}, ["text"])],
    "files": [tool("edit_file", "Edit a file (scoped)", {"path": STRING}, ["path"])],
    "channels": [
        tool(
            "incoming",
            "Deliver inbound channel messages to the host",
            {"channelId": STRING, "texts": {"type": "array", "items": STRING}},
            ["channelId", "texts"],
        )
    ],
}

CHANNEL_CAPS = {"register": True, "publish": True, "observe": True, "lifecycle": True, "streaming": True}

ROLE_CAPABILITIES: dict[str, JsonObj] = {
    # §15.1 plus modelInfo (§5.1).
    "memory": {
        "version": "0.4",
        "contextHooks": {"beforeInference": True, "afterInference": {"blocking": False}},
        "inferenceRequest": {"streaming": True},
        "pushEvents": True,
        "featureSets": {
            "memory.retrieval": {
                "description": "Retrieve relevant memories",
                "uses": ["contextHooks.beforeInference"],
            },
            "memory.extraction": {"description": "Learn from conversations", "uses": ["contextHooks.afterInference"]},
            "memory.consolidation": {"description": "Summarize memories using AI", "uses": ["inferenceRequest"]},
            "memory.proactive": {"description": "Surface reminders proactively", "uses": ["pushEvents"]},
        },
        "modelInfo": True,
    },
    # §15.2 exactly.
    "compliance": {
        "version": "0.4",
        "contextHooks": {"afterInference": {"blocking": True}},
        "featureSets": {
            "compliance.redaction": {
                "description": "Redact secrets and PII from responses",
                "uses": ["contextHooks.afterInference"],
            }
        },
    },
    # §8.1.
    "notes": {
        "version": "0.4",
        "featureSets": {"notes.edit": {"description": "Manage notes", "uses": ["tools"], "rollback": True}},
    },
    # The array / boolean shapes real peers send (the reference servers of MCPL 0.4 and 0.5 differ from the spec).
    "files": {
        "version": "0.4",
        "pushEvents": True,
        "channels": True,
        "featureSets": [
            {"name": "files.edit", "description": "Edit files", "uses": ["tools"], "scoped": True},
            {"name": "files.watch", "description": "Watch files", "uses": ["pushEvents"]},
        ],
    },
    # §14.1.
    "channels": {
        "version": "0.4",
        "channels": dict(CHANNEL_CAPS),
        "featureSets": {
            "channels.publish": {
                "description": "Publish to registered channels",
                "uses": ["channels.publish"],
                "scoped": True,
            },
            "channels.observe": {
                "description": "Observe outgoing/incoming messages",
                "uses": ["channels.observe"],
                "scoped": True,
            },
        },
    },
}

DEFAULT_FEATURE_SET = {
    "memory": "memory.proactive",
    "compliance": "compliance.redaction",
    "notes": "notes.edit",
    "files": "files.watch",
    "channels": "channels.publish",
}

HOOK_FEATURE_SET = {
    "memory": ("memory.retrieval", "memory.extraction"),
    "compliance": ("compliance.redaction", "compliance.redaction"),
    "notes": ("notes.edit", "notes.edit"),
    "files": ("files.edit", "files.edit"),
    "channels": ("channels.observe", "channels.observe"),
}


def channel_descriptor(channel: str) -> JsonObj:
    return {
        "id": f"discord:{channel}",
        "type": "discord",
        "label": f"{channel} (Acme Discord)",
        "direction": "bidirectional",
        "address": {"guild": "acme", "channel": channel},
    }


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


# ---------------------------------------------------------------------------------------------- stdio


async def run_stdio(options: Options) -> None:
    out = sys.stdout.buffer
    sys.stdout = sys.stderr  # a stray print() must never corrupt the JSON-RPC stream

    async def send(message: JsonObj) -> None:
        out.write(json.dumps(message).encode() + b"\n")
        out.flush()

    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=64 * 1024 * 1024)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    server = McplServer(options, send)

    async def answer(message: JsonObj) -> None:
        reply = await server.handle_request(message)
        await send(reply.message)
        for step in reply.after:
            await step()

    while line := await reader.readline():
        if not line.strip():
            continue
        try:
            message = json.loads(line)
        except ValueError:
            await send({"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error"}})
            continue
        kind = classify(message)
        if kind == "request":
            server.spawn(answer(message))
        elif kind == "notification":
            await server.handle_notification(message)  # in order: chunks land before their final answer
        elif kind == "response":
            server.handle_response(message)
        else:
            await send({"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "Invalid Request"}})
    log.info("stdin closed; exiting")
    server.close()


# ---------------------------------------------------------------------------------------------- HTTP


class Outbox:
    """Server-initiated messages waiting for a GET stream; a message taken but not delivered goes back."""

    def __init__(self) -> None:
        self.items: deque[JsonObj] = deque()
        self.changed = asyncio.Event()
        self.closed = False

    def put(self, message: JsonObj, *, front: bool = False) -> None:
        (self.items.appendleft if front else self.items.append)(message)
        self.changed.set()

    def close(self) -> None:
        self.closed = True
        self.changed.set()

    async def get(self, timeout: float) -> JsonObj | None:
        """The next message, or None after `timeout` seconds (or when closed)."""
        if not self.items and not self.closed:
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), timeout)
        return self.items.popleft() if self.items and not self.closed else None


@dataclass
class HttpSession:
    server: McplServer
    outbox: Outbox


def build_app(options: Options) -> Any:
    from starlette.applications import Starlette
    from starlette.background import BackgroundTask
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response, StreamingResponse
    from starlette.routing import Route

    sessions: dict[str, HttpSession] = {}

    def rpc_error(status: int, code: int, message: str) -> JSONResponse:
        return JSONResponse({"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}, status)

    def lookup(request: Request) -> HttpSession | JSONResponse:
        session_id = request.headers.get("mcp-session-id")
        if not session_id:
            return rpc_error(400, -32600, "Missing Mcp-Session-Id header")
        session = sessions.get(session_id)
        if session is None:
            return rpc_error(404, -32600, "Unknown or ended session")
        return session

    async def post(request: Request) -> Response:
        try:
            message = json.loads(await request.body())
        except ValueError:
            return rpc_error(400, -32700, "Parse error")
        kind = classify(message)
        if kind == "invalid":
            return rpc_error(400, -32600, "Invalid Request (batches are not supported)")
        if kind == "request" and message["method"] == "initialize":
            session_id = uuid.uuid4().hex
            outbox = Outbox()

            async def send(outgoing: JsonObj, outbox: Outbox = outbox) -> None:
                outbox.put(outgoing)

            session = HttpSession(McplServer(options, send), outbox)
            sessions[session_id] = session
            reply = await session.server.handle_request(message)
            log.info("new session %s", session_id)
            return JSONResponse(reply.message, headers={"Mcp-Session-Id": session_id})
        found = lookup(request)
        if isinstance(found, JSONResponse):
            return found
        server = found.server
        if kind == "request":
            reply = await server.handle_request(message)

            async def after(steps: list[AfterResponse] = reply.after) -> None:
                for step in steps:
                    await step()

            return JSONResponse(reply.message, background=BackgroundTask(after) if reply.after else None)
        if kind == "notification":
            await server.handle_notification(message)
        else:
            server.handle_response(message)
        return Response(status_code=202)

    async def get(request: Request) -> Response:
        if "text/event-stream" not in request.headers.get("accept", ""):
            return rpc_error(406, -32600, "GET needs Accept: text/event-stream")
        found = lookup(request)
        if isinstance(found, JSONResponse):
            return found
        outbox = found.outbox

        async def events() -> AsyncIterator[str]:
            yield ": keepalive\n\n"  # flushes the stream open at once
            pending: JsonObj | None = None
            try:
                while not outbox.closed:
                    pending = await outbox.get(5.0)
                    if pending is None:
                        yield ": keepalive\n\n"
                        continue
                    yield f"data: {json.dumps(pending)}\n\n"
                    pending = None
            finally:
                if pending is not None and not outbox.closed:
                    outbox.put(pending, front=True)

        return StreamingResponse(
            events(), media_type="text/event-stream", headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        )

    async def delete(request: Request) -> Response:
        found = lookup(request)
        if isinstance(found, JSONResponse):
            return found
        sessions.pop(request.headers["mcp-session-id"], None)
        found.outbox.close()
        found.server.close()
        return Response(status_code=200)

    async def mcp(request: Request) -> Response:
        handler = {"POST": post, "GET": get, "DELETE": delete}[request.method]
        return await handler(request)

    return Starlette(routes=[Route("/mcp", mcp, methods=["POST", "GET", "DELETE"])])


async def run_http(options: Options, port: int) -> None:
    import uvicorn

    config = uvicorn.Config(build_app(options), host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    await uvicorn.Server(config).serve()


# ---------------------------------------------------------------------------------------------- CLI


def parse_args(argv: list[str] | None = None) -> tuple[Options, int | None]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--role", required=True, choices=ROLES)
    parser.add_argument("--http", type=int, metavar="PORT", help="serve Streamable HTTP on 127.0.0.1:PORT/mcp")
    parser.add_argument("--name", help="serverInfo.name and push origin.server (default: the role)")
    parser.add_argument("--hook-delay", type=float, default=0.0, metavar="SECONDS")
    parser.add_argument("--tag", metavar="FEATURESET", help="featureSet to tag hook responses with")
    parser.add_argument("--infer-in-hook", action="store_true", help="send inference/request inside beforeInference")
    parser.add_argument("--redact", action="append", default=[], metavar="WORD", help="compliance: redact WORD too")
    parser.add_argument("--ask-timeout", type=float, default=10.0, metavar="SECONDS")
    parser.add_argument("--mcpl-version", help="MCPL version to declare (0.5: updates come as requests)")
    ns = parser.parse_args(argv)
    options = Options(
        role=ns.role,
        name=ns.name or ns.role,
        hook_delay=ns.hook_delay,
        tag=ns.tag,
        infer_in_hook=ns.infer_in_hook,
        redact=ns.redact,
        ask_timeout=ns.ask_timeout,
        mcpl_version=ns.mcpl_version,
    )
    return options, ns.http


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="mcpl_server %(levelname)s %(message)s")
    options, port = parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run_http(options, port) if port is not None else run_stdio(options))


if __name__ == "__main__":
    main()
