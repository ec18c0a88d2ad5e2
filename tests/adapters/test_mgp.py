"""adapters/mgp: versions and negotiation, extension names, capability shapes of both eras, names."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from adapters import detect_dialects, mgp
from adapters.mgp import caps, extensions, names, versions
from gateway.events import Dialect

# ---- versions --------------------------------------------------------------------------------------

ALL = list(versions.SUPPORTED)


def test_supported_versions_are_the_seed_and_the_draft_line() -> None:
    assert versions.SUPPORTED == ("0.3", "0.5", "0.6", "0.7", "0.8")
    assert [versions.is_draft(v) for v in versions.SUPPORTED] == [False, True, True, True, True]
    assert versions.wire("0.8") == "0.8.0" and versions.parse("0.6.0-draft") == (0, 6)
    assert versions.parse("x") is None and versions.parse(8) is None


@pytest.mark.parametrize("ours", ALL)
@pytest.mark.parametrize("theirs", ALL)
def test_negotiation_table_for_every_pair(ours: str, theirs: str) -> None:
    result = mgp.negotiate(ours, versions.wire(theirs))
    expected = min(ours, theirs, key=lambda v: versions.parse(v) or (0, 0))  # the highest both support
    assert result.version == expected
    assert result.theirs == versions.wire(theirs)
    assert result.ours == ours
    assert result.mismatch is (ours != theirs)  # a different minor is logged (§2.5)
    assert result.draft is versions.is_draft(expected)


@pytest.mark.parametrize(
    ("theirs", "spoken", "mismatch"),
    [
        ("0.1.0", "0.3", True),  # below all of ours: the seed
        ("0.2.0-draft", "0.3", True),
        ("0.4.0", "0.3", True),  # between the seed and the draft line
        ("0.6.3", "0.6", True),
        ("0.8.1", "0.8", False),  # a patch is the same wire
        ("0.9.0", "0.8", True),  # newer than ours
        ("1.0.0", "0.8", True),
        (None, "0.3", True),
        ("garbage", "0.3", True),
    ],
)
def test_negotiation_with_every_supported_version_of_ours(theirs: Any, spoken: str, mismatch: bool) -> None:
    result = mgp.negotiate(versions.SUPPORTED, theirs)
    assert (result.version, result.mismatch) == (spoken, mismatch)
    assert bool(result.reason) is mismatch


def test_a_mismatch_is_logged_never_fatal(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="switchboard.mgp"):
        result = mgp.negotiate("0.8", "0.3.0", peer="backend fs")
    assert result.version == "0.3" and result.ours == "0.8" and result.mismatch
    assert any("backend fs" in record.getMessage() for record in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="switchboard.mgp"):
        assert not mgp.negotiate("0.8", "0.8.0").mismatch
    assert caplog.records == []


def test_negotiate_refuses_nonsense_of_ours() -> None:
    with pytest.raises(ValueError):
        mgp.negotiate("nope", "0.8")
    with pytest.raises(ValueError):
        mgp.negotiate("0.2", "0.8")  # nothing of ours at or below 0.2
    with pytest.raises(ValueError):
        mgp.negotiate([], "0.8")
    assert mgp.negotiate(["0.8", "0.3"], "0.7.0").version == "0.3"  # only what is offered


# ---- extension names -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("wire", "version", "canonical"),
    [
        (["security"], "0.3", {"permissions", "tool_security"}),
        (["bidirectional"], "0.3", {"callbacks", "events"}),
        (["streaming"], "0.3", {"streaming", "progress"}),  # the seed's §12.6 is part of streaming
        (["streaming"], "0.6", {"streaming"}),
        (["permissions", "tool_security", "events"], "0.3", {"permissions", "tool_security", "events"}),
        (["security", "permissions", "audit"], None, {"permissions", "tool_security", "audit"}),
        (["com.example.custom", 3, "", None], None, {"com.example.custom"}),
        ("security", None, set()),  # not a list
        (None, None, set()),
    ],
)
def test_both_name_sets_read_as_canonical(wire: Any, version: str | None, canonical: set[str]) -> None:
    assert extensions.canonical(wire, version) == canonical


def test_every_seed_name_has_a_canonical_reading_and_back() -> None:
    for name in extensions.SEED_EXTENSIONS:
        parts = extensions.canonical([name])
        assert parts <= extensions.ALL
        assert extensions.to_wire(parts, "0.3") == [name]
    for name in extensions.DRAFT_EXTENSIONS:
        assert extensions.to_wire([name], "0.8") == [name]


@pytest.mark.parametrize(
    ("active", "version", "wire"),
    [
        ({"permissions", "tool_security", "audit"}, "0.3", ["audit", "security"]),
        ({"permissions"}, "0.5", ["security"]),  # a seed-named peer can only say the whole
        ({"callbacks", "events", "progress", "streaming"}, "0.3", ["bidirectional", "streaming"]),
        ({"progress"}, "0.3", []),
        ({"permissions", "tool_security", "audit"}, "0.6", ["audit", "permissions", "tool_security"]),
        ({"security", "bidirectional"}, "0.8", ["callbacks", "events", "permissions", "tool_security"]),
        ({"delegation", "x.custom"}, "0.3", ["delegation", "x.custom"]),
    ],
)
def test_canonical_written_for_each_version(active: set[str], version: str, wire: list[str]) -> None:
    assert extensions.to_wire(active, version) == wire


@pytest.mark.parametrize(
    ("client", "server", "active"),
    [
        (["security", "audit"], ["permissions", "audit", "streaming"], {"permissions", "audit"}),
        (["bidirectional"], ["events"], {"events"}),
        (["tool_security"], ["security"], {"tool_security"}),
        ([], ["audit"], set()),
        (None, ["audit"], set()),  # a client without mgp gets none
        (["audit"], None, set()),  # a server without mgp: standard MCP
    ],
)
def test_active_set_is_the_intersection(client: Any, server: Any, active: set[str]) -> None:
    assert extensions.active(client, server) == active


# ---- capabilities, both eras -------------------------------------------------------------------------

OBJ = {"version": "0.8.0", "extensions": ["permissions", "tool_security"], "permissions_required": ["shell.execute"]}


@pytest.mark.parametrize(
    "message_part",
    [
        {"capabilities": {"mgp": OBJ}},  # seed §2.2 / draft §2.2
        {"capabilities": {"experimental": {"mgp": OBJ}}},  # Python SDK servers
        {"capabilities": {"tools": {}, "extensions": {"dev.cloto/mgp": OBJ}}},  # server/discover (§2.6)
        {"name": "t", "_meta": {"io.modelcontextprotocol/clientCapabilities": {"extensions": {"dev.cloto/mgp": OBJ}}}},
    ],
)
def test_capability_read_in_every_place(message_part: dict[str, Any]) -> None:
    assert mgp.capabilities(message_part) == OBJ
    assert mgp.speaks(message_part)
    parsed = caps.read(message_part)
    assert parsed is not None
    assert parsed.version == "0.8.0" and parsed.extensions == {"permissions", "tool_security"}
    assert parsed.permissions_required == ("shell.execute",)
    assert Dialect.MGP in detect_dialects(message_part)


@pytest.mark.parametrize(
    "message_part",
    [
        {},
        {"capabilities": {"extensions": {"dev.cloto/mgp": True}}},
        {"capabilities": {"extensions": []}},
        {"_meta": {"io.modelcontextprotocol/clientCapabilities": {"extensions": {"other/ext": {}}}}},
        {"_meta": {"io.modelcontextprotocol/clientCapabilities": []}},
    ],
)
def test_no_capability_means_plain_mcp(message_part: dict[str, Any]) -> None:
    assert mgp.capabilities(message_part) is None and caps.read(message_part) is None
    assert not mgp.speaks(message_part)


def test_parse_is_lenient_and_reads_the_seed_meaning() -> None:
    parsed = caps.parse({"version": 3, "extensions": ["streaming"], "server_id": 1, "trust_level": "trusted"})
    assert parsed.version is None and parsed.server_id is None and parsed.trust_level == "trusted"
    assert caps.parse({"version": "0.3.0", "extensions": ["streaming"]}).extensions == {"streaming", "progress"}


def test_capability_written_for_each_era() -> None:
    obj = caps.build("0.3", {"permissions", "tool_security", "audit"}, server_id="gw", trust_level="standard")
    assert obj == {
        "version": "0.3.0",
        "extensions": ["audit", "security"],
        "server_id": "gw",
        "trust_level": "standard",
    }
    legacy: dict[str, Any] = {"tools": {}}
    caps.put_legacy(legacy, obj)
    assert legacy == {"tools": {}, "mgp": obj}
    experimental: dict[str, Any] = {"experimental": {"mcpl": {}}}
    caps.put_legacy(experimental, obj, experimental=True)
    assert experimental == {"experimental": {"mcpl": {}, "mgp": obj}}
    modern = caps.build("0.8", {"permissions"}, permissions_required=["network.outbound"])
    discover: dict[str, Any] = {"resultType": "complete", "capabilities": {"tools": {}}}
    caps.put_discover(discover, modern)
    assert discover["capabilities"]["extensions"] == {
        "dev.cloto/mgp": {
            "version": "0.8.0",
            "extensions": ["permissions"],
            "permissions_required": ["network.outbound"],
        }
    }
    params: dict[str, Any] = {"name": "t", "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}
    caps.put_request(params, modern)
    assert params["_meta"]["io.modelcontextprotocol/clientCapabilities"] == {"extensions": {"dev.cloto/mgp": modern}}
    assert params["_meta"]["io.modelcontextprotocol/protocolVersion"] == "2026-07-28"
    for written in (discover, params):
        assert mgp.capabilities(written) == modern


def test_answer_to_a_client() -> None:
    ours = extensions.ALL
    assert caps.answer(None, ours, "0.8") is None  # §2.4 rule 3
    seed_client = {"version": "0.3.0", "extensions": ["security", "audit", "unknown"]}
    assert caps.answer(seed_client, ours, "0.3") == {"version": "0.3.0", "extensions": ["audit", "security"]}
    assert caps.answer(seed_client, {"audit"}, "0.3") == {"version": "0.3.0", "extensions": ["audit"]}
    draft_client = {"version": "0.8.0", "extensions": ["permissions", "events"]}
    assert caps.answer(draft_client, ours, "0.8", server_id="switchboard") == {
        "version": "0.8.0",
        "extensions": ["events", "permissions"],
        "server_id": "switchboard",
    }


def test_grants_both_forms_and_the_modern_meta() -> None:
    mixed = {"shell.execute": "approved", "fs.read": {"decision": "approved", "scope": {"paths": ["/tmp/**"]}}}
    mixed |= {"net": "denied", "x": "maybe", "y": {"decision": 1}, "z": {"decision": "deferred", "scope": 3}}
    assert caps.normalize_grants(mixed) == {
        "shell.execute": {"decision": "approved"},
        "fs.read": {"decision": "approved", "scope": {"paths": ["/tmp/**"]}},
        "net": {"decision": "denied"},
        "z": {"decision": "deferred"},
    }
    assert caps.approved(mixed) == {"shell.execute", "fs.read"}
    assert caps.normalize_grants(["approved"]) == {}
    params = caps.grant_params("perm-1", {"shell.execute": "approved"}, expires_at="2026-11-24T00:00:00Z")
    assert params == {
        "request_id": "perm-1",
        "grants": {"shell.execute": {"decision": "approved"}},  # object form, as the real kernel sends
        "expires_at": "2026-11-24T00:00:00Z",
    }
    request: dict[str, Any] = {"name": "run"}
    caps.put_grants(request, {"shell.execute": "approved"})
    assert request["_meta"]["dev.cloto/mgp/grants"] == {"shell.execute": {"decision": "approved"}}
    assert caps.read_grants(request) == {"shell.execute": {"decision": "approved"}}
    caps.put_grants(request, "handle-abc")
    assert caps.read_grants(request) == "handle-abc"
    assert caps.read_grants({"name": "run"}) is None  # absent grants = ungranted (§3.8)


# ---- names --------------------------------------------------------------------------------------------


def test_method_and_notification_names_of_both_wires() -> None:
    assert "mgp/tools/session/evict" in names.SEED_METHODS and "mgp/lifecycle/shutdown" in names.SEED_METHODS
    assert names.DRAFT_METHODS == {
        "mgp/permission/await",
        "mgp/permission/grant",
        "mgp/callback/respond",
        "mgp/stream/cancel",
    }
    assert len(names.DRAFT_NOTIFICATIONS) == 8  # §1.6 Layer 2
    assert names.SEED_NOTIFICATIONS < names.DRAFT_NOTIFICATIONS
    assert all(names.is_mgp_method(m) for m in names.SEED_METHODS | names.DRAFT_METHODS)
    assert all(names.is_mgp_notification(n) for n in names.DRAFT_NOTIFICATIONS)
    assert not names.is_mgp_method("tools/call") and not names.is_mgp_notification("notifications/progress")
    assert names.permission_methods("0.3") == ("mgp/permission/request", "mgp/permission/response")
    assert names.permission_methods("0.8") == ("mgp/permission/await", "mgp/permission/grant")


@pytest.mark.parametrize(
    ("tool", "method"),
    [
        ("mgp.access.query", "mgp/access/query"),
        ("mgp.access.grant", "mgp/access/grant"),
        ("mgp.access.revoke", "mgp/access/revoke"),
        ("mgp.tools.discover", "mgp/tools/discover"),
        ("mgp.tools.request", "mgp/tools/request"),
        ("mgp.health.ping", "mgp/health/ping"),
        ("mgp.lifecycle.shutdown", "mgp/lifecycle/shutdown"),
        ("mgp.events.subscribe", "mgp/events/subscribe"),
        ("mgp.audit.replay", None),  # draft only
        ("mgp.events.replay", None),
    ],
)
def test_kernel_tools_and_seed_methods_map_both_ways(tool: str, method: str | None) -> None:
    assert names.method_for_kernel_tool(tool) == method
    if method is not None:
        assert names.kernel_tool_for_method(method) == tool


def test_kernel_tool_schemas_as_the_draft_defines_them() -> None:
    required = {
        "mgp.access.query": ["agent_id", "server_id"],
        "mgp.access.grant": ["entry_type", "agent_id", "server_id", "permission"],
        "mgp.access.revoke": ["agent_id", "server_id", "entry_type"],
        "mgp.tools.discover": ["query"],
        "mgp.tools.request": ["reason", "context", "requirements"],
        "mgp.events.replay": ["subscription_id", "after_seq"],
    }
    for name, fields in required.items():
        assert names.KERNEL_TOOL_SCHEMAS[name]["required"] == fields
    assert "required" not in names.KERNEL_TOOL_SCHEMAS["mgp.audit.replay"]
    discover = names.KERNEL_TOOL_SCHEMAS["mgp.tools.discover"]["properties"]
    assert discover["filter"]["properties"]["risk_level_max"]["enum"] == ["safe", "moderate", "dangerous"]
    assert names.KERNEL_TOOL_SCHEMAS["mgp.access.grant"]["properties"]["permission"]["enum"] == ["allow", "deny"]
    tool = names.kernel_tool("mgp.access.grant", "Grant access")
    assert tool["_mgp"] == {"source": "kernel", "admin_only": True}
    assert names.kernel_tool("mgp.tools.discover")["_mgp"] == {"source": "kernel", "admin_only": False}
    tool["inputSchema"]["required"].append("mutated")  # a copy, never the table
    assert "mutated" not in names.KERNEL_TOOL_SCHEMAS["mgp.access.grant"]["required"]
    assert names.is_kernel_tool_entry(tool) and not names.is_kernel_tool_entry({"name": "x"})
    assert names.kernel_tools_for("0.3") == () and "mgp.tools.discover" in names.kernel_tools_for("0.5")
    assert names.LLM_CONTEXT == {"mgp.tools.discover", "mgp.tools.request"}


@pytest.mark.parametrize(
    ("name", "reserved"),
    [
        ("mgp.access.query", True),
        ("mgp.", True),
        ("mgp.custom", True),
        ("mgp", False),
        ("mgp_x", False),
        ("MGP.x", False),
        ("x.mgp.y", False),
        ("fs__read", False),
        (None, False),
        (3, False),
    ],
)
def test_the_reserved_prefix(name: Any, reserved: bool) -> None:
    assert names.is_reserved_tool_name(name) is reserved


def test_reserved_backend_tools_are_withheld() -> None:
    tools = [{"name": "read"}, {"name": "mgp.access.grant"}, "junk", {"name": "mgp.evil"}, {"title": "no name"}]
    kept, withheld = names.withhold_reserved(tools)
    assert kept == [{"name": "read"}, "junk", {"title": "no name"}]
    assert withheld == ["mgp.access.grant", "mgp.evil"]
    assert int(mgp.MgpCode.TOOL_NAME_CONFLICT) == 4003
    assert {"TOOL_NAME_CONFLICT", "TOOL_BLOCKED", "RISK_LEVEL_OVERRIDE"} <= names.AUDIT_EVENT_TYPES
