"""adapters/*: MCP decode and negotiation, extension detection and facets, MCPx envelopes; Event actions."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, strategies as st

import adapters
from adapters import mcp, mcpc, mcpl, mcpx, mgp
from adapters.mcpx import EnvelopeError
from gateway import jsonrpc
from gateway.events import Dialect, Event, Kind, action_string, new_event_id
from gateway.jsonrpc import Shape

# ---- gateway/events.py -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "method", "context", "action"),
    [
        (Kind.REQUEST, "tools/call", "echo", "mcp/request:tools/call:echo"),
        (Kind.REQUEST, "tools/call", "weather__get_forecast", "mcp/request:tools/call:weather__get_forecast"),
        (Kind.REQUEST, "tools/list", None, "mcp/request:tools/list"),
        (Kind.REQUEST, "resources/read", "file:///a:b", "mcp/request:resources/read:file:///a:b"),
        (Kind.REQUEST, None, None, "mcp/request"),
        (Kind.REQUEST, "ping", "", "mcp/request:ping"),
        (Kind.NOTIFICATION, "notifications/initialized", None, "mcp/request:notifications/initialized"),
        (Kind.RESPONSE, "tools/call", "echo", "mcp/response:tools/call:echo"),
        (Kind.RESPONSE, None, None, "mcp/response"),
        (Kind.ERROR, "tools/call", None, "mcp/response:tools/call"),
        (Kind.ERROR, None, None, "mcp/response"),
        (Kind.PROPOSAL, "tools/call", "x", "mcp/proposal:tools/call:x"),
        (Kind.CHAT, None, None, "chat"),
        (Kind.CHAT, "ignored", "ignored", "chat"),
        (Kind.PRESENCE, "presence", None, "system/presence"),
        (Kind.PRESENCE, None, None, "system/presence"),
        (Kind.SYSTEM, "welcome", None, "system/welcome"),
        (Kind.SYSTEM, "error", "ignored", "system/error"),
        (Kind.SYSTEM, None, None, "system"),
    ],
)
def test_action_string(kind: Kind, method: str | None, context: str | None, action: str) -> None:
    assert action_string(kind, method, context) == action
    assert Event(kind=kind, method=method, payload={}, context=context).action == action


def test_every_kind_has_an_action() -> None:
    for kind in Kind:
        assert action_string(kind, "m", "c")


def test_event_defaults_and_params() -> None:
    a = Event(kind=Kind.REQUEST, method="m", payload={"params": {"x": 1}})
    b = Event(kind=Kind.REQUEST, method="m", payload={"params": [1, 2]})
    assert a.params == {"x": 1}
    assert b.params == {}
    assert Event(kind=Kind.REQUEST, method="m", payload={}).params == {}
    assert a.dialect is Dialect.MCP and a.targets == () and a.facets == {}
    assert a.id != b.id
    assert a.facets is not b.facets
    assert a.ts > 0


def test_event_ids_are_unique_and_share_a_process_prefix() -> None:
    ids = [new_event_id() for _ in range(1000)]
    assert len(set(ids)) == 1000
    assert len({i.split("-")[0] for i in ids}) == 1


# ---- adapters/mcp.py -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("requested", "answered"),
    [
        ("2024-11-05", "2024-11-05"),
        ("2025-03-26", "2025-03-26"),
        ("2025-06-18", "2025-06-18"),
        ("2025-11-25", "2025-11-25"),
        ("2099-01-01", mcp.LATEST_LEGACY),
        ("1999-01-01", mcp.LATEST_LEGACY),
        (None, mcp.LATEST_LEGACY),
        (20250618, mcp.LATEST_LEGACY),
        (["2025-06-18"], mcp.LATEST_LEGACY),
    ],
)
def test_negotiate_version(requested: Any, answered: str) -> None:
    assert mcp.negotiate_version(requested) == answered


def test_latest_legacy_is_the_newest() -> None:
    assert mcp.LATEST_LEGACY == max(mcp.LEGACY_VERSIONS) == "2025-11-25"


@pytest.mark.parametrize(
    ("method", "params", "context"),
    [
        ("tools/call", {"name": "echo", "arguments": {}}, "echo"),
        ("tools/call", {"name": 5}, None),
        ("tools/call", {}, None),
        ("prompts/get", {"name": "greet"}, "greet"),
        ("resources/read", {"uri": "file:///x"}, "file:///x"),
        ("resources/subscribe", {"uri": "mem://y"}, "mem://y"),
        ("resources/unsubscribe", {"uri": "mem://y"}, "mem://y"),
        ("resources/read", {"uri": None}, None),
        ("completion/complete", {"ref": {"type": "ref/prompt", "name": "greet"}}, "greet"),
        ("completion/complete", {"ref": {"type": "ref/resource", "uri": "db://{t}"}}, "db://{t}"),
        ("completion/complete", {"ref": {"type": "ref/prompt", "uri": "x"}}, None),
        ("completion/complete", {"ref": "greet"}, None),
        ("completion/complete", {}, None),
        ("tools/list", {"cursor": "c"}, None),
        ("resources/list", {}, None),
        ("ping", {"name": "x"}, None),
        (None, {"name": "x"}, None),
    ],
)
def test_context_of(method: str | None, params: dict[str, Any], context: str | None) -> None:
    assert mcp.context_of(method, params) == context


def decode(message: dict[str, Any]) -> Event:
    return mcp.decode(message, jsonrpc.classify(message), session="s1", principal="alice")


def test_decode_request() -> None:
    message = jsonrpc.request(7, "tools/call", {"name": "echo", "arguments": {"text": "hi"}})
    ev = decode(message)
    assert ev.kind is Kind.REQUEST
    assert ev.method == "tools/call"
    assert ev.context == "echo"
    assert ev.action == "mcp/request:tools/call:echo"
    assert ev.rpc_id == 7
    assert ev.payload is message  # kept untouched, not copied
    assert (ev.session, ev.principal, ev.dialect) == ("s1", "alice", Dialect.MCP)


@pytest.mark.parametrize(
    ("message", "kind", "action"),
    [
        (
            jsonrpc.request(1, "resources/read", {"uri": "file:///x"}),
            Kind.REQUEST,
            "mcp/request:resources/read:file:///x",
        ),
        (jsonrpc.request(1, "prompts/get", {"name": "p"}), Kind.REQUEST, "mcp/request:prompts/get:p"),
        (jsonrpc.request(1, "tools/list"), Kind.REQUEST, "mcp/request:tools/list"),
        (jsonrpc.request("a", "ping"), Kind.REQUEST, "mcp/request:ping"),
        (
            jsonrpc.notification("notifications/cancelled", {"requestId": 1}),
            Kind.NOTIFICATION,
            "mcp/request:notifications/cancelled",
        ),
        (jsonrpc.result(1, {"tools": []}), Kind.RESPONSE, "mcp/response"),
        (jsonrpc.error(1, -32601, "nope"), Kind.ERROR, "mcp/response"),
    ],
)
def test_decode_shapes(message: dict[str, Any], kind: Kind, action: str) -> None:
    ev = decode(message)
    assert ev.kind is kind
    assert ev.action == action
    assert ev.rpc_id == message.get("id")


def test_decode_tolerates_array_params() -> None:
    ev = mcp.decode(
        jsonrpc.request(1, "tools/call", None) | {"params": ["x"]}, Shape.REQUEST, session=None, principal=None
    )
    assert ev.context is None and ev.params == {}


# ---- detect_dialects / annotate --------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "dialects"),
    [
        ({}, {Dialect.MCP}),
        ({"capabilities": {}}, {Dialect.MCP}),
        ({"capabilities": None}, {Dialect.MCP}),
        ({"capabilities": {"experimental": {"mcpl": {"version": "0.4"}}}}, {Dialect.MCP, Dialect.MCPL}),
        ({"capabilities": {"experimental": {"mcpl": True}}}, {Dialect.MCP}),
        ({"capabilities": {"mcpl": {}}}, {Dialect.MCP}),  # MCPL lives under experimental only
        ({"capabilities": {"mgp": {"version": "0.3"}}}, {Dialect.MCP, Dialect.MGP}),
        ({"capabilities": {"experimental": {"mgp": {"version": "0.3"}}}}, {Dialect.MCP, Dialect.MGP}),
        ({"capabilities": {"mgp": "yes"}}, {Dialect.MCP}),
        (
            {"capabilities": {"mgp": {}, "experimental": {"mcpl": {}, "mgp": {}}}},
            {Dialect.MCP, Dialect.MCPL, Dialect.MGP},
        ),
        ({"capabilities": {"experimental": {"mcpc": {}}}}, {Dialect.MCP}),  # MCPC shows per call only
    ],
)
def test_detect_dialects(params: dict[str, Any], dialects: set[Dialect]) -> None:
    found = adapters.detect_dialects(params)
    assert found == frozenset(dialects)
    assert isinstance(found, frozenset)


def test_annotate_plain_mcp_adds_nothing() -> None:
    ev = adapters.annotate(decode(jsonrpc.request(1, "tools/call", {"name": "echo", "arguments": {"a": 1}})))
    assert ev.facets == {}


def test_annotate_returns_the_same_event_with_all_facets() -> None:
    params = {
        "name": "t",
        "arguments": {"mcpc_params": {"session_id": "s", "task_id": "t1"}},
        "featureSet": "fs",
        "scope": {"paths": ["/"]},
        "_mgp": {"token": "x"},
    }
    ev = decode(jsonrpc.request(1, "tools/call", params))
    assert adapters.annotate(ev) is ev
    assert ev.facets == {
        "feature_set": "fs",
        "scope": {"paths": ["/"]},
        "mgp": {"token": "x"},
        "mcpc": {"session_id": "s", "task_id": "t1"},
    }


# ---- adapters/mcpl.py ------------------------------------------------------------------------


def test_mcpl_capabilities() -> None:
    assert mcpl.capabilities({"capabilities": {"experimental": {"mcpl": {"pushEvents": True}}}}) == {"pushEvents": True}
    assert mcpl.capabilities({"capabilities": {"experimental": "x"}}) is None
    assert mcpl.capabilities({}) is None
    assert mcpl.DIALECT is Dialect.MCPL


@pytest.mark.parametrize(
    "method",
    [
        "push/event",
        "context/hook",
        "inference/chunk",
        "featureSets/update",
        "scope/elevate",
        "channels/open",
        "state/checkpoint",
        "model/info",
    ],
)
def test_mcpl_methods_are_marked(method: str) -> None:
    ev = Event(kind=Kind.REQUEST, method=method, payload={"params": {}})
    mcpl.annotate(ev)
    assert ev.facets == {"mcpl": True}


@pytest.mark.parametrize("method", ["tools/call", "pushx", "notifications/push/event", None])
def test_mcpl_other_methods_are_not_marked(method: str | None) -> None:
    ev = Event(kind=Kind.REQUEST, method=method, payload={"params": {}})
    mcpl.annotate(ev)
    assert "mcpl" not in ev.facets


def test_mcpl_feature_set_and_scope() -> None:
    ev = Event(kind=Kind.REQUEST, method="tools/call", payload={"params": {"featureSet": "files", "scope": None}})
    mcpl.annotate(ev)
    assert ev.facets == {"feature_set": "files", "scope": None}
    ev = Event(kind=Kind.REQUEST, method="tools/call", payload={"params": {"featureSet": 3}})
    mcpl.annotate(ev)
    assert ev.facets == {}


# ---- adapters/mgp.py -------------------------------------------------------------------------


def test_mgp_capabilities_in_both_places() -> None:
    assert mgp.capabilities({"capabilities": {"mgp": {"version": "0.3", "extensions": ["a"]}}}) == {
        "version": "0.3",
        "extensions": ["a"],
    }
    assert mgp.capabilities({"capabilities": {"experimental": {"mgp": {"version": "0.3"}}}}) == {"version": "0.3"}
    # The top-level one wins when both are present; a malformed top-level one falls back.
    both = {"capabilities": {"mgp": {"at": "top"}, "experimental": {"mgp": {"at": "experimental"}}}}
    assert mgp.capabilities(both) == {"at": "top"}
    fallback = {"capabilities": {"mgp": "bad", "experimental": {"mgp": {"at": "experimental"}}}}
    assert mgp.capabilities(fallback) == {"at": "experimental"}
    assert mgp.capabilities({"capabilities": {"experimental": {"mgp": []}}}) is None
    assert mgp.capabilities({"capabilities": []}) is None
    assert mgp.speaks({"capabilities": {"experimental": {"mgp": {}}}})
    assert not mgp.speaks({})


@pytest.mark.parametrize(
    ("method", "params", "facet"),
    [
        ("tools/call", {"_mgp": {"permissions": ["read"]}}, {"permissions": ["read"]}),
        ("mgp/stream/cancel", {}, {}),
        ("notifications/mgp.stream.chunk", {}, {}),
        ("notifications/mgp.event", {"_mgp": "bad"}, {}),
        ("tools/call", {"_mgp": "bad"}, None),
        ("tools/call", {}, None),
        ("notifications/progress", {}, None),
    ],
)
def test_mgp_annotate(method: str, params: dict[str, Any], facet: dict[str, Any] | None) -> None:
    ev = Event(kind=Kind.REQUEST, method=method, payload={"params": params})
    mgp.annotate(ev)
    assert ev.facets.get("mgp") == facet
    assert ("mgp" in ev.facets) is (facet is not None)


# ---- adapters/mcpc.py ------------------------------------------------------------------------


def test_mcpc_never_detected_at_initialize() -> None:
    assert not mcpc.speaks({"capabilities": {"experimental": {"mcpc": {}}}})
    assert mcpc.DIALECT is Dialect.MCPC


@pytest.mark.parametrize(
    ("arguments", "info"),
    [
        ({"mcpc_params": {"session_id": "s", "task_id": "t"}}, {"session_id": "s", "task_id": "t"}),
        ({"mcpc_params": {}}, {"session_id": None, "task_id": None}),
        ({"_metadata": {"mcpc_session_id": "s", "mcpc_task_id": "t"}}, {"session_id": "s", "task_id": "t"}),
        ({"_metadata": {"mcpc_task_id": "t"}}, {"session_id": None, "task_id": "t"}),
        ({"_metadata": {"mcpc_session_id": "s"}}, {"session_id": "s", "task_id": None}),
        # mcpc_params (0.2.5+) wins over the legacy form.
        (
            {"mcpc_params": {"session_id": "new", "task_id": "n"}, "_metadata": {"mcpc_task_id": "old"}},
            {"session_id": "new", "task_id": "n"},
        ),
        ({"_metadata": {"other": 1}}, None),
        ({"_metadata": "x"}, None),
        ({"mcpc_params": "x"}, None),
        ({}, None),
    ],
)
def test_mcpc_task_info(arguments: dict[str, Any], info: dict[str, Any] | None) -> None:
    assert mcpc.task_info(arguments) == info
    ev = Event(kind=Kind.REQUEST, method="tools/call", payload={"params": {"name": "t", "arguments": arguments}})
    mcpc.annotate(ev)
    assert ev.facets.get("mcpc") == info


@pytest.mark.parametrize("tool", ["_mcpc_init", "_is_mcpc_enabled", "is_mcpc_enabled"])
def test_mcpc_handshake_tools(tool: str) -> None:
    arguments = {"mcpc_info": {"mcpc_enabled": True, "mcpc_version": "0.2.6", "mcpc_provider": "x"}}
    ev = Event(kind=Kind.REQUEST, method="tools/call", payload={"params": {"name": tool, "arguments": arguments}})
    mcpc.annotate(ev)
    assert ev.facets == {"mcpc": {"handshake": True}}


def test_mcpc_ignores_other_methods_and_odd_arguments() -> None:
    payload = {"params": {"name": "_mcpc_init", "arguments": {"mcpc_params": {"task_id": "t"}}}}
    ev = Event(kind=Kind.REQUEST, method="prompts/get", payload=payload)
    mcpc.annotate(ev)
    assert ev.facets == {}
    ev = Event(kind=Kind.REQUEST, method="tools/call", payload={"params": {"name": "t", "arguments": ["x"]}})
    mcpc.annotate(ev)
    assert ev.facets == {}
    assert "mcpc_enabled" not in mcpc.HANDSHAKE_TOOLS


# ---- adapters/mcpx.py ------------------------------------------------------------------------


def envelope(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "protocol": "mcpx/v0.1",
        "id": "env-1",
        "ts": "2025-08-26T14:00:00Z",
        "from": "robot-alpha",
        "kind": "mcp/request:tools/call:dangerous_operation",
    }
    return {**base, **fields}


def test_mcpx_decode_request() -> None:
    payload = {"jsonrpc": "2.0", "id": 42, "method": "tools/call", "params": {"name": "dangerous_operation"}}
    ev = mcpx.decode(envelope(to=["target-agent"], correlation_id="c-1", payload=payload))
    assert ev.kind is Kind.REQUEST
    assert ev.method == "tools/call"
    assert ev.context == "dangerous_operation"
    assert ev.action == "mcp/request:tools/call:dangerous_operation"
    assert ev.dialect is Dialect.MCPX
    assert ev.source == "robot-alpha"
    assert ev.targets == ("target-agent",)
    assert ev.correlation_id == "c-1"
    assert ev.payload is payload


@pytest.mark.parametrize(
    ("kind", "expected", "action"),
    [
        ("mcp/response:tools/call:x", (Kind.RESPONSE, "tools/call", "x"), "mcp/response:tools/call:x"),
        ("mcp/proposal:tools/call", (Kind.PROPOSAL, "tools/call", None), "mcp/proposal:tools/call"),
        ("mcp/request:resources/read:file:///a:b", (Kind.REQUEST, "resources/read", "file:///a:b"), None),
        ("mcp/request", (Kind.REQUEST, None, None), "mcp/request"),
        ("mcp/request:", (Kind.REQUEST, None, None), "mcp/request"),
        ("chat", (Kind.CHAT, None, None), "chat"),
        ("system/presence", (Kind.PRESENCE, "presence", None), "system/presence"),
        ("system/welcome", (Kind.SYSTEM, "welcome", None), "system/welcome"),
        ("system/error", (Kind.SYSTEM, "error", None), "system/error"),
    ],
)
def test_mcpx_kinds(kind: str, expected: tuple[Kind, str | None, str | None], action: str | None) -> None:
    assert mcpx.kind_of(kind) == expected
    ev = mcpx.decode(envelope(kind=kind, payload={}))
    assert (ev.kind, ev.method, ev.context) == expected
    assert ev.action == (action or kind)


def test_mcpx_broadcast_and_missing_payload() -> None:
    for extra in ({}, {"to": []}, {"to": None}):
        ev = mcpx.decode(envelope(**extra))
        assert ev.targets == ()
        assert ev.payload == {}
        assert ev.correlation_id is None


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ([], "an envelope must be a JSON object"),
        ("x", "an envelope must be a JSON object"),
        (None, "an envelope must be a JSON object"),
        ({"kind": "chat"}, "missing field(s): protocol, id, ts, from"),
        ({k: v for k, v in envelope().items() if k != "from"}, "missing field(s): from"),
        ({k: v for k, v in envelope().items() if k != "kind"}, "missing field(s): kind"),
        (envelope(protocol="mcpx/v0.0"), "protocol must be 'mcpx/v0.1'"),
        (envelope(protocol=None), "protocol must be 'mcpx/v0.1'"),
        (envelope(kind=5), "kind must be a string"),
        (envelope(kind="presence"), "unknown kind 'presence'"),
        (envelope(kind="mcp/other:tools/call"), "unknown kind"),
        (envelope(kind=""), "unknown kind"),
        (envelope(kind="chatty"), "unknown kind"),
        (envelope(to="bob"), "to must be an array of participant ids"),
        (envelope(to=["bob", 3]), "to must be an array of participant ids"),
        (envelope(to={"bob": True}), "to must be an array of participant ids"),
        (envelope(payload=[1]), "payload must be an object"),
        (envelope(payload="text"), "payload must be an object"),
        (envelope(correlation_id=7), "correlation_id must be a string"),
    ],
)
def test_mcpx_envelope_errors(value: Any, message: str) -> None:
    with pytest.raises(EnvelopeError) as info:
        mcpx.decode(value)
    assert message in str(info.value)
    assert isinstance(info.value, ValueError)


methods = st.text(st.characters(blacklist_characters=":", blacklist_categories=("Cs",)), min_size=1)
contexts = st.none() | st.text(st.characters(blacklist_categories=("Cs",)), min_size=1)


@given(st.sampled_from([Kind.REQUEST, Kind.RESPONSE, Kind.PROPOSAL]), methods, contexts)
def test_mcpx_kind_round_trips_through_action_string(kind: Kind, method: str, context: str | None) -> None:
    assert mcpx.kind_of(action_string(kind, method, context)) == (kind, method, context)
