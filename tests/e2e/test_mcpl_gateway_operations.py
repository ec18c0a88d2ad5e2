"""MCPL through the gateway, operations: timing and failure behaviour, operator rules, replicas, restarts.

Hook timeouts (a slow backend, a stuck one in a blocking redaction chain, failing open or closed), an HTTP
MCPL backend, per-principal operator rules (config, SIGHUP reload and the admin API), push de-duplication
shared by replicas through Redis, a restarted backend given the current configuration, and an MCPL 0.5
backend. Each test (or the module's slow gateway) starts gateways of its own; both ends are checked.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.e2e.mcpl_host import McplHost
from tests.e2e.mcpl_support import enable, eventually, mcpl_backend, stats, ws_url
from tests.support import RunningGateway, http_server, run_gateway

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


# ================================================================= restarts and MCPL 0.5 backends


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


# ================================================================= the admin API


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
