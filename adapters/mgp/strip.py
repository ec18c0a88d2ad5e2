"""Removing MGP from messages for a client that did not negotiate it.

A plain MCP client never sees ``mgp`` fields (issue 12; §1.3 "MGP extensions silent", §2.4 rule 3).
Removal is structural, at the places the specs put MGP, so that a user's own data that happens to
use the same words (a tool argument named ``security``, a schema property ``_mgp``) is untouched:

- capabilities: ``mgp``, ``experimental.mgp``, ``extensions["dev.cloto/mgp"]`` (§2.2, §2.3, §2.6);
- ``_meta``: ``dev.cloto/mgp/grants`` and the client capabilities' ``dev.cloto/mgp`` (§2.6, §3.8);
- params and results: ``_mgp`` (§5.6, §6.3, §12.3, §12.5) and flat ``_mgp.*`` keys (``_mgp.seq``,
  ``_mgp.attempt``, §13.3-13.4); ``error.data._mgp`` (§14.4);
- ``tools/list`` results: each tool's ``security`` (§4.2) and ``_mgp`` (§1.6.3), and kernel tools
  (reserved ``mgp.*`` names or ``_mgp.source == "kernel"``), which are listed to MGP clients only.

MGP-only messages (``mgp/*`` requests, ``notifications/mgp.*``) are not rewritten but dropped by
:func:`for_plain_client`. The input is never modified; the output shares untouched sub-trees.
"""

from __future__ import annotations

from typing import Any

from adapters.mgp import names
from adapters.mgp.caps import CAPABILITY_KEY, CLIENT_CAPABILITIES_META_KEY, EXTENSION_ID, GRANTS_META_KEY

MGP_KEY = "_mgp"


def _without(obj: dict[str, Any], *keys: str) -> dict[str, Any]:
    if not any(key in obj for key in keys):
        return obj
    return {key: value for key, value in obj.items() if key not in keys}


def _without_flat_mgp(obj: dict[str, Any]) -> dict[str, Any]:
    if not any(key == MGP_KEY or key.startswith(MGP_KEY + ".") for key in obj):
        return obj
    return {key: value for key, value in obj.items() if key != MGP_KEY and not key.startswith(MGP_KEY + ".")}


def _replace(obj: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    if obj.get(key) is value:
        return obj
    return {**obj, key: value}


def strip_capabilities(caps: Any) -> Any:
    if not isinstance(caps, dict):
        return caps
    out = _without(caps, CAPABILITY_KEY)
    experimental = out.get("experimental")
    if isinstance(experimental, dict):
        out = _replace(out, "experimental", _without(experimental, CAPABILITY_KEY))
    extensions = out.get("extensions")
    if isinstance(extensions, dict):
        out = _replace(out, "extensions", _without(extensions, EXTENSION_ID))
    return out


def strip_meta(meta: Any) -> Any:
    if not isinstance(meta, dict):
        return meta
    out = _without(meta, GRANTS_META_KEY)
    client_caps = out.get(CLIENT_CAPABILITIES_META_KEY)
    if isinstance(client_caps, dict):
        out = _replace(out, CLIENT_CAPABILITIES_META_KEY, strip_capabilities(client_caps))
    return out


def strip_tool(tool: Any) -> Any:
    return _without(tool, "security", MGP_KEY) if isinstance(tool, dict) else tool


def strip_tools(tools: Any) -> Any:
    """A ``tools`` list without kernel tools and without each tool's MGP fields."""
    if not isinstance(tools, list):
        return tools
    return [strip_tool(tool) for tool in without_reserved(tools)]


def without_reserved(tools: list[Any]) -> list[Any]:
    """A backend's ``tools`` without the ones using the kernel's reserved names (for MGP clients,
    who see the tools' MGP fields but never a backend's ``mgp.*`` tool, §1.6.3)."""
    return [
        tool
        for tool in tools
        if not (
            isinstance(tool, dict)
            and (names.is_reserved_tool_name(tool.get("name")) or names.is_kernel_tool_entry(tool))
        )
    ]


def _strip_body(body: Any, *, result: bool) -> Any:
    """params or result: flat ``_mgp`` keys, ``_meta``, capabilities, and a result's ``tools``."""
    if not isinstance(body, dict):
        return body
    out = _without_flat_mgp(body)
    if "_meta" in out:
        out = _replace(out, "_meta", strip_meta(out["_meta"]))
    if "capabilities" in out:
        out = _replace(out, "capabilities", strip_capabilities(out["capabilities"]))
    if result and "tools" in out:
        out = _replace(out, "tools", strip_tools(out["tools"]))
    return out


# The keys of a result that _strip_body may change (besides flat "_mgp." ones).
_RESULT_KEYS = frozenset({MGP_KEY, "_meta", "capabilities", "tools"})


def strip_result(result: Any) -> Any:
    """A response's ``result`` without any MGP field: ``strip({"result": result})["result"]``, with
    one pass over its keys when none can hold MGP (the common case: the same object back)."""
    if not isinstance(result, dict):
        return result
    for key in result:
        if key in _RESULT_KEYS or key.startswith("_mgp."):
            return _strip_body(result, result=True)
    return result


def strip(message: Any) -> Any:
    """``message`` (one JSON-RPC message or a batch) without any MGP field."""
    if isinstance(message, list):
        return [strip(item) for item in message]
    if not isinstance(message, dict):
        return message
    out = message
    for key in ("params", "result"):
        if key in out:
            out = _replace(out, key, _strip_body(out[key], result=key == "result"))
    error = out.get("error")
    if isinstance(error, dict) and isinstance(error.get("data"), dict):
        out = _replace(out, "error", _replace(error, "data", _without(error["data"], MGP_KEY)))
    return out


def without_client_grants(params: dict[str, Any]) -> dict[str, Any]:
    """A client's request params without grants in ``_meta`` (§3.8): grants are the kernel's to
    give, so a client's own never reach a backend, in either era."""
    meta = params.get("_meta")
    if not isinstance(meta, dict) or GRANTS_META_KEY not in meta:
        return params
    return {**params, "_meta": _without(meta, GRANTS_META_KEY)}


def is_mgp_only(message: Any) -> bool:
    """A request or notification that exists only in MGP (``mgp/*``, ``notifications/mgp.*``)."""
    if not isinstance(message, dict):
        return False
    method = message.get("method")
    return names.is_mgp_method(method) or names.is_mgp_notification(method)


def for_plain_client(message: Any) -> Any:
    """What a client that did not negotiate MGP gets: None for an MGP-only message, else the
    message stripped (a batch keeps its other members)."""
    if isinstance(message, list):
        return [strip(item) for item in message if not is_mgp_only(item)]
    return None if is_mgp_only(message) else strip(message)
