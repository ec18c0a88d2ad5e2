"""MCPL through the gateway: real MCPL servers behind it, a real MCPL host in front.

This module: negotiation, feature sets, push events, context hooks, inference, model info, state,
audit, live feature-set changes, departures and metrics, on one shared gateway. Scopes, channels and
hosts over HTTP are in test_mcpl_gateway_scopes_channels.py; timing, failures, operator rules, replicas
and restarts (each with its own gateways) in test_mcpl_gateway_operations.py.

The servers play the spec's §15 Memory and Compliance servers (and a notes, a files and a channels
server); the host is a WebSocket MCPL host. Every test checks both ends: what the host saw and what
the backend recorded (its ``stats`` tool).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
from mcp.client import Client

from tests.e2e.mcpl_host import McplHost
from tests.e2e.mcpl_support import AUDIT_DIR, enable, eventually, shared_gateway_config, stats, ws_url
from tests.support import RunningGateway, run_gateway


@pytest.fixture(scope="module")
def gateway() -> Iterator[RunningGateway]:
    """The shared six-backend gateway (one per test module that uses it)."""
    with run_gateway(shared_gateway_config()) as gw:
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


# ---- changes and departures --------------------------------------------------------------------


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


# ---- metrics -----------------------------------------------------------------------------------


async def test_mcpl_metrics_are_exported(gateway: RunningGateway) -> None:
    import httpx

    async with httpx.AsyncClient(timeout=10) as http:
        text = (await http.get(f"{gateway.url}/metrics")).text
    assert 'switchboard_mcpl_push_events_total{outcome="accepted"}' in text
    assert "switchboard_mcpl_decisions_total" in text and "switchboard_mcpl_hook_seconds" in text
