"""The OpenTelemetry semantic conventions for MCP, as plain functions (no OpenTelemetry import).

What a span or a duration metric says about one MCP operation: span name ``{mcp.method.name}
{target}`` (the target is the tool or prompt name, never a resource URI: span names stay low in
cardinality), ``mcp.method.name``, ``jsonrpc.request.id``, ``gen_ai.tool.name``, ``error.type``
(the JSON-RPC error code as a string, ``tool_error`` for a ``tools/call`` whose result says
``isError``), ``network.transport`` (``pipe`` for stdio, else ``tcp``). The Prometheus histograms use
the same ``error.type`` values, so a dashboard built on either agrees with the other.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from gateway import jsonrpc

# Attribute keys (semconv: gen-ai/mcp.md, rpc/json-rpc.md, general attributes).
METHOD = "mcp.method.name"
SESSION_ID = "mcp.session.id"
PROTOCOL_VERSION = "mcp.protocol.version"
RESOURCE_URI = "mcp.resource.uri"
REQUEST_ID = "jsonrpc.request.id"
JSONRPC_VERSION = "jsonrpc.protocol.version"
TOOL_NAME = "gen_ai.tool.name"
PROMPT_NAME = "gen_ai.prompt.name"
OPERATION_NAME = "gen_ai.operation.name"
ERROR_TYPE = "error.type"
STATUS_CODE = "rpc.response.status_code"
NETWORK_TRANSPORT = "network.transport"
NETWORK_PROTOCOL = "network.protocol.name"
SERVER_ADDRESS = "server.address"
SERVER_PORT = "server.port"
# The gateway's own facts (no convention names them).
BACKEND = "switchboard.backend"
OUTCOME = "switchboard.outcome"
PRINCIPAL = "switchboard.principal"
TRANSPORT = "switchboard.transport"

TOOL_ERROR = "tool_error"
_MODERN_VERSION_KEY = "io.modelcontextprotocol/protocolVersion"
# Client doors (gateway/transports/) by the name a session records, and what carries them.
_NETWORK = {
    "stdio": ("pipe", None),
    "ws": ("tcp", "websocket"),
}


def target_of(method: str | None, params: Mapping[str, Any] | None) -> str | None:
    """The low-cardinality target of a span name: the tool or prompt a request names."""
    if params is not None and method in ("tools/call", "prompts/get"):
        name = params.get("name")
        if isinstance(name, str):
            return name
    return None


def span_name(method: str | None, params: Mapping[str, Any] | None) -> str:
    target = target_of(method, params)
    method = method or "unknown"
    return f"{method} {target}" if target else method


def request_attributes(method: str | None, params: Mapping[str, Any] | None, rpc_id: Any) -> dict[str, Any]:
    """The attributes of a request or notification that its own message says."""
    attributes: dict[str, Any] = {METHOD: method or "unknown", JSONRPC_VERSION: "2.0"}
    if rpc_id is not None:
        attributes[REQUEST_ID] = str(rpc_id)
    if params is None:
        return attributes
    target = target_of(method, params)
    if method == "tools/call":
        attributes[OPERATION_NAME] = "execute_tool"
        if target is not None:
            attributes[TOOL_NAME] = target
    elif method == "prompts/get" and target is not None:
        attributes[PROMPT_NAME] = target
    uri = params.get("uri")
    if isinstance(uri, str) and method is not None and method.startswith("resources/"):
        attributes[RESOURCE_URI] = uri
    meta = params.get("_meta")
    if isinstance(meta, dict):
        version = meta.get(_MODERN_VERSION_KEY)
        if isinstance(version, str):
            attributes[PROTOCOL_VERSION] = version
    return attributes


def network_attributes(transport: str) -> dict[str, str]:
    """``network.*`` of a client door (the session's transport name)."""
    carrier, protocol = _NETWORK.get(transport, ("tcp", "http"))
    attributes = {NETWORK_TRANSPORT: carrier, TRANSPORT: transport}
    if protocol is not None:
        attributes[NETWORK_PROTOCOL] = protocol
    return attributes


def error_type_of(response: Mapping[str, Any] | None) -> str:
    """``error.type`` of an answer: the JSON-RPC error code, ``tool_error``, or ``""`` for success."""
    if response is None:
        return ""
    error = response.get("error")
    if error is not None:
        code = error.get("code") if isinstance(error, dict) else None
        return str(code) if isinstance(code, int) else "error"
    result = response.get("result")
    if isinstance(result, dict) and result.get("isError") is True:
        return TOOL_ERROR
    return ""


def error_type_of_exception(exc: BaseException) -> str:
    """``error.type`` of a failure raised instead of answered (the gateway's own, or a cancellation)."""
    if isinstance(exc, jsonrpc.RpcError):
        return str(exc.code)
    if isinstance(exc, asyncio.CancelledError):
        return "cancelled"
    return type(exc).__qualname__
