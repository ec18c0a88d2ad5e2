"""MCP 2026-07-28 ("modern", stateless): per-request envelope, header rules, result stamping.

Everything that is particular to the modern era lives here, for both directions: validating what
a modern client sends (``_meta`` keys, ``MCP-Protocol-Version``/``Mcp-Method``/``Mcp-Name`` and
``Mcp-Param-*`` headers that must mirror the body), stamping what it receives (``resultType``,
caching hints), and building the envelope and headers the gateway sends to modern backends.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from typing import Any, NamedTuple

from adapters.mcp import LEGACY_VERSIONS, LOG_LEVELS

# The modern era's error codes (the numbers live in the one error table).
from gateway.errors import (
    HEADER_MISMATCH as HEADER_MISMATCH,
    MISSING_REQUIRED_CLIENT_CAPABILITY as MISSING_REQUIRED_CLIENT_CAPABILITY,
    UNSUPPORTED_PROTOCOL_VERSION as UNSUPPORTED_PROTOCOL_VERSION,
)

MODERN_VERSIONS = ("2026-07-28",)
LATEST_MODERN = MODERN_VERSIONS[-1]

PROTOCOL_VERSION_KEY = "io.modelcontextprotocol/protocolVersion"
CLIENT_CAPABILITIES_KEY = "io.modelcontextprotocol/clientCapabilities"
CLIENT_INFO_KEY = "io.modelcontextprotocol/clientInfo"
LOG_LEVEL_KEY = "io.modelcontextprotocol/logLevel"
SUBSCRIPTION_ID_KEY = "io.modelcontextprotocol/subscriptionId"
SERVER_INFO_KEY = "io.modelcontextprotocol/serverInfo"


MODERN_ERROR_CODES = frozenset({HEADER_MISMATCH, MISSING_REQUIRED_CLIENT_CAPABILITY, UNSUPPORTED_PROTOCOL_VERSION})

# Methods whose target is mirrored in the Mcp-Name header, and where the body keeps it.
NAME_FIELD = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}
# Results that carry caching hints (SEP-2549) and the defaults the gateway applies.
CACHEABLE = frozenset({"tools/list", "prompts/list", "resources/list", "resources/templates/list", "resources/read"})
DEFAULT_TTL_MS = 0
# Methods of the legacy era that the modern era removed.
REMOVED_METHODS = frozenset({"initialize", "ping", "logging/setLevel", "resources/subscribe", "resources/unsubscribe"})

X_MCP_HEADER = "x-mcp-header"
PARAM_HEADER_PREFIX = "mcp-param-"
_B64 = re.compile(r"^=\?base64\?(?P<payload>[A-Za-z0-9+/]*={0,2})\?=$")
_SAFE = re.compile(r"^[\x20-\x7e]*$")


class ModernRejection(Exception):
    """A modern request refused before dispatch: HTTP status and the JSON-RPC error to answer with."""

    def __init__(self, status: int, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.data = data


def is_modern_version(version: Any) -> bool:
    return isinstance(version, str) and version in MODERN_VERSIONS


def looks_modern(header_version: str | None, message: Any) -> bool:
    """Whether a session-less POST is a modern request (rather than a legacy one missing its session).

    A version header that is not a legacy version counts as modern, so that an unknown version is
    answered with -32022 and the supported list rather than with "session required".
    """
    if header_version is not None and header_version not in LEGACY_VERSIONS:
        return True
    if isinstance(message, dict):
        params = message.get("params")
        meta = params.get("_meta") if isinstance(params, dict) else None
        if isinstance(meta, dict) and PROTOCOL_VERSION_KEY in meta:
            return True
    return False


# ---- header values --------------------------------------------------------------------------


def encode_header_value(value: str) -> str:
    """Plain when it survives an HTTP field verbatim, else the ``=?base64?...?=`` form."""
    if _SAFE.fullmatch(value) and value == value.strip() and not _B64.fullmatch(value):
        return value
    return f"=?base64?{base64.b64encode(value.encode()).decode()}?="


def decode_header_value(value: str) -> str | None:
    """The header's text; None for a malformed base64 form (which then matches nothing)."""
    if not value.startswith("=?"):
        return value  # the plain form (the common case): no base64 form starts otherwise
    match = _B64.fullmatch(value)
    if match is None:
        return value
    payload = match.group("payload")
    try:
        raw = base64.b64decode(payload, validate=True)
    except binascii.Error:
        return None
    if base64.b64encode(raw).decode() != payload:
        return None
    try:
        return raw.decode()
    except UnicodeDecodeError:
        return None


def render_scalar(value: Any) -> str | None:
    """How an argument value is mirrored into a header (booleans lowercase), None if it cannot be."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int, float)):
        return str(value)
    return None


# Schemas are walked once each: a tool's schema object lives as long as its backend's cached
# tools/list, and every modern tools/call would walk it again. Keyed by identity; the entry keeps
# the schema alive so its id cannot be reused while cached.
# The entry also holds the tokens lowercased (as ASGI header names are) for check_param_headers.
PATHS_CACHE: dict[int, tuple[Any, dict[tuple[str, ...], str], dict[str, tuple[str, ...]]]] = {}
_PATHS_CACHE_MAX = 4096


def param_header_paths(input_schema: Any) -> dict[tuple[str, ...], str]:
    """``x-mcp-header`` annotations of a tool's input schema: property path -> header token.

    Only properties reached from the root through plain ``properties`` chains count, as the spec
    requires; anything else is not a declared header. The result is shared: do not change it.
    """
    cached = PATHS_CACHE.get(id(input_schema))  # _param_headers_of's hit, inline: one call less per tools/call
    if cached is not None and cached[0] is input_schema:
        return cached[1]
    return _param_headers_of(input_schema)[1]


def _param_headers_of(input_schema: Any) -> tuple[Any, dict[tuple[str, ...], str], dict[str, tuple[str, ...]]]:
    cached = PATHS_CACHE.get(id(input_schema))
    if cached is not None and cached[0] is input_schema:
        return cached
    found = _walk_param_headers(input_schema)
    if len(PATHS_CACHE) >= _PATHS_CACHE_MAX:
        PATHS_CACHE.clear()
    entry = (input_schema, found, {token.lower(): path for path, token in found.items()})
    PATHS_CACHE[id(input_schema)] = entry
    return entry


def _walk_param_headers(input_schema: Any) -> dict[tuple[str, ...], str]:
    found: dict[tuple[str, ...], str] = {}

    def walk(schema: Any, path: tuple[str, ...]) -> None:
        if not isinstance(schema, dict):
            return
        token = schema.get(X_MCP_HEADER)
        if path and isinstance(token, str) and token:
            found[path] = token
        props = schema.get("properties")
        if isinstance(props, dict):
            for name, sub in props.items():
                walk(sub, (*path, name))

    walk(input_schema, ())
    return found


def _value_at(arguments: Any, path: tuple[str, ...]) -> Any:
    node = arguments
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node


def param_headers(input_schema: Any, arguments: Any) -> dict[str, str]:
    """The ``Mcp-Param-*`` headers a ``tools/call`` with these arguments must carry."""
    headers = {}
    for path, token in param_header_paths(input_schema).items():
        rendered = render_scalar(_value_at(arguments, path))
        if rendered is not None:
            headers[f"Mcp-Param-{token}"] = encode_header_value(rendered)
    return headers


# ---- validating a modern request --------------------------------------------------------------


# A key not in ``_meta``. A JSON null is not absence: it is a value of the wrong type, refused like any
# other. No real client sends null for a field it leaves out: the official SDKs' clients omit the key
# (python-sdk ``_make_modern_stamp``: logLevel only when set, clientInfo and capabilities dumped with
# ``exclude_none``; typescript-sdk ``rev2026Codec.outboundEnvelope``: logLevel only when defined), and
# the schema types none of the fields as nullable (typescript-sdk's server refuses null; ADR 0006, "Later").
_ABSENT: Any = object()
_LEVELS = frozenset(LOG_LEVELS)
_LEVEL_NAMES = ", ".join(LOG_LEVELS)
# ClientCapabilities (schema 2026-07-28): the members the spec defines, each an object. ``experimental``
# and ``extensions`` map names to settings objects; ``sampling`` and ``elicitation`` have members that are
# objects in turn. Any other member passes as it is: "not a closed set", a client may define its own.
_MAPS_OF_OBJECTS = frozenset({"experimental", "extensions"})
_CAPABILITY_MEMBERS = {"roots": (), "sampling": ("context", "tools"), "elicitation": ("form", "url")}


def _json_type(value: Any) -> str:
    """What a JSON value is, in the words of JSON (for a refusal's message)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _must_be(where: str, expected: str, value: Any) -> str:
    """A refusal's message: the field at ``where`` is not of the type it must have."""
    return f"Invalid params: {where} must be {expected}, not {_json_type(value)}"


def _wrong_type(key: str, expected: str, value: Any) -> str:
    return _must_be(f"_meta[{key!r}]", expected, value)


def _capabilities_problem(capabilities: dict[str, Any]) -> str | None:
    """What is wrong with a client capabilities object, or None (the shapes of ``ClientCapabilities``)."""
    where = f"_meta[{CLIENT_CAPABILITIES_KEY!r}]"
    for name, value in capabilities.items():
        if name in _MAPS_OF_OBJECTS:
            if not isinstance(value, dict):
                return _must_be(f"{where}.{name}", "an object", value)
            for key, settings in value.items():
                if not isinstance(settings, dict):
                    return _must_be(f"{where}.{name}[{key!r}]", "an object", settings)
            continue
        members = _CAPABILITY_MEMBERS.get(name)
        if members is None:
            continue
        if not isinstance(value, dict):
            return _must_be(f"{where}.{name}", "an object", value)
        for member in members:
            sub = value.get(member, _ABSENT)
            if sub is not _ABSENT and not isinstance(sub, dict):
                return _must_be(f"{where}.{name}.{member}", "an object", sub)
    return None


def _client_info_problem(info: Any) -> str | None:
    """What is wrong with a client info value, or None: an ``Implementation``, whose ``name`` and
    ``version`` are required strings. Its optional members are for display only, and not read here."""
    where = f"_meta[{CLIENT_INFO_KEY!r}]"
    if not isinstance(info, dict):
        return _must_be(where, "an object with a name and a version", info)
    for member in ("name", "version"):
        value = info.get(member, _ABSENT)
        if value is _ABSENT:
            return f"Invalid params: {where}.{member} is required"
        if not isinstance(value, str):
            return _must_be(f"{where}.{member}", "a string", value)
    return None


class Envelope(NamedTuple):
    """What a modern request says about its client, from ``params._meta`` (a named tuple: one is
    made per modern request, and a frozen dataclass costs four ``object.__setattr__`` to make)."""

    version: str
    capabilities: dict[str, Any]
    client_info: dict[str, Any]
    log_level: str | None


def read_envelope(message: dict[str, Any], header_version: str | None = None) -> Envelope:
    """The client envelope of a modern request. Once the body's version is there and a string, the
    version header is compared: a header that disagrees with the body is a mismatch (-32020) whatever
    the versions are.

    Every envelope field has the type MCP 2026-07-28 gives it (basic/index, "Per-request protocol
    fields"; schema ``RequestMetaObject``): a field of the wrong type (null included) is refused with
    400 and -32602, naming the key and the type it must have, never read as absent. The other fields
    are judged once the version is one this gateway speaks: it says what they are (an unsupported
    version's envelope is -32022 whatever it holds)."""
    params = message.get("params", _ABSENT)
    if params is _ABSENT:
        raise ModernRejection(400, -32602, "Invalid params: params._meta is required")
    if not isinstance(params, dict):
        raise ModernRejection(400, -32602, _must_be("params", "an object carrying _meta", params))
    meta = params.get("_meta", _ABSENT)
    if meta is _ABSENT:
        raise ModernRejection(400, -32602, "Invalid params: params._meta is required")
    if not isinstance(meta, dict):
        raise ModernRejection(400, -32602, _must_be("params._meta", "an object", meta))
    version = meta.get(PROTOCOL_VERSION_KEY, _ABSENT)
    if version is _ABSENT:
        raise ModernRejection(400, -32602, f"Invalid params: _meta[{PROTOCOL_VERSION_KEY!r}] is required")
    if not isinstance(version, str):
        raise ModernRejection(400, -32602, _wrong_type(PROTOCOL_VERSION_KEY, "a string", version))
    if header_version is not None and header_version.strip(" \t") != version:
        raise ModernRejection(
            400,
            HEADER_MISMATCH,
            f"MCP-Protocol-Version header {header_version!r} does not match _meta protocol version {version!r}",
        )
    if version not in MODERN_VERSIONS:
        raise ModernRejection(
            400,
            UNSUPPORTED_PROTOCOL_VERSION,
            f"Unsupported protocol version: {version!r}",
            {"supported": list(MODERN_VERSIONS), "requested": version},
        )
    capabilities = meta.get(CLIENT_CAPABILITIES_KEY, _ABSENT)
    if capabilities is _ABSENT:
        raise ModernRejection(400, -32602, f"Invalid params: _meta[{CLIENT_CAPABILITIES_KEY!r}] is required")
    if not isinstance(capabilities, dict):
        raise ModernRejection(400, -32602, _wrong_type(CLIENT_CAPABILITIES_KEY, "an object", capabilities))
    problem = _capabilities_problem(capabilities)
    if problem is not None:
        raise ModernRejection(400, -32602, problem)
    info = meta.get(CLIENT_INFO_KEY, _ABSENT)
    if info is _ABSENT:
        info = {}  # optional: clients SHOULD send it (basic/index)
    else:
        problem = _client_info_problem(info)
        if problem is not None:
            raise ModernRejection(400, -32602, problem)
    level = meta.get(LOG_LEVEL_KEY, _ABSENT)
    if level is _ABSENT:
        level = None  # no logLevel: no notifications/message for this request (server/utilities/logging)
    elif not isinstance(level, str):
        raise ModernRejection(400, -32602, _wrong_type(LOG_LEVEL_KEY, f"a string (one of {_LEVEL_NAMES})", level))
    elif level not in _LEVELS:
        # server/utilities/logging, "Error Handling": an unrecognized level SHOULD be refused with -32602,
        # as logging/setLevel refuses one (routing/router.py).
        raise ModernRejection(
            400, -32602, f"Invalid params: _meta[{LOG_LEVEL_KEY!r}] {level!r} is not a log level; one of {_LEVEL_NAMES}"
        )
    # tuple.__new__: the named tuple's own __new__ is a Python function, and one envelope is read per request.
    return _new_tuple(Envelope, (version, capabilities, info, level))


_new_tuple = tuple.__new__


# The common shape's Mcp-Method values as sent (raw bytes): the method and the params field Mcp-Name mirrors.
_NAMED_RAW = {method.encode(): (method, field) for method, field in NAME_FIELD.items()}


# Mcp-Name values seen in the plain form (raw header value -> the name it says, stripped): a request
# names one of a few tools, and decoding, stripping and testing the value cost three calls a request.
# Bounded: names past the limit are decoded per request.
_PLAIN_NAMES: dict[bytes, str] = {}
_PLAIN_NAMES_MAX = 1024


# An envelope as a plain tuple (an :class:`Envelope`'s fields, in order): what read_common returns.
EnvelopeFields = tuple[str, dict[str, Any], dict[str, Any], str | None]


def read_common(
    message: dict[str, Any], header_version: str | None, header_method: bytes | None, header_name: bytes | None
) -> EnvelopeFields | None:
    """:func:`read_envelope` and :func:`check_routing` at once, for a request of the common shape: a
    method whose target is named (``tools/call``, ``prompts/get``, ``resources/read``), the version
    header equal to a modern ``_meta`` version, capabilities an object (of the spec's shapes), client
    info an object with a string name and version, a log level (if any) one of the levels,
    ``Mcp-Method`` equal to the method and ``Mcp-Name`` (raw header values, latin-1) to the target, in
    the plain form. None: not that shape, and the two full checks decide (they raise the error to
    answer with). Only cheap tests are made here (``type(x) is dict``, specialized subscripts);
    anything unusual is left to the full checks.

    It accepts only what the full checks accept (every test it makes is one of theirs, or stricter),
    and returns the envelope they would, as a plain tuple (equal to that :class:`Envelope`; building
    the named tuple cost ~0.4k instructions more): one pass over the request, where the two take two."""
    # Subscripts, not .get (a specialized dict read, not a method call): a key this shape needs that is
    # missing is the KeyError below, a value that cannot be subscripted the TypeError, and the full
    # checks decide.
    try:
        params = message["params"]
        if type(params) is not dict or header_name is None:
            return None
        named = _NAMED_RAW[header_method]  # type: ignore[index]  # None (absent) is no key: not the common shape
        if named[0] != message["method"]:
            return None  # (a method in NAME_FIELD has no blank: equal is equal once stripped)
        name = _PLAIN_NAMES.get(header_name)
        if name is None:
            name = header_name.decode("latin-1").strip(" \t")
            if name[:2] == "=?":
                return None  # the base64 form: the full checks decode it
            if len(_PLAIN_NAMES) < _PLAIN_NAMES_MAX:
                _PLAIN_NAMES[header_name] = name
        if name != params[named[1]]:
            return None
        meta = params["_meta"]
        if type(meta) is not dict:
            return None
        version = meta[PROTOCOL_VERSION_KEY]
        capabilities = meta[CLIENT_CAPABILITIES_KEY]
        # Client info as every real client sends it: an object with a string name and version. Without
        # it (optional, unusual), the KeyError; not an object, the TypeError of its subscript (no
        # ``type(info) is dict`` test: ~0.15k instructions a request).
        info = meta[CLIENT_INFO_KEY]
        if type(info["name"]) is not str or type(info["version"]) is not str:
            return None
        if LOG_LEVEL_KEY in meta:  # (absent, the common case: one test, where .get is a method call)
            level = meta[LOG_LEVEL_KEY]
            if level not in _LEVELS:  # (only a level's name is in it; an array or object: the TypeError)
                return None
        else:
            level = None
    except (KeyError, TypeError):
        return None  # what this shape needs is missing or of another type: the full checks decide
    if version != header_version or version not in MODERN_VERSIONS or type(capabilities) is not dict:
        return None  # (no blank in a modern version: equal is equal once stripped)
    if capabilities and _capabilities_problem(capabilities) is not None:
        return None  # (empty, the common case: nothing to look into)
    return version, capabilities, info, level


def check_headers(headers: Mapping[str, str], message: dict[str, Any], envelope: Envelope) -> None:
    """The routing headers must agree with the body (else 400, -32020). Values are compared after
    removing the optional whitespace HTTP allows around a field value."""
    check_routing(message, headers.get("mcp-method"), headers.get("mcp-name"))


def check_routing(message: dict[str, Any], header_method: str | None, header_name: str | None) -> None:
    """:func:`check_headers` given the ``Mcp-Method`` and ``Mcp-Name`` headers' values (None: absent)."""
    method = message.get("method")
    if header_method is None:
        raise ModernRejection(400, HEADER_MISMATCH, "Mcp-Method header is required")
    header_method = header_method.strip(" \t")
    if header_method != method:
        raise ModernRejection(400, HEADER_MISMATCH, f"Mcp-Method header {header_method!r} does not match {method!r}")
    field = NAME_FIELD.get(method)  # a string: it equals the header's
    if field is not None:
        params = message.get("params") or {}
        target = params.get(field) if isinstance(params, dict) else None
        if header_name is None:
            raise ModernRejection(400, HEADER_MISMATCH, f"Mcp-Name header is required for {method}")
        header_name = header_name.strip(" \t")
        decoded = header_name if not header_name.startswith("=?") else decode_header_value(header_name)
        # A malformed base64 form (None) matches nothing, not even an absent params field.
        if decoded is None or decoded != target:
            raise ModernRejection(400, HEADER_MISMATCH, f"Mcp-Name header does not match params.{field}")


def _field(headers: Mapping[str, str], name: str) -> str | None:
    value = headers.get(name)
    return value.strip(" \t") if value is not None else None


def check_param_headers(headers: Mapping[str, str], input_schema: Any, arguments: Any) -> None:
    """Every ``x-mcp-header`` argument must be mirrored exactly; no undeclared ``Mcp-Param-*`` may appear."""
    expected = _param_headers_of(input_schema)[2]
    if not expected and not headers:
        return  # the common case: nothing declared, nothing sent
    for name in headers:
        if not name.startswith(PARAM_HEADER_PREFIX):
            continue
        token = name[len(PARAM_HEADER_PREFIX) :]
        if token not in expected:
            raise ModernRejection(400, HEADER_MISMATCH, f"Mcp-Param-{token} is not declared by the tool's input schema")
    for token, path in expected.items():
        rendered = render_scalar(_value_at(arguments, path))
        sent = _field(headers, PARAM_HEADER_PREFIX + token)
        if rendered is None:
            if sent is not None:
                raise ModernRejection(400, HEADER_MISMATCH, f"Mcp-Param-{token} sent for an argument that is absent")
            continue
        if sent is None:
            raise ModernRejection(400, HEADER_MISMATCH, f"Mcp-Param-{token} header is required")
        if decode_header_value(sent) != rendered:
            raise ModernRejection(400, HEADER_MISMATCH, f"Mcp-Param-{token} header does not match the argument")


# ---- results ----------------------------------------------------------------------------------


def stamp_result(method: str | None, result: Any) -> Any:
    """Every modern result names its type; cacheable ones carry caching hints."""
    if not isinstance(result, dict):
        return result
    if "resultType" not in result:
        stamped = {**result, "resultType": "complete"}
    elif result["resultType"] == "input_required":
        return result  # an interim answer is never cacheable
    else:
        stamped = result
    if method in CACHEABLE and ("ttlMs" not in stamped or "cacheScope" not in stamped):
        stamped = {"ttlMs": DEFAULT_TTL_MS, "cacheScope": "private", **stamped}
    return stamped


def strip_modern_fields(result: Any) -> Any:
    """A modern backend's result as a legacy client should see it."""
    if not isinstance(result, dict) or not any(k in result for k in ("resultType", "ttlMs", "cacheScope")):
        return result
    return {k: v for k, v in result.items() if k not in ("resultType", "ttlMs", "cacheScope")}


# ---- toward modern backends -------------------------------------------------------------------


def envelope_meta(
    capabilities: dict[str, Any], client_info: dict[str, Any], log_level: str | None = None
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        PROTOCOL_VERSION_KEY: LATEST_MODERN,
        CLIENT_CAPABILITIES_KEY: capabilities,
        CLIENT_INFO_KEY: client_info,
    }
    if log_level:
        meta[LOG_LEVEL_KEY] = log_level
    return meta


ENVELOPE_KEYS = frozenset({PROTOCOL_VERSION_KEY, CLIENT_CAPABILITIES_KEY, CLIENT_INFO_KEY, LOG_LEVEL_KEY})
"""The client envelope's keys in ``_meta``: a handshake-era server refuses a request that carries them."""


def detach_envelope(message: dict[str, Any]) -> None:
    """Take the client envelope out of a modern request that :func:`read_envelope` accepted (so
    ``params._meta`` is an object): it told the gateway about its client, and goes no further. A
    legacy backend must not see it, a modern one gets the gateway's own per request
    (:func:`stamp_request`). A ``_meta`` left empty goes too. Changes ``message`` in place: the
    door's own parse of the body."""
    params = message["params"]
    meta = params["_meta"]
    if ENVELOPE_KEYS.issuperset(meta):
        del params["_meta"]  # the common case: nothing but the envelope
    else:
        params["_meta"] = {key: value for key, value in meta.items() if key not in ENVELOPE_KEYS}


def without_envelope(meta: dict[str, Any]) -> dict[str, Any]:
    """``_meta`` without the client envelope (a modern client's request on its way to a legacy server)."""
    return {key: value for key, value in meta.items() if key not in ENVELOPE_KEYS}


def stamp_request(
    params: dict[str, Any] | None, capabilities: dict[str, Any], client_info: dict[str, Any], log_level: str | None
) -> dict[str, Any]:
    params = dict(params or {})
    existing = params.get("_meta")
    meta = dict(existing) if isinstance(existing, dict) else {}
    meta.update(envelope_meta(capabilities, client_info, log_level))
    params["_meta"] = meta
    return params


# Mcp-Method and Mcp-Name by (method, name): they depend on nothing else, and encoding a name costs
# two regex matches per request toward a modern backend. Bounded: cleared when full. Values are copied out.
_ROUTING_CACHE: dict[tuple[str, str | None], dict[str, str]] = {}
_ROUTING_CACHE_MAX = 4096


def request_headers(method: str, params: dict[str, Any] | None, input_schema: Any = None) -> dict[str, str]:
    """Routing headers a modern request must carry (besides MCP-Protocol-Version). A new dict each time."""
    field = NAME_FIELD.get(method)
    name = params.get(field) if field is not None and params is not None else None
    if type(name) is not str:
        name = None
    cached = _ROUTING_CACHE.get((method, name))
    if cached is None:
        cached = (
            {"Mcp-Method": method} if name is None else {"Mcp-Method": method, "Mcp-Name": encode_header_value(name)}
        )
        if len(_ROUTING_CACHE) >= _ROUTING_CACHE_MAX:
            _ROUTING_CACHE.clear()
        _ROUTING_CACHE[(method, name)] = cached
    headers = cached.copy()
    if method == "tools/call" and input_schema is not None and params is not None and param_header_paths(input_schema):
        headers.update(param_headers(input_schema, params.get("arguments")))
    return headers
