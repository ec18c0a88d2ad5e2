"""MCPL through the gateway: real MCPL servers (stdio and HTTP) behind it, a real MCPL host in front.

The servers play the spec's §15 Memory and Compliance servers (and a notes, a files and a channels
server); the host is a WebSocket MCPL host. Every test checks both ends: what the host saw and what
the backend recorded (its ``stats`` tool).
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from mcp.client import Client

from tests.e2e.mcpl_host import McplHost
from tests.support import (
    JSON_HEADERS,
    RunningGateway,
    http_server,
    initialize_params,
    initialize_request,
    run_gateway,
    stdio_backend,
)


def mcpl_backend(role: str, *args: str, **extra: Any) -> dict[str, Any]:
    return stdio_backend("tests.e2e.backends.mcpl_server", "--role", role, *args, **{"required": True, **extra})


def ws_url(gateway: RunningGateway, server: str | None = None) -> str:
    return gateway.ws(f"/servers/{server}/mcp/ws" if server else "/mcp/ws")


async def stats(host: McplHost, tool: str) -> dict[str, Any]:
    return await host.call_tool(tool)


async def eventually(check: Callable[[], Any], timeout: float = 10.0) -> Any:
    """Poll an async check until it returns something truthy (every wait is bounded)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = await check()
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.05)


async def enable(
    host: McplHost, tool: str, enabled: list[str], disabled: list[str] | None = None, **extra: Any
) -> dict[str, Any]:
    """Send featureSets/update and wait until the backend behind ``tool`` got a configuration."""
    before = len((await stats(host, tool))["featureSetUpdates"])
    await host.notify("featureSets/update", {"enabled": enabled, "disabled": disabled or [], **extra})

    async def arrived() -> Any:
        updates = (await stats(host, tool))["featureSetUpdates"]
        return updates[-1] if len(updates) > before else None

    return await eventually(arrived)


AUDIT_DIR = Path(tempfile.mkdtemp(prefix="switchboard-mcpl-audit-"))


@pytest.fixture(scope="module")
def gateway() -> Iterator[RunningGateway]:
    config = {
        "backends": {
            "mem1": mcpl_backend("memory", "--name", "mem1"),
            "mem2": mcpl_backend("memory", "--name", "mem2"),
            "comp": mcpl_backend("compliance"),
            "notes": mcpl_backend("notes"),
            "files": mcpl_backend("files"),
            "chan": mcpl_backend("channels"),
        },
        "mcpl": {
            "hook_order": ["mem2"],
            "routing": {"mem1": {"memory.*": {"modelTier": "small"}}},
            "scopes": {"files.edit": {"whitelist": ["/srv/**"], "blacklist": ["/etc/**"]}},
        },
        "audit": {"file": str(AUDIT_DIR / "audit.jsonl")},
    }
    with run_gateway(config) as gw:
        yield gw


# ---- negotiation -------------------------------------------------------------------------------


async def test_host_is_shown_the_merged_mcpl_capabilities(gateway: RunningGateway) -> None:
    async with McplHost.connect(ws_url(gateway)) as host:
        caps = host.server_mcpl
        assert caps is not None and caps["version"] == "0.4"
        names = set(caps["featureSets"])
        assert {"mem1.memory.retrieval", "mem2.memory.retrieval", "comp.compliance.redaction"} <= names
        assert {"files.files.edit", "files.files.watch"} <= names, "the array-shaped featureSets server is read"
        assert caps["featureSets"]["files.files.edit"] == {
            "description": "Edit files",
            "uses": ["tools"],
            "scoped": True,
        }
        assert caps["pushEvents"] is True and caps["modelInfo"] is True
        assert caps["contextHooks"] == {"beforeInference": True, "afterInference": {"blocking": True}}
        assert caps["channels"]["publish"] is True, "channels: true (a boolean) counts as every channel feature"

    async with McplHost.connect(ws_url(gateway, "mem1")) as single:
        assert set(single.server_mcpl["featureSets"]) == {
            "memory.retrieval",
            "memory.extraction",
            "memory.consolidation",
            "memory.proactive",
        }, "one backend: bare names"


async def test_backends_get_host_capabilities_and_an_initial_configuration(gateway: RunningGateway) -> None:
    async with McplHost.connect(ws_url(gateway)) as host:
        record = await stats(host, "mem1__stats")
        offered = record["initialize"]["capabilities"]["experimental"]["mcpl"]
        assert offered["version"] == "0.4" and offered["pushEvents"] is True
        first = record["featureSetUpdates"][0]
        assert first["enabled"] == [] and "memory.retrieval" in first["disabled"], "unnamed = disabled"


async def test_plain_mcp_client_gets_tools_and_no_mcpl(gateway: RunningGateway) -> None:
    async with Client(f"{gateway.url}/mcp", mode="legacy", read_timeout_seconds=30) as sdk:
        experimental = sdk.server_capabilities.experimental if sdk.server_capabilities else None
        assert "mcpl" not in (experimental or {})
        names = {t.name for t in (await sdk.list_tools()).tools}
        assert {"mem1__remember", "files__edit_file", "notes__add_note"} <= names
        result = await sdk.call_tool("mem1__push", {"eventId": "plain-1", "text": "hello"})
        answer = json.loads(result.content[0].text)
        assert answer["error"]["code"] == -32001, "no MCPL host has it enabled: the feature is silent"
        assert answer["error"]["data"] == {"featureSet": "memory.proactive", "canEnable": True}


# ---- feature sets ------------------------------------------------------------------------------


async def test_host_wildcards_become_explicit_backend_configuration(gateway: RunningGateway) -> None:
    async with McplHost.connect(ws_url(gateway)) as host:
        update = await enable(host, "mem1__stats", ["mem1.memory.*"], ["mem1.memory.consolidation"])
        assert update["enabled"] == ["memory.extraction", "memory.proactive", "memory.retrieval"]
        assert update["disabled"] == ["memory.consolidation"]
        assert (await stats(host, "mem2__stats"))["featureSetUpdates"][-1]["enabled"] == []
    # The session ended: the backend is told that nothing is enabled any more.
    async with McplHost.connect(ws_url(gateway, "mem1")) as other:
        last = (await stats(other, "stats"))["featureSetUpdates"][-1]
        assert last["enabled"] == []


async def test_disabled_and_unknown_feature_sets_are_refused(gateway: RunningGateway) -> None:
    async with McplHost.connect(ws_url(gateway)) as host:
        await enable(host, "mem1__stats", ["mem1.memory.proactive"])
        disabled = await host.call_tool(
            "mem1__push", {"eventId": "d-1", "text": "x", "featureSet": "memory.consolidation"}
        )
        assert disabled["error"]["code"] == -32001
        assert disabled["error"]["data"] == {"featureSet": "memory.consolidation", "canEnable": True}
        unknown = await host.call_tool("mem1__push", {"eventId": "d-2", "text": "x", "featureSet": "memory.nope"})
        assert unknown["error"]["code"] == -32003
        untagged = await host.call_tool("mem1__ask", {"method": "push/event", "params": {"eventId": "d-3"}})
        assert untagged["error"]["code"] == -32602
        assert not [r for r in host.requests if r["method"] == "push/event"], "nothing refused reached the host"


# ---- push events -------------------------------------------------------------------------------


async def test_push_event_is_delivered_and_deduplicated(gateway: RunningGateway) -> None:
    async with McplHost.connect(ws_url(gateway)) as host:
        await enable(host, "mem1__stats", ["mem1.memory.proactive"])
        first = await host.call_tool("mem1__push", {"eventId": "evt_reminder_001", "text": "Follow up with Alice"})
        assert first == {"result": {"accepted": True, "inferenceId": "inf_1"}}
        pushed = await host.wait_request("push/event")
        params = pushed["params"]
        assert params["featureSet"] == "mem1.memory.proactive" and params["eventId"] == "evt_reminder_001"
        assert params["origin"] == {"server": "mem1"}
        assert params["payload"] == {"content": [{"type": "text", "text": "Follow up with Alice"}]}
        again = await host.call_tool("mem1__push", {"eventId": "evt_reminder_001", "text": "Follow up with Alice"})
        assert again == {"result": {"accepted": False, "reason": "duplicate"}}
        assert len([r for r in host.requests if r["method"] == "push/event"]) == 1


async def test_push_rejected_by_every_host_can_be_retried(gateway: RunningGateway) -> None:
    async with McplHost.connect(ws_url(gateway)) as host:
        await enable(host, "mem1__stats", ["mem1.memory.proactive"])

        async def busy(message: dict[str, Any]) -> dict[str, Any]:
            return {"accepted": False, "reason": "busy"}

        default = host.handlers["push/event"]
        host.handlers["push/event"] = busy
        assert await host.call_tool("mem1__push", {"eventId": "retry-1", "text": "x"}) == {
            "result": {"accepted": False, "reason": "busy"}
        }
        host.handlers["push/event"] = default
        retried = await host.call_tool("mem1__push", {"eventId": "retry-1", "text": "x"})
        assert retried["result"]["accepted"] is True, "a rejected event is not remembered as seen"


# ---- context hooks -----------------------------------------------------------------------------


async def test_before_inference_fans_out_and_merges_in_order(gateway: RunningGateway) -> None:
    async with McplHost.connect(ws_url(gateway)) as host:
        await host.call_tool("mem1__remember", {"text": "Scaling mannequin installation to 8-10 units."})
        await host.call_tool("mem2__remember", {"text": "DMX lighting, X32 audio routing."})
        await enable(host, "mem1__stats", ["*.memory.retrieval"])
        params = {
            "inferenceId": "inf_xyz",
            "conversationId": "conv_123",
            "turnIndex": 7,
            "userMessage": "How's the mannequin project?",
            "model": {"id": "claude-opus-4-5-20251101", "vendor": "anthropic", "contextWindow": 200000},
        }
        response = await host.request("context/beforeInference", params)
        injections = response["result"]["contextInjections"]
        assert [i["server"] for i in injections] == ["mem2", "mem1"], "mcpl.hook_order puts mem2 first"
        assert [i["featureSet"] for i in injections] == ["mem2.memory.retrieval", "mem1.memory.retrieval"]
        mem1 = injections[1]
        assert mem1["namespace"] == "memory" and mem1["position"] == "system"
        assert mem1["content"][0]["text"].startswith("<memories>\n") and "mannequin" in mem1["content"][0]["text"]
        assert mem1["metadata"]["memoryIds"]
        seen = (await stats(host, "mem1__stats"))["hooks"][-1]
        assert seen == params, "the hook reaches the backend exactly as the host sent it"
        assert "featureSet" not in response["result"], "several feature sets contributed"


async def test_after_inference_notification_reaches_extraction_only(gateway: RunningGateway) -> None:
    async with McplHost.connect(ws_url(gateway)) as host:
        await enable(host, "mem1__stats", ["mem1.memory.extraction"])
        params = {"inferenceId": "inf_n", "conversationId": "c", "turnIndex": 1, "assistantMessage": "ok"}
        await host.notify("context/afterInference", params)

        async def arrived() -> Any:
            return [n for n in (await stats(host, "mem1__stats"))["notifications"] if n["params"] == params]

        assert await eventually(arrived)
        mem2 = await stats(host, "mem2__stats")
        assert not [n for n in mem2["notifications"] if n["params"] == params], "mem2 has extraction disabled"


async def test_compliance_redaction_flow(gateway: RunningGateway) -> None:
    async with McplHost.connect(ws_url(gateway, "comp")) as host:
        await enable(host, "stats", ["compliance.redaction"])
        response = await host.request(
            "context/afterInference",
            {
                "inferenceId": "inf_abc",
                "conversationId": "conv_456",
                "turnIndex": 3,
                "userMessage": "What's the API key?",
                "assistantMessage": "The API key is sk-1234567890abcdef...",
                "usage": {"inputTokens": 50, "outputTokens": 20},
            },
        )
        result = response["result"]
        assert result["modifiedResponse"] == "The API key is [REDACTED]..."
        assert result["featureSet"] == "compliance.redaction"
        assert result["metadata"]["chain"] == [
            {
                "server": "comp",
                "featureSet": "compliance.redaction",
                "modified": True,
                "metadata": {"redactions": [{"type": "api_key"}]},
            }
        ]


async def test_hook_answer_from_a_disabled_feature_set_is_dropped(gateway: RunningGateway) -> None:
    async with McplHost.connect(ws_url(gateway, "comp")) as host:
        # Nothing enabled: the compliance server is not even asked.
        response = await host.request("context/afterInference", {"inferenceId": "i", "assistantMessage": "sk-abc"})
        assert response["result"] == {}


# ---- inference, model info, state --------------------------------------------------------------


async def test_inference_request_streams_with_remapped_ids_and_routing_hints(gateway: RunningGateway) -> None:
    async with McplHost.connect(ws_url(gateway)) as host:
        await enable(host, "mem1__stats", ["mem1.memory.consolidation"])
        answer = await host.call_tool(
            "mem1__infer", {"featureSet": "memory.consolidation", "stream": True, "conversationId": "conv_9"}
        )
        assert answer["answer"]["result"]["content"] == "Consolidated memory summary"
        assert [c["delta"] for c in answer["chunks"]] == ["Consolidated ", "memory ", "summary"]
        server_id = answer["chunks"][0]["requestId"]
        assert isinstance(server_id, str) and server_id.startswith("s-"), "chunks carry the server's own id"
        request = await host.wait_request("inference/request")
        assert request["params"]["featureSet"] == "mem1.memory.consolidation"
        assert request["params"]["preferences"] == {"maxTokens": 500, "temperature": 0.7, "modelTier": "small"}
        assert request["id"] != server_id, "the host sees the gateway's id"


async def test_inference_request_without_an_enabled_host_is_answered(gateway: RunningGateway) -> None:
    async with McplHost.connect(ws_url(gateway)) as host:
        answer = await host.call_tool("mem2__infer", {"featureSet": "memory.consolidation", "stream": False})
        assert answer["answer"]["error"]["code"] == -32001


async def test_model_info_is_relayed_to_the_host(gateway: RunningGateway) -> None:
    async with McplHost.connect(ws_url(gateway)) as host:
        answer = await host.call_tool("mem1__ask", {"method": "model/info", "params": {}})
        assert answer == {
            "result": {"id": "test-model", "vendor": "test", "contextWindow": 200000, "capabilities": ["tools"]}
        }


async def test_state_and_rollback_are_relayed_faithfully(gateway: RunningGateway) -> None:
    async with McplHost.connect(ws_url(gateway)) as host:
        await enable(host, "notes__stats", ["notes.notes.edit"])
        first = await host.request("tools/call", {"name": "notes__add_note", "arguments": {"text": "Remember to..."}})
        state = first["result"]["state"]
        assert state["checkpoint"].startswith("chk_") and state["patch"][0]["op"] == "add"
        await host.request(
            "tools/call",
            {
                "name": "notes__add_note",
                "arguments": {"text": "Buy groceries"},
                "state": {"notes": [{"id": 1}]},
                "checkpoint": state["checkpoint"],
                "x-unknown": {"kept": True},
            },
        )
        sent = [c for c in (await stats(host, "notes__stats"))["toolCalls"] if c["name"] == "add_note"][-1]
        assert sent["checkpoint"] == state["checkpoint"] and sent["state"] == {"notes": [{"id": 1}]}
        assert sent["x-unknown"] == {"kept": True}
        rolled = await host.request(
            "state/rollback", {"featureSet": "notes.notes.edit", "checkpoint": state["checkpoint"]}
        )
        assert rolled["result"] == {"checkpoint": state["checkpoint"], "success": True}
        missing = await host.request("state/rollback", {"featureSet": "notes.notes.edit", "checkpoint": "chk_old"})
        assert missing["error"]["code"] == -32005 and missing["error"]["data"] == {"checkpoint": "chk_old"}
        unknown = await host.request("state/rollback", {"featureSet": "nope", "checkpoint": "chk_1"})
        assert unknown["error"]["code"] == -32003


async def test_plain_client_cannot_use_mcpl_methods(gateway: RunningGateway) -> None:
    async with McplHost.connect(ws_url(gateway), mcpl=None) as plain:
        response = await plain.request("context/beforeInference", {"inferenceId": "x"})
        assert response["error"]["code"] == -32601
        # A scoped call from a plain client still meets the operator's blacklist.
        denied = await plain.request(
            "tools/call", {"name": "files__edit_file", "arguments": {"path": "/etc/x"}, "scope": {"label": "/etc/x"}}
        )
        assert denied["error"]["code"] == -32093
        allowed = await plain.request(
            "tools/call", {"name": "files__edit_file", "arguments": {"path": "/p/x"}, "scope": {"label": "/p/x"}}
        )
        assert "result" in allowed


# ---- scopes ------------------------------------------------------------------------------------


async def test_every_scope_elevate_branch(gateway: RunningGateway) -> None:
    async with McplHost.connect(ws_url(gateway, "files")) as host:

        def elevate(label: str) -> dict[str, Any]:
            scope = {"label": label, "payload": {"path": label}}
            return {"method": "scope/elevate", "params": {"featureSet": "files.edit", "scope": scope}}

        disabled = await host.call_tool("ask", elevate("/project/a"))
        assert disabled["error"]["code"] == -32001
        scopes = {"files.edit": {"whitelist": ["/project/**", "/etc/hosts"], "blacklist": ["**/.env"]}}
        await enable(host, "stats", ["files.*"], scopes=scopes)
        operator = await host.call_tool("ask", elevate("/etc/hosts"))
        assert operator["result"]["approved"] is False and "operator" in operator["result"]["reason"]
        host_black = await host.call_tool("ask", elevate("/project/.env"))
        assert host_black["result"]["approved"] is False and "**/.env" in host_black["result"]["reason"]
        white = await host.call_tool("ask", elevate("/project/src/main.ts"))
        assert white == {"result": {"approved": True, "payload": {"path": "/project/src/main.ts"}}}
        operator_white = await host.call_tool("ask", elevate("/srv/data"))
        assert operator_white["result"]["approved"] is True
        assert not [r for r in host.requests if r["method"] == "scope/elevate"], "decided without asking the host"

        async def approve(message: dict[str, Any]) -> dict[str, Any]:
            label = message["params"]["scope"]["label"]
            if label == "/home/y":
                return {"approved": False, "reason": "user declined"}
            return {"approved": True, "payload": {**message["params"]["scope"]["payload"], "resolved": True}}

        host.handlers["scope/elevate"] = approve
        asked = await host.call_tool("ask", elevate("/home/x"))
        assert asked == {"result": {"approved": True, "payload": {"path": "/home/x", "resolved": True}}}
        forwarded = await host.wait_request("scope/elevate")
        assert forwarded["params"]["featureSet"] == "files.edit"
        cached = await host.call_tool("ask", elevate("/home/x"))
        assert cached["result"]["approved"] is True
        assert len([r for r in host.requests if r["method"] == "scope/elevate"]) == 1, "the approval was cached"
        declined = await host.call_tool("ask", elevate("/home/y"))
        assert declined == {"result": {"approved": False, "reason": "user declined"}}


async def test_scoped_tool_call_is_checked_before_forwarding(gateway: RunningGateway) -> None:
    async with McplHost.connect(ws_url(gateway, "files")) as host:
        await enable(host, "stats", ["files.edit"], scopes={"files.edit": {"blacklist": ["**/secrets/**"]}})
        ok = await host.request(
            "tools/call", {"name": "edit_file", "arguments": {"path": "/p/a"}, "scope": {"label": "/p/a"}}
        )
        assert "result" in ok
        edits = [c for c in (await stats(host, "stats"))["toolCalls"] if c["name"] == "edit_file"]
        assert edits[-1]["scope"] == {"label": "/p/a"}
        for label in ("/etc/passwd", "/p/secrets/key"):
            denied = await host.request(
                "tools/call", {"name": "edit_file", "arguments": {"path": label}, "scope": {"label": label}}
            )
            assert denied["error"]["code"] == -32093 and denied["error"]["data"]["scope"] == label
        calls = (await stats(host, "stats"))["toolCalls"]
        assert not [c for c in calls if (c.get("arguments") or {}).get("path") in ("/etc/passwd", "/p/secrets/key")]


# ---- channels ----------------------------------------------------------------------------------


async def test_channel_round_trip(gateway: RunningGateway) -> None:
    async with McplHost.connect(ws_url(gateway)) as host:

        async def listed() -> Any:
            channels = (await host.request("channels/list"))["result"]["channels"]
            return channels if len(channels) >= 2 else None

        ids = {c["id"] for c in await eventually(listed)}
        assert {"chan.discord:#general", "chan.discord:#random"} <= ids
        await enable(
            host,
            "chan__stats",
            ["chan.channels.*"],
            scopes={"chan.channels.publish": {"blacklist": ["chan.discord:#random"]}},
        )
        content = [{"type": "text", "text": "Hello team"}]
        sent = await host.request(
            "channels/publish", {"conversationId": "conv_1", "channelId": "chan.discord:#general", "content": content}
        )
        assert sent["result"]["delivered"] is True and sent["result"]["messageId"].startswith("msg_")
        published = (await stats(host, "chan__stats"))["published"][-1]
        assert published["channelId"] == "discord:#general" and published["content"] == content
        refused = await host.request("channels/publish", {"channelId": "chan.discord:#random", "content": content})
        assert refused["error"]["code"] == -32017
        unknown = await host.request("channels/publish", {"channelId": "chan.discord:#nope", "content": content})
        assert unknown["error"]["code"] == -32023

        opened = await host.request(
            "channels/open", {"type": "discord", "address": {"guild": "acme", "channel": "#dev"}}
        )
        assert opened["result"]["channel"]["id"] == "chan.discord:#dev"
        changed = await host.wait_notification(
            "channels/changed", lambda m: any(c["id"] == "chan.discord:#dev" for c in m["params"].get("added", []))
        )
        assert changed["params"]["added"][0]["type"] == "discord"
        broken = await host.request("channels/open", {"type": "discord", "address": {"channel": "#broken"}})
        assert broken["error"]["code"] == -32024

        await host.notify(
            "channels/outgoing/chunk",
            {
                "inferenceId": "i",
                "conversationId": "c",
                "channelId": "chan.discord:#general",
                "index": 0,
                "delta": "Hi",
            },
        )

        async def observed() -> Any:
            return (await stats(host, "chan__stats"))["observed"]

        seen = (await eventually(observed))[-1]
        assert seen["method"] == "channels/outgoing/chunk" and seen["params"]["channelId"] == "discord:#general"

        incoming = await host.call_tool("chan__incoming", {"channelId": "discord:#general", "texts": ["What's up?"]})
        assert incoming["result"]["results"][0]["accepted"] is True
        assert incoming["result"]["results"][0]["conversationId"] == "conv_ch"
        delivered = await host.wait_request("channels/incoming")
        assert delivered["params"]["messages"][0]["channelId"] == "chan.discord:#general"
        stray = await host.call_tool("chan__incoming", {"channelId": "discord:#nope", "texts": ["?"]})
        assert stray["result"]["results"][0] == {"messageId": "dmsg_2", "accepted": False, "reason": "Unknown channel"}

        tagged = {"featureSet": "channels.observe", "messages": [{"channelId": "discord:#general", "messageId": "t1"}]}
        passed = await host.call_tool("chan__ask", {"method": "channels/incoming", "params": tagged})
        assert passed["result"]["results"][0]["accepted"] is True, "a tag that is enabled passes"
        wrong_tag = {**tagged, "featureSet": "channels.nope"}
        unknown_tag = await host.call_tool("chan__ask", {"method": "channels/incoming", "params": wrong_tag})
        assert unknown_tag["error"]["code"] == -32003, "a channel message that carries a tag is held to it"

        asked = await host.call_tool("chan__ask", {"method": "channels/list", "params": {}})
        assert {c["id"] for c in asked["result"]["channels"]} >= {"discord:#general", "discord:#random"}
        closed = await host.request("channels/close", {"channelId": "chan.discord:#dev"})
        assert closed["result"] == {"closed": True}


# ---- audit -------------------------------------------------------------------------------------


async def test_every_decision_is_audited(gateway: RunningGateway) -> None:
    async with McplHost.connect(ws_url(gateway)) as host:
        await enable(host, "mem1__stats", ["mem1.memory.proactive"])
        await host.call_tool("mem1__push", {"eventId": "audit-1", "text": "x"})
        await host.call_tool("mem1__push", {"eventId": "audit-1", "text": "x"})
        await host.call_tool("mem1__push", {"eventId": "audit-2", "text": "x", "featureSet": "memory.nope"})
    path = AUDIT_DIR / "audit.jsonl"

    def records() -> list[dict[str, Any]]:
        lines = path.read_text().splitlines() if path.exists() else []
        return [r for r in map(json.loads, lines) if r.get("dialect") == "mcpl"]

    async def written() -> Any:
        found = {(r["method"], r["outcome"]) for r in records()}
        wanted = {
            ("push/event", "delivered"),
            ("push/event", "duplicate"),
            ("push/event", "denied"),
            ("featureSets/update", "configured"),
        }
        return wanted <= found

    assert await eventually(written)
    delivered = next(r for r in records() if r["method"] == "push/event" and r["outcome"] == "delivered")
    assert delivered["backend"] == "mem1" and delivered["feature_set"] == "memory.proactive"


# ================================================================= timing and failure behaviour


@pytest.fixture(scope="module")
def http_memory() -> Iterator[str]:
    argv = [sys.executable, "-m", "tests.e2e.backends.mcpl_server", "--role", "memory", "--name", "web", "--http"]
    with http_server(lambda port: [*argv, str(port)]) as url:
        yield url


@pytest.fixture(scope="module")
def slow_gateway(http_memory: str) -> Iterator[RunningGateway]:
    config = {
        "backends": {
            "slow": mcpl_backend("memory", "--name", "slow", "--hook-delay", "3", "--infer-in-hook"),
            "fast": mcpl_backend("memory", "--name", "fast"),
            "web": {"transport": "http", "url": http_memory, "required": True},
            "red1": mcpl_backend("compliance"),
            "red2": mcpl_backend("compliance", "--redact", "Alice"),
            "stuck": mcpl_backend("compliance", "--hook-delay", "3"),
        },
        "mcpl": {
            "hook_order": ["red1", "stuck", "red2"],
            "before_inference_timeout_s": 1.0,
            "after_inference_timeout_s": 1.0,
        },
    }
    with run_gateway(config) as gw:
        yield gw


async def test_before_inference_timeout_proceeds_without_the_slow_backend(slow_gateway: RunningGateway) -> None:
    async with McplHost.connect(ws_url(slow_gateway)) as host:
        await host.call_tool("fast__remember", {"text": "fast memory"})
        await host.call_tool("web__remember", {"text": "web memory"})
        await enable(host, "slow__stats", ["*.memory.retrieval", "slow.memory.consolidation"])
        started = asyncio.get_running_loop().time()
        response = await host.request("context/beforeInference", {"inferenceId": "t1", "conversationId": "c1"})
        elapsed = asyncio.get_running_loop().time() - started
        servers = [i["server"] for i in response["result"]["contextInjections"]]
        assert servers == ["fast", "web"], "the slow backend timed out; the HTTP backend took part"
        assert elapsed < 2.5, "the host waited for the hook timeout, not for the slow backend"

        async def loop_refused() -> Any:
            return (await stats(host, "slow__stats")).get("inferInHook")

        refused = await eventually(loop_refused, timeout=15)
        assert refused["error"]["code"] == -32600 and "§10.7" in refused["error"]["message"]
        assert not [r for r in host.requests if r["method"] == "inference/request"]


async def test_push_over_an_http_backend(slow_gateway: RunningGateway) -> None:
    async with McplHost.connect(ws_url(slow_gateway)) as host:
        await enable(host, "web__stats", ["web.memory.proactive"])
        answer = await host.call_tool("web__push", {"eventId": "web-1", "text": "from the web"})
        assert answer["result"]["accepted"] is True
        pushed = await host.wait_request("push/event")
        assert pushed["params"]["featureSet"] == "web.memory.proactive"


async def test_blocking_redaction_chain_fails_open(slow_gateway: RunningGateway) -> None:
    async with McplHost.connect(ws_url(slow_gateway)) as host:
        await enable(host, "red1__stats", ["*.compliance.redaction"])
        response = await host.request(
            "context/afterInference",
            {"inferenceId": "i", "assistantMessage": "Alice's key is sk-abc123", "userMessage": "key?"},
        )
        result = response["result"]
        assert result["modifiedResponse"] == "[REDACTED]'s key is [REDACTED]"
        assert [s["server"] for s in result["metadata"]["chain"]] == ["red1", "red2"], "stuck timed out"
        second = (await stats(host, "red2__stats"))["hooks"][-1]
        assert second["assistantMessage"] == "Alice's key is [REDACTED]", "each sees the previous modifiedResponse"


def test_blocking_hook_can_fail_closed() -> None:
    config = {
        "backends": {"stuck": mcpl_backend("compliance", "--hook-delay", "3")},
        "mcpl": {"after_inference_timeout_s": 0.5, "after_inference_failure": "closed"},
    }

    async def run(gw: RunningGateway) -> None:
        async with McplHost.connect(ws_url(gw)) as host:
            await enable(host, "stats", ["compliance.redaction"])
            response = await host.request("context/afterInference", {"inferenceId": "i", "assistantMessage": "sk-1"})
            assert response["error"]["code"] == -32091 and "failing closed" in response["error"]["message"]

    with run_gateway(config) as gw:
        asyncio.run(run(gw))


# ================================================================= operator rules per principal


def test_operator_deny_beats_host_enable_per_principal() -> None:
    config = {
        "auth": {},
        "principals": {
            "alice": {
                "tokens": ["alice-token"],
                "capabilities": ["*"],
                "mcpl": {"feature_sets": {"allow": ["*"], "deny": ["memory.proactive"]}},
            },
            "bob": {"tokens": ["bob-token"], "capabilities": ["*"]},
        },
        "backends": {"mem": mcpl_backend("memory")},
    }

    async def run(gw: RunningGateway) -> None:
        async with McplHost.connect(ws_url(gw), token="alice-token") as alice:
            update = await enable(alice, "stats", ["memory.*"])
            assert "memory.proactive" in update["disabled"] and "memory.retrieval" in update["enabled"]
            refused = await alice.call_tool("push", {"eventId": "p-1", "text": "x"})
            assert refused["error"]["data"] == {"featureSet": "memory.proactive", "canEnable": False}
            async with McplHost.connect(ws_url(gw), token="bob-token") as bob:
                update = await enable(bob, "stats", ["memory.proactive"])
                assert "memory.proactive" in update["enabled"], "the backend is told the union"
                delivered = await bob.call_tool("push", {"eventId": "p-2", "text": "x"})
                assert delivered["result"]["accepted"] is True
                assert [r["params"]["eventId"] for r in bob.requests if r["method"] == "push/event"] == ["p-2"]
                assert not [r for r in alice.requests if r["method"] == "push/event"], "alice never gets it"

    with run_gateway(config) as gw:
        asyncio.run(run(gw))


async def test_operator_change_reaches_the_backend_at_once() -> None:
    config = {"backends": {"mem": mcpl_backend("memory")}}
    with run_gateway(config) as gw:
        async with McplHost.connect(ws_url(gw)) as host:
            update = await enable(host, "stats", ["memory.*"])
            assert "memory.proactive" in update["enabled"]
            changed = yaml.safe_load(gw.config_path.read_text())
            changed["mcpl"] = {"feature_sets": {"deny": ["mem.memory.proactive"]}}
            gw.config_path.write_text(yaml.safe_dump(changed))
            gw.proc.send_signal(signal.SIGHUP)

            async def told() -> Any:
                last = (await stats(host, "stats"))["featureSetUpdates"][-1]
                return last if "memory.proactive" in last["disabled"] else None

            last = await eventually(told)
            assert "memory.retrieval" in last["enabled"], "only what the operator took away is gone"
            refused = await host.call_tool("push", {"eventId": "after-reload", "text": "x"})
            assert refused["error"]["data"] == {"featureSet": "memory.proactive", "canEnable": False}


# ================================================================= de-duplication across replicas


def test_push_dedup_is_shared_by_replicas_through_redis(redis_url: str) -> None:
    config = {"bus": {"kind": "redis", "url": redis_url}, "backends": {"mem": mcpl_backend("memory")}}

    async def run(one: RunningGateway, two: RunningGateway) -> None:
        async with McplHost.connect(ws_url(one)) as h1, McplHost.connect(ws_url(two)) as h2:
            await enable(h1, "stats", ["memory.proactive"])
            await enable(h2, "stats", ["memory.proactive"])
            first = await h1.call_tool("push", {"eventId": "shared-1", "text": "x"})
            second = await h2.call_tool("push", {"eventId": "shared-1", "text": "x"})
            assert first["result"]["accepted"] is True
            assert second == {"result": {"accepted": False, "reason": "duplicate"}}

    with run_gateway(config) as one, run_gateway(config) as two:
        asyncio.run(run(one, two))


# ================================================================= an MCPL host over Streamable HTTP


async def test_http_host_is_asked_on_the_stream_of_its_own_call(gateway: RunningGateway) -> None:
    """A host on Streamable HTTP with no GET stream open: the backend's scope/elevate, made while
    the host's tool call runs, arrives on that call's SSE stream, and the answer goes back by POST."""
    import httpx

    from gateway.sse import iter_sse

    headers = dict(JSON_HEADERS)
    init = initialize_request(
        0, capabilities={"experimental": {"mcpl": {"version": "0.4", "featureSets": True}}}, client="http-host"
    )
    url = gateway.server("files")
    async with httpx.AsyncClient(timeout=15) as http:
        opened = await http.post(url, json=init, headers=headers)
        assert opened.json()["result"]["capabilities"]["experimental"]["mcpl"]["featureSets"]["files.edit"]
        headers["mcp-session-id"] = opened.headers["mcp-session-id"]
        await http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers)
        update = {"jsonrpc": "2.0", "method": "featureSets/update", "params": {"enabled": ["files.edit"]}}
        assert (await http.post(url, json=update, headers=headers)).status_code == 202
        scope = {"label": "/http/only", "payload": {"path": "/http/only"}}
        call = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {
                "name": "ask",
                "arguments": {"method": "scope/elevate", "params": {"featureSet": "files.edit", "scope": scope}},
            },
        }
        async with http.stream("POST", url, json=call, headers=headers) as stream:
            assert stream.headers["content-type"].startswith("text/event-stream")
            async for event in iter_sse(stream.aiter_bytes()):
                if not event.data:
                    continue  # the priming event (resumability)
                message = json.loads(event.data)
                if message.get("method") == "scope/elevate":
                    assert message["params"]["scope"]["label"] == "/http/only"
                    answer = {
                        "jsonrpc": "2.0",
                        "id": message["id"],
                        "result": {"approved": True, "payload": scope["payload"]},
                    }
                    assert (await http.post(url, json=answer, headers=headers)).status_code == 202
                elif message.get("id") == 1:
                    result = json.loads(message["result"]["content"][0]["text"])
                    assert result == {"result": {"approved": True, "payload": {"path": "/http/only"}}}
                    break
            else:
                raise AssertionError("the call's stream ended without its result")


# ================================================================= changes, restarts, departures


async def test_feature_sets_changed_reaches_hosts_and_wildcards_cover_new_sets(gateway: RunningGateway) -> None:
    async with McplHost.connect(ws_url(gateway)) as host:
        await enable(host, "mem2__stats", ["mem2.memory.*"])
        added = {"memory.semantic": {"description": "Semantic search (index now ready)", "uses": ["pushEvents"]}}
        await host.call_tool("mem2__notify", {"method": "featureSets/changed", "params": {"added": added}})
        changed = await host.wait_notification("featureSets/changed")
        assert changed["params"] == {"added": {"mem2.memory.semantic": added["memory.semantic"]}}

        async def told() -> Any:
            last = (await stats(host, "mem2__stats"))["featureSetUpdates"][-1]
            return last if "memory.semantic" in last["enabled"] else None

        assert await eventually(told), "memory.* already covered the new set; the backend is told at once"
        pushed = await host.call_tool("mem2__push", {"eventId": "sem-1", "text": "x", "featureSet": "memory.semantic"})
        assert pushed["result"]["accepted"] is True
        await host.call_tool(
            "mem2__notify", {"method": "featureSets/changed", "params": {"removed": ["memory.semantic"]}}
        )
        gone = await host.wait_notification("featureSets/changed")
        assert gone["params"] == {"removed": ["mem2.memory.semantic"]}
        refused = await host.call_tool("mem2__push", {"eventId": "sem-2", "text": "x", "featureSet": "memory.semantic"})
        assert refused["error"]["code"] == -32003


async def test_push_reaches_every_host_that_enabled_it(gateway: RunningGateway) -> None:
    async with McplHost.connect(ws_url(gateway)) as one, McplHost.connect(ws_url(gateway)) as two:
        await enable(one, "mem2__stats", ["mem2.memory.proactive"])
        # (extraction too: an update that changes nothing in the union is not re-sent to the backend)
        await enable(two, "mem2__stats", ["mem2.memory.proactive", "mem2.memory.extraction"])
        answer = await one.call_tool("mem2__push", {"eventId": "both-1", "text": "x"})
        assert answer["result"]["accepted"] is True
        assert (await one.wait_request("push/event"))["params"]["eventId"] == "both-1"
        assert (await two.wait_request("push/event"))["params"]["eventId"] == "both-1"


async def test_a_host_that_leaves_mid_request_does_not_leave_the_backend_waiting(gateway: RunningGateway) -> None:
    async with McplHost.connect(ws_url(gateway)) as watcher:
        host = await McplHost.connect(ws_url(gateway))
        await enable(host, "mem2__stats", ["mem2.memory.proactive"])

        async def never(message: dict[str, Any]) -> dict[str, Any]:
            await asyncio.sleep(3600)
            return {}

        host.handlers["push/event"] = never
        pending = asyncio.create_task(watcher.call_tool("mem2__push", {"eventId": "gone-1", "text": "x"}))
        await host.wait_request("push/event")
        started = asyncio.get_running_loop().time()
        await host.close()
        answer = await asyncio.wait_for(pending, 10)
        assert answer == {"result": {"accepted": False, "reason": "client session ended"}}
        assert asyncio.get_running_loop().time() - started < 5


def test_a_restarted_backend_is_given_the_current_configuration_and_its_channels_reset() -> None:
    config = {
        "backends": {
            "mem": mcpl_backend("memory", restart={"initial_backoff_s": 0.1}),
            "chan": mcpl_backend("channels", restart={"initial_backoff_s": 0.1}),
        }
    }

    async def run(gw: RunningGateway) -> None:
        async with McplHost.connect(ws_url(gw)) as host:
            await enable(host, "mem__stats", ["mem.memory.retrieval"])
            await host.call_tool("mem__exit")
            await host.call_tool("chan__exit")

            async def reconfigured() -> Any:
                response = await host.request("tools/call", {"name": "mem__stats", "arguments": {}})
                if "error" in response:
                    return None
                updates = json.loads(response["result"]["content"][0]["text"])["featureSetUpdates"]
                return updates if len(updates) == 1 else None  # the old process had two by now

            updates = await eventually(reconfigured, timeout=20)
            assert updates[0]["enabled"] == ["memory.retrieval"], "the first update after restart is the current one"
            removed = await host.wait_notification("channels/changed", lambda m: "removed" in m["params"], timeout=20)
            assert set(removed["params"]["removed"]) == {"chan.discord:#general", "chan.discord:#random"}
            again = await host.wait_notification("channels/changed", lambda m: "added" in m["params"], timeout=20)
            assert {c["id"] for c in again["params"]["added"]} == {"chan.discord:#general", "chan.discord:#random"}

    with run_gateway(config) as gw:
        asyncio.run(run(gw))


def test_an_mcpl_05_backend_gets_feature_set_updates_as_requests() -> None:
    config = {"backends": {"mem": mcpl_backend("memory", "--mcpl-version", "0.5")}}

    async def run(gw: RunningGateway) -> None:
        async with McplHost.connect(ws_url(gw)) as host:
            update = await enable(host, "stats", ["memory.retrieval"])
            assert update["asRequest"] is True and update["enabled"] == ["memory.retrieval"]

    with run_gateway(config) as gw:
        asyncio.run(run(gw))


async def test_mcpl_metrics_are_exported(gateway: RunningGateway) -> None:
    import httpx

    async with httpx.AsyncClient(timeout=10) as http:
        text = (await http.get(f"{gateway.url}/metrics")).text
    assert 'switchboard_mcpl_push_events_total{outcome="accepted"}' in text
    assert "switchboard_mcpl_decisions_total" in text and "switchboard_mcpl_hook_seconds" in text


def test_admin_api_changes_a_principals_feature_sets_live_and_shows_mcpl_state() -> None:
    import httpx

    admin = {"authorization": "Bearer admin-secret"}
    config = {
        "auth": {"admin_token": "admin-secret"},
        "principals": {"alice": {"tokens": ["alice-token"], "capabilities": ["*"]}},
        "backends": {"mem": mcpl_backend("memory")},
    }

    async def run(gw: RunningGateway) -> None:
        async with McplHost.connect(ws_url(gw), token="alice-token") as alice, httpx.AsyncClient(timeout=10) as http:
            update = await enable(alice, "stats", ["memory.*"])
            assert "memory.proactive" in update["enabled"]
            principal = {"capabilities": ["*"], "mcpl": {"feature_sets": {"deny": ["memory.proactive"]}}}
            put = await http.put(f"{gw.url}/admin/principals/alice", json=principal, headers=admin)
            assert put.status_code == 200

            async def told() -> Any:
                last = (await stats(alice, "stats"))["featureSetUpdates"][-1]
                return last if "memory.proactive" in last["disabled"] else None

            assert await eventually(told), "the operator's change reached the backend at once"
            state = (await http.get(f"{gw.url}/admin/mcpl", headers=admin)).json()
            assert "memory.proactive" in state["backends"]["mem"]["told"]["disabled"]
            assert state["sessions"][0]["principal"] == "alice"
            assert "memory.proactive" not in state["sessions"][0]["enabled"]
            listed = (await http.get(f"{gw.url}/admin/principals", headers=admin)).json()
            assert listed["principals"]["alice"]["mcpl"]["feature_sets"]["deny"] == ["memory.proactive"]

    with run_gateway(config) as gw:
        asyncio.run(run(gw))


async def test_scoped_call_naming_its_feature_set_federated_with_pattern_keyed_scopes(gateway: RunningGateway) -> None:
    async with McplHost.connect(ws_url(gateway)) as host:
        await enable(host, "files__stats", ["files.files.*"], scopes={"files.files.*": {"blacklist": ["/tmp/**"]}})
        call = {"name": "files__edit_file", "arguments": {"path": "/p/b"}, "scope": {"label": "/p/b"}}
        ok = await host.request("tools/call", {**call, "featureSet": "files.files.edit"})
        assert "result" in ok
        sent = [c for c in (await stats(host, "files__stats"))["toolCalls"] if c["name"] == "edit_file"][-1]
        assert sent["featureSet"] == "files.edit", "the backend hears its own feature-set name"
        denied = await host.request("tools/call", {**call, "scope": {"label": "/tmp/x"}})
        assert denied["error"]["code"] == -32093, "a scope key may be a feature-set pattern"
        unknown = await host.request("tools/call", {**call, "featureSet": "files.nope"})
        assert unknown["error"]["code"] == -32003


async def test_mcpl_host_over_legacy_http_sse(gateway: RunningGateway) -> None:
    """The same push round trip for a host on the legacy HTTP+SSE transport (GET /sse + POST)."""
    import httpx

    from gateway.sse import iter_sse

    async with httpx.AsyncClient(timeout=15) as http, http.stream("GET", f"{gateway.url}/sse") as stream:
        events = iter_sse(stream.aiter_bytes())
        endpoint = (await anext(events)).data
        post_url = f"{gateway.url}{endpoint}"

        async def post(message: dict[str, Any]) -> None:
            assert (await http.post(post_url, json=message)).status_code == 202

        async def next_message() -> dict[str, Any]:
            while True:
                event = await asyncio.wait_for(anext(events), 10)
                if event.data:
                    return json.loads(event.data)

        caps = {"experimental": {"mcpl": {"version": "0.4", "pushEvents": True, "featureSets": True}}}
        init = initialize_params(capabilities=caps, client="sse-host")
        await post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": init})
        assert "mcpl" in (await next_message())["result"]["capabilities"]["experimental"]
        await post({"jsonrpc": "2.0", "method": "notifications/initialized"})
        await post({"jsonrpc": "2.0", "method": "featureSets/update", "params": {"enabled": ["mem2.memory.proactive"]}})
        for attempt in range(100):  # the update is a notification: wait until the backend has it
            await post(
                {"jsonrpc": "2.0", "id": 100 + attempt, "method": "tools/call", "params": {"name": "mem2__stats"}}
            )
            record = json.loads((await next_message())["result"]["content"][0]["text"])
            if "memory.proactive" in record["featureSetUpdates"][-1]["enabled"]:
                break
            await asyncio.sleep(0.05)
        arguments = {"eventId": "sse-1", "text": "over SSE"}
        await post(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {"name": "mem2__push", "arguments": arguments},
            }
        )
        pushed = await next_message()
        assert pushed["method"] == "push/event" and pushed["params"]["featureSet"] == "mem2.memory.proactive"
        await post({"jsonrpc": "2.0", "id": pushed["id"], "result": {"accepted": True, "inferenceId": "inf_sse"}})
        done = await next_message()
        assert done["id"] == 1
        assert json.loads(done["result"]["content"][0]["text"]) == {
            "result": {"accepted": True, "inferenceId": "inf_sse"}
        }
