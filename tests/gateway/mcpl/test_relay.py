"""The bound on what one backend may have the relay answer at once (``mcpl.max_serving_per_backend``),
decided by policies/load.py."""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any

from gateway.audit import AuditLog
from gateway.bus.memory import MemoryBus
from gateway.config import AuditConfig, Mcpl
from gateway.mcpl import McplRelay
from gateway.metrics import Metrics
from policies.auth import PrincipalRegistry
from policies.chain import PolicyChain
from policies.load import LoadPolicy


class _Conn:
    """What the relay touches of a backend connection when a request arrives."""

    name = "mem"

    def __init__(self) -> None:
        self.spawned: list[Coroutine[Any, Any, Any]] = []
        self.sent: list[dict[str, Any]] = []

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        self.spawned.append(coro)

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)


def _relay(config: Mcpl) -> McplRelay:
    metrics = Metrics()
    return McplRelay(
        config=config,
        sessions=[],
        connections={},
        principals=PrincipalRegistry({}),
        chain=PolicyChain([]),
        audit=AuditLog(AuditConfig(), metrics),
        metrics=metrics,
        bus=MemoryBus(),
        load=LoadPolicy(max_sessions=10, max_inflight_per_session=10),
    )


def _push(n: int) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": n, "method": "push/event", "params": {"featureSet": "m", "eventId": str(n)}}


async def test_requests_beyond_the_configured_bound_are_refused_at_once() -> None:
    assert Mcpl().max_serving_per_backend == 256, "the documented default"
    relay, conn = _relay(Mcpl(max_serving_per_backend=2)), _Conn()
    assert all(relay.on_server_request(conn, _push(n), None) for n in (1, 2, 3))  # type: ignore[arg-type]
    answering, refusal = conn.spawned[:2], conn.spawned[2]
    await refusal
    assert conn.sent == [
        {
            "jsonrpc": "2.0",
            "id": 3,
            "error": {"code": -32094, "message": "too many MCPL requests from this backend in flight (limit 2)"},
        }
    ]
    for coro in answering:
        coro.close()  # never run: both stay in flight
    assert not relay.on_server_request(conn, {"jsonrpc": "2.0", "id": 4, "method": "tools/list"}, None)  # type: ignore[arg-type]


async def test_a_reload_changes_the_bound_for_the_next_request() -> None:
    relay, conn = _relay(Mcpl(max_serving_per_backend=1)), _Conn()
    relay.on_server_request(conn, _push(1), None)  # type: ignore[arg-type]
    relay.reconfigure(Mcpl(max_serving_per_backend=2))
    relay.on_server_request(conn, _push(2), None)  # type: ignore[arg-type]
    relay.on_server_request(conn, _push(3), None)  # type: ignore[arg-type]
    for coro in conn.spawned[:2]:
        coro.close()
    await conn.spawned[2]
    assert [m["id"] for m in conn.sent] == [3] and "(limit 2)" in conn.sent[0]["error"]["message"]
