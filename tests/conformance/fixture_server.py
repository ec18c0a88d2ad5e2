"""MCP conformance fixture backend, built on the official MCP Python SDK (lowlevel `Server`).

Provides every tool, resource, resource template, prompt and completion that the server
scenarios of `@modelcontextprotocol/conformance` (requirement set 2025-11-25) exercise, with
the exact names and payloads those scenarios check.

    python -m tests.conformance.fixture_server --port PORT [--host 127.0.0.1]   # Streamable HTTP at /mcp
    python -m tests.conformance.fixture_server --stdio                          # same server over stdio

The HTTP endpoint is the SDK's dual-era Streamable HTTP app: the initialize-handshake era
(protocol versions up to 2025-11-25, stateful sessions with `Mcp-Session-Id`) and, on the same
path, the 2026-07-28 per-request-envelope era (routed by the `MCP-Protocol-Version` header).

Behaviour worth knowing when testing a proxy in front of this fixture:
- Server-to-client traffic caused by a request (log messages, progress, sampling and
  elicitation requests, the resources/updated notification sent on subscribe) rides that
  request's POST SSE stream (`related_request_id`), never the standalone GET stream.
- An event store is configured, so every POST SSE stream starts with a priming event
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
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, get_args

import anyio
import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.server.streamable_http import EventCallback, EventMessage, EventStore
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

# Logging, sampling and roots are deprecated at 2026-07-28 but are exactly what the
# 2025-11-25 scenarios exercise; the SDK warns on every call, which is only noise here.
warnings.filterwarnings("ignore", category=MCPDeprecationWarning)

logger = logging.getLogger("conformance-fixture")

SERVER_NAME = "switchboard-conformance-fixture"
SERVER_VERSION = "1.0.0"
LOGGER_NAME = "conformance-fixture"


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
# by the HTTP session id (stdio serves exactly one connection: key None).
# --------------------------------------------------------------------------------------


@dataclass
class _ConnState:
    log_level: str = "debug"  # the spec lets the server choose; send everything until told otherwise
    subscriptions: set[str] | None = None


_STATE: dict[str | None, _ConnState] = {}


def _conn_key(ctx: ServerRequestContext[Any, Any]) -> str | None:
    headers = getattr(ctx.request, "headers", None)
    return headers.get("mcp-session-id") if headers is not None else None


def _state(ctx: ServerRequestContext[Any, Any]) -> _ConnState:
    return _STATE.setdefault(_conn_key(ctx), _ConnState())


async def _log(ctx: ServerRequestContext[Any, Any], level: types.LoggingLevel, message: str) -> None:
    """Send a log notification on this request's stream, honouring logging/setLevel."""
    threshold = _state(ctx).log_level
    if _LOG_LEVELS.index(level) < _LOG_LEVELS.index(threshold):
        return
    await ctx.session.send_log_message(level=level, data=message, logger=LOGGER_NAME, related_request_id=ctx.request_id)


def _text(text: str, *, is_error: bool = False) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=is_error)


def _require_client_capability(ctx: ServerRequestContext[Any, Any], capability: str) -> None:
    caps = ctx.session.client_capabilities
    if caps is None or getattr(caps, capability, None) is None:
        raise MCPError(
            code=types.INVALID_REQUEST,
            message=f"Client does not support {capability}",
            data={"requiredCapabilities": {capability: {}}},
        )


# --------------------------------------------------------------------------------------
# Tools
# --------------------------------------------------------------------------------------

ToolFn = Callable[[ServerRequestContext[Any, Any], dict[str, Any]], Awaitable[types.CallToolResult]]


async def _simple_text(ctx: ServerRequestContext[Any, Any], args: dict[str, Any]) -> types.CallToolResult:
    return _text("This is a simple text response for testing.")


async def _image(ctx: ServerRequestContext[Any, Any], args: dict[str, Any]) -> types.CallToolResult:
    return types.CallToolResult(content=[types.ImageContent(data=PNG_B64, mime_type="image/png")])


async def _audio(ctx: ServerRequestContext[Any, Any], args: dict[str, Any]) -> types.CallToolResult:
    return types.CallToolResult(content=[types.AudioContent(data=WAV_B64, mime_type="audio/wav")])


async def _embedded(ctx: ServerRequestContext[Any, Any], args: dict[str, Any]) -> types.CallToolResult:
    resource = types.TextResourceContents(
        uri="test://embedded-resource", mime_type="text/plain", text="This is an embedded resource content."
    )
    return types.CallToolResult(content=[types.EmbeddedResource(resource=resource)])


async def _mixed(ctx: ServerRequestContext[Any, Any], args: dict[str, Any]) -> types.CallToolResult:
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


async def _with_logging(ctx: ServerRequestContext[Any, Any], args: dict[str, Any]) -> types.CallToolResult:
    # The delays make the client see several notifications during one call.
    await _log(ctx, "info", "Tool execution started")
    await anyio.sleep(0.05)
    await _log(ctx, "info", "Tool processing data")
    await anyio.sleep(0.05)
    await _log(ctx, "info", "Tool execution completed")
    return _text("Tool with logging executed successfully")


async def _error(ctx: ServerRequestContext[Any, Any], args: dict[str, Any]) -> types.CallToolResult:
    return _text("This tool intentionally returns an error for testing", is_error=True)


async def _with_progress(ctx: ServerRequestContext[Any, Any], args: dict[str, Any]) -> types.CallToolResult:
    # report_progress is a no-op when the request carried no progressToken.
    for step, value in enumerate((0.0, 50.0, 100.0)):
        if step:
            await anyio.sleep(0.05)
        await ctx.session.report_progress(value, 100.0, f"Completed step {step + 1} of 3")
    return _text("Tool with progress executed successfully")


async def _sampling(ctx: ServerRequestContext[Any, Any], args: dict[str, Any]) -> types.CallToolResult:
    _require_client_capability(ctx, "sampling")
    prompt = str(args.get("prompt", ""))
    result = await ctx.session.create_message(
        messages=[types.SamplingMessage(role="user", content=types.TextContent(text=prompt))],
        max_tokens=100,
        related_request_id=ctx.request_id,
    )
    blocks = result.content if isinstance(result.content, list) else [result.content]
    reply = " ".join(b.text for b in blocks if isinstance(b, types.TextContent)) or "(no text content)"
    return _text(f"LLM response: {reply}")


async def _elicit(ctx: ServerRequestContext[Any, Any], message: str, schema: dict[str, Any]) -> types.ElicitResult:
    _require_client_capability(ctx, "elicitation")
    return await ctx.session.elicit_form(message, schema, related_request_id=ctx.request_id)


async def _elicitation(ctx: ServerRequestContext[Any, Any], args: dict[str, Any]) -> types.CallToolResult:
    schema = {
        "type": "object",
        "properties": {
            "username": {"type": "string", "description": "User's response"},
            "email": {"type": "string", "description": "User's email address"},
        },
        "required": ["username", "email"],
    }
    result = await _elicit(ctx, str(args.get("message", "")), schema)
    return _text(f"User response: action={result.action}, content={json.dumps(result.content)}")


async def _elicitation_defaults(ctx: ServerRequestContext[Any, Any], args: dict[str, Any]) -> types.CallToolResult:
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
    result = await _elicit(ctx, "Please review and update the form fields with defaults", schema)
    return _text(f"Elicitation completed: action={result.action}, content={json.dumps(result.content)}")


async def _elicitation_enums(ctx: ServerRequestContext[Any, Any], args: dict[str, Any]) -> types.CallToolResult:
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
    result = await _elicit(ctx, "Please choose from the enum fields", schema)
    return _text(f"Elicitation completed: action={result.action}, content={json.dumps(result.content)}")


async def _reconnection(ctx: ServerRequestContext[Any, Any], args: dict[str, Any]) -> types.CallToolResult:
    # Closing the POST stream before answering forces the client to resume via GET +
    # Last-Event-ID; the result is kept in the event store and replayed or streamed live.
    # The callback is only offered with an event store and protocol >= 2025-11-25.
    if ctx.close_sse_stream is not None:
        await ctx.close_sse_stream()
        await anyio.sleep(0.2)
    return _text("Reconnection test completed successfully")


async def _json_schema_tool(ctx: ServerRequestContext[Any, Any], args: dict[str, Any]) -> types.CallToolResult:
    return _text(f"Received: {json.dumps(args, sort_keys=True)}")


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
}
assert set(_TOOL_FNS) == _TOOL_NAMES


# --------------------------------------------------------------------------------------
# Request handlers
# --------------------------------------------------------------------------------------


async def on_list_tools(
    ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
) -> types.ListToolsResult:
    return types.ListToolsResult(tools=TOOLS)


async def on_call_tool(
    ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
) -> types.CallToolResult:
    fn = _TOOL_FNS.get(params.name)
    if fn is None:
        raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown tool: {params.name}")
    return await fn(ctx, params.arguments or {})


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
) -> types.GetPromptResult:
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


def build_server() -> Server[Any]:
    """The fixture as an SDK lowlevel server (transport-agnostic)."""
    return Server(
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
        on_list_prompts=on_list_prompts,
        on_get_prompt=on_get_prompt,
        on_completion=on_completion,
        on_set_logging_level=on_set_logging_level,
    )


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


def build_http_app(host: str = "127.0.0.1", retry_interval_ms: int = 500) -> ASGIApp:
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
    app = build_server().streamable_http_app(
        streamable_http_path="/mcp",
        event_store=InMemoryEventStore(),
        retry_interval=retry_interval_ms,
        transport_security=security,
        host=host,
    )
    return _SessionTagMiddleware(app)


def serve_http(host: str, port: int, log_level: str = "warning") -> None:
    import uvicorn

    config = uvicorn.Config(build_http_app(host), host=host, port=port, log_level=log_level, lifespan="on")
    uvicorn.Server(config).run()


async def serve_stdio() -> None:
    from mcp.server.stdio import stdio_server

    server = build_server()
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--port", type=int, help="serve Streamable HTTP at http://HOST:PORT/mcp")
    mode.add_argument("--stdio", action="store_true", help="serve over stdin/stdout instead")
    parser.add_argument("--host", default="127.0.0.1", help="bind address for --port (default 127.0.0.1)")
    parser.add_argument("--log-level", default="warning", help="uvicorn/server log level (default warning)")
    args = parser.parse_args(argv)

    # stdout belongs to the protocol in --stdio mode, so diagnostics go to stderr.
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr)
    if args.stdio:
        anyio.run(serve_stdio)
    else:
        serve_http(args.host, args.port, args.log_level)
    return 0


if __name__ == "__main__":
    sys.exit(main())
