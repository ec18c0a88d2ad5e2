"""JSON-RPC 2.0 framing: parsing, validation, error objects and message builders (orjson).

Messages stay plain dicts on purpose: the gateway forwards far more than it interprets, and a dict
round-trips unknown fields (extensions ride on them) without a schema in the way.
"""

from __future__ import annotations

import json
import math
from enum import StrEnum
from typing import Any

import orjson

# The codes framing and routing use most, re-exported from the one error table (gateway/errors.py).
from gateway.errors import (
    BACKEND_TIMEOUT as BACKEND_TIMEOUT,
    BACKEND_UNAVAILABLE as BACKEND_UNAVAILABLE,
    CAPABILITY_DENIED as CAPABILITY_DENIED,
    INTERNAL_ERROR as INTERNAL_ERROR,
    INVALID_PARAMS as INVALID_PARAMS,
    INVALID_REQUEST as INVALID_REQUEST,
    METHOD_NOT_FOUND as METHOD_NOT_FOUND,
    NAME_NOT_ROUTABLE as NAME_NOT_ROUTABLE,
    PARSE_ERROR as PARSE_ERROR,
    PAYLOAD_TOO_LARGE as PAYLOAD_TOO_LARGE,
    REQUEST_CANCELLED as REQUEST_CANCELLED,
    RESOURCE_NOT_FOUND as RESOURCE_NOT_FOUND,
    SESSION_OVERLOADED as SESSION_OVERLOADED,
)

JSONRPC = "2.0"


class RpcError(Exception):
    """A JSON-RPC error to send back to whoever asked."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data

    def to_error(self) -> dict[str, Any]:
        err: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            err["data"] = self.data
        return err

    @classmethod
    def from_error(cls, error: Any) -> RpcError:
        # A peer's error object is untrusted: a malformed one must still become an RpcError, not a
        # TypeError/ValueError escaping from here.
        if not isinstance(error, dict):
            return cls(INTERNAL_ERROR, "malformed error object", error)
        try:
            code = int(error.get("code", INTERNAL_ERROR))
        except (TypeError, ValueError, OverflowError):
            code = INTERNAL_ERROR
        return cls(code, str(error.get("message", "")), error.get("data"))


class Shape(StrEnum):
    REQUEST = "request"
    NOTIFICATION = "notification"
    RESPONSE = "response"
    ERROR = "error"


# The members as plain module constants: reading a member off an enum class is a descriptor call.
_REQUEST, _NOTIFICATION, _RESPONSE, _ERROR = Shape.REQUEST, Shape.NOTIFICATION, Shape.RESPONSE, Shape.ERROR


def dumps(message: Any) -> bytes:
    try:
        return orjson.dumps(message)
    except orjson.JSONEncodeError as exc:
        # orjson refuses integers beyond 64 bits, which a peer may send (JSON numbers are unbounded) or a
        # tool may compute. Writing them exactly is valid JSON; refusing would turn an answer into a 500.
        try:
            return json.dumps(_finite(message), separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()
        except (TypeError, ValueError, RecursionError):
            raise exc from None


def _finite(value: Any) -> Any:
    """``value`` with non-finite floats as null, as orjson writes them (the standard library would write NaN)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def loads(data: bytes | str) -> Any:
    """Parse JSON; raises RpcError(-32700) on malformed input."""
    try:
        message = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise RpcError(PARSE_ERROR, f"Parse error: {exc}") from None
    if isinstance(message, dict):  # the common case, without a generator
        rpc_id = message.get("id")
        lossy = isinstance(rpc_id, float) and _lossy(rpc_id)
    else:
        items = message if isinstance(message, list) else ()
        lossy = any(isinstance(m, dict) and _lossy(m.get("id")) for m in items)
    if lossy:
        # orjson reads integers beyond 64 bits as floats; an id must come back exactly as sent.
        try:
            return json.loads(data)
        except (ValueError, RecursionError):
            pass  # deeper than the stdlib parser goes: keep orjson's reading
    return message


def _lossy(value: Any) -> bool:
    return isinstance(value, float) and value.is_integer() and abs(value) >= 2**63


def names_a_request(value: Any) -> bool:
    """Whether a peer's value (an id, a ``requestId``, a progress token) can name a request: a string
    or a number. Any JSON value may arrive, and only these can be looked up (lists are unhashable);
    booleans are numbers to Python, not to JSON-RPC."""
    return isinstance(value, (str, int, float)) and not isinstance(value, bool)


def valid_id(value: Any) -> bool:
    """JSON-RPC ids are strings, numbers or null."""
    return value is None or names_a_request(value)


def classify(message: Any) -> Shape:
    """Validate one JSON-RPC message and say what it is; raises RpcError(-32600) if it is none."""
    if not isinstance(message, dict):
        raise RpcError(INVALID_REQUEST, "Invalid Request: a JSON-RPC message must be an object")
    if message.get("jsonrpc") != JSONRPC:
        raise RpcError(INVALID_REQUEST, 'Invalid Request: "jsonrpc" must be "2.0"')
    if "method" in message:
        # Decided by the key, not its value: {"method": null, "result": ...} is a broken request,
        # not a response (is_response() keys on "method" too, so both must agree).
        method = message["method"]
        if not isinstance(method, str) or not method:
            raise RpcError(INVALID_REQUEST, 'Invalid Request: "method" must be a non-empty string')
        params = message.get("params")
        if params is not None and not isinstance(params, (dict, list)):
            raise RpcError(INVALID_REQUEST, 'Invalid Request: "params" must be an object or array')
        if "id" not in message:
            return _NOTIFICATION
        rpc_id = message["id"]
        if type(rpc_id) is not int and type(rpc_id) is not str and (rpc_id is None or not valid_id(rpc_id)):
            raise RpcError(INVALID_REQUEST, 'Invalid Request: "id" must be a string or number')
        return _REQUEST
    if "id" not in message or not valid_id(message["id"]):
        raise RpcError(INVALID_REQUEST, "Invalid Request: neither a request, a notification nor a response")
    if "result" in message and "error" not in message:
        return _RESPONSE
    if "error" in message and "result" not in message:
        if not isinstance(message["error"], dict):
            raise RpcError(INVALID_REQUEST, 'Invalid Request: "error" must be an object')
        return _ERROR
    raise RpcError(INVALID_REQUEST, 'Invalid Request: a response carries exactly one of "result" or "error"')


def request(rpc_id: Any, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    msg: dict[str, Any] = {"jsonrpc": JSONRPC, "id": rpc_id, "method": method}
    if params is not None:
        msg["params"] = params
    return msg


def notification(method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    msg: dict[str, Any] = {"jsonrpc": JSONRPC, "method": method}
    if params is not None:
        msg["params"] = params
    return msg


def result(rpc_id: Any, value: Any) -> dict[str, Any]:
    return {"jsonrpc": JSONRPC, "id": rpc_id, "result": value}


def error(rpc_id: Any, code: int, message: str, data: Any = None) -> dict[str, Any]:
    err: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        err["data"] = data
    return {"jsonrpc": JSONRPC, "id": rpc_id, "error": err}


def error_from(rpc_id: Any, exc: RpcError) -> dict[str, Any]:
    return {"jsonrpc": JSONRPC, "id": rpc_id, "error": exc.to_error()}


def is_response(message: dict[str, Any]) -> bool:
    return "method" not in message and ("result" in message or "error" in message)
