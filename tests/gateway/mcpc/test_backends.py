"""MCPC detection (gateway/mcpc/backends.py) against real servers over stdio.

Each test speaks to a real backend through a real ``BackendConnection`` whose handler hands its
connects and losses to ``McpcBackends``, as the gateway does: our older-wire server
(tests/mcpc_peers/old_server.py) as 0.2.4 and 0.2.2, the real ``mcpc`` 0.2.6 library server
(tests/mcpc_peers/server.py, under the library's own python) and the plain conformance fixture.
What the backend is asked is watched on the scripted carrier (tests/gateway/upstreams/fakes.py),
where a real server cannot show it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from gateway.config import Backend, Limits
from gateway.mcpc.backends import BackendInfo, McpcBackends
from gateway.upstreams import make_carrier
from gateway.upstreams.base import Carrier
from gateway.upstreams.connection import BackendConnection
from tests.gateway.upstreams.fakes import FakeBackend, config as fake_config
from tests.support import PROJECT_ROOT, QuietHandler, fixture_stdio_backend

pytestmark = pytest.mark.timeout(60)

PEERS = PROJECT_ROOT / "tests" / "mcpc_peers"
READY_S = 30.0
PROBE_S = 5.0


class Detecting(QuietHandler):
    """The gateway's part of a connection's handler that MCPC detection needs."""

    def __init__(self, backends: McpcBackends) -> None:
        self.backends = backends
        self.connects = 0

    def on_connected(self, conn: BackendConnection) -> None:
        self.connects += 1
        self.backends.on_connected(conn)

    def on_disconnected(self, conn: BackendConnection, reason: str) -> None:
        self.backends.on_disconnected(conn.name)


class Rig:
    def __init__(self, probe_timeout_s: float = PROBE_S) -> None:
        self.changes: list[tuple[str, bool]] = []
        self.changed = asyncio.Event()
        self.backends = McpcBackends("switchboard", probe_timeout_s, self._changed)
        self.handler = Detecting(self.backends)
        self.carriers: list[Carrier] = []

    def _changed(self, name: str, speaks: bool) -> None:
        self.changes.append((name, speaks))
        self.changed.set()

    async def until(self, condition: Callable[[], bool], timeout_s: float = 20.0) -> None:
        async with asyncio.timeout(timeout_s):
            while not condition():
                self.changed.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(0.05):
                        await self.changed.wait()


@contextlib.asynccontextmanager
async def connected(
    name: str, cfg: dict[str, Any] | Backend, rig: Rig, factory: Callable[[], Carrier] | None = None
) -> AsyncIterator[BackendConnection]:
    backend = cfg if isinstance(cfg, Backend) else Backend.model_validate(cfg)

    def carrier() -> Carrier:
        made = make_carrier(name, backend, Limits())
        rig.carriers.append(made)
        return made

    conn = BackendConnection(name, backend, factory or carrier, rig.handler, {"name": "switchboard", "version": "0"})
    await conn.start()
    try:
        assert await conn.wait_ready(READY_S), conn.last_error
        yield conn
    finally:
        async with asyncio.timeout(15):
            await conn.close()


def old_server(version: str, **extra: Any) -> dict[str, Any]:
    args = [str(PEERS / "old_server.py"), "--version", version, "--name", f"old-{version}"]
    return {"transport": "stdio", "command": sys.executable, "args": args, "timeout_s": 10, **extra}


async def settled_within(rig: Rig, conn: BackendConnection, limit_s: float) -> BackendInfo | None:
    started = time.monotonic()
    info = await rig.backends.settled(conn)
    assert time.monotonic() - started < limit_s
    assert not rig.backends.detecting(conn.name)
    return info


@pytest.mark.parametrize(
    ("version", "tool"), [("0.2.4", "_is_mcpc_enabled"), ("0.2.2", "is_mcpc_enabled")], ids=["0.2.4", "0.2.2"]
)
async def test_an_older_server_is_found_under_its_versions_handshake_name(version: str, tool: str) -> None:
    rig = Rig()
    async with connected("old", old_server(version), rig) as conn:
        info = await settled_within(rig, conn, 10)
        assert info == BackendInfo(version, f"old-{version}", tool)
        assert rig.backends.speaks("old") and rig.backends.info("old") == info
        assert rig.backends.names() == ["old"]
        assert rig.changes == [("old", True)]
        # The connection still serves ordinary calls after the handshake.
        answer = await conn.request("tools/call", {"name": "sync_echo", "arguments": {"text": "hi"}}, timeout=10)
        assert answer["result"]["content"][0]["text"] == "hi"


async def test_the_library_server_answers_the_newest_handshake(mcpc_python: Path) -> None:
    rig = Rig()
    cfg = {"transport": "stdio", "command": str(mcpc_python), "args": [str(PEERS / "server.py"), "--name", "lib"]}
    async with connected("lib", cfg, rig) as conn:
        info = await settled_within(rig, conn, 10)
        assert info == BackendInfo("0.2.6", "lib", "_mcpc_init")
        assert rig.changes == [("lib", True)]


async def test_a_plain_backend_is_not_mcpc() -> None:
    rig = Rig()
    async with connected("plain", fixture_stdio_backend(), rig) as conn:
        assert await settled_within(rig, conn, 10) is None
        assert not rig.backends.speaks("plain") and rig.backends.info("plain") is None
        assert rig.backends.names() == [] and rig.changes == []


async def test_mcpc_off_is_never_asked() -> None:
    rig = Rig()
    async with connected("old", old_server("0.2.4", mcpc="off"), rig) as conn:
        assert not rig.backends.detecting("old")
        assert await settled_within(rig, conn, 0.5) is None
        await asyncio.sleep(0.3)
        assert not rig.backends.speaks("old") and rig.changes == []
    # What went over the wire, on a scripted backend: no tools/call at all.
    fake, watched = FakeBackend("legacy"), Rig()
    async with connected("fake", fake_config("http", mcpc="off"), watched, fake.factory) as conn:
        assert await settled_within(watched, conn, 0.5) is None
        await asyncio.sleep(0.2)
        assert "tools/call" not in fake.carrier.methods()


async def test_a_backend_that_does_not_answer_is_asked_once_and_settles_in_bounded_time() -> None:
    fake, rig = FakeBackend("legacy"), Rig(probe_timeout_s=0.2)
    async with connected("fake", fake_config("http"), rig, fake.factory) as conn:
        [(_, asked)] = await fake.held_request("tools/call")
        assert asked["params"]["name"] == "_mcpc_init"
        assert asked["params"]["arguments"]["mcpc_info"]["mcpc_provider"] == "switchboard"
        assert rig.backends.detecting("fake")
        assert await settled_within(rig, conn, 2) is None
        await asyncio.sleep(0.3)
        assert [m["params"]["name"] for m in fake.carrier.find("tools/call")] == ["_mcpc_init"]
        assert rig.changes == []


async def test_an_error_answer_moves_on_to_the_next_name() -> None:
    fake, rig = FakeBackend("legacy"), Rig()
    async with connected("fake", fake_config("http"), rig, fake.factory) as conn:
        refusals: list[dict[str, Any]] = [
            {"error": {"code": -32602, "message": "Unknown tool: _mcpc_init"}},  # a JSON-RPC error
            {"result": {"content": [{"type": "text", "text": "Unknown tool"}], "isError": True}},
        ]
        for expected, refusal in zip(("_mcpc_init", "_is_mcpc_enabled"), refusals, strict=True):
            held = await fake.held_request("tools/call", 1)
            carrier, asked = held[-1]
            assert asked["params"]["name"] == expected
            fake.held.clear()
            carrier.deliver({"jsonrpc": "2.0", "id": asked["id"], **refusal})
        [(carrier, asked)] = await fake.held_request("tools/call")
        assert asked["params"] == {"name": "is_mcpc_enabled", "arguments": {}}
        reply = '{"mcpc_enabled":true,"mcpc_version":"0.2.9","mcpc_provider":"x"}'
        carrier.answer(asked["id"], {"content": [{"type": "text", "text": reply}], "isError": False})
        info = await settled_within(rig, conn, 5)
        assert info == BackendInfo("0.2.2", "x", "is_mcpc_enabled"), "an old name speaks its old form"


async def test_what_is_known_is_forgotten_when_the_backend_goes_away_and_learnt_again() -> None:
    rig = Rig()
    async with connected("old", old_server("0.2.4", restart={"initial_backoff_s": 0.05}), rig) as conn:
        assert await settled_within(rig, conn, 10) is not None
        pid = getattr(rig.carriers[-1], "pid", None)
        assert isinstance(pid, int)
        os.kill(pid, signal.SIGKILL)
        await rig.until(lambda: ("old", False) in rig.changes)
        assert rig.changes[:2] == [("old", True), ("old", False)]
        await rig.until(lambda: rig.handler.connects == 2 and rig.changes[-1] == ("old", True))
        assert rig.backends.info("old") == BackendInfo("0.2.4", "old-0.2.4", "_is_mcpc_enabled")
    rig.backends.on_disconnected("old")
    assert not rig.backends.speaks("old") and rig.changes[-1] == ("old", False)
    rig.backends.on_disconnected("old")
    assert rig.changes.count(("old", False)) == 2, "told once per loss"
