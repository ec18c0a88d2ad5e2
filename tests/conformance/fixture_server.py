"""MCP conformance fixture backend, built on the official MCP Python SDK (lowlevel `Server`).

Provides every tool, resource, resource template, prompt and completion that the server
scenarios of `@modelcontextprotocol/conformance` exercise, at both requirement sets
(2025-11-25: 30 scored scenarios; 2026-07-28: 37), with the exact names and payloads those
scenarios check.

    python -m tests.conformance.fixture_server --port PORT [--host 127.0.0.1] [--era ERA]  # HTTP at /mcp
    python -m tests.conformance.fixture_server --stdio [--era ERA]                         # over stdio

Protocol eras (`--era`, default `dual`):

- `dual`: both eras on one endpoint, exactly as the SDK serves them. Over HTTP the SDK routes
  by the `MCP-Protocol-Version` header: a 2026-07-28 value takes the stateless per-request
  path (`server/discover`, `_meta` envelope, MRTR), no header or a handshake-era value takes
  the stateful `initialize` path with `Mcp-Session-Id`. Over stdio the first request decides
  the connection's era (`initialize` opens a legacy connection, an enveloped request a modern
  one); the other era is then refused on that connection (`initialize` -32022, an enveloped
  request on a legacy connection -32600).
- `legacy`: only the initialize-handshake era (protocol versions up to 2025-11-25), answered
  the way a real legacy-only server (MCP Python SDK 1.x) answers a 2026-07-28 client. Over
  HTTP a request carrying `MCP-Protocol-Version: 2026-07-28` and no session id is treated as
  if the header were absent: anything but `initialize` gets HTTP 400 with the JSON-RPC error
  -32600 "Bad Request: Missing session ID" (id null; like the SDK, the 400 carries a throwaway
  `Mcp-Session-Id` header of a session that no longer exists), never -32020/-32021/-32022; the same
  header on a live session gets HTTP 400, -32600 "Bad Request: Unsupported protocol version".
  A request with the `_meta` envelope but without that header is routed to the legacy path
  like any other (no session id: the same 400). `server/discover` and `subscriptions/listen`
  are -32601 Method not found. Over stdio `server/discover` is answered with -32601 too.
- `modern`: only 2026-07-28. Over HTTP every request goes to the SDK's stateless path and no
  session is ever minted: `initialize` gets HTTP 404 with -32601 Method not found (whatever
  headers it carries); a request without `MCP-Protocol-Version` is answered as the modern path
  answers a missing header (400, -32020 HeaderMismatch, or -32602 when `_meta` is missing); a
  handshake-era header value gets 400, -32022 UnsupportedProtocolVersion with
  `data.supported == ["2026-07-28"]`; GET/DELETE get 405. Over stdio `initialize` gets -32601.

Behaviour worth knowing when testing a proxy in front of this fixture:
- Legacy era: server-to-client traffic caused by a request (log messages, progress, sampling,
  elicitation and roots requests, the resources/updated notification sent on subscribe) rides
  that request's POST SSE stream (`related_request_id`), never the standalone GET stream.
- Modern era: the server never sends a request. Tools that need client input (`test_sampling`,
  `test_elicitation*`, `test_input_required_result_*`, `test_missing_capability`,
  `test_streaming_elicitation`) answer `{"resultType": "input_required", "inputRequests": {...},
  "requestState": ...}` and complete when retried with `inputResponses` (+ the echoed
  `requestState`); in the legacy era the very same tools send real `sampling/createMessage`,
  `elicitation/create` and `roots/list` requests instead and return the same final text.
  `requestState` is sealed (AES-GCM, process-local key) by the SDK's `RequestStateBoundary`,
  bound to method + tool/prompt name + arguments: a tampered or foreign state is -32602.
  Capabilities are checked per request against `_meta["io.modelcontextprotocol/clientCapabilities"]`:
  an undeclared one is -32021 with `data.requiredCapabilities == {"<cap>": {}}` (HTTP 400).
  Log notifications are sent only when the request's `_meta["io.modelcontextprotocol/logLevel"]`
  asks for them (legacy: `logging/setLevel` per connection, default debug).
  `subscriptions/listen` is served (SDK `ListenHandler`), so `server/discover` advertises
  `listChanged` for tools/prompts/resources and `resources.subscribe`; `test_trigger_tool_change`,
  `test_trigger_prompt_change` and `test_trigger_resource_update` publish the matching
  list_changed / resources/updated event to every open listen stream of the process (legacy
  era: the notification goes to the session's standalone GET stream, resources/updated only
  after resources/subscribe; the legacy `initialize` result still says `listChanged: false`).
  Not implemented: the tasks extension and `x-mcp-header` tools (unscored 2026-07-28 scenarios).
- An event store is configured, so every legacy POST SSE stream starts with a priming event
  (`id` + empty `data` + `retry`), and `GET` with `Last-Event-ID` replays missed events.
  The `test_reconnection` tool closes its own POST stream mid-call to exercise that path.
- DNS-rebinding protection is always on: Host must be localhost/127.0.0.1/[::1] (any port),
  Origin (if present) the same; otherwise 421/403.
"""

from __future__ import annotations

import argparse
import base64
import contextvars
import io
import itertools
import json
import logging
import struct
import sys
import warnings
import wave
import zlib
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

import anyio
import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.server.context import CallNext, HandlerResult
from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity
from mcp.server.runner import modern_on_request, serve_loop
from mcp.server.streamable_http import EventCallback, EventMessage, EventStore
from mcp.server.subscriptions import (
    InMemorySubscriptionBus,
    ListenHandler,
    PromptsListChanged,
    ResourceUpdated,
    ToolsListChanged,
)
from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from mcp.shared.dispatcher import DispatchContext
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp.shared.inbound import (
    ERROR_CODE_HTTP_STATUS,
    MCP_PROTOCOL_VERSION_HEADER,
    InboundLadderRejection,
    classify_inbound_request,
    unsupported_protocol_version_rejection,
)
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher
from mcp.shared.message import ServerMessageMetadata
from mcp.shared.transport_context import TransportContext
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

# Logging, sampling and roots are deprecated at 2026-07-28 but are exactly what the
# 2025-11-25 scenarios exercise; the SDK warns on every call, which is only noise here.
warnings.filterwarnings("ignore", category=MCPDeprecationWarning)

logger = logging.getLogger("conformance-fixture")

SERVER_NAME = "switchboard-conformance-fixture"
SERVER_VERSION = "1.0.0"
LOGGER_NAME = "conformance-fixture"

Era = Literal["dual", "legacy", "modern"]
ERAS: tuple[Era, ...] = ("dual", "legacy", "modern")
MODERN_VERSION = MODERN_PROTOCOL_VERSIONS[-1]


# --------------------------------------------------------------------------------------
# Binary payloads, generated rather than embedded so they are obviously valid.
# --------------------------------------------------------------------------------------


def _png_1x1_red() -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)  # 1x1, 8-bit RGB
    pixels = zlib.compress(b"\x00\xff\x00\x00")  # filter byte + one red pixel
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")


def _wav_silence() -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(8000)
        wav.writeframes(b"\x00\x00" * 80)  # 10 ms of silence
    return buf.getvalue()


PNG_B64 = base64.b64encode(_png_1x1_red()).decode()
WAV_B64 = base64.b64encode(_wav_silence()).decode()


# --------------------------------------------------------------------------------------
# Static catalogue
# --------------------------------------------------------------------------------------

_EMPTY_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}

# Mirrors the schema the (pending) json-schema-2020-12 scenario expects to survive listing unchanged.
_JSON_SCHEMA_2020_12: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {
        "address": {
            "$anchor": "addressDef",
            "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
        }
    },
    "properties": {
        "name": {"type": "string"},
        "address": {"$ref": "#/$defs/address"},
        "contactMethod": {"type": "string", "enum": ["phone", "email"]},
        "phone": {"type": "string"},
        "email": {"type": "string"},
    },
    "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
    "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
    "then": {"required": ["phone"]},
    "else": {"required": ["email"]},
    "additionalProperties": False,
}


def _tool(name: str, description: str, schema: dict[str, Any] | None = None) -> types.Tool:
    return types.Tool(name=name, description=description, input_schema=schema or dict(_EMPTY_SCHEMA))


TOOLS: list[types.Tool] = [
    _tool("test_simple_text", "Returns a fixed text block"),
    _tool("test_image_content", "Returns a 1x1 red PNG image"),
    _tool("test_audio_content", "Returns a short WAV audio clip"),
    _tool("test_embedded_resource", "Returns an embedded text resource"),
    _tool("test_multiple_content_types", "Returns text, image and embedded resource content"),
    _tool("test_tool_with_logging", "Sends three info log notifications while running"),
    _tool("test_error_handling", "Always fails with isError: true"),
    _tool("test_tool_with_progress", "Reports progress 0/100, 50/100, 100/100 when given a progressToken"),
    _tool(
        "test_sampling",
        "Asks the client to sample an LLM completion for the prompt",
        {
            "type": "object",
            "properties": {"prompt": {"type": "string", "description": "The prompt to send to the LLM"}},
            "required": ["prompt"],
        },
    ),
    _tool(
        "test_elicitation",
        "Asks the client to elicit a username and email from the user",
        {
            "type": "object",
            "properties": {"message": {"type": "string", "description": "The message to show the user"}},
            "required": ["message"],
        },
    ),
    _tool("test_elicitation_sep1034_defaults", "Elicits a form whose fields all carry defaults (SEP-1034)"),
    _tool("test_elicitation_sep1330_enums", "Elicits a form with every enum schema variant (SEP-1330)"),
    _tool("test_reconnection", "Closes its own SSE stream mid-call; the result arrives after reconnection"),
    _tool("json_schema_2020_12_tool", "Tool with JSON Schema 2020-12 features", _JSON_SCHEMA_2020_12),
    # Multi-round-trip requests (SEP-2322). At 2026-07-28 these answer `input_required`; in the
    # legacy era they send the equivalent server-to-client requests and return the same text.
    _tool("test_input_required_result_elicitation", "Asks for the user's name (input key user_name)"),
    _tool("test_input_required_result_sampling", "Asks the client LLM a question (input key capital_question)"),
    _tool("test_input_required_result_list_roots", "Asks for the client's roots (input key client_roots)"),
    _tool("test_input_required_result_request_state", "Asks for a confirmation and round-trips requestState"),
    _tool("test_input_required_result_multiple_inputs", "Asks for elicitation, sampling and roots at once"),
    _tool("test_input_required_result_multi_round", "Two input rounds (step1, step2) with evolving requestState"),
    _tool("test_input_required_result_tampered_state", "Integrity-protected requestState; tampering is -32602"),
    _tool("test_input_required_result_capabilities", "Asks only for inputs the client declared capabilities for"),
    # Diagnostic tools of the server-stateless scenario (SEP-2575).
    _tool("test_missing_capability", "Needs the sampling capability; -32021 when the client did not declare it"),
    _tool("test_streaming_elicitation", "Needs elicitation; answers input_required, never a server request"),
    _tool("test_logging_tool", "Logs at debug, info, warning and error (sent only as the request's log level allows)"),
    _tool("test_trigger_tool_change", "Announces notifications/tools/list_changed to listeners"),
    _tool("test_trigger_prompt_change", "Announces notifications/prompts/list_changed to listeners"),
    _tool("test_trigger_resource_update", "Announces notifications/resources/updated for test://watched-resource"),
]
_TOOL_NAMES = {t.name for t in TOOLS}

STATIC_TEXT_URI = "test://static-text"
STATIC_BINARY_URI = "test://static-binary"
WATCHED_URI = "test://watched-resource"
TEMPLATE_URI = "test://template/{id}/data"
_TEMPLATE_PREFIX, _TEMPLATE_SUFFIX = "test://template/", "/data"

RESOURCES: list[types.Resource] = [
    types.Resource(
        uri=STATIC_TEXT_URI,
        name="static-text",
        description="A static text resource",
        mime_type="text/plain",
    ),
    types.Resource(
        uri=STATIC_BINARY_URI,
        name="static-binary",
        description="A static binary resource (1x1 PNG)",
        mime_type="image/png",
    ),
    types.Resource(
        uri=WATCHED_URI,
        name="watched-resource",
        description="A resource that can be subscribed to",
        mime_type="text/plain",
    ),
]

RESOURCE_TEMPLATES: list[types.ResourceTemplate] = [
    types.ResourceTemplate(
        uri_template=TEMPLATE_URI,
        name="template-data",
        description="Templated JSON data keyed by id",
        mime_type="application/json",
    )
]

PROMPTS: list[types.Prompt] = [
    types.Prompt(name="test_simple_prompt", description="A simple prompt without arguments"),
    types.Prompt(
        name="test_prompt_with_arguments",
        description="A prompt with two required arguments",
        arguments=[
            types.PromptArgument(name="arg1", description="First test argument", required=True),
            types.PromptArgument(name="arg2", description="Second test argument", required=True),
        ],
    ),
    types.Prompt(
        name="test_prompt_with_embedded_resource",
        description="A prompt that embeds a resource",
        arguments=[types.PromptArgument(name="resourceUri", description="URI of the resource to embed", required=True)],
    ),
    types.Prompt(name="test_prompt_with_image", description="A prompt with image content"),
    types.Prompt(
        name="test_input_required_result_prompt",
        description="A prompt that first asks the user for context (input key user_context)",
    ),
]
_PROMPT_NAMES = {p.name for p in PROMPTS}

# Candidate completions, filtered by the typed prefix.
_COMPLETIONS: dict[tuple[str, str], list[str]] = {
    ("test_prompt_with_arguments", "arg1"): ["paris", "park", "party", "test", "testing", "tested"],
    ("test_prompt_with_arguments", "arg2"): ["alpha", "beta", "gamma", "test-value"],
    ("test_prompt_with_embedded_resource", "resourceUri"): [STATIC_TEXT_URI, STATIC_BINARY_URI, WATCHED_URI],
    (TEMPLATE_URI, "id"): ["1", "2", "3", "123", "456"],
}

_LOG_LEVELS: tuple[str, ...] = get_args(types.LoggingLevel)  # severity-ascending


# --------------------------------------------------------------------------------------
# Per-connection state. Handlers get no public handle on the connection, so state is keyed
# by the HTTP session id (stdio serves exactly one connection: key None). Only the legacy
# era has connections; 2026-07-28 requests are self-contained.
# --------------------------------------------------------------------------------------


@dataclass
class _ConnState:
    log_level: str = "debug"  # the spec lets the server choose; send everything until told otherwise
    subscriptions: set[str] | None = None


_STATE: dict[str | None, _ConnState] = {}

# Fan-out for `subscriptions/listen` streams (2026-07-28); process-wide, like the fixture's catalogue.
_BUS = InMemorySubscriptionBus()


def _conn_key(ctx: ServerRequestContext[Any, Any]) -> str | None:
    headers = getattr(ctx.request, "headers", None)
    return headers.get("mcp-session-id") if headers is not None else None


def _state(ctx: ServerRequestContext[Any, Any]) -> _ConnState:
    return _STATE.setdefault(_conn_key(ctx), _ConnState())


def _is_modern(ctx: ServerRequestContext[Any, Any]) -> bool:
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS


async def _log(ctx: ServerRequestContext[Any, Any], level: types.LoggingLevel, message: str) -> None:
    """Send a log notification on this request's stream.

    Legacy era: honours the connection's logging/setLevel. 2026-07-28: the SDK's session
    drops it unless this request's `_meta["io.modelcontextprotocol/logLevel"]` allows `level`.
    """
    if not _is_modern(ctx):
        threshold = _state(ctx).log_level
        if _LOG_LEVELS.index(level) < _LOG_LEVELS.index(threshold):
            return
    await ctx.session.send_log_message(level=level, data=message, logger=LOGGER_NAME, related_request_id=ctx.request_id)


def _text(text: str, *, is_error: bool = False) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=is_error)


def _has_client_capability(ctx: ServerRequestContext[Any, Any], capability: str) -> bool:
    caps = ctx.session.client_capabilities
    return caps is not None and getattr(caps, capability, None) is not None


def _require_client_capabilities(ctx: ServerRequestContext[Any, Any], capabilities: list[str]) -> None:
    """Refuse a request that needs capabilities the client did not declare.

    2026-07-28 (capabilities travel in each request's `_meta`): -32021
    MissingRequiredClientCapability, `data.requiredCapabilities` a ClientCapabilities object.
    Legacy era (capabilities from `initialize`): -32600 with the same data, as before.
    """
    missing = [c for c in dict.fromkeys(capabilities) if not _has_client_capability(ctx, c)]
    if not missing:
        return
    data = {"requiredCapabilities": {c: {} for c in missing}}
    if _is_modern(ctx):
        raise MCPError(
            code=types.MISSING_REQUIRED_CLIENT_CAPABILITY,
            message=f"Missing required client capability: {', '.join(missing)}",
            data=data,
        )
    raise MCPError(code=types.INVALID_REQUEST, message=f"Client does not support {', '.join(missing)}", data=data)


# --------------------------------------------------------------------------------------
# Client input: multi-round-trip requests (SEP-2322) at 2026-07-28, server-to-client
# requests in the legacy era. A tool describes what it needs as rounds of keyed input
# requests; `_gather` either returns every answer (as wire dicts) or, at 2026-07-28, the
# `InputRequiredResult` to send instead.
# --------------------------------------------------------------------------------------

InputRequest = types.ElicitRequest | types.CreateMessageRequest | types.ListRootsRequest
Round = dict[str, InputRequest]
Answers = dict[str, dict[str, Any]]

_CAPABILITY_FOR: dict[str, str] = {
    "elicitation/create": "elicitation",
    "sampling/createMessage": "sampling",
    "roots/list": "roots",
}
_LEGACY_RESULT_TYPE: dict[str, type[types.Result]] = {
    "elicitation/create": types.ElicitResult,
    "sampling/createMessage": types.CreateMessageResult,
    "roots/list": types.ListRootsResult,
}
_ACCEPTED_RESPONSES: dict[str, tuple[type[types.Result], ...]] = {
    "elicitation/create": (types.ElicitResult,),
    "sampling/createMessage": (types.CreateMessageResult, types.CreateMessageResultWithTools),
    "roots/list": (types.ListRootsResult,),
}


def _elicit(message: str, schema: dict[str, Any]) -> types.ElicitRequest:
    return types.ElicitRequest(params=types.ElicitRequestFormParams(message=message, requested_schema=schema))


def _sample(text: str, max_tokens: int = 100) -> types.CreateMessageRequest:
    message = types.SamplingMessage(role="user", content=types.TextContent(text=text))
    return types.CreateMessageRequest(
        params=types.CreateMessageRequestParams(messages=[message], max_tokens=max_tokens)
    )


def _roots() -> types.ListRootsRequest:
    return types.ListRootsRequest()


def _string_form(field_name: str) -> dict[str, Any]:
    return {"type": "object", "properties": {field_name: {"type": "string"}}, "required": [field_name]}


def _wire(model: types.Result) -> dict[str, Any]:
    return model.model_dump(by_alias=True, mode="json", exclude_none=True)


@dataclass
class _Gathered:
    answers: Answers
    state_verified: bool = False
    """True when a sealed requestState this tool minted came back (and passed the SDK's check)."""


def _load_state(raw: str | None, owner: str) -> dict[str, Any] | None:
    """The plaintext state minted earlier for `owner` (the SDK boundary already unsealed and verified it)."""
    if raw is None:
        return None
    try:
        state = json.loads(raw)
    except ValueError:
        state = None
    if not isinstance(state, dict) or state.get("owner") != owner:
        raise MCPError(code=types.INVALID_PARAMS, message="Invalid or expired requestState")
    return state


async def _gather(
    ctx: ServerRequestContext[Any, Any],
    owner: str,
    rounds: list[Round],
    params: types.InputResponseRequestParams,
    *,
    stateful: bool,
) -> _Gathered | types.InputRequiredResult:
    """Collect the client's answers to `rounds`, in the connection's era.

    Legacy: each request goes to the client on this request's stream, round by round.
    2026-07-28: answers come from `params.input_responses`; what is still missing is asked
    for with an `InputRequiredResult`. Stateless flows (one round) re-ask the whole round;
    stateful ones keep the round number and earlier answers in `requestState`, which the
    SDK's `RequestStateBoundary` seals on the way out and verifies on the way back.
    Responses of the wrong shape count as missing; unknown keys are ignored.
    """
    if not _is_modern(ctx):
        answers: Answers = {}
        metadata = ServerMessageMetadata(related_request_id=ctx.request_id)
        for rnd in rounds:
            _require_client_capabilities(ctx, [_CAPABILITY_FOR[r.method] for r in rnd.values()])
            for key, request in rnd.items():
                result = await ctx.session.send_request(request, _LEGACY_RESULT_TYPE[request.method], metadata=metadata)
                answers[key] = _wire(result)
        return _Gathered(answers)

    state = _load_state(params.request_state, owner) if stateful else None
    index = int(state["round"]) if state is not None else 0
    answers = dict(state["answers"]) if state is not None else {}
    responses = params.input_responses or {}
    while index < len(rounds):
        rnd = rounds[index]
        for key, request in rnd.items():
            response = responses.get(key)
            if key not in answers and isinstance(response, _ACCEPTED_RESPONSES[request.method]):
                answers[key] = _wire(response)
        missing = {k: r for k, r in rnd.items() if k not in answers}
        if missing:
            ask = missing if stateful else rnd
            _require_client_capabilities(ctx, [_CAPABILITY_FOR[r.method] for r in ask.values()])
            request_state = None
            if stateful:
                request_state = json.dumps({"owner": owner, "round": index, "answers": answers}, separators=(",", ":"))
            return types.InputRequiredResult(input_requests=dict(ask), request_state=request_state)
        index += 1
        responses = {}  # retry answers belong to the round that asked for them
    return _Gathered(answers, state_verified=state is not None)


def _elicited(answer: dict[str, Any], field_name: str) -> str | None:
    """The accepted value of `field_name`, or None when the user declined/cancelled."""
    if answer.get("action") != "accept":
        return None
    return str((answer.get("content") or {}).get(field_name, ""))


def _sampled(answer: dict[str, Any]) -> str:
    content = answer.get("content")
    blocks = content if isinstance(content, list) else [content]
    texts = [b.get("text", "") for b in blocks if isinstance(b, dict) and b.get("type") == "text"]
    return " ".join(texts) or "(no text content)"


def _root_list(answer: dict[str, Any]) -> str:
    return ", ".join(str(r.get("uri")) for r in answer.get("roots", []) if isinstance(r, dict)) or "(no roots)"


# --------------------------------------------------------------------------------------
# Tools
# --------------------------------------------------------------------------------------

ToolResult = types.CallToolResult | types.InputRequiredResult
ToolFn = Callable[[ServerRequestContext[Any, Any], types.CallToolRequestParams], Awaitable[ToolResult]]


def _args(params: types.CallToolRequestParams) -> dict[str, Any]:
    return params.arguments or {}


async def _simple_text(ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams) -> ToolResult:
    return _text("This is a simple text response for testing.")


async def _image(ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams) -> ToolResult:
    return types.CallToolResult(content=[types.ImageContent(data=PNG_B64, mime_type="image/png")])


async def _audio(ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams) -> ToolResult:
    return types.CallToolResult(content=[types.AudioContent(data=WAV_B64, mime_type="audio/wav")])


async def _embedded(ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams) -> ToolResult:
    resource = types.TextResourceContents(
        uri="test://embedded-resource", mime_type="text/plain", text="This is an embedded resource content."
    )
    return types.CallToolResult(content=[types.EmbeddedResource(resource=resource)])


async def _mixed(ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams) -> ToolResult:
    resource = types.TextResourceContents(
        uri="test://mixed-content-resource",
        mime_type="application/json",
        text=json.dumps({"test": "data", "value": 123}, separators=(",", ":")),
    )
    return types.CallToolResult(
        content=[
            types.TextContent(text="Multiple content types test:"),
            types.ImageContent(data=PNG_B64, mime_type="image/png"),
            types.EmbeddedResource(resource=resource),
        ]
    )


async def _with_logging(ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams) -> ToolResult:
    # The delays make the client see several notifications during one call.
    await _log(ctx, "info", "Tool execution started")
    await anyio.sleep(0.05)
    await _log(ctx, "info", "Tool processing data")
    await anyio.sleep(0.05)
    await _log(ctx, "info", "Tool execution completed")
    return _text("Tool with logging executed successfully")


async def _logging_tool(ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams) -> ToolResult:
    for level in ("debug", "info", "warning", "error"):
        await _log(ctx, level, f"{level} message from test_logging_tool")
    return _text("Logged at debug, info, warning and error")


async def _error(ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams) -> ToolResult:
    return _text("This tool intentionally returns an error for testing", is_error=True)


async def _with_progress(ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams) -> ToolResult:
    # report_progress is a no-op when the request carried no progressToken.
    for step, value in enumerate((0.0, 50.0, 100.0)):
        if step:
            await anyio.sleep(0.05)
        await ctx.session.report_progress(value, 100.0, f"Completed step {step + 1} of 3")
    return _text("Tool with progress executed successfully")


async def _sampling(ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams) -> ToolResult:
    prompt = str(_args(params).get("prompt", ""))
    got = await _gather(ctx, params.name, [{"llm_response": _sample(prompt)}], params, stateful=False)
    if isinstance(got, types.InputRequiredResult):
        return got
    return _text(f"LLM response: {_sampled(got.answers['llm_response'])}")


def _elicitation_text(prefix: str, answer: dict[str, Any]) -> types.CallToolResult:
    return _text(f"{prefix}: action={answer.get('action')}, content={json.dumps(answer.get('content'))}")


async def _elicitation(ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams) -> ToolResult:
    schema = {
        "type": "object",
        "properties": {
            "username": {"type": "string", "description": "User's response"},
            "email": {"type": "string", "description": "User's email address"},
        },
        "required": ["username", "email"],
    }
    message = str(_args(params).get("message", ""))
    got = await _gather(ctx, params.name, [{"user_info": _elicit(message, schema)}], params, stateful=False)
    if isinstance(got, types.InputRequiredResult):
        return got
    return _elicitation_text("User response", got.answers["user_info"])


async def _elicitation_defaults(ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams) -> ToolResult:
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "User name", "default": "John Doe"},
            "age": {"type": "integer", "description": "User age", "default": 30},
            "score": {"type": "number", "description": "User score", "default": 95.5},
            "status": {
                "type": "string",
                "description": "User status",
                "enum": ["active", "inactive", "pending"],
                "default": "active",
            },
            "verified": {"type": "boolean", "description": "Verification status", "default": True},
        },
        "required": [],
    }
    request = _elicit("Please review and update the form fields with defaults", schema)
    got = await _gather(ctx, params.name, [{"form": request}], params, stateful=False)
    if isinstance(got, types.InputRequiredResult):
        return got
    return _elicitation_text("Elicitation completed", got.answers["form"])


async def _elicitation_enums(ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams) -> ToolResult:
    schema = {
        "type": "object",
        "properties": {
            "untitledSingle": {
                "type": "string",
                "description": "Untitled single-select enum",
                "enum": ["option1", "option2", "option3"],
            },
            "titledSingle": {
                "type": "string",
                "description": "Titled single-select enum",
                "oneOf": [
                    {"const": "value1", "title": "First Option"},
                    {"const": "value2", "title": "Second Option"},
                    {"const": "value3", "title": "Third Option"},
                ],
            },
            "legacyEnum": {
                "type": "string",
                "description": "Legacy titled enum (enumNames, deprecated)",
                "enum": ["opt1", "opt2", "opt3"],
                "enumNames": ["Option One", "Option Two", "Option Three"],
            },
            "untitledMulti": {
                "type": "array",
                "description": "Untitled multi-select enum",
                "items": {"type": "string", "enum": ["option1", "option2", "option3"]},
            },
            "titledMulti": {
                "type": "array",
                "description": "Titled multi-select enum",
                "items": {
                    "anyOf": [
                        {"const": "value1", "title": "First Choice"},
                        {"const": "value2", "title": "Second Choice"},
                        {"const": "value3", "title": "Third Choice"},
                    ]
                },
            },
        },
        "required": [],
    }
    got = await _gather(
        ctx, params.name, [{"form": _elicit("Please choose from the enum fields", schema)}], params, stateful=False
    )
    if isinstance(got, types.InputRequiredResult):
        return got
    return _elicitation_text("Elicitation completed", got.answers["form"])


async def _reconnection(ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams) -> ToolResult:
    # Closing the POST stream before answering forces the client to resume via GET +
    # Last-Event-ID; the result is kept in the event store and replayed or streamed live.
    # The callback is only offered with an event store and protocol >= 2025-11-25.
    if ctx.close_sse_stream is not None:
        await ctx.close_sse_stream()
        await anyio.sleep(0.2)
    return _text("Reconnection test completed successfully")


async def _json_schema_tool(ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams) -> ToolResult:
    return _text(f"Received: {json.dumps(_args(params), sort_keys=True)}")


# --- SEP-2322 multi-round-trip tools (names and input keys fixed by the scenarios) ---------------


async def _ir_elicitation(ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams) -> ToolResult:
    rounds = [{"user_name": _elicit("What is your name?", _string_form("name"))}]
    got = await _gather(ctx, params.name, rounds, params, stateful=False)
    if isinstance(got, types.InputRequiredResult):
        return got
    name = _elicited(got.answers["user_name"], "name")
    return _text(f"Hello, {name}!" if name is not None else "No name given (elicitation declined).")


async def _ir_sampling(ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams) -> ToolResult:
    rounds = [{"capital_question": _sample("What is the capital of France?")}]
    got = await _gather(ctx, params.name, rounds, params, stateful=False)
    if isinstance(got, types.InputRequiredResult):
        return got
    return _text(f"LLM response: {_sampled(got.answers['capital_question'])}")


async def _ir_list_roots(ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams) -> ToolResult:
    got = await _gather(ctx, params.name, [{"client_roots": _roots()}], params, stateful=False)
    if isinstance(got, types.InputRequiredResult):
        return got
    return _text(f"Client roots: {_root_list(got.answers['client_roots'])}")


_CONFIRM_SCHEMA: dict[str, Any] = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}


async def _confirmed(
    ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams, message: str
) -> ToolResult:
    got = await _gather(ctx, params.name, [{"confirm": _elicit(message, _CONFIRM_SCHEMA)}], params, stateful=True)
    if isinstance(got, types.InputRequiredResult):
        return got
    answer = got.answers["confirm"]
    ok = answer.get("action") == "accept" and bool((answer.get("content") or {}).get("ok"))
    verdict = "state-ok" if got.state_verified or not _is_modern(ctx) else "state-missing"
    return _text(f"{verdict}: confirmed={str(ok).lower()}")


async def _ir_request_state(ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams) -> ToolResult:
    return await _confirmed(ctx, params, "Please confirm")


async def _ir_tampered_state(ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams) -> ToolResult:
    return await _confirmed(ctx, params, "Please confirm (the requestState of this call is integrity-protected)")


async def _ir_multiple_inputs(ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams) -> ToolResult:
    rounds: list[Round] = [
        {
            "user_name": _elicit("What is your name?", _string_form("name")),
            "greeting": _sample("Generate a greeting", max_tokens=50),
            "client_roots": _roots(),
        }
    ]
    got = await _gather(ctx, params.name, rounds, params, stateful=True)
    if isinstance(got, types.InputRequiredResult):
        return got
    name = _elicited(got.answers["user_name"], "name")
    greeting = _sampled(got.answers["greeting"])
    roots = _root_list(got.answers["client_roots"])
    return _text(f"name={name}, greeting={greeting}, roots={roots}")


async def _ir_multi_round(ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams) -> ToolResult:
    rounds: list[Round] = [
        {"step1": _elicit("Step 1: What is your name?", _string_form("name"))},
        {"step2": _elicit("Step 2: What is your favorite color?", _string_form("color"))},
    ]
    got = await _gather(ctx, params.name, rounds, params, stateful=True)
    if isinstance(got, types.InputRequiredResult):
        return got
    name = _elicited(got.answers["step1"], "name")
    color = _elicited(got.answers["step2"], "color")
    return _text(f"{name}'s favorite color is {color}")


async def _ir_capabilities(ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams) -> ToolResult:
    wanted: Round = {
        "user_name": _elicit("What is your name?", _string_form("name")),
        "capital_question": _sample("What is the capital of France?"),
        "client_roots": _roots(),
    }
    # Only ask for what this request's client declared it can answer.
    usable = {k: r for k, r in wanted.items() if _has_client_capability(ctx, _CAPABILITY_FOR[r.method])}
    if not usable:
        return _text("The client declared none of elicitation, sampling and roots; nothing to ask.")
    got = await _gather(ctx, params.name, [usable], params, stateful=False)
    if isinstance(got, types.InputRequiredResult):
        return got
    return _text(f"Answered: {', '.join(sorted(got.answers))}")


async def _missing_capability(ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams) -> ToolResult:
    _require_client_capabilities(ctx, ["sampling"])  # checked before anything else, in both eras
    got = await _gather(ctx, params.name, [{"probe": _sample("Reply with anything")}], params, stateful=False)
    if isinstance(got, types.InputRequiredResult):
        return got
    return _text(f"Sampling capability present: {_sampled(got.answers['probe'])}")


async def _streaming_elicitation(
    ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
) -> ToolResult:
    got = await _gather(
        ctx,
        params.name,
        [{"user_input": _elicit("Please provide some input", _string_form("value"))}],
        params,
        stateful=False,
    )
    if isinstance(got, types.InputRequiredResult):
        return got
    return _text(f"Received input: {_elicited(got.answers['user_input'], 'value')}")


# --- change triggers: subscriptions/listen at 2026-07-28, the standalone stream in the legacy era --


async def _trigger_tool_change(ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams) -> ToolResult:
    if _is_modern(ctx):
        await _BUS.publish(ToolsListChanged())
    else:
        await ctx.session.send_tool_list_changed()
    return _text("Sent notifications/tools/list_changed")


async def _trigger_prompt_change(
    ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
) -> ToolResult:
    if _is_modern(ctx):
        await _BUS.publish(PromptsListChanged())
    else:
        await ctx.session.send_prompt_list_changed()
    return _text("Sent notifications/prompts/list_changed")


async def _trigger_resource_update(
    ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
) -> ToolResult:
    if _is_modern(ctx):
        await _BUS.publish(ResourceUpdated(uri=WATCHED_URI))
    elif WATCHED_URI in (_state(ctx).subscriptions or set()):
        await ctx.session.send_resource_updated(WATCHED_URI)
    return _text(f"Sent notifications/resources/updated for {WATCHED_URI}")


_TOOL_FNS: dict[str, ToolFn] = {
    "test_simple_text": _simple_text,
    "test_image_content": _image,
    "test_audio_content": _audio,
    "test_embedded_resource": _embedded,
    "test_multiple_content_types": _mixed,
    "test_tool_with_logging": _with_logging,
    "test_error_handling": _error,
    "test_tool_with_progress": _with_progress,
    "test_sampling": _sampling,
    "test_elicitation": _elicitation,
    "test_elicitation_sep1034_defaults": _elicitation_defaults,
    "test_elicitation_sep1330_enums": _elicitation_enums,
    "test_reconnection": _reconnection,
    "json_schema_2020_12_tool": _json_schema_tool,
    "test_input_required_result_elicitation": _ir_elicitation,
    "test_input_required_result_sampling": _ir_sampling,
    "test_input_required_result_list_roots": _ir_list_roots,
    "test_input_required_result_request_state": _ir_request_state,
    "test_input_required_result_multiple_inputs": _ir_multiple_inputs,
    "test_input_required_result_multi_round": _ir_multi_round,
    "test_input_required_result_tampered_state": _ir_tampered_state,
    "test_input_required_result_capabilities": _ir_capabilities,
    "test_missing_capability": _missing_capability,
    "test_streaming_elicitation": _streaming_elicitation,
    "test_logging_tool": _logging_tool,
    "test_trigger_tool_change": _trigger_tool_change,
    "test_trigger_prompt_change": _trigger_prompt_change,
    "test_trigger_resource_update": _trigger_resource_update,
}
assert set(_TOOL_FNS) == _TOOL_NAMES


# --------------------------------------------------------------------------------------
# Request handlers
# --------------------------------------------------------------------------------------


async def on_list_tools(
    ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
) -> types.ListToolsResult:
    return types.ListToolsResult(tools=TOOLS)


async def on_call_tool(ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams) -> ToolResult:
    fn = _TOOL_FNS.get(params.name)
    if fn is None:
        raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown tool: {params.name}")
    return await fn(ctx, params)


async def on_list_resources(
    ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
) -> types.ListResourcesResult:
    return types.ListResourcesResult(resources=RESOURCES)


async def on_list_resource_templates(
    ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
) -> types.ListResourceTemplatesResult:
    return types.ListResourceTemplatesResult(resource_templates=RESOURCE_TEMPLATES)


def _read(uri: str) -> types.TextResourceContents | types.BlobResourceContents:
    if uri == STATIC_TEXT_URI:
        return types.TextResourceContents(
            uri=uri, mime_type="text/plain", text="This is the content of the static text resource."
        )
    if uri == STATIC_BINARY_URI:
        return types.BlobResourceContents(uri=uri, mime_type="image/png", blob=PNG_B64)
    if uri == WATCHED_URI:
        return types.TextResourceContents(uri=uri, mime_type="text/plain", text="Watched resource content")
    if uri.startswith(_TEMPLATE_PREFIX) and uri.endswith(_TEMPLATE_SUFFIX):
        ident = uri[len(_TEMPLATE_PREFIX) : -len(_TEMPLATE_SUFFIX)]
        if ident and "/" not in ident:
            payload = {"id": ident, "templateTest": True, "data": f"Data for ID: {ident}"}
            return types.TextResourceContents(
                uri=uri, mime_type="application/json", text=json.dumps(payload, separators=(",", ":"))
            )
    # SEP-2164: unknown resource -> -32602 with the uri in data (never an empty contents array).
    raise MCPError(code=types.INVALID_PARAMS, message="Resource not found", data={"uri": uri})


async def on_read_resource(
    ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
) -> types.ReadResourceResult:
    return types.ReadResourceResult(contents=[_read(str(params.uri))])


async def on_subscribe_resource(
    ctx: ServerRequestContext[Any, Any], params: types.SubscribeRequestParams
) -> types.EmptyResult:
    uri = str(params.uri)
    state = _state(ctx)
    state.subscriptions = (state.subscriptions or set()) | {uri}
    if uri == WATCHED_URI:
        # Emit one update right away so a subscriber (or a proxy) can observe the notification
        # deterministically; it rides the subscribe request's stream, ahead of its response.
        await ctx.session.send_notification(
            types.ResourceUpdatedNotification(params=types.ResourceUpdatedNotificationParams(uri=uri)),
            related_request_id=ctx.request_id,
        )
    return types.EmptyResult()


async def on_unsubscribe_resource(
    ctx: ServerRequestContext[Any, Any], params: types.UnsubscribeRequestParams
) -> types.EmptyResult:
    state = _state(ctx)
    if state.subscriptions:
        state.subscriptions.discard(str(params.uri))
    return types.EmptyResult()


async def on_list_prompts(
    ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
) -> types.ListPromptsResult:
    return types.ListPromptsResult(prompts=PROMPTS)


def _user(content: types.ContentBlock) -> types.PromptMessage:
    return types.PromptMessage(role="user", content=content)


async def on_get_prompt(
    ctx: ServerRequestContext[Any, Any], params: types.GetPromptRequestParams
) -> types.GetPromptResult | types.InputRequiredResult:
    args = params.arguments or {}
    name = params.name
    if name not in _PROMPT_NAMES:
        raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown prompt: {name}")
    for arg in next(p for p in PROMPTS if p.name == name).arguments or []:
        if arg.required and arg.name not in args:
            raise MCPError(code=types.INVALID_PARAMS, message=f"Missing required argument: {arg.name}")

    if name == "test_simple_prompt":
        messages = [_user(types.TextContent(text="This is a simple prompt for testing."))]
    elif name == "test_prompt_with_arguments":
        text = f"Prompt with arguments: arg1='{args['arg1']}', arg2='{args['arg2']}'"
        messages = [_user(types.TextContent(text=text))]
    elif name == "test_input_required_result_prompt":
        rounds = [{"user_context": _elicit("What context should the prompt use?", _string_form("context"))}]
        got = await _gather(ctx, name, rounds, params, stateful=False)
        if isinstance(got, types.InputRequiredResult):
            return got
        context = _elicited(got.answers["user_context"], "context")
        text = f"Answer using this context: {context}" if context is not None else "Answer without extra context."
        messages = [_user(types.TextContent(text=text))]
    elif name == "test_prompt_with_embedded_resource":
        resource = types.TextResourceContents(
            uri=args["resourceUri"], mime_type="text/plain", text="Embedded resource content for testing."
        )
        messages = [
            _user(types.EmbeddedResource(resource=resource)),
            _user(types.TextContent(text="Please process the embedded resource above.")),
        ]
    else:  # test_prompt_with_image
        messages = [
            _user(types.ImageContent(data=PNG_B64, mime_type="image/png")),
            _user(types.TextContent(text="Please analyze the image above.")),
        ]
    return types.GetPromptResult(description=next(p.description for p in PROMPTS if p.name == name), messages=messages)


async def on_completion(
    ctx: ServerRequestContext[Any, Any], params: types.CompleteRequestParams
) -> types.CompleteResult:
    ref = params.ref
    key = ref.name if isinstance(ref, types.PromptReference) else ref.uri
    candidates = _COMPLETIONS.get((key, params.argument.name), [])
    prefix = params.argument.value.lower()
    values = [c for c in candidates if c.lower().startswith(prefix)]
    return types.CompleteResult(
        completion=types.Completion(values=values[:100], total=len(values), has_more=len(values) > 100)
    )


async def on_set_logging_level(
    ctx: ServerRequestContext[Any, Any], params: types.SetLevelRequestParams
) -> types.EmptyResult:
    _state(ctx).log_level = params.level
    return types.EmptyResult()


async def _legacy_era_only(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    """Server middleware of `--era legacy`: the 2026-07-28-only methods do not exist."""
    if ctx.request_id is not None and ctx.method in ("server/discover", "subscriptions/listen"):
        raise MCPError(code=types.METHOD_NOT_FOUND, message="Method not found", data=ctx.method)
    return await call_next(ctx)


async def _modern_era_only(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    """Server middleware of `--era modern`: there is no handshake to perform."""
    if ctx.request_id is not None and ctx.method == "initialize":
        raise MCPError(code=types.METHOD_NOT_FOUND, message="Method not found", data=ctx.method)
    return await call_next(ctx)


def build_server(era: Era = "dual") -> Server[Any]:
    """The fixture as an SDK lowlevel server (transport-agnostic).

    `era` only trims what the server answers at the JSON-RPC level (see `_legacy_era_only`,
    `_modern_era_only`); the transports below do the rest.
    """
    if era not in ERAS:
        raise ValueError(f"era must be one of {ERAS}, got {era!r}")
    server = Server(
        SERVER_NAME,
        version=SERVER_VERSION,
        instructions="Fixture backend for the MCP conformance suite.",
        on_list_tools=on_list_tools,
        on_call_tool=on_call_tool,
        on_list_resources=on_list_resources,
        on_list_resource_templates=on_list_resource_templates,
        on_read_resource=on_read_resource,
        on_subscribe_resource=on_subscribe_resource,
        on_unsubscribe_resource=on_unsubscribe_resource,
        # 2026-07-28 change notifications; serving it makes server/discover advertise
        # tools/prompts/resources listChanged and resources.subscribe (the SDK derives them).
        on_subscriptions_listen=ListenHandler(_BUS) if era != "legacy" else None,
        on_list_prompts=on_list_prompts,
        on_get_prompt=on_get_prompt,
        on_completion=on_completion,
        on_set_logging_level=on_set_logging_level,
    )
    if era == "legacy":
        server.middleware.append(_legacy_era_only)
    elif era == "modern":
        server.middleware.append(_modern_era_only)
    # Seals every outgoing `requestState` and verifies (then unseals) every echoed one, so a
    # tampered or foreign state never reaches a handler (-32602 "Invalid or expired requestState").
    server.middleware.append(RequestStateBoundary(RequestStateSecurity.ephemeral(), default_audience=SERVER_NAME))
    return server


# --------------------------------------------------------------------------------------
# Resumability: an in-memory event store that never mixes sessions.
#
# The SDK keys POST streams by JSON-RPC request id, so two sessions that both use id 1
# share a stream id. Events are therefore tagged with an owner token identifying the HTTP
# session; `_SessionTagMiddleware` puts that token in a contextvar for every request of a
# session, and the transport's message router task (spawned while serving the session's
# opening request) inherits it.
# --------------------------------------------------------------------------------------

_OWNER: contextvars.ContextVar[object | None] = contextvars.ContextVar("fixture_session_owner", default=None)


@dataclass
class _StoredEvent:
    owner: object | None
    stream_id: str
    message: types.JSONRPCMessage | None


class InMemoryEventStore(EventStore):
    def __init__(self, max_events: int = 10_000) -> None:
        self._events: OrderedDict[str, _StoredEvent] = OrderedDict()
        self._ids = itertools.count(1)
        self._max_events = max_events

    async def store_event(self, stream_id: str, message: types.JSONRPCMessage | None) -> str:
        event_id = str(next(self._ids))
        self._events[event_id] = _StoredEvent(_OWNER.get(), stream_id, message)
        while len(self._events) > self._max_events:
            self._events.popitem(last=False)
        return event_id

    async def replay_events_after(self, last_event_id: str, send_callback: EventCallback) -> str | None:
        anchor = self._events.get(last_event_id)
        if anchor is None:
            return None
        # Snapshot: send_callback awaits, and new events may be stored meanwhile.
        snapshot = list(self._events.items())
        after = False
        for event_id, event in snapshot:
            if after and event.owner is anchor.owner and event.stream_id == anchor.stream_id:
                if event.message is not None:  # priming events carry no message
                    await send_callback(EventMessage(event.message, event_id))
            elif event_id == last_event_id:
                after = True
        return anchor.stream_id


class _SessionTagMiddleware:
    """Sets `_OWNER` to one token per MCP HTTP session (see InMemoryEventStore)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._owners: dict[str, object] = {}

    def knows(self, session_id: str) -> bool:
        """Whether `session_id` names a session opened through this app and not yet deleted."""
        return session_id in self._owners

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        session_id = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"mcp-session-id"), None)
        owner = self._owners.get(session_id) if session_id else None
        if owner is None:
            owner = object()
        send_fn = send
        if session_id is None:

            async def send_fn(message: Message) -> None:
                # Remember which session this opening request created.
                if message["type"] == "http.response.start":
                    for k, v in message.get("headers", []):
                        if k.lower() == b"mcp-session-id":
                            self._owners[v.decode("latin-1")] = owner
                await send(message)

        elif scope.get("method") == "DELETE":
            self._owners.pop(session_id, None)
            _STATE.pop(session_id, None)
        token = _OWNER.set(owner)
        try:
            await self.app(scope, receive, send_fn)
        finally:
            _OWNER.reset(token)


# --------------------------------------------------------------------------------------
# Entry points
# --------------------------------------------------------------------------------------

_LOCAL_HOSTS = ("127.0.0.1", "localhost", "[::1]")


def _header(scope: Scope, name: bytes) -> str | None:
    return next((v.decode("latin-1") for k, v in scope["headers"] if k == name), None)


_VERSION_HEADER = MCP_PROTOCOL_VERSION_HEADER.lower().encode("ascii")
_SESSION_HEADER = b"mcp-session-id"


def _jsonrpc_error(
    status: int, request_id: Any, code: int, message: str, data: Any = None, headers: Mapping[str, str] | None = None
) -> Response:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    body = {"jsonrpc": "2.0", "id": request_id, "error": error}
    return Response(
        json.dumps(body, separators=(",", ":")), status_code=status, media_type="application/json", headers=headers
    )


async def _read_body(receive: Receive) -> tuple[bytes, Receive]:
    """Buffer the request body; returns it with a `receive` that replays it to the app."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    body = b"".join(chunks)
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return body, replay


class _LegacyEraGate:
    """`--era legacy` over HTTP: answer 2026-07-28 requests like a legacy-only server.

    The SDK routes on the `MCP-Protocol-Version` header alone, so the header is what must not
    reach it. A real legacy-only server (SDK 1.x) checks the session first and the version
    header after: without a session id the header is irrelevant (stripped here, so the legacy
    transport answers: 400 -32600 "Missing session ID" for anything but `initialize`); on a live
    session an unknown version is 400 -32600 "Unsupported protocol version" (1.x's wording).
    """

    def __init__(self, app: ASGIApp, is_live_session: Callable[[str], bool], security: TransportSecuritySettings):
        self.app = app
        self._is_live_session = is_live_session
        self._security = security

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        version = _header(scope, _VERSION_HEADER) if scope["type"] == "http" else None
        if version is None or version in HANDSHAKE_PROTOCOL_VERSIONS:
            await self.app(scope, receive, send)
            return
        session_id = _header(scope, _SESSION_HEADER)
        if session_id is not None and self._is_live_session(session_id):
            request = Request(scope, receive)
            rejected = await TransportSecurityMiddleware(self._security).validate_request(
                request, is_post=scope["method"] == "POST"
            )
            if rejected is None:
                supported = ", ".join(HANDSHAKE_PROTOCOL_VERSIONS)
                rejected = _jsonrpc_error(
                    400,
                    None,
                    types.INVALID_REQUEST,
                    f"Bad Request: Unsupported protocol version: {version}. Supported protocol versions: {supported}",
                    headers={"mcp-session-id": session_id},
                )
            await rejected(scope, receive, send)
            return
        scope = {**scope, "headers": [(k, v) for k, v in scope["headers"] if k != _VERSION_HEADER]}
        await self.app(scope, receive, send)


class _ModernEraGate:
    """`--era modern` over HTTP: everything goes to the SDK's stateless 2026-07-28 path.

    `initialize` is a method this server does not have (404, -32601), whatever its headers.
    A handshake-era `MCP-Protocol-Version` is an unsupported version (400, -32022). A missing
    header is passed on as an empty one, which the stateless path treats exactly like a
    missing one (400 -32020 HeaderMismatch, or -32602 when `_meta` is missing too), instead of
    letting the SDK open a legacy session.
    """

    def __init__(self, app: ASGIApp, security: TransportSecuritySettings):
        self.app = app
        self._security = security

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        version = _header(scope, _VERSION_HEADER) if scope["type"] == "http" else None
        if scope["type"] != "http" or (version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS):
            await self.app(scope, receive, send)
            return
        is_post = scope["method"] == "POST"
        decoded: Any = None
        if is_post:
            body, receive = await _read_body(receive)
            try:
                decoded = json.loads(body)
            except (ValueError, RecursionError):
                decoded = None
        is_initialize = isinstance(decoded, dict) and decoded.get("method") == "initialize"
        if is_initialize or (is_post and version is not None):
            rejected = await TransportSecurityMiddleware(self._security).validate_request(
                Request(scope, receive), is_post=True
            )
            if rejected is None:
                request_id = decoded.get("id") if isinstance(decoded, dict) else None
                if is_initialize:
                    rejected = _jsonrpc_error(404, request_id, types.METHOD_NOT_FOUND, "Method not found", "initialize")
                else:
                    rejection = unsupported_protocol_version_rejection(version or "")
                    assert rejection is not None  # a handshake-era version is never a modern one
                    status = ERROR_CODE_HTTP_STATUS.get(rejection.code, 400)
                    rejected = _jsonrpc_error(status, request_id, rejection.code, rejection.message, rejection.data)
            await rejected(scope, receive, send)
            return
        headers = [(k, v) for k, v in scope["headers"] if k != _VERSION_HEADER]
        await self.app({**scope, "headers": [*headers, (_VERSION_HEADER, b"")]}, receive, send)


def build_http_app(host: str = "127.0.0.1", retry_interval_ms: int = 500, era: Era = "dual") -> ASGIApp:
    """The Streamable HTTP ASGI app serving the fixture at /mcp (with DNS-rebinding protection)."""
    hosts = list(_LOCAL_HOSTS)
    bound = f"[{host}]" if ":" in host and not host.startswith("[") else host
    if bound not in hosts and bound not in ("0.0.0.0", "[::]"):
        hosts.append(bound)
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[f"{h}:*" for h in hosts],
        allowed_origins=[f"http://{h}:*" for h in hosts],
    )
    app = build_server(era).streamable_http_app(
        streamable_http_path="/mcp",
        event_store=InMemoryEventStore(),
        retry_interval=retry_interval_ms,
        transport_security=security,
        host=host,
    )
    tagged = _SessionTagMiddleware(app)
    if era == "legacy":
        return _LegacyEraGate(tagged, tagged.knows, security)
    if era == "modern":
        return _ModernEraGate(tagged, security)
    return tagged


def serve_http(host: str, port: int, log_level: str = "warning", era: Era = "dual") -> None:
    import uvicorn

    config = uvicorn.Config(build_http_app(host, era=era), host=host, port=port, log_level=log_level, lifespan="on")
    uvicorn.Server(config).run()


async def _serve_modern_stdio(server: Server[Any], read_stream: Any, write_stream: Any, lifespan_state: Any) -> None:
    """A 2026-07-28-only stdio loop: every request carries its own `_meta` envelope.

    The SDK's `Server.run` lets the first request pick the era; this loop has no legacy arm:
    `initialize` is -32601, a request without a valid envelope gets the SDK's classification
    error (-32602 / -32022), everything else is served per request without a session.
    """
    dispatcher: JSONRPCDispatcher[TransportContext] = JSONRPCDispatcher(read_stream, write_stream)
    handle = modern_on_request(server, lifespan_state)

    async def on_request(
        dctx: DispatchContext[TransportContext], method: str, params: Mapping[str, Any] | None
    ) -> dict[str, Any]:
        if method == "initialize":
            raise MCPError(code=types.METHOD_NOT_FOUND, message="Method not found", data=method)
        route = classify_inbound_request({"method": method, "params": params})
        if isinstance(route, InboundLadderRejection):
            raise MCPError(code=route.code, message=route.message, data=route.data)
        return await handle(dctx, method, params)

    async def on_notify(dctx: DispatchContext[TransportContext], method: str, params: Mapping[str, Any] | None) -> None:
        # No client-to-server notification means anything here; the dispatcher itself
        # applies notifications/cancelled.
        return None

    await dispatcher.run(on_request, on_notify)


async def serve_stdio(era: Era = "dual") -> None:
    from mcp.server.stdio import stdio_server

    server = build_server(era)
    async with stdio_server() as (read_stream, write_stream):
        if era == "dual":
            await server.run(read_stream, write_stream, server.create_initialization_options())
            return
        async with server.lifespan(server) as lifespan_state:
            if era == "legacy":
                await serve_loop(
                    server,
                    read_stream,
                    write_stream,
                    lifespan_state=lifespan_state,
                    init_options=server.create_initialization_options(),
                )
            else:
                await _serve_modern_stdio(server, read_stream, write_stream, lifespan_state)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--port", type=int, help="serve Streamable HTTP at http://HOST:PORT/mcp")
    mode.add_argument("--stdio", action="store_true", help="serve over stdin/stdout instead")
    parser.add_argument("--host", default="127.0.0.1", help="bind address for --port (default 127.0.0.1)")
    parser.add_argument(
        "--era",
        choices=ERAS,
        default="dual",
        help="protocol eras served: dual (default), legacy (initialize handshake only) or modern (2026-07-28 only)",
    )
    parser.add_argument("--log-level", default="warning", help="uvicorn/server log level (default warning)")
    args = parser.parse_args(argv)

    # stdout belongs to the protocol in --stdio mode, so diagnostics go to stderr.
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr)
    if args.stdio:
        anyio.run(serve_stdio, args.era)
    else:
        serve_http(args.host, args.port, args.log_level, args.era)
    return 0


if __name__ == "__main__":
    sys.exit(main())
