"""One MCPx topic over several real gateway processes sharing a real redis-server (ADR 0015):
welcome and presence across replicas, routing in both modes, admin capability changes from any
replica, the per-topic limit counted globally, a bridged backend answering exactly once, and the
participants of a killed replica leaving within the TTL (with its backend taken over)."""

from __future__ import annotations

import contextlib
import shutil
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from gateway.mcpx.span import DEFAULT_TTL_S
from tests.e2e.mcpx_client import ADMIN, SECRET, Peer, mint, refused, tool_call
from tests.support import RunningGateway, redis_server, run_gateway

pytestmark = [pytest.mark.timeout(120)]

ROOM = "room"  # configured topic with the builtin demo backend in it, on every replica
LIMIT = 4
LEAVE_WITHIN_S = DEFAULT_TTL_S + 2 * DEFAULT_TTL_S / 3 + 3  # the TTL, two beats (notice, reap), slack


def config(redis: str, prefix: str) -> dict[str, Any]:
    return {
        "backends": {"demo": {"transport": "builtin", "required": True}},
        "bus": {"kind": "redis", "url": redis, "prefix": prefix},
        "auth": {"jwt": {"hs256_secret": SECRET}, "admin_token": ADMIN},
        "principals": {
            name: {"tokens": [f"{name}-token"], "capabilities": ["mcp/*", "chat"]}
            for name in ("alice", "bob", "carol", "dave")
        },
        "mcpx": {"max_participants_per_topic": LIMIT, "topics": {ROOM: {"participants": ["demo"]}}},
    }


def participants(gw: RunningGateway, topic: str) -> list[str]:
    response = httpx.get(
        f"{gw.url}/v0.1/topics/{topic}/participants", headers={"authorization": f"Bearer {ADMIN}"}, timeout=5
    )
    return [p["id"] for p in response.json()["participants"]] if response.status_code == 200 else []


def wait_for_backend(gw: RunningGateway) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if "demo" in participants(gw, ROOM):
            return
        time.sleep(0.05)
    raise TimeoutError(f"backend demo never joined {ROOM}\n{gw.log()}")


@pytest.fixture(scope="module")
def redis() -> Iterator[str]:
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed (make test installs it with apt-get)")
    with redis_server(binary) as (url, _):
        yield url


@pytest.fixture(scope="module")
def replicas(redis: str) -> Iterator[tuple[RunningGateway, RunningGateway, RunningGateway]]:
    """Three replicas of one gateway: same config, same Redis, same prefix."""
    cfg = config(redis, f"replicas-{uuid.uuid4().hex[:8]}:")
    with run_gateway(cfg) as one, run_gateway(cfg) as two, run_gateway(cfg) as three:
        for gw in (one, two, three):
            wait_for_backend(gw)
        yield one, two, three


async def heard(peer: Peer, event: str, pid: str) -> dict[str, Any]:
    """Until ``peer`` hears of ``pid``'s join or leave (other presence skipped)."""
    while True:
        message = await peer.recv_kind("system/presence", timeout=LEAVE_WITHIN_S)
        if message["payload"]["event"] == event and message["payload"]["participant"]["id"] == pid:
            return message


def ids(peer: Peer) -> set[str]:
    return {p["id"] for p in peer.welcome["payload"]["participants"]}


async def test_welcome_and_presence_cross_replicas(replicas: tuple[RunningGateway, ...]) -> None:
    one, two, three = replicas
    alice = await Peer.join(one.url, "t-presence", "alice-token")
    bob = await Peer.join(two.url, "t-presence", "bob-token")
    assert bob.welcome["payload"]["participants"] == [{"id": "alice", "capabilities": ["mcp/*", "chat"]}]
    join = await alice.recv_kind("system/presence")
    assert join["payload"] == {"event": "join", "participant": {"id": "bob", "capabilities": ["mcp/*", "chat"]}}
    carol = await Peer.join(three.url, "t-presence", "carol-token")
    assert ids(carol) == {"alice", "bob"}
    for peer in (alice, bob):
        assert (await peer.recv_kind("system/presence"))["payload"]["participant"]["id"] == "carol"
    await bob.quiet(0.3, ignore=())  # no presence of himself, no duplicate of carol's
    # A duplicate id is refused on any replica; the topic lists everyone on every replica.
    code, why = await refused(three.url, "t-presence", "alice-token")
    assert code == 1008 and "already connected" in why
    everyone = ["alice", "bob", "carol"]
    assert sorted(participants(one, "t-presence")) == sorted(participants(three, "t-presence")) == everyone
    await bob.close()
    for peer in (alice, carol):
        leave = await peer.recv_kind("system/presence")
        assert leave["payload"] == {"event": "leave", "participant": {"id": "bob"}}
    await alice.quiet(0.5, ignore=())  # the leave came once
    await alice.close()
    await carol.close()


async def test_routing_all_and_directed_across_replicas(replicas: tuple[RunningGateway, ...]) -> None:
    one, two, _ = replicas
    alice = await Peer.join(one.url, "t-route", "alice-token")
    bob = await Peer.join(two.url, "t-route", "bob-token", mode="directed")
    carol = await Peer.join(one.url, "t-route", "carol-token", mode="directed")
    dave = await Peer.join(two.url, "t-route", "dave-token")  # mode all
    for peer in (alice, bob, carol):
        await heard(peer, "join", "dave")
    hello = await alice.send("chat", {"text": "hello"})
    for peer in (bob, carol, dave):
        assert await peer.recv_kind("chat") == hello  # preserved exactly, across the bus too
    # Directed to carol (same replica as the sender): carol and dave (mode all, other replica), not bob.
    note = await alice.send("chat", {"text": "psst"}, to=["carol"])
    assert await carol.recv_kind("chat") == note
    assert await dave.recv_kind("chat") == note
    # Directed to bob from dave (same replica), and to alice from bob (the other).
    to_bob = await dave.send("chat", {"text": "for bob"}, to=["bob"])
    assert await bob.recv_kind("chat") == to_bob
    assert await alice.recv_kind("chat") == to_bob  # alice is "all"
    to_alice = await bob.send("chat", {"text": "for alice"}, to=["alice"])
    assert await alice.recv_kind("chat") == to_alice
    assert (await dave.recv_kind("chat"))["id"] == to_alice["id"]  # dave is "all"
    await carol.quiet(0.5)  # directed: nothing else was for her
    await bob.quiet(0.3)  # nothing else for bob; he never gets his own
    # Exactly once each: nothing else arrives anywhere.
    await alice.quiet(0.3)
    await dave.quiet(0.3)
    # A recipient on another replica is known; an unknown one is reported to the sender.
    missing = await alice.send("chat", {"text": "x"}, to=["bob", "nobody"])
    error = await alice.recv_kind("system/error")
    assert error["correlation_id"] == missing["id"] and error["payload"]["recipients"] == ["nobody"]
    for peer in (alice, bob, carol, dave):
        await peer.close()


async def test_admin_on_one_replica_changes_a_participant_on_another(replicas: tuple[RunningGateway, ...]) -> None:
    one, two, _ = replicas
    trainee = await Peer.join(two.url, "t-admin", mint("trainee", "t-admin", ["mcp/proposal:*", "chat"]))
    watcher = await Peer.join(two.url, "t-admin", "alice-token")
    await trainee.send("chat", {"text": "x"})
    await watcher.recv_kind("chat")
    async with httpx.AsyncClient(timeout=5) as http:
        response = await http.post(
            f"{one.url}/admin/participants/trainee/capabilities",
            json={"add": ["mcp/request:tools/*"], "remove": ["mcp/proposal:*"]},
            headers={"authorization": f"Bearer {ADMIN}"},
        )
        missing = await http.post(
            f"{one.url}/admin/participants/nobody/capabilities",
            json={"add": []},
            headers={"authorization": f"Bearer {ADMIN}"},
        )
    assert response.status_code == 200, response.text
    assert missing.status_code == 404
    body = response.json()
    assert body["oldCapabilities"] == ["mcp/proposal:*", "chat"]
    assert body["newCapabilities"] == ["chat", "mcp/request:tools/*"] and body["topics"] == ["t-admin"]
    welcome = await trainee.recv_kind("system/welcome")
    assert welcome["payload"]["you"] == {"id": "trainee", "capabilities": body["newCapabilities"]}
    assert [p["id"] for p in welcome["payload"]["participants"]] == ["alice"]
    # In force on replica two at once: a tool request passes, a proposal no longer does.
    call = await trainee.send("mcp/request:tools/list", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert (await watcher.recv_kind("mcp/request:tools/list"))["id"] == call["id"]
    await trainee.send("mcp/proposal:tools/call:echo", {"method": "tools/call"})
    assert (await trainee.recv_kind("system/error"))["payload"]["error"] == "capability_violation"
    # Later joiners on any replica see the new capabilities.
    late = await Peer.join(one.url, "t-admin", "bob-token")
    listed = {p["id"]: p["capabilities"] for p in late.welcome["payload"]["participants"]}
    assert listed["trainee"] == body["newCapabilities"]
    for peer in (trainee, watcher, late):
        await peer.close()


async def test_the_topic_limit_is_counted_over_all_replicas(replicas: tuple[RunningGateway, ...]) -> None:
    one, two, three = replicas
    peers = [
        await Peer.join(gw.url, "t-limit", name + "-token")
        for gw, name in ((one, "alice"), (two, "bob"), (three, "carol"), (one, "dave"))
    ]
    for gw in (one, two, three):
        code, why = await refused(gw.url, "t-limit", mint("extra", "t-limit", ["chat"]))
        assert code == 1013 and "full" in why
    await peers[1].close()  # a seat frees on replica two: a joiner on replica three takes it
    await heard(peers[0], "leave", "bob")
    extra = await Peer.join(three.url, "t-limit", mint("extra", "t-limit", ["chat"]))
    assert ids(extra) == {"alice", "carol", "dave"}
    for peer in (*peers[:1], *peers[2:], extra):
        await peer.close()


async def test_a_bridged_backend_answers_once_for_every_replica(replicas: tuple[RunningGateway, ...]) -> None:
    one, two, three = replicas
    # Directed: each sees only what is addressed to it, so a second answer could not hide.
    askers = [
        await Peer.join(gw.url, ROOM, name + "-token", mode="directed")
        for gw, name in ((one, "alice"), (two, "bob"), (three, "carol"))
    ]
    for n, peer in enumerate(askers):
        assert "demo" in ids(peer)
        call = await peer.send("mcp/request:tools/call:add", tool_call("add", {"a": n, "b": 10}, rpc_id=n), to=["demo"])
        response = await peer.recv_kind("mcp/response:tools/call:add", timeout=10)
        assert response["from"] == "demo" and response["correlation_id"] == call["id"]
        assert response["payload"]["result"]["structuredContent"] == {"sum": n + 10}
    for peer in askers:
        # Every replica runs a bridge for demo, yet each call was answered once.
        await peer.quiet(1.0)
    for peer in askers[1:]:
        await peer.close()
    # A proposal made on one replica, fulfilled from another: demo's answer reaches both.
    human = await Peer.join(one.url, ROOM, "dave-token")
    proposer = await Peer.join(three.url, ROOM, mint("untrusted", ROOM, ["mcp/proposal:*", "chat"]))
    proposal = await proposer.send(
        "mcp/proposal:tools/call:echo",
        {"method": "tools/call", "params": {"name": "echo", "arguments": {"text": "approved"}}},
        to=["demo"],
    )
    assert (await human.recv_kind("mcp/proposal:tools/call:echo"))["id"] == proposal["id"]
    fulfil = await human.send(
        "mcp/request:tools/call:echo", tool_call("echo", {"text": "ok"}), to=["demo"], correlation_id=proposal["id"]
    )
    for peer in (human, proposer):
        response = await peer.recv_kind("mcp/response:tools/call:echo", timeout=10)
        assert response["correlation_id"] == fulfil["id"] and response["to"] == ["dave", "untrusted"]
    await proposer.quiet(0.5)
    for peer in (askers[0], human, proposer):
        await peer.close()


async def test_a_killed_replica_leaves_and_its_backend_is_taken_over(redis: str) -> None:
    cfg = config(redis, f"kill-{uuid.uuid4().hex[:8]}:")
    with run_gateway(cfg) as first:
        wait_for_backend(first)  # the first replica holds demo's entry
        with run_gateway(cfg) as second:
            wait_for_backend(second)
            ghost = await Peer.join(first.url, ROOM, "bob-token")
            alice = await Peer.join(second.url, ROOM, "alice-token")
            assert ids(alice) == {"demo", "bob"}
            call = await alice.send("mcp/request:tools/call:add", tool_call("add", {"a": 1, "b": 1}), to=["demo"])
            assert (await alice.recv_kind("mcp/response:tools/call:add"))["correlation_id"] == call["id"]
            first.proc.kill()  # no goodbye: its entries stay until its beat is missed
            started = time.monotonic()
            gone: set[str] = set()
            while gone != {"bob", "demo"}:
                event = await alice.recv_kind("system/presence", timeout=LEAVE_WITHIN_S)
                if event["payload"]["event"] == "leave":
                    gone.add(event["payload"]["participant"]["id"])
            assert time.monotonic() - started < LEAVE_WITHIN_S
            # The survivor's bridge stood by for demo, and takes it over.
            join = await alice.recv_kind("system/presence", timeout=LEAVE_WITHIN_S)
            assert join["payload"]["event"] == "join" and join["payload"]["participant"]["id"] == "demo"
            call = await alice.send("mcp/request:tools/call:add", tool_call("add", {"a": 2, "b": 2}), to=["demo"])
            response = await alice.recv_kind("mcp/response:tools/call:add", timeout=10)
            assert response["correlation_id"] == call["id"]
            assert set(participants(second, ROOM)) == {"demo", "alice"}
            with contextlib.suppress(Exception):  # its replica is gone; nothing to close cleanly
                await ghost.ws.close()
            await alice.close()


async def test_a_replica_stopped_gracefully_says_goodbye_at_once(redis: str) -> None:
    cfg = config(redis, f"stop-{uuid.uuid4().hex[:8]}:")
    with run_gateway(cfg) as staying:
        wait_for_backend(staying)
        with run_gateway(cfg) as going:
            await Peer.join(going.url, "t-stop", "bob-token")
            alice = await Peer.join(staying.url, "t-stop", "alice-token")
            assert ids(alice) == {"bob"}
            started = time.monotonic()
        # The context stopped it (SIGTERM): its participants left before its beat could be missed.
        await heard(alice, "leave", "bob")
        assert time.monotonic() - started < DEFAULT_TTL_S
        await alice.close()
