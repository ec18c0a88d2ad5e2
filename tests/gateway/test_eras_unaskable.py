"""gateway/eras.py and ``Forwarder._awaited``: a modern client that declared no sampling, elicitation or
roots is never asked, so its call to a legacy backend is awaited in the exchange's own task (no task per
call), and a backend's request it lacks the capability for ends the call with -32021. Here the call goes
through the general exchange (a span is open, so ``_exchange`` times it and ``_awaited`` does not); a
client that can be asked goes through the bridge's MRTR path, whose call may be parked.
tests/gateway/routing/test_forwarding_unaskable.py has the call that ``_unaskable`` times itself."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, cast

import pytest

from adapters import codecs
from gateway import jsonrpc
from gateway.config import Limits
from gateway.eras import EraBridge
from gateway.federation import Namer, View
from gateway.mrtr import Parking
from gateway.routing.call import Call
from gateway.routing.forwarding import Forwarder
from gateway.sessions import ClientSession
from policies.auth import Credentials
from policies.principal import ANONYMOUS_ALL

VIEW = View("solo", ("legacy",), Namer("conditional", "__", ("legacy",)))


class FakeConnection:
    """A legacy backend connection: ``begin``/``call``/``cancel`` as gateway/upstreams/connection.py has them."""

    era = "legacy"

    def __init__(self) -> None:
        self.begun: list[tuple[str, Any, Any]] = []
        self.cancelled: list[str | None] = []
        self.pending: SimpleNamespace | None = None

    def begin(self, method: str, params: Any, owner: Any) -> SimpleNamespace:
        self.begun.append((method, params, owner))
        self.pending = SimpleNamespace(future=asyncio.get_running_loop().create_future())
        return self.pending

    async def call(self, pending: SimpleNamespace) -> dict[str, Any]:
        answer: dict[str, Any] = await pending.future
        return answer

    def cancel(self, pending: SimpleNamespace, reason: str | None) -> None:
        self.cancelled.append(reason)
        if not pending.future.done():
            pending.future.set_result(jsonrpc.error(1, jsonrpc.REQUEST_CANCELLED, "Request cancelled"))


def _session(capabilities: dict[str, Any]) -> ClientSession:
    return ClientSession.exchange(
        "modern",
        VIEW,
        ANONYMOUS_ALL,
        Limits(),
        Credentials("anonymous", "anonymous"),
        "2026-07-28",
        capabilities,
        {},
        None,
        codecs.MODERN,
    )


def _call(session: ClientSession) -> Call:
    event = SimpleNamespace(rpc_id=7, method="tools/call")
    return cast(Call, SimpleNamespace(session=session, event=event, channel=session.new_stream(resumable=False)))


class Span:
    def __init__(self) -> None:
        self.ended: list[str] = []

    def end(self, error_type: str) -> None:
        self.ended.append(error_type)


class Tracing:
    """A tracer that opens one span per call: the forwarder then takes the general exchange."""

    def __init__(self) -> None:
        self.spans: list[Span] = []

    def client(self, backend: str, conn: Any, method: str, params: Any) -> tuple[Span, Any]:
        self.spans.append(Span())
        return self.spans[-1], params


def _forwarder(bridge: EraBridge, conn: FakeConnection) -> Forwarder:
    conn.state = "ready"  # type: ignore[attr-defined]
    load = SimpleNamespace(forward_call=lambda inflight: SimpleNamespace(allowed=True))
    return Forwarder(
        {"legacy": cast(Any, conn)}, cast(Any, load), bridge, cast(Any, None), tracing=cast(Any, Tracing())
    )


async def _start(bridge: EraBridge, session: ClientSession, conn: FakeConnection) -> asyncio.Task[dict[str, Any]]:
    params = {"name": "echo", "arguments": {}}
    call = _call(session)
    task = asyncio.create_task(_run(_forwarder(bridge, conn), call, params))
    for _ in range(5):
        await asyncio.sleep(0)
    return task


async def _run(forwarder: Forwarder, call: Call, params: dict[str, Any]) -> dict[str, Any]:
    return (await forwarder.forward(call, "legacy", params)).response


@pytest.fixture
async def bridge() -> Any:
    parking = Parking(60.0)
    yield EraBridge(parking, Limits())
    parking.close()


async def test_the_call_runs_in_the_exchanges_task_and_is_answered(bridge: EraBridge) -> None:
    session, conn = _session({}), FakeConnection()
    before = len(asyncio.all_tasks())
    exchange = await _start(bridge, session, conn)
    assert len(asyncio.all_tasks()) == before + 1, "no task of its own beside the exchange's"
    assert session.inflight[7][0] is cast(Any, conn) and session.input_ready is not None
    assert conn.pending is not None
    conn.pending.future.set_result(jsonrpc.result(1, {"content": [{"type": "text", "text": "hi"}]}))
    async with asyncio.timeout(2):
        answer = await exchange
    assert answer["id"] == 7 and answer["result"]["content"][0]["text"] == "hi"
    assert session.inflight == {} and session.input_ready is None and conn.cancelled == []


async def test_a_request_for_a_missing_capability_ends_the_call_with_32021(bridge: EraBridge) -> None:
    session, conn = _session({}), FakeConnection()
    exchange = await _start(bridge, session, conn)
    # What gateway/routing/backend_events.py does when the backend asks for sampling.
    session.missing_capabilities.append("sampling")
    assert session.input_ready is not None
    session.input_ready.set()
    with pytest.raises(jsonrpc.RpcError) as refused:
        async with asyncio.timeout(2):
            await exchange
    assert refused.value.code == -32021
    assert refused.value.data == {"requiredCapabilities": {"sampling": {}}}
    assert len(conn.cancelled) == 1, "the backend is told the call is cancelled"
    assert session.inflight == {} and session.input_ready is None


async def test_the_client_leaving_cancels_the_call(bridge: EraBridge) -> None:
    session, conn = _session({}), FakeConnection()
    exchange = await _start(bridge, session, conn)
    exchange.cancel()
    with pytest.raises(asyncio.CancelledError):
        async with asyncio.timeout(2):
            await exchange
    assert conn.pending is not None and conn.pending.future.cancelled()
    assert session.inflight == {} and session.input_ready is None


async def test_a_client_that_can_be_asked_still_gets_a_task_to_park(bridge: EraBridge) -> None:
    session, conn = _session({"elicitation": {}}), FakeConnection()
    before = len(asyncio.all_tasks())
    exchange = await _start(bridge, session, conn)
    assert len(asyncio.all_tasks()) == before + 2, "the call's own task, which a parking outlives the exchange"
    assert conn.pending is not None
    conn.pending.future.set_result(jsonrpc.result(1, {"content": []}))
    async with asyncio.timeout(2):
        answer = await exchange
    assert answer["result"]["content"] == []
