"""The names of the seed draft (``specs/mcp-draft-2025-06-18.md``), accepted from clients as aliases.

No real peer sends them, but a client written from that draft does: ``initialize`` with
``mcpVersion``/``clientCapabilities``, ``initialized``, ``tools/invoke`` with a ``{status, output}``
result, ``cancel {id}``, ``progress {id, percent}``, ``tools/changed``, ``shutdown`` and ``exit``.
On the way in they become the real MCP names (so no backend ever sees them); on the way out, a
session that introduced itself with the draft's ``initialize`` gets the draft's shapes back.
"""

from __future__ import annotations

from typing import Any

from adapters.mcp import LATEST_LEGACY, LEGACY_VERSIONS

# Aliases whose meaning needs no reshaping beyond the name.
_RENAMED = {"initialized": "notifications/initialized"}
LOCAL_METHODS = frozenset({"shutdown", "exit"})
# Every method ``normalize`` may change or report as an alias: any other message is canonical as it
# is (one set test on every client message; a ``str`` test first, since a method may be any JSON).
ALIASES = frozenset({"initialize", *_RENAMED, "tools/invoke", "cancel", "progress", *LOCAL_METHODS})


def is_draft_initialize(params: dict[str, Any]) -> bool:
    return "mcpVersion" in params and "protocolVersion" not in params


def normalize(message: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """The canonical form of a client message, and the alias it used (None: it used none)."""
    method = message.get("method")
    if not isinstance(method, str) or method not in ALIASES:
        return message, None
    params = message.get("params")
    params = params if isinstance(params, dict) else {}
    if method == "initialize" and is_draft_initialize(params):
        version = params.get("mcpVersion")
        caps = params.get("clientCapabilities")
        canonical = {
            "protocolVersion": version if version in LEGACY_VERSIONS else LATEST_LEGACY,
            "capabilities": {} if not isinstance(caps, dict) else _capabilities_from_draft(caps),
            "clientInfo": params.get("clientInfo") or {"name": "draft-client", "version": "0"},
        }
        return {**message, "params": canonical}, "initialize"
    if method in _RENAMED:
        return {**message, "method": _RENAMED[method]}, method
    if method == "tools/invoke":
        meta = m if isinstance(m := params.get("_meta"), dict) else {}
        if "id" in message and "progressToken" not in meta:
            # The draft reports progress by request id; a token equal to the id makes that possible.
            params = {**params, "_meta": {**meta, "progressToken": message["id"]}}
        return {**message, "method": "tools/call", "params": params}, method
    if method == "cancel":
        cancelled: dict[str, Any] = {"requestId": params.get("id")}
        if isinstance(params.get("reason"), str):
            cancelled["reason"] = params["reason"]
        return {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": cancelled}, method
    if method == "progress":
        progress: dict[str, Any] = {
            "progressToken": params.get("id"),
            "progress": params.get("percent", 0),
            "total": 100,
        }
        if isinstance(params.get("message"), str):
            progress["message"] = params["message"]
        return {"jsonrpc": "2.0", "method": "notifications/progress", "params": progress}, method
    if method in LOCAL_METHODS:
        return message, method
    return message, None


def _capabilities_from_draft(caps: dict[str, Any]) -> dict[str, Any]:
    # The draft's flags describe what the client can *receive*; MCP's client capabilities are
    # sampling/elicitation/roots, which the draft has no words for. Unknown flags are kept aside.
    return {"experimental": {"draft": caps}}


def reshape_response(alias: str | None, response: dict[str, Any], server_info: dict[str, Any]) -> dict[str, Any]:
    """The answer to a draft-named request, in the draft's shape."""
    result = response.get("result")
    if alias == "tools/invoke" and isinstance(result, dict):
        return {**response, "result": invoke_result(result)}
    if alias == "initialize" and isinstance(result, dict):
        caps = c if isinstance(c := result.get("capabilities"), dict) else {}
        draft_caps = {
            "supportsToolDiscovery": "tools" in caps,
            "supportsResourceDiscovery": "resources" in caps,
            "supportsPromptDiscovery": "prompts" in caps,
            "supportsNotifications": True,
            "supportsProgress": True,
            "supportsCancellation": True,
        }
        return {
            **response,
            "result": {
                **result,
                "mcpVersion": result.get("protocolVersion"),
                "server": server_info,
                "serverCapabilities": draft_caps,
            },
        }
    return response


def invoke_result(result: dict[str, Any]) -> dict[str, Any]:
    """``tools/call`` result -> the draft's ``{status, output}``."""
    status = "error" if result.get("isError") else "success"
    if "structuredContent" in result:
        output: Any = result["structuredContent"]
    else:
        content = items if isinstance(items := result.get("content"), list) else []
        texts = [c.get("text") for c in content if isinstance(c, dict) and c.get("type") == "text"]
        output = texts[0] if len(texts) == 1 and len(content) == 1 else content
    return {"status": status, "output": output, "content": result.get("content", [])}


def render_outbound(message: dict[str, Any]) -> dict[str, Any] | None:
    """A server-to-client message as a draft session expects it (None: drop it)."""
    method = message.get("method")
    params = p if isinstance(p := message.get("params"), dict) else {}
    if method == "notifications/tools/list_changed":
        return {"jsonrpc": "2.0", "method": "tools/changed", "params": params.get("changes") or {}}
    if method == "notifications/resources/list_changed" or method == "notifications/resources/updated":
        updated = [params["uri"]] if isinstance(params.get("uri"), str) else []
        return {"jsonrpc": "2.0", "method": "resources/changed", "params": {"updated": updated}}
    if method == "notifications/progress":
        progress, total = params.get("progress"), params.get("total")
        percent = (
            progress * 100 / total
            if isinstance(progress, (int, float)) and isinstance(total, (int, float)) and total
            else progress
        )
        out: dict[str, Any] = {"id": params.get("progressToken"), "percent": percent}
        if isinstance(params.get("message"), str):
            out["message"] = params["message"]
        return {"jsonrpc": "2.0", "method": "progress", "params": out}
    return message
