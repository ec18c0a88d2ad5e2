"""gateway/mcpx/bridge.py without backends: a backend participant's bound on concurrent topic calls."""

from __future__ import annotations

import asyncio
from typing import Any

import pydantic
import pytest

from adapters import mcpx
from gateway import errors
from gateway.audit import AuditLog
from gateway.config import AuditConfig, Mcpx
from gateway.mcpx.bridge import BackendParticipants
from gateway.mcpx.hub import Participant, TopicHub
from gateway.metrics import Metrics
from policies import CapabilitySet, PolicyChain


class HeldBackend:
    """A backend connection whose requests all wait until released."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.started = 0

    async def request(self, method: str, params: dict[str, Any] | None, owner: Any = None) -> dict[str, Any]:
        self.started += 1
        await self.release.wait()
        return {"result": {"content": [{"type": "text", "text": f"{method} {params}"}]}}


def call(n: int) -> dict[str, Any]:
    payload = {"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": {"name": "echo", "arguments": {}}}
    return mcpx.envelope("alice", "mcp/request:tools/call:echo", payload, to=["demo"])


def test_the_bound_is_a_config_field() -> None:
    assert Mcpx().max_inflight_per_backend == 256
    assert Mcpx(max_inflight_per_backend=3).max_inflight_per_backend == 3
    with pytest.raises(pydantic.ValidationError):
        Mcpx(max_inflight_per_backend=0)


async def test_calls_beyond_the_bound_are_answered_busy_at_once() -> None:
    hub = TopicHub(10)
    backend = HeldBackend()
    bridge = BackendParticipants(
        Mcpx(max_inflight_per_backend=2),
        topics=hub,
        connections={"demo": backend},  # type: ignore[dict-item]
        catalog=None,  # type: ignore[arg-type]
        catalogs={},
        views={},
        chain=PolicyChain([]),
        audit=AuditLog(AuditConfig(), Metrics()),
    )
    answers: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    def to_alice(envelope: dict[str, Any], _text: str) -> bool:
        if envelope["kind"] == "mcp/response:tools/call:echo":
            answers.put_nowait(envelope)
        return True

    demo = Participant("demo", CapabilitySet(["mcp/response:*"]), bridge._deliverer("room", "demo"), "directed")
    hub.join("room", demo)
    topic = hub.join("room", Participant("alice", CapabilitySet(["mcp/*"]), to_alice, "all"))

    async def next_answer() -> dict[str, Any]:
        return await asyncio.wait_for(answers.get(), 5)

    sent = [call(n) for n in range(3)]
    for envelope in sent:
        hub.route(topic, "alice", envelope)
    # The third is refused without waiting: two run, held by the backend.
    assert answers.qsize() == 1
    busy = answers.get_nowait()
    assert busy["correlation_id"] == sent[2]["id"] and busy["to"] == ["alice"]
    assert busy["payload"]["error"] == {"code": errors.SESSION_OVERLOADED, "message": "backend demo is busy"}
    await asyncio.sleep(0)
    assert backend.started == 2

    backend.release.set()
    answered = {e["correlation_id"]: e["payload"] for e in [await next_answer(), await next_answer()]}
    assert set(answered) == {sent[0]["id"], sent[1]["id"]}
    assert all("result" in payload for payload in answered.values())

    # The slots are free again once the calls are answered.
    later = call(3)
    hub.route(topic, "alice", later)
    last = await next_answer()
    assert last["correlation_id"] == later["id"] and "result" in last["payload"]
    await bridge.stop()
