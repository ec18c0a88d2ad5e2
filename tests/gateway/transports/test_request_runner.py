"""gateway/transports/request_runner.py: one request run through the router and answered, as JSON when
nothing precedes the result, as SSE from the first push on, -32603 when the gateway itself fails, and
nothing at all (the call cancelled) when a 2026-07-28 client leaves. The router here is a stand-in whose
``handle`` does what each case needs; the door's end-to-end behaviour is tested over real sockets in
test_streamable_http_door.py and test_cancel_on_disconnect.py."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any, cast

import pytest

from gateway import jsonrpc
from gateway.channels import Channel
from gateway.config import Limits
from gateway.federation import Namer, View
from gateway.metrics import Metrics
from gateway.sessions import ClientSession
from gateway.transports.coalesce import HOLD_KEY, CoalescingTransport
from gateway.transports.event_stream import EventStreamWriter
from gateway.transports.request_runner import RequestRunner
from policies.principal import ANONYMOUS_ALL

pytestmark = pytest.mark.timeout(10)

VIEW = View("solo", ("echo",), Namer("conditional", "__", ("echo",)))
CALL = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "echo"}}

Handle = Callable[[ClientSession, dict[str, Any], Channel], Awaitable[dict[str, Any] | None]]


class Router:
    def __init__(self, handle: Handle) -> None:
        self._handle = handle

    async def handle(
        self, session: ClientSession, message: dict[str, Any], shape: Any, channel: Channel, principal: Any
    ) -> dict[str, Any] | None:
        return await self._handle(session, message, channel)


class Client:
    """The ASGI side of one exchange: the messages the runner sent, and a receive that waits."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.left = asyncio.Event()

    async def receive(self) -> dict[str, Any]:
        await self.left.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)

    def status(self) -> int:
        return int(self.sent[0]["status"])

    def body(self) -> bytes:
        return b"".join(m.get("body", b"") for m in self.sent[1:])


def _runner(handle: Handle) -> RequestRunner:
    return RequestRunner(cast(Any, Router(handle)), EventStreamWriter(Limits(), Metrics()))


def _session() -> ClientSession:
    session = ClientSession("s" * 32, "streamable_http", VIEW, ANONYMOUS_ALL, Limits())
    session.protocol_version = "2025-11-25"
    session.initialized = True
    return session


SCOPE: dict[str, Any] = {"type": "http", "method": "POST", "path": "/mcp", "headers": []}


async def test_a_result_alone_is_answered_as_json() -> None:
    async def handle(session: ClientSession, message: dict[str, Any], channel: Channel) -> dict[str, Any]:
        return jsonrpc.result(message["id"], {"content": []})

    client, session = Client(), _session()
    await _runner(handle).run(SCOPE, client.receive, client.send, session, dict(CALL), [("x-extra", "1")])
    assert client.status() == 200
    assert (b"x-extra", b"1") in client.sent[0]["headers"]
    assert json.loads(client.body()) == {"jsonrpc": "2.0", "id": 3, "result": {"content": []}}
    assert session.streams == {}, "a stream is kept for Last-Event-ID only once it streams"


async def test_a_push_before_the_result_switches_to_sse_and_nothing_is_lost() -> None:
    async def handle(session: ClientSession, message: dict[str, Any], channel: Channel) -> dict[str, Any]:
        channel.push(jsonrpc.notification("notifications/progress", {"progressToken": "p", "progress": 1}))
        await asyncio.sleep(0.01)
        return jsonrpc.result(message["id"], {"content": []})

    client, session = Client(), _session()
    await _runner(handle).run(SCOPE, client.receive, client.send, session, dict(CALL), [])
    assert client.status() == 200
    assert (b"content-type", b"text/event-stream") in client.sent[0]["headers"]
    data = [line[6:] for line in client.body().split(b"\n") if line.startswith(b"data: ")]
    assert data[0] == b"", "first an event with an id and no data, to resume from (2025-11-25)"
    events = [json.loads(d) for d in data[1:]]
    assert [e.get("method") or e.get("id") for e in events] == ["notifications/progress", 3]
    assert len(session.streams) == 1, "a legacy client's stream is kept for Last-Event-ID once it streams"


async def test_a_failure_inside_the_gateway_is_answered_with_32603() -> None:
    async def handle(session: ClientSession, message: dict[str, Any], channel: Channel) -> dict[str, Any]:
        raise ValueError("a bug")

    client = Client()
    await _runner(handle).run(SCOPE, client.receive, client.send, _session(), dict(CALL), [])
    answer = json.loads(client.body())
    # (a legacy client: a JSON-RPC error rides on HTTP 200)
    assert client.status() == 200 and answer["id"] == 3 and answer["error"]["code"] == jsonrpc.INTERNAL_ERROR


async def test_an_error_is_mapped_by_finish() -> None:
    async def handle(session: ClientSession, message: dict[str, Any], channel: Channel) -> dict[str, Any]:
        return jsonrpc.error(message["id"], jsonrpc.INVALID_PARAMS, "bad")

    client = Client()
    await _runner(handle).run(
        SCOPE, client.receive, client.send, _session(), dict(CALL), [], lambda response: (418, response)
    )
    assert client.status() == 418 and json.loads(client.body())["error"]["message"] == "bad"


@pytest.mark.parametrize("held", [False, True], ids=["disconnect-watch", "held-by-connection"])
async def test_a_client_that_leaves_cancels_the_call_and_gets_nothing(held: bool) -> None:
    started, cancelled = asyncio.Event(), asyncio.Event()

    async def handle(session: ClientSession, message: dict[str, Any], channel: Channel) -> dict[str, Any]:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return jsonrpc.result(message["id"], {})

    client = Client()
    scope = dict(SCOPE)
    connection = CoalescingTransport(cast(Any, None), asyncio.get_running_loop())
    if held:
        scope[HOLD_KEY] = connection
    run = _runner(handle).run(scope, client.receive, client.send, _session(), dict(CALL), [], None, True)
    task = asyncio.create_task(run)
    await started.wait()
    if held:
        assert len(connection.held) == 1
        connection.lost()  # what the gateway's protocol does when the socket closes
    else:
        client.left.set()
    async with asyncio.timeout(5):
        await task  # ends quietly: not cancelled itself, no exception
    assert cancelled.is_set() and client.sent == [] and not task.cancelled()
    assert connection.held == set()
