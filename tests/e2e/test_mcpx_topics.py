"""MCPx v0.1 topic gateway against real WebSocket clients: every §8.1 gateway checklist item, routing
modes, bridged MCP backends, proposals, capability promotion, and 50 participants in one topic."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect

from tests.e2e.mcpx_client import ADMIN, SECRET, Peer, mint, refused, tool_call, ws_url
from tests.support import RunningGateway, dynamic_backend, run_gateway

pytestmark = [pytest.mark.timeout(90)]

ROOM = "room"  # configured topic with the builtin demo backend in it


def config(**mcpx: Any) -> dict[str, Any]:
    return {
        "backends": {"demo": {"transport": "builtin", "required": True}},
        "auth": {"jwt": {"hs256_secret": SECRET}, "admin_token": ADMIN},
        "principals": {
            "alice": {"tokens": ["alice-token"], "capabilities": ["mcp/*", "chat"]},
            "bob": {"tokens": ["bob-token"], "capabilities": ["mcp/*", "chat"]},
            "carol": {"tokens": ["carol-token"], "capabilities": ["mcp/*", "chat"]},
            "dave": {"tokens": ["dave-token"], "capabilities": ["mcp/*", "chat"]},
            "lister": {"tokens": ["lister-token"], "capabilities": ["mcp/request:*/list", "chat"]},
        },
        "mcpx": {"dev_tokens": True, "topics": {ROOM: {"participants": ["demo"]}}, **mcpx},
    }


def wait_for_backend(gw: RunningGateway, topic: str, name: str) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        response = httpx.get(
            f"{gw.url}/v0.1/topics/{topic}/participants", headers={"authorization": f"Bearer {ADMIN}"}, timeout=5
        )
        if response.status_code == 200 and any(p["id"] == name for p in response.json()["participants"]):
            return
        time.sleep(0.05)
    raise TimeoutError(f"backend {name} never joined {topic}\n{gw.log()}")


@pytest.fixture(scope="module")
def gateway() -> Iterator[RunningGateway]:
    with run_gateway(config()) as gw:
        wait_for_backend(gw, ROOM, "demo")
        yield gw


@pytest.fixture(scope="module")
def strict() -> Iterator[RunningGateway]:
    """Small limits and validate_kind on."""
    cfg = config(
        max_participants_per_topic=3,
        max_envelope_bytes=4096,
        rate_per_participant={"messages_per_s": 2, "burst": 3},
        validate_kind=True,
        dev_tokens=False,
        topics={},
    )
    with run_gateway(cfg) as gw:
        yield gw


def proposer_token(name: str, topic: str = ROOM) -> str:
    return mint(name, topic, ["mcp/proposal:*", "mcp/response:*", "chat"])


# ---- connection management -------------------------------------------------------------------


async def test_welcome_first_then_presence_then_leave(gateway: RunningGateway) -> None:
    alice = await Peer.join(gateway.url, "t-welcome", "alice-token")
    assert alice.welcome["from"] == "system:gateway"
    assert alice.welcome["to"] == ["alice"]
    assert alice.welcome["payload"] == {"you": {"id": "alice", "capabilities": ["mcp/*", "chat"]}, "participants": []}
    bob = await Peer.join(gateway.url, "t-welcome", "bob-token")  # join() asserts welcome is the first frame
    assert bob.welcome["payload"]["participants"] == [{"id": "alice", "capabilities": ["mcp/*", "chat"]}]
    join = await alice.recv()
    assert join["kind"] == "system/presence" and join["from"] == "system:gateway"
    assert join["payload"] == {"event": "join", "participant": {"id": "bob", "capabilities": ["mcp/*", "chat"]}}
    await bob.quiet(0.2, ignore=())  # bob gets no presence of himself
    await bob.close()
    leave = await alice.recv()
    assert leave["kind"] == "system/presence" and leave["payload"]["event"] == "leave"
    assert leave["payload"]["participant"]["id"] == "bob"
    await alice.close()


async def test_token_from_header_or_query_maps_to_participant_id(gateway: RunningGateway) -> None:
    by_header = await Peer.join(gateway.url, "t-auth", mint("agent-h", "t-auth", ["chat"]))
    by_query = await Peer.join(gateway.url, "t-auth", mint("agent-q", "t-auth", ["chat"]), via_query=True)
    static_query = await Peer.join(gateway.url, "t-auth", "alice-token", via_query=True)
    assert (by_header.id, by_query.id, static_query.id) == ("agent-h", "agent-q", "alice")
    assert by_query.welcome["payload"]["you"]["capabilities"] == ["chat"]
    for peer in (by_header, by_query, static_query):
        await peer.close()


@pytest.mark.parametrize(
    ("token", "reason"),
    [
        (None, "authentication required"),
        ("wrong-token", "unknown token"),
        (mint("x", "t-refuse", secret="other-secret"), "signature"),
        (mint("x", "another-topic", ["chat"]), "topic"),
    ],
)
async def test_refusals_close_1008(gateway: RunningGateway, token: str | None, reason: str) -> None:
    code, why = await refused(gateway.url, "t-refuse", token)
    assert code == 1008 and reason in why


async def test_duplicate_participant_and_bad_query_close_1008(gateway: RunningGateway) -> None:
    alice = await Peer.join(gateway.url, "t-dup", "alice-token")
    code, why = await refused(gateway.url, "t-dup", "alice-token")
    assert code == 1008 and "already connected" in why
    assert (await refused(gateway.url, "t-dup", "bob-token", mode="loud"))[0] == 1008
    assert (await refused(gateway.url, "", "bob-token"))[0] == 1008
    # The refused duplicate did not remove the connected one.
    bob = await Peer.join(gateway.url, "t-dup", "bob-token")
    await bob.send("chat", {"text": "still there?"})
    assert (await alice.recv_kind("chat"))["payload"]["text"] == "still there?"
    await alice.close()
    await bob.close()


# ---- envelope validation ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mutate", "code", "needle"),
    [
        (lambda e: e.update(protocol="mcp-x/v0"), "invalid_envelope", "protocol"),
        (lambda e: e.pop("ts"), "invalid_envelope", "missing"),
        (lambda e: e.update(kind="bogus/kind"), "invalid_envelope", "unknown kind"),
        (lambda e: e.update(to="bob"), "invalid_envelope", "to must be"),
        (lambda e: e.update({"from": "bob"}), "invalid_envelope", "from must be"),
        (lambda e: e.update(kind="system/welcome"), "reserved_kind", "reserved"),
        (lambda e: e.update(kind="system/presence"), "reserved_kind", "reserved"),
        (lambda e: e.update(kind="mcp/response:tools/call"), "invalid_envelope", "correlation_id"),
    ],
)
async def test_protocol_violations_get_system_error_with_correlation(
    gateway: RunningGateway, mutate: Any, code: str, needle: str
) -> None:
    alice = await Peer.join(gateway.url, "t-viol", "alice-token")
    bob = await Peer.join(gateway.url, "t-viol", "bob-token")
    bad = alice.envelope("chat", {"text": "x"})
    mutate(bad)
    await alice.send_raw(bad)
    error = await alice.recv_kind("system/error")
    assert error["from"] == "system:gateway" and error["to"] == ["alice"]
    assert error["correlation_id"] == bad["id"]
    assert error["payload"]["error"] == code and needle in error["payload"]["message"]
    await bob.quiet(0.3)  # a refused envelope reaches nobody
    # The connection survives.
    await alice.send("chat", {"text": "after"})
    assert (await bob.recv_kind("chat"))["payload"]["text"] == "after"
    await alice.close()
    await bob.close()


@pytest.mark.parametrize("frame", ["{not json", "[1, 2]", '"a string"', "42"])
async def test_unparseable_frame_gets_system_error_and_connection_lives(gateway: RunningGateway, frame: str) -> None:
    alice = await Peer.join(gateway.url, "t-junk", "alice-token")
    bob = await Peer.join(gateway.url, "t-junk", "bob-token")
    await alice.send_raw(frame)
    error = await alice.recv_kind("system/error")
    assert error["protocol"] == "mcpx/v0.1" and error["payload"]["error"] in ("invalid_message", "invalid_envelope")
    assert "correlation_id" not in error  # nothing to correlate with
    await alice.send("chat", {"text": "alive"})
    assert (await bob.recv_kind("chat"))["payload"]["text"] == "alive"
    await alice.close()
    await bob.close()


# ---- capability enforcement -------------------------------------------------------------------


async def test_capability_violation_blocked_and_reported(gateway: RunningGateway) -> None:
    alice = await Peer.join(gateway.url, "t-caps", "alice-token")
    agent = await Peer.join(gateway.url, "t-caps", proposer_token("untrusted", "t-caps"))
    sent = await agent.send("mcp/request:tools/call:echo", tool_call("echo", {"text": "x"}), to=["alice"])
    error = await agent.recv_kind("system/error")
    assert error["correlation_id"] == sent["id"]
    assert error["payload"] == {
        "error": "capability_violation",
        "message": "You lack capability for 'mcp/request:tools/call:echo'",
        "attempted_kind": "mcp/request:tools/call:echo",
        "your_capabilities": ["mcp/proposal:*", "mcp/response:*", "chat"],
    }
    await alice.quiet(0.3)
    # What it may do passes.
    proposal = await agent.send("mcp/proposal:tools/call:echo", {"method": "tools/call", "params": {"name": "echo"}})
    assert (await alice.recv_kind("mcp/proposal:tools/call:echo"))["id"] == proposal["id"]
    await alice.close()
    await agent.close()


async def test_mid_pattern_wildcard(gateway: RunningGateway) -> None:
    lister = await Peer.join(gateway.url, "t-mid", "lister-token")
    alice = await Peer.join(gateway.url, "t-mid", "alice-token")
    ok = await lister.send("mcp/request:tools/list", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert (await alice.recv_kind("mcp/request:tools/list"))["id"] == ok["id"]
    bad = await lister.send("mcp/request:tools/call", tool_call("echo", {}))
    error = await lister.recv_kind("system/error")
    assert error["payload"]["error"] == "capability_violation" and error["correlation_id"] == bad["id"]
    await alice.quiet(0.3)
    await lister.close()
    await alice.close()


async def test_lazy_enforcement_by_default_payload_not_checked(gateway: RunningGateway) -> None:
    alice = await Peer.join(gateway.url, "t-lazy", "alice-token")
    bob = await Peer.join(gateway.url, "t-lazy", "bob-token")
    spoof = await alice.send("mcp/request:tools/call:safe", tool_call("dangerous", {}), to=["bob"])
    assert (await bob.recv_kind("mcp/request:tools/call:safe"))["id"] == spoof["id"]
    await alice.close()
    await bob.close()


# ---- routing ----------------------------------------------------------------------------------


async def test_routing_broadcast_directed_and_all_modes(gateway: RunningGateway) -> None:
    alice = await Peer.join(gateway.url, "t-route", "alice-token")
    bob = await Peer.join(gateway.url, "t-route", "bob-token", mode="directed")
    carol = await Peer.join(gateway.url, "t-route", "carol-token", mode="directed")
    dave = await Peer.join(gateway.url, "t-route", "dave-token")  # mode all
    for peer in (alice, bob, carol):
        await peer.recv_kind("system/presence")  # dave's join reaches everyone, whatever the mode
    # Broadcast: everyone but the sender.
    hello = await alice.send("chat", {"text": "hello"})
    for peer in (bob, carol, dave):
        assert await peer.recv_kind("chat") == hello  # envelope preserved exactly
    # Directed to carol: carol and the "all" participant dave get it; bob (directed) does not.
    note = await alice.send("chat", {"text": "psst"}, to=["carol"], x_extension={"kept": True})
    assert await carol.recv_kind("chat") == note
    assert await dave.recv_kind("chat") == note
    await bob.quiet(0.3)
    await alice.quiet(0.1)  # the sender never receives its own envelope
    for peer in (alice, bob, carol, dave):
        await peer.close()


async def test_topics_are_ephemeral_unless_configured(gateway: RunningGateway) -> None:
    auth = {"authorization": f"Bearer {ADMIN}"}
    alice = await Peer.join(gateway.url, "t-ephemeral", "alice-token")
    async with httpx.AsyncClient(base_url=gateway.url, headers=auth, timeout=5) as http:
        names = [t["name"] for t in (await http.get("/v0.1/topics")).json()["topics"]]
        assert "t-ephemeral" in names and ROOM in names
        participants = (await http.get("/v0.1/topics/t-ephemeral/participants")).json()["participants"]
        assert participants == [{"id": "alice", "capabilities": ["mcp/*", "chat"], "mode": "all"}]
        await alice.close()
        for _ in range(100):
            if (await http.get("/v0.1/topics/t-ephemeral/participants")).status_code == 404:
                break
            await asyncio.sleep(0.05)
        topics = {t["name"]: t for t in (await http.get("/v0.1/topics")).json()["topics"]}
        assert "t-ephemeral" not in topics
        assert topics[ROOM]["configured"] is True  # configured topics persist (demo is in it)
        # A topic-bound JWT sees only its topic; no credentials at all is 401.
        bound = {"authorization": f"Bearer {mint('x', ROOM, ['chat'])}"}
        assert [t["name"] for t in (await http.get("/v0.1/topics", headers=bound)).json()["topics"]] == [ROOM]
        assert (await http.get("/v0.1/topics", headers={"authorization": ""})).status_code == 401


# ---- MCP backends as participants and proposals -----------------------------------------------


async def test_bridged_backend_answers_a_topic_call(gateway: RunningGateway) -> None:
    alice = await Peer.join(gateway.url, ROOM, "alice-token")
    demo = next(p for p in alice.welcome["payload"]["participants"] if p["id"] == "demo")
    assert demo["capabilities"] == ["mcp/response:*"]
    assert {"echo", "add"} <= {t["name"] for t in demo["tools"]}
    call = await alice.send("mcp/request:tools/call:add", tool_call("add", {"a": 2, "b": 3}, rpc_id=7), to=["demo"])
    response = await alice.recv_kind("mcp/response:tools/call:add")
    assert response["from"] == "demo" and response["to"] == ["alice"]
    assert response["correlation_id"] == call["id"]
    assert response["payload"]["id"] == 7
    assert response["payload"]["result"]["structuredContent"] == {"sum": 5}
    # The bridge is a receiving participant: a kind that does not match the payload is not executed.
    spoof = await alice.send("mcp/request:tools/call:echo", tool_call("add", {"a": 1, "b": 1}), to=["demo"])
    answer = await alice.recv_kind("mcp/response:tools/call:echo")
    assert answer["correlation_id"] == spoof["id"] and answer["payload"]["error"]["code"] == -32602
    await alice.close()


async def test_proposal_fulfilment_response_to_fulfiller_and_proposer(gateway: RunningGateway) -> None:
    proposer = await Peer.join(gateway.url, ROOM, proposer_token("untrusted"))
    human = await Peer.join(gateway.url, ROOM, "alice-token")
    observer = await Peer.join(gateway.url, ROOM, "bob-token", mode="directed")
    blocked = await proposer.send("mcp/request:tools/call:echo", tool_call("echo", {"text": "no"}), to=["demo"])
    assert (await proposer.recv_kind("system/error"))["correlation_id"] == blocked["id"]
    proposal = await proposer.send(
        "mcp/proposal:tools/call:echo",
        {"method": "tools/call", "params": {"name": "echo", "arguments": {"text": "approved"}}},
        to=["demo"],
    )
    seen = await human.recv_kind("mcp/proposal:tools/call:echo")
    assert seen == proposal
    fulfil = await human.send(
        "mcp/request:tools/call:echo",
        tool_call("echo", {"text": "approved"}, rpc_id=44),
        to=["demo"],
        correlation_id=proposal["id"],
    )
    for peer in (human, proposer):
        response = await peer.recv_kind("mcp/response:tools/call:echo")
        assert response["correlation_id"] == fulfil["id"]
        assert response["to"] == ["alice", "untrusted"]
        assert response["payload"]["result"]["content"][0]["text"] == "approved"
    await observer.quiet(0.3)  # directed and not addressed: sees none of it
    for peer in (proposer, human, observer):
        await peer.close()


async def test_proposals_must_not_carry_correlation_id(gateway: RunningGateway) -> None:
    agent = await Peer.join(gateway.url, "t-prop", proposer_token("p1", "t-prop"))
    sent = await agent.send("mcp/proposal:tools/call:x", {"method": "tools/call"}, correlation_id="c-1")
    error = await agent.recv_kind("system/error")
    assert error["correlation_id"] == sent["id"] and "correlation_id" in error["payload"]["message"]
    await agent.close()


# ---- capability promotion ---------------------------------------------------------------------


async def test_admin_promotes_a_live_participant(gateway: RunningGateway) -> None:
    agent = await Peer.join(gateway.url, ROOM, proposer_token("trainee"))
    url = f"{gateway.url}/admin/participants/trainee/capabilities"
    async with httpx.AsyncClient(timeout=5) as http:
        assert (await http.post(url, json={"add": ["x"]})).status_code == 401
        missing = f"{gateway.url}/admin/participants/nobody/capabilities"
        assert (
            await http.post(missing, json={"add": []}, headers={"authorization": f"Bearer {ADMIN}"})
        ).status_code == 404
        response = await http.post(
            url,
            json={"add": ["mcp/request:tools/*"], "remove": ["mcp/proposal:*"]},
            headers={"authorization": f"Bearer {ADMIN}"},
        )
    assert response.status_code == 200
    body = response.json()
    assert body["participantId"] == "trainee"
    assert body["oldCapabilities"] == ["mcp/proposal:*", "mcp/response:*", "chat"]
    assert body["newCapabilities"] == ["mcp/response:*", "chat", "mcp/request:tools/*"]
    assert body["modifiedBy"] and body["modifiedAt"]
    welcome = await agent.recv_kind("system/welcome")
    assert welcome["payload"]["you"] == {"id": "trainee", "capabilities": body["newCapabilities"]}
    # Applied at once, on the same socket.
    call = await agent.send("mcp/request:tools/call:echo", tool_call("echo", {"text": "promoted"}), to=["demo"])
    response_env = await agent.recv_kind("mcp/response:tools/call:echo")
    assert response_env["correlation_id"] == call["id"]
    await agent.send("mcp/proposal:tools/call:echo", {"method": "tools/call"})
    assert (await agent.recv_kind("system/error"))["payload"]["error"] == "capability_violation"
    await agent.close()


# ---- dev tokens -------------------------------------------------------------------------------


async def test_dev_token_endpoint(gateway: RunningGateway, strict: RunningGateway) -> None:
    async with httpx.AsyncClient(timeout=5) as http:
        minted = await http.post(
            f"{gateway.url}/v0.1/auth/token", json={"participantId": "dev-agent", "topic": "t-dev"}
        )
        assert minted.status_code == 200
        assert minted.json()["capabilities"] == ["mcp/proposal:*", "mcp/response:*", "chat"]
        custom = await http.post(
            f"{gateway.url}/v0.1/auth/token",
            json={"participantId": "dev-2", "topic": "t-dev", "capabilities": ["chat"]},
        )
        assert custom.json()["capabilities"] == ["chat"]
        bad = await http.post(f"{gateway.url}/v0.1/auth/token", json={"topic": "t-dev"})
        assert bad.status_code == 400
        off = await http.post(f"{strict.url}/v0.1/auth/token", json={"participantId": "a", "topic": "b"})
        assert off.status_code == 404
    agent = await Peer.join(gateway.url, "t-dev", minted.json()["token"])
    assert agent.welcome["payload"]["you"] == {"id": "dev-agent", "capabilities": minted.json()["capabilities"]}
    assert (await refused(gateway.url, "elsewhere", minted.json()["token"]))[0] == 1008
    await agent.close()


# ---- scale ------------------------------------------------------------------------------------


async def test_fifty_participants_in_one_topic(gateway: RunningGateway) -> None:
    started = time.monotonic()
    peers = [await Peer.join(gateway.url, "t-fifty", mint(f"agent-{i:02d}", "t-fifty", ["chat"])) for i in range(50)]
    assert len(peers[-1].welcome["payload"]["participants"]) == 49
    # Drain the presence joins each one saw (peer i saw 49 - i of them).
    for i, peer in enumerate(peers):
        for _ in range(49 - i):
            assert (await peer.recv())["kind"] == "system/presence"
    sent = [await peers[i].send("chat", {"text": f"from {i}"}) for i in range(0, 50, 10)]
    for i, peer in enumerate(peers):
        got = [await peer.recv_kind("chat", timeout=10) for _ in range(len(sent) - (1 if i % 10 == 0 else 0))]
        assert {g["id"] for g in got} == {s["id"] for s in sent if s["from"] != peer.id}
    await asyncio.gather(*(peer.close() for peer in peers))
    assert time.monotonic() - started < 30


# ---- limits and validate_kind -----------------------------------------------------------------


async def test_rate_limit_answers_system_error(strict: RunningGateway) -> None:
    alice = await Peer.join(strict.url, "t-rate", "alice-token")
    bob = await Peer.join(strict.url, "t-rate", "bob-token")
    sent = [await alice.send("chat", {"text": str(i)}) for i in range(6)]
    errors = []
    for _ in range(3):
        error = await alice.recv_kind("system/error")
        assert error["payload"]["error"] == "rate_limited" and error["payload"]["retry_after_ms"] > 0
        errors.append(error["correlation_id"])
    assert errors == [s["id"] for s in sent[3:]]  # every over-rate envelope is answered, none silently dropped
    received = [await bob.recv_kind("chat") for _ in range(3)]
    assert [r["id"] for r in received] == [s["id"] for s in sent[:3]]
    await bob.quiet(0.3)
    await alice.close()
    await bob.close()


async def test_oversize_envelope_answers_system_error(strict: RunningGateway) -> None:
    alice = await Peer.join(strict.url, "t-size", "alice-token")
    big = await alice.send("chat", {"text": "x" * 5000})
    error = await alice.recv_kind("system/error")
    assert error["payload"]["error"] == "envelope_too_large" and error["correlation_id"] == big["id"]
    assert error["payload"]["max_envelope_bytes"] == 4096
    await alice.close()


async def test_max_participants_refuses_with_reason(strict: RunningGateway) -> None:
    peers = [await Peer.join(strict.url, "t-full", token) for token in ("alice-token", "bob-token", "carol-token")]
    code, reason = await refused(strict.url, "t-full", "dave-token")
    assert code == 1013 and "full" in reason
    for peer in peers:
        await peer.close()


async def test_validate_kind_checks_payload(strict: RunningGateway) -> None:
    alice = await Peer.join(strict.url, "t-kind", "carol-token")  # a fresh rate bucket
    bob = await Peer.join(strict.url, "t-kind", "dave-token")
    spoof = await alice.send("mcp/request:tools/call:safe", tool_call("dangerous", {}), to=["bob"])
    error = await alice.recv_kind("system/error")
    assert error["payload"]["error"] == "kind_mismatch" and error["correlation_id"] == spoof["id"]
    wrong_method = await alice.send("mcp/request:tools/call", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert (await alice.recv_kind("system/error"))["correlation_id"] == wrong_method["id"]
    await bob.quiet(0.3)
    good = await alice.send("mcp/request:tools/call:safe", tool_call("safe", {}), to=["bob"])
    assert (await bob.recv_kind("mcp/request:tools/call:safe"))["id"] == good["id"]
    await alice.close()
    await bob.close()


async def test_topic_calls_pass_the_same_dispatch_stage_as_mcp_calls() -> None:
    """Argument validation (and pinning) decide for topic calls too, not only for MCP clients."""
    cfg = config()
    cfg["backends"]["demo"]["validate_arguments"] = True
    with run_gateway(cfg) as gw:
        wait_for_backend(gw, ROOM, "demo")
        alice = await Peer.join(gw.url, ROOM, "alice-token")
        await alice.send("mcp/request:tools/call:add", tool_call("add", {"a": 1, "b": 2}, rpc_id=1), to=["demo"])
        ok = await alice.recv_kind("mcp/response:tools/call:add")
        assert ok["payload"]["result"]["structuredContent"] == {"sum": 3}
        await alice.send("mcp/request:tools/call:add", tool_call("add", {"a": "one", "b": 2}, rpc_id=2), to=["demo"])
        refused = await alice.recv_kind("mcp/response:tools/call:add")
        assert refused["payload"]["id"] == 2
        assert refused["payload"]["error"]["code"] == -32602
        assert "Invalid arguments for tool add" in refused["payload"]["error"]["message"]
        await alice.close()


async def test_unknown_recipients_are_reported_and_envelopes_counted(gateway: RunningGateway) -> None:
    alice = await Peer.join(gateway.url, "t-unknown", "alice-token")
    bob = await Peer.join(gateway.url, "t-unknown", "bob-token")
    sent = await alice.send("chat", {"text": "anyone?"}, to=["bob", "nobody"])
    assert (await bob.recv_kind("chat"))["payload"]["text"] == "anyone?", "those present still receive it"
    error = await alice.recv_kind("system/error")
    assert error["correlation_id"] == sent["id"]
    assert error["payload"]["error"] == "unknown_recipient"
    assert error["payload"]["recipients"] == ["nobody"]
    async with httpx.AsyncClient(timeout=5) as http:
        metrics = (await http.get(f"{gateway.url}/metrics")).text
    assert 'switchboard_mcpx_envelopes_total{outcome="routed"}' in metrics
    assert "switchboard_mcpx_deliveries_total" in metrics
    await alice.close()
    await bob.close()


async def test_a_bridged_backends_new_tools_are_announced() -> None:
    cfg = config()
    cfg["backends"] = {"dyn": dynamic_backend()}
    cfg["mcpx"]["topics"] = {"lab": {"participants": ["dyn"]}}
    with run_gateway(cfg) as gw:
        wait_for_backend(gw, "lab", "dyn")
        alice = await Peer.join(gw.url, "lab", "alice-token")
        dyn = next(p for p in alice.welcome["payload"]["participants"] if p["id"] == "dyn")
        assert "sprout" not in {t["name"] for t in dyn["tools"]}
        await alice.send("mcp/request:tools/call:grow", tool_call("grow", {"name": "sprout"}), to=["dyn"])
        await alice.recv_kind("mcp/response:tools/call:grow")
        async with asyncio.timeout(10):
            while True:
                presence = await alice.recv_kind("system/presence")
                entry = presence["payload"]["participant"]
                if entry["id"] == "dyn" and "sprout" in {t["name"] for t in entry.get("tools", [])}:
                    break
        assert presence["payload"]["event"] == "join", "presence has only join and leave (§3.4)"
        await alice.close()


# ---- fan-out writes (gateway/mcpx/outbox.py) ---------------------------------------------------


async def _join(gw: RunningGateway, topic: str, name: str, **options: Any) -> Peer:
    """A peer whose connection options are the test's (compression, the client's own read buffer)."""
    headers = {"Authorization": f"Bearer {mint(name, topic, ['chat'])}"}
    ws = await asyncio.wait_for(connect(ws_url(gw.url, topic), additional_headers=headers, **options), 10)
    peer = Peer(ws)
    peer.welcome = await peer.recv()
    peer.id = peer.welcome["payload"]["you"]["id"]
    return peer


async def _chats(peer: Peer, count: int, timeout: float = 20.0) -> list[dict[str, Any]]:
    async with asyncio.timeout(timeout):
        return [await peer.recv_kind("chat", timeout=timeout) for _ in range(count)]


@pytest.fixture(scope="module")
def roomy() -> Iterator[RunningGateway]:
    """A generous envelope rate, for bursts."""
    with run_gateway(config(rate_per_participant={"messages_per_s": 100_000, "burst": 100_000})) as gw:
        yield gw


async def test_a_burst_reaches_compressed_and_plain_peers_whole_and_in_order(roomy: RunningGateway) -> None:
    # Frame lengths of every size class (7-bit, 16-bit, 64-bit) and a non-ASCII text, to a peer that
    # negotiated permessage-deflate (its own frames) and one that did not (the shared frame bytes).
    plain = await _join(roomy, "t-burst", "plain", compression=None)
    deflated = await _join(roomy, "t-burst", "deflated")
    sender = await _join(roomy, "t-burst", "sender", compression=None)
    texts = ["x", "é" * 100, "y" * 70_000, *(f"n{i}" for i in range(300))]
    sent = [sender.envelope("chat", {"text": text}) for text in texts]
    await asyncio.gather(*(sender.send_raw(env) for env in sent))  # no yield between sends: one batch
    for peer in (plain, deflated):
        got = await _chats(peer, len(sent))
        assert [g["id"] for g in got] == [s["id"] for s in sent]
        assert [g["payload"]["text"] for g in got] == texts
    await asyncio.gather(plain.close(), deflated.close(), sender.close())


async def test_a_peer_that_pauses_reading_gets_everything_in_order_after() -> None:
    # 24 MB toward a peer that reads nothing for a while: the gateway's socket buffer fills, later
    # frames wait in the participant's queue, then everything arrives in the order it was sent.
    cfg = config(rate_per_participant={"messages_per_s": 100_000, "burst": 100_000})
    cfg["limits"] = {"session_queue": 100_000}
    with run_gateway(cfg) as gw:
        sleeper = await _join(gw, "t-pause", "sleeper", compression=None, max_queue=1)
        sender = await _join(gw, "t-pause", "sender", compression=None)
        await sleeper.recv_kind("system/presence")
        sent = [sender.envelope("chat", {"text": f"{i:06d}" + "z" * 24_000}) for i in range(1000)]
        for env in sent:
            await sender.send_raw(env)
        await asyncio.sleep(1.0)
        got = await _chats(sleeper, len(sent), timeout=60)
        assert [g["id"] for g in got] == [s["id"] for s in sent]
        await asyncio.gather(sleeper.close(), sender.close())


async def test_a_peer_that_stops_reading_is_dropped_and_the_others_get_everything() -> None:
    cfg = config(rate_per_participant={"messages_per_s": 100_000, "burst": 100_000})
    cfg["limits"] = {"session_queue": 16}
    with run_gateway(cfg) as gw:
        stuck = await _join(gw, "t-stuck", "stuck", compression=None, max_queue=1)
        reader = await _join(gw, "t-stuck", "reader", compression=None)
        sender = await _join(gw, "t-stuck", "sender", compression=None)
        sent = [sender.envelope("chat", {"text": f"{i:06d}" + "z" * 24_000}) for i in range(1000)]
        got: list[dict[str, Any]] = []
        for start in range(0, len(sent), 8):  # in steps the reader keeps up with
            for env in sent[start : start + 8]:
                await sender.send_raw(env)
            got += await _chats(reader, len(sent[start : start + 8]))
        assert [g["id"] for g in got] == [s["id"] for s in sent]
        # The stuck peer overflowed its queue: it was removed from the topic (the others saw it leave).
        leave = await sender.recv_kind("system/presence", timeout=10)
        while leave["payload"]["event"] != "leave":
            leave = await sender.recv_kind("system/presence", timeout=10)
        assert leave["payload"]["participant"]["id"] == "stuck"
        await asyncio.gather(reader.close(), sender.close())
        with contextlib.suppress(Exception):
            await asyncio.wait_for(stuck.ws.close(), 5)
