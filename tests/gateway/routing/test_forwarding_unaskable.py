"""gateway/routing/forwarding.py: a modern client that can never be asked, calling a legacy backend with
no stream, task or span, is served by one timed coroutine (``Forwarder._awaited``): answered under its
id, timed with its error.type, and a backend's request it lacks the capability for ends it with -32021."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, cast

import pytest

from gateway import jsonrpc
from gateway.config import Limits
from gateway.eras import EraBridge
from gateway.mrtr import Parking
from gateway.routing.call import Call
from gateway.routing.forwarding import Forwarder
from tests.gateway.test_eras_unaskable import FakeConnection, _session


class Metrics:
    def __init__(self) -> None:
        self.observed: list[tuple[str, str, str]] = []

    def observe_client(self, method: str, backend: str, error_type: str, seconds: float) -> None:
        self.observed.append((method, backend, error_type))


def _forwarder(conn: FakeConnection, parking: Parking, metrics: Metrics) -> Forwarder:
    conn.state = "ready"  # type: ignore[attr-defined]
    load = SimpleNamespace(forward_call=lambda inflight: SimpleNamespace(allowed=True))
    return Forwarder(
        {"legacy": cast(Any, conn)},
        cast(Any, load),
        EraBridge(parking, Limits()),
        cast(Any, None),
        metrics=cast(Any, metrics),
    )


async def _started(capabilities: dict[str, Any]) -> tuple[Any, FakeConnection, Metrics, asyncio.Task[Any], Parking]:
    session, conn, metrics, parking = _session(capabilities), FakeConnection(), Metrics(), Parking(60.0)
    event = SimpleNamespace(rpc_id=7, method="tools/call")
    call = cast(Call, SimpleNamespace(session=session, event=event, channel=session.new_stream(resumable=False)))
    forwarder = _forwarder(conn, parking, metrics)

    async def run() -> Any:
        return await forwarder.forward(call, "legacy", {"name": "echo", "arguments": {}})

    task = asyncio.create_task(run())
    for _ in range(5):
        await asyncio.sleep(0)
    return session, conn, metrics, task, parking


async def test_answered_and_timed_in_one_coroutine() -> None:
    session, conn, metrics, task, parking = await _started({})
    assert session.inflight[7][0] is cast(Any, conn) and session.input_ready is not None
    assert conn.pending is not None
    conn.pending.future.set_result(jsonrpc.result(1, {"content": [{"type": "text", "text": "hi"}]}))
    async with asyncio.timeout(2):
        routed = await task
    parking.close()
    assert routed.response["id"] == 7 and routed.response["result"]["content"][0]["text"] == "hi"
    assert routed.backend == "legacy" and routed.error_type == ""
    assert metrics.observed == [("tools/call", "legacy", "")]
    assert session.inflight == {} and session.input_ready is None


async def test_a_request_for_a_missing_capability_ends_the_call_with_32021() -> None:
    session, conn, metrics, task, parking = await _started({})
    session.missing_capabilities.append("sampling")  # what gateway/routing/backend_events.py does
    session.input_ready.set()
    with pytest.raises(jsonrpc.RpcError) as refused:
        async with asyncio.timeout(2):
            await task
    parking.close()
    assert refused.value.code == -32021 and refused.value.data == {"requiredCapabilities": {"sampling": {}}}
    assert len(conn.cancelled) == 1, "the backend is told the call is cancelled"
    assert metrics.observed == [("tools/call", "legacy", "-32021")]
    assert session.inflight == {} and session.input_ready is None


async def test_the_client_leaving_is_timed_as_cancelled() -> None:
    session, _conn, metrics, task, parking = await _started({})
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        async with asyncio.timeout(2):
            await task
    parking.close()
    assert metrics.observed == [("tools/call", "legacy", "cancelled")]
    assert session.inflight == {} and session.input_ready is None
