"""adapters/mgp/strip: a client that did not negotiate MGP never sees an MGP field, and nothing else changes."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from hypothesis import given, strategies as st

from adapters.mgp import names, strip

CLIENT_CAPS = "io.modelcontextprotocol/clientCapabilities"
EXT = "dev.cloto/mgp"
GRANTS = "dev.cloto/mgp/grants"

# User data may use MGP's words as its own keys: those must survive.
_keys = st.sampled_from(["security", "_mgp", "mgp", "_mgp.seq", EXT, GRANTS, "tools", "name", "data"]) | st.text(
    max_size=6
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(_keys, children, max_size=3),
    max_leaves=8,
)
user_dicts = st.dictionaries(_keys, json_values, max_size=3)
plain_keys = st.text(min_size=1, max_size=6).filter(lambda k: k not in ("mgp", "_mgp") and not k.startswith("_mgp."))
mgp_objects = st.fixed_dictionaries({"version": st.sampled_from(["0.3.0", "0.8.0"]), "extensions": st.just(["audit"])})


@st.composite
def capabilities(draw: st.DrawFn) -> dict[str, Any]:
    caps: dict[str, Any] = draw(
        st.dictionaries(plain_keys.filter(lambda k: k not in ("experimental", "extensions")), user_dicts, max_size=2)
    )
    if draw(st.booleans()):
        caps["experimental"] = draw(st.dictionaries(plain_keys, user_dicts, max_size=2))
    if draw(st.booleans()):
        caps["extensions"] = draw(st.dictionaries(plain_keys.filter(lambda k: k != EXT), user_dicts, max_size=2))
    return caps


@st.composite
def tools(draw: st.DrawFn) -> list[dict[str, Any]]:
    names_ = draw(st.lists(st.text(min_size=1, max_size=6).filter(lambda n: not n.startswith("mgp.")), max_size=3))
    # inputSchema and annotations are the tool's own data: their "security" keys stay.
    return [{"name": n, "inputSchema": {"type": "object", "properties": draw(user_dicts)}} for n in names_]


@st.composite
def base_messages(draw: st.DrawFn) -> dict[str, Any]:
    """A message as a plain MCP peer would send it (no MGP anywhere the specs put MGP)."""
    kind = draw(st.sampled_from(["initialize", "init_result", "discover", "list", "call", "note", "error", "result"]))
    meta: dict[str, Any] = draw(
        st.dictionaries(plain_keys.filter(lambda k: k not in (GRANTS, CLIENT_CAPS)), json_values, max_size=2)
    )
    if draw(st.booleans()):
        meta[CLIENT_CAPS] = draw(capabilities())
    if kind == "initialize":
        return {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": draw(capabilities())},
        }
    if kind in ("init_result", "discover"):
        return {
            "jsonrpc": "2.0",
            "id": 1,
            "result": {"capabilities": draw(capabilities()), "serverInfo": draw(user_dicts)},
        }
    if kind == "list":
        return {"jsonrpc": "2.0", "id": 2, "result": {"tools": draw(tools())}}
    if kind == "call":
        params = {"name": draw(st.text(max_size=6)), "arguments": draw(user_dicts), "_meta": meta}
        return {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": params}
    if kind == "note":
        return {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": 1, "_meta": meta}}
    if kind == "error":
        data = draw(st.none() | user_dicts.map(lambda d: {k: v for k, v in d.items() if k != "_mgp"}))
        error: dict[str, Any] = {"code": 1000, "message": "no"}
        if data is not None:
            error["data"] = data
        return {"jsonrpc": "2.0", "id": 4, "error": error}
    return {
        "jsonrpc": "2.0",
        "id": 5,
        "result": {"content": [{"type": "text", "text": "ok"}], "structuredContent": draw(user_dicts)},
    }


def inject(message: dict[str, Any], draw: Callable[..., Any]) -> dict[str, Any]:
    """``message`` with MGP added wherever the specs put it and the message has room for it."""
    out = copy.deepcopy(message)
    for body_key in ("params", "result"):
        body = out.get(body_key)
        if not isinstance(body, dict):
            continue
        if draw(st.booleans()):
            body["_mgp"] = draw(user_dicts)
        if draw(st.booleans()):
            body["_mgp.seq"] = draw(st.integers(0, 99))
        for caps in (body.get("capabilities"), (body.get("_meta") or {}).get(CLIENT_CAPS)):
            if isinstance(caps, dict):
                if draw(st.booleans()):
                    caps["mgp"] = draw(mgp_objects)
                if isinstance(caps.get("experimental"), dict) and draw(st.booleans()):
                    caps["experimental"]["mgp"] = draw(mgp_objects)
                if isinstance(caps.get("extensions"), dict) and draw(st.booleans()):
                    caps["extensions"][EXT] = draw(mgp_objects)
        if isinstance(body.get("_meta"), dict) and draw(st.booleans()):
            body["_meta"][GRANTS] = {"shell.execute": {"decision": "approved"}}
        if body_key == "result" and isinstance(body.get("tools"), list):
            for tool in body["tools"]:
                if draw(st.booleans()):
                    tool["security"] = {"risk_level": "dangerous", "effective_risk_level": "dangerous"}
                if draw(st.booleans()):
                    tool["_mgp"] = {"category": "x"}
            for name in draw(st.lists(st.sampled_from(sorted(names.KERNEL_TOOL_SCHEMAS)), max_size=2)):
                body["tools"].insert(draw(st.integers(0, len(body["tools"]))), names.kernel_tool(name))
    error = out.get("error")
    if isinstance(error, dict) and isinstance(error.get("data"), dict) and draw(st.booleans()):
        error["data"]["_mgp"] = {"category": "security", "retryable": False}
    return out


def mgp_left(message: dict[str, Any]) -> list[str]:
    """Every MGP field still present at a place the specs put one."""
    found: list[str] = []
    for body_key in ("params", "result"):
        body = message.get(body_key)
        if not isinstance(body, dict):
            continue
        found += [f"{body_key}.{k}" for k in body if k == "_mgp" or k.startswith("_mgp.")]
        meta: dict[str, Any] = body["_meta"] if isinstance(body.get("_meta"), dict) else {}
        found += [GRANTS] if GRANTS in meta else []
        for caps in (body.get("capabilities"), meta.get(CLIENT_CAPS)):
            if isinstance(caps, dict):
                found += ["mgp"] if "mgp" in caps else []
                found += ["experimental.mgp"] if "mgp" in (caps.get("experimental") or {}) else []
                found += [EXT] if EXT in (caps.get("extensions") or {}) else []
        for tool in body.get("tools") or [] if body_key == "result" else []:
            found += [f"tool {tool.get('name')}.{k}" for k in ("security", "_mgp") if k in tool]
            found += [f"kernel tool {tool['name']}"] if names.is_reserved_tool_name(tool.get("name")) else []
    error = message.get("error")
    if isinstance(error, dict) and isinstance(error.get("data"), dict) and "_mgp" in error["data"]:
        found.append("error.data._mgp")
    return found


@given(st.data())
def test_stripping_removes_every_mgp_field_and_nothing_else(data: st.DataObject) -> None:
    base = data.draw(base_messages())
    with_mgp = inject(base, data.draw)
    frozen = copy.deepcopy(with_mgp)
    stripped = strip.strip(with_mgp)
    assert mgp_left(stripped) == []
    assert stripped == base  # non-MGP content unchanged
    assert with_mgp == frozen  # the input is never modified
    assert strip.strip(base) == base


@given(st.lists(base_messages(), max_size=3), st.data())
def test_batches_are_stripped_member_by_member(batch: list[dict[str, Any]], data: st.DataObject) -> None:
    assert strip.strip([inject(m, data.draw) for m in batch]) == batch


def test_mgp_only_messages_are_dropped_for_a_plain_client() -> None:
    audit = {"jsonrpc": "2.0", "method": "notifications/mgp.audit", "params": {"event_type": "TOOL_EXECUTED"}}
    ping = {"jsonrpc": "2.0", "id": 9, "method": "mgp/health/ping", "params": {}}
    listed = {"jsonrpc": "2.0", "id": 1, "result": {"tools": [{"name": "a", "security": {"risk_level": "safe"}}]}}
    assert strip.for_plain_client(audit) is None and strip.for_plain_client(ping) is None
    assert strip.for_plain_client(listed) == {"jsonrpc": "2.0", "id": 1, "result": {"tools": [{"name": "a"}]}}
    assert strip.for_plain_client([audit, listed, ping]) == [strip.strip(listed)]
    assert strip.for_plain_client("junk") == "junk"


def test_user_data_with_mgp_words_is_untouched() -> None:
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "name": "set",
            "arguments": {"security": "high", "_mgp": 1, "mgp": {"version": "x"}},
            "_mgp": {"stream": True},
        },
    }
    assert strip.strip(call)["params"] == {
        "name": "set",
        "arguments": {"security": "high", "_mgp": 1, "mgp": {"version": "x"}},
    }
    sampling = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "sampling/createMessage",
        "params": {"tools": [{"name": "mgp.x", "security": 1}]},
    }
    assert strip.strip(sampling) == sampling  # only a result's tools list is MGP's to strip


def test_a_clients_own_grants_are_removed_and_nothing_else() -> None:
    params = {"name": "x", "_meta": {"progressToken": 1, "dev.cloto/mgp/grants": {"shell.execute": "approved"}}}
    assert strip.without_client_grants(params) == {"name": "x", "_meta": {"progressToken": 1}}
    untouched = {"name": "x", "_meta": {"progressToken": 1}}
    assert strip.without_client_grants(untouched) is untouched


_result_keys = st.sampled_from(["_mgp", "_mgp.seq", "_meta", "capabilities", "tools", "content", "isError", "_mgpx"])


@given(
    st.dictionaries(_result_keys | _keys, json_values | st.lists(st.dictionaries(_keys, json_values)), max_size=4)
    | json_values
)
def test_strip_result_is_strip_of_the_result(result: Any) -> None:
    """The quick form for a response's result (gateway/routing/forwarding.py) agrees with the
    general one, and gives the very same object back when nothing is stripped."""
    before = copy.deepcopy(result)
    stripped = strip.strip_result(result)
    general = strip.strip({"result": result})["result"]
    assert stripped == general
    assert result == before
    if general is result:
        assert stripped is result
