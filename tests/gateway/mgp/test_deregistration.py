"""What a deregistration (MGP §15.4 ``mgp/discovery/deregister``, gateway/runtime_backends.py) leaves
behind: nothing. The kernel forgets what the backend negotiated, the lifecycle ends it
``disconnected`` (events subscribers see it) and drops its state, its tools leave the discovery
index, MgpNews listeners are told ``disconnected`` even when it never connected, and a dual-era
backend's legacy twin is closed (gateway/upstreams/affinity.py)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import pytest

from adapters.mgp import names
from gateway.core import Gateway
from gateway.upstreams.affinity import EraAffinity
from gateway.upstreams.connection import BackendConnection
from tests.gateway.mgp.demo_gateway import ask, mgp_session_of, rpc, started
from tests.gateway.mgp.feature_support import pushed

pytestmark = pytest.mark.timeout(30)

MGP_SERVER = {
    "id": "dyn",
    "transport": "stdio",
    "command": sys.executable,
    "args": ["-m", "tests.e2e.backends.mgp_server", "--none"],
}


@pytest.fixture
async def gateway() -> AsyncIterator[Gateway]:
    async for gw in started({"register_commands": True}):
        yield gw


async def test_a_deregistered_backend_leaves_nothing_behind(gateway: Gateway) -> None:
    session, _ = await mgp_session_of(gateway)
    await ask(gateway, session, rpc("mgp/events/subscribe", {"channels": ["lifecycle"]}))
    assert "result" in await ask(gateway, session, rpc("mgp/discovery/register", MGP_SERVER, 2))
    assert gateway.mgp.kernel.backend("dyn") is not None, "the kernel negotiated MGP with it"
    assert gateway.mgp.lifecycle.state("dyn") == "connected"
    everything = {"query": "handshake log", "filter": {"status": "all"}}
    found = (await ask(gateway, session, rpc("mgp/tools/discover", everything, 3)))["result"]["tools"]
    assert "handshake_log" in [t["name"] for t in found]

    gone = await ask(gateway, session, rpc("mgp/discovery/deregister", {"id": "dyn"}, 4))
    assert gone["result"]["deregistered"] is True
    assert gateway.mgp.kernel.backend("dyn") is None, "kernel.forget"
    assert gateway.mgp.lifecycle.state("dyn") == "registered", "a later backend of the name starts afresh"
    changes = [e["data"] for e in await pushed(session, names.EVENT) if e["channel"] == "lifecycle"]
    assert ("dyn", "connected", "disconnected") in [
        (c["server_id"], c["previous_state"], c["new_state"]) for c in changes
    ]
    found = (await ask(gateway, session, rpc("mgp/tools/discover", everything, 5)))["result"]["tools"]
    assert "handshake_log" not in [t["name"] for t in found], "not even as disconnected"


async def test_news_listeners_hear_of_a_backend_that_never_connected(gateway: Gateway) -> None:
    heard: list[tuple[str, str, str]] = []
    gateway.mgp.news.on_state(lambda conn, state, reason: heard.append((conn.name, state, reason)))
    never = {"id": "never", "transport": "http", "url": "http://127.0.0.1:9/mcp"}  # nothing listens there
    session, _ = await mgp_session_of(gateway)
    await ask(gateway, session, rpc("mgp/discovery/register", never))
    assert gateway.connections["never"].state != "ready"
    transitions: list[tuple[str, str]] = []
    gateway.mgp.lifecycle.on_transition(lambda t: transitions.append((t.server_id, t.new_state)))
    await gateway.runtime.remove("never", 0.1)
    assert ("never", "disconnected", "deregistered") in heard
    assert transitions[-1] == ("never", "disconnected"), "it ends disconnected whatever state it was in"
    assert gateway.mgp.lifecycle.state("never") == "registered"


class _Conn:
    """The little of a connection :class:`EraAffinity` reads (a dual-era http backend)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.era = "modern"
        self.state = "ready"
        self.connected_at: float | None = 1.0
        self.first_attempt_pending = False
        self.config = SimpleNamespace(transport="http", era="auto", era_affinity=True)
        self.closed = False

    async def start(self) -> None:
        pass

    async def close(self) -> None:
        self.closed = True
        self.state = "closed"


async def test_retire_closes_a_backends_legacy_twin() -> None:
    twins: list[_Conn] = []

    def make_twin(primary: Any) -> Any:
        twins.append(_Conn(primary.name))
        return twins[-1]

    affinity = EraAffinity(make_twin, 1.0)
    primary: Any = _Conn("split")
    chosen: BackendConnection = await affinity.for_legacy_client(primary)
    assert chosen is twins[0] and affinity.describe("split") == "ready"
    affinity.retire("split")
    assert affinity.describe("split") is None
    affinity.retire("split")  # nothing left: a no-op
    async with asyncio.timeout(2):
        await affinity.close()  # waits for the closes it started
    assert twins[0].closed and len(twins) == 1
