"""The lean request cycle (gateway/transports/lean.py) under the gateway's protocol, over real sockets.

A small ASGI app stands in for FastPath: it declares the lean paths and body limit, and answers
what it saw (which cycle served it, the body, the header table). Every HTTP edge the brief lists
is here: keep-alive, pipelining, Connection: close, bodies in pieces, a client gone mid-body,
bodies over the limit, chunked bodies, Expect: 100-continue, HTTP/1.0, repeated headers, streamed
answers through uvicorn's inherited send, and the keep-alive timer armed once per idle period.
"""

from __future__ import annotations

import asyncio
import gc
import inspect
import json
import re
import weakref
from collections.abc import AsyncIterator
from typing import Any

import pytest
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from gateway.transports.coalesce import ABORT_KEY, LOST_KEY, CoalescingTransport
from gateway.transports.http_common import answered_now, body_at_hand, read_body, send_bytes
from gateway.transports.http_protocol import CoalescingHttpToolsProtocol
from gateway.transports.lean import BODY_KEY, HEADERS_KEY, UNIQUE_HEADERS_KEY, LeanCycle
from tests.support import served_by_protocol

pytestmark = pytest.mark.timeout(30)

LIMIT = 1000


class Probe:
    """Answers what it saw; ``/stream`` answers in chunks, ``/slow`` after a while, ``/gone`` waits
    for the client to leave."""

    lean_posts = frozenset({b"/lean", b"/stream", b"/gone", b"/extra", b"/bad"})
    lean_body_limit = LIMIT

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.gone = asyncio.Event()
        self.cycles: list[weakref.ref[LeanCycle]] = []
        self.tasks: set[asyncio.Task[None]] = set()  # uvicorn's server_state.tasks, set by the fixture

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            message = await receive()
            await send({"type": "lifespan.startup.complete"})
            message = await receive()
            assert message["type"] == "lifespan.shutdown"
            await send({"type": "lifespan.shutdown.complete"})
            return
        lean = type(send) is LeanCycle
        if lean:
            self.cycles.append(weakref.ref(send))
        body = body_at_hand(scope)
        if body is None:
            body = await read_body(receive, 10 * LIMIT, None)
        seen = {
            "lean": lean,
            "body": body.decode(),
            "unique": UNIQUE_HEADERS_KEY in scope,
            "keys": ABORT_KEY in scope and LOST_KEY in scope,
        }
        self.calls.append(seen)
        path = scope["path"]
        if path == "/stream":
            await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
            for part in (b"one", b"two"):
                await send({"type": "http.response.body", "body": part, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        elif path == "/gone":
            message = await receive()
            seen["after"] = message["type"]
            self.gone.set()
        elif path == "/extra":
            await send_bytes(send, 201, b"{}", extra=[("x-one", "1"), ("connection", "close")])
        elif path == "/bad":
            await send_bytes(send, 200, b"{}", extra=[("x-bad", "a\r\nb")])
        else:
            await send_bytes(send, 200, json.dumps(seen).encode())


@pytest.fixture
async def served() -> AsyncIterator[tuple[Probe, int]]:
    probe = Probe()
    async with served_by_protocol(probe, timeout_keep_alive=1) as (server, port):
        probe.tasks = server.server_state.tasks
        yield probe, port


def post(path: str, body: bytes, *headers: str, version: str = "1.1") -> bytes:
    head = [f"POST {path} HTTP/{version}", "Host: 127.0.0.1", f"Content-Length: {len(body)}", *headers]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


async def read_response(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    async with asyncio.timeout(5):
        head = await reader.readuntil(b"\r\n\r\n")
        while head.startswith(b"HTTP/1.1 100 "):  # Expect: 100-continue's interim answer
            head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        status = int(lines[0].split()[1])
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if line:
                name, _, value = line.partition(":")
                headers[name.lower()] = value.strip()
        if "content-length" in headers:
            body = await reader.readexactly(int(headers["content-length"]))
        else:  # chunked
            body = b""
            while True:
                size = int((await reader.readuntil(b"\r\n")).strip(), 16)
                chunk = await reader.readexactly(size + 2)
                if size == 0:
                    break
                body += chunk[:-2]
        return status, headers, body


async def exchange(port: int, data: bytes, count: int = 1) -> list[tuple[int, dict[str, str], bytes]]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        return [await read_response(reader) for _ in range(count)]
    finally:
        writer.close()


def test_uvicorn_internals_the_protocol_relies_on() -> None:
    """The HttpToolsProtocol and RequestResponseCycle parts http_protocol.py and lean.py build on."""
    for name in ("_start_asgi_task", "on_response_complete", "timeout_keep_alive_handler", "on_body"):
        assert callable(getattr(HttpToolsProtocol, name))
    # CoalescingHttpToolsProtocol.data_received replaces uvicorn's: it must do what uvicorn's does
    # (reset the keep-alive state, feed the parser, answer its two exceptions) and nothing more.
    data_received = inspect.getsource(HttpToolsProtocol.data_received)
    assert "_unset_keepalive_if_required()" in data_received and "self.parser.feed_data(data)" in data_received
    assert re.findall(r"except ([\w.]+)", data_received) == ["httptools.HttpParserError", "httptools.HttpParserUpgrade"]
    for name in ("send_400_response", "_should_upgrade", "handle_websocket_upgrade", "_unsupported_upgrade_warning"):
        assert name in data_received, name
    assert "self.pipeline.appendleft((self.cycle, app))" in inspect.getsource(HttpToolsProtocol.on_headers_complete)
    on_body = inspect.getsource(HttpToolsProtocol.on_body)
    assert "self.cycle.body += body" in on_body and "self.cycle.message_event.set()" in on_body
    send = inspect.getsource(RequestResponseCycle.send)
    # Every attribute the inherited send reads is set by LeanCycle (class or instance).
    cycle = LeanCycle({}, None, None, [], True, lambda: None)  # type: ignore[arg-type, typeddict-item]
    for attribute in sorted(set(re.findall(r"self\.([a-z_0-9]+)", send))):
        assert hasattr(cycle, attribute), attribute


# CPython 3.11 keeps one table of attribute names for all instances of a class (each instance then
# holds only its values) while the class's instances have at most this many attributes; past it every
# instance gets a whole dict of its own (measured: 29 attributes ~330 bytes an instance, 30 ~1.6 KB).
KEY_SHARING_LIMIT = 29


async def test_the_protocol_stays_within_key_sharing_of_its_instance_dict() -> None:
    """One connection, one lean and one uvicorn-cycle request, the protocol's attributes counted after
    both (uvicorn sets some per request): within the limit, or each of 10,000 idle connections carries
    ~1.3 KB more (client_limits.PerConnection holds the gateway's own)."""
    probe = Probe()
    async with served_by_protocol(probe) as (server, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(post("/lean", b"a") + post("/other", b"b"))  # a path not lean: uvicorn's cycle
            answers = [json.loads((await read_response(reader))[2]) for _ in range(2)]
            assert [answer["lean"] for answer in answers] == [True, False]
            (protocol,) = server.server_state.connections
            assert isinstance(protocol, CoalescingHttpToolsProtocol)
            assert len(vars(protocol)) <= KEY_SHARING_LIMIT, sorted(vars(protocol))
        finally:
            writer.close()


async def test_a_plain_post_takes_the_lean_cycle(served: tuple[Probe, int]) -> None:
    _probe, port = served
    [(status, headers, body)] = await exchange(port, post("/lean", b"hello"))
    assert status == 200 and headers["content-type"] == "application/json" and "date" in headers
    assert json.loads(body) == {"lean": True, "body": "hello", "unique": True, "keys": True}


async def test_keep_alive_and_pipelining(served: tuple[Probe, int]) -> None:
    _probe, port = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(post("/lean", b"a"))
        assert json.loads((await read_response(reader))[2])["body"] == "a"
        writer.write(post("/lean", b"b"))  # the same connection, kept alive
        assert json.loads((await read_response(reader))[2])["body"] == "b"
        # Three pipelined at once, one of them not lean: answered in order.
        writer.write(post("/lean", b"c") + post("/lean", b"d", "Expect: 100-continue") + post("/lean", b"e"))
        answers = [json.loads((await read_response(reader))[2]) for _ in range(3)]
        assert [(a["body"], a["lean"]) for a in answers] == [("c", True), ("d", False), ("e", True)]
    finally:
        writer.close()


async def test_a_finished_request_is_freed_by_reference_counting(served: tuple[Probe, int]) -> None:
    """No reference cycle per request: with one, every call left garbage for the cyclic collector,
    whose runs paused the loop for milliseconds every hundred calls under load (ADR 0017)."""
    probe, port = served
    gc.collect()
    gc.disable()  # only reference counting may free the cycles now
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for text in (b"a", b"b", b"c"):
            writer.write(post("/lean", text))
            await read_response(reader)
        # The third is still the connection's current cycle; the first two finished and were replaced.
        async with asyncio.timeout(2):
            while any(ref() is not None for ref in probe.cycles[:2]):  # noqa: ASYNC110 (their tasks end a turn later)
                await asyncio.sleep(0.005)
        assert len(probe.cycles) == 3
    finally:
        gc.enable()
        writer.close()


async def test_a_lean_request_is_in_uvicorns_task_set_until_it_ends(served: tuple[Probe, int]) -> None:
    """Graceful shutdown waits on uvicorn's task set: a lean request is in it while it runs and
    leaves it when it ends, answered, failed or abandoned, without uvicorn's done-callback."""
    probe, port = served
    _reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(post("/gone", b"x"))
    async with asyncio.timeout(5):
        while not probe.calls:  # noqa: ASYNC110 (the app notes the call)
            await asyncio.sleep(0.005)
    [task] = probe.tasks
    assert task.get_coro().__qualname__ == "LeanCycle.run_asgi"  # type: ignore[union-attr]
    writer.close()
    async with asyncio.timeout(5):
        await probe.gone.wait()
        while probe.tasks:  # noqa: ASYNC110 (the task ends a turn after the app)
            await asyncio.sleep(0.005)
    assert task.done() and not task.cancelled()
    for path in ("/lean", "/bad", "/extra"):
        await exchange(port, post(path, b"y"))
    async with asyncio.timeout(5):
        while probe.tasks:  # noqa: ASYNC110
            await asyncio.sleep(0.005)
    assert len(probe.cycles) == 4


async def test_connection_close_is_honoured(served: tuple[Probe, int]) -> None:
    _probe, port = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(post("/lean", b"x", "Connection: close"))
    status, headers, _ = await read_response(reader)
    assert status == 200 and headers["connection"] == "close"
    async with asyncio.timeout(5):
        assert await reader.read() == b""
    writer.close()


async def test_a_body_in_pieces_is_read_whole(served: tuple[Probe, int]) -> None:
    probe, port = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        request = post("/lean", b"0123456789")
        writer.write(request[:-7])
        await asyncio.sleep(0.1)
        assert probe.calls == []  # the app starts only once the body is whole
        writer.write(request[-7:])
        assert json.loads((await read_response(reader))[2]) == {
            "lean": True,
            "body": "0123456789",
            "unique": True,
            "keys": True,
        }
    finally:
        writer.close()


async def test_a_client_gone_mid_body_never_reaches_the_app(served: tuple[Probe, int]) -> None:
    probe, port = served
    _reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(post("/lean", b"0123456789")[:-3])
    await asyncio.sleep(0.1)
    writer.close()
    await asyncio.sleep(0.2)
    assert probe.calls == []
    [(status, _, _)] = await exchange(port, post("/lean", b"ok"))  # and the server is fine
    assert status == 200


async def test_receive_after_the_body_says_disconnect_when_the_client_leaves(served: tuple[Probe, int]) -> None:
    probe, port = served
    _reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(post("/gone", b"x"))
    await asyncio.sleep(0.1)
    writer.close()
    async with asyncio.timeout(5):
        await probe.gone.wait()
    assert probe.calls[0]["after"] == "http.disconnect" and probe.calls[0]["lean"]


@pytest.mark.parametrize(
    "request_bytes",
    [
        post("/lean", b"y" * (LIMIT + 1)),  # over the body limit: the app decides (413) the usual way
        post("/lean", b"q", "Expect: 100-continue"),
        post("/lean", b"q", version="1.0"),
        post("/lean", b"q", "Connection: keep-alive", version="1.0"),
        post("/lean", b"q", "Connection: close"),
        post("/lean", b"q", "Host: 127.0.0.1"),  # a repeated header
        post("/lean?x=1", b"q"),
        post("/other", b"q"),
        b"POST /lean HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nq\r\n0\r\n\r\n",
        b"PUT /lean HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n\r\nq",
    ],
)
async def test_everything_else_takes_uvicorns_cycle(served: tuple[Probe, int], request_bytes: bytes) -> None:
    _probe, port = served
    [(status, _, body)] = await exchange(port, request_bytes)
    assert status == 200
    seen = json.loads(body)
    assert seen["lean"] is False and seen["keys"] is True and seen["body"] in ("q", "y" * (LIMIT + 1))


async def test_a_streamed_answer_goes_through_uvicorns_send(served: tuple[Probe, int]) -> None:
    probe, port = served
    [(status, headers, body)] = await exchange(port, post("/stream", b"s"))
    assert probe.calls[0]["lean"] and status == 200
    assert headers["transfer-encoding"] == "chunked" and body == b"onetwo"


async def test_extra_headers_and_refused_values(served: tuple[Probe, int]) -> None:
    _probe, port = served
    [(status, headers, body)] = await exchange(port, post("/extra", b"e"))
    assert status == 201 and headers["x-one"] == "1" and headers["connection"] == "close" and body == b"{}"
    # A header value with CR LF is refused before anything is written: the client gets a 500.
    [(status, _, _)] = await exchange(port, post("/bad", b"e"))
    assert status == 500


async def test_keep_alive_timer_closes_idle_connections_only(served: tuple[Probe, int]) -> None:
    _probe, port = served  # timeout_keep_alive=1
    busy_reader, busy = await asyncio.open_connection("127.0.0.1", port)
    idle_reader, idle = await asyncio.open_connection("127.0.0.1", port)
    try:
        idle.write(post("/lean", b"i"))
        await read_response(idle_reader)
        for _ in range(8):  # 1.6 s of requests every 0.2 s: never idle for the timeout
            busy.write(post("/lean", b"b"))
            assert (await read_response(busy_reader))[0] == 200
            await asyncio.sleep(0.2)
        async with asyncio.timeout(1):
            assert await idle_reader.read() == b""  # closed after 1 s idle
        busy.write(post("/lean", b"b"))
        assert (await read_response(busy_reader))[0] == 200
        async with asyncio.timeout(3):
            assert await busy_reader.read() == b""  # then idle: closed too
    finally:
        busy.close()
        idle.close()


def test_scope_keys_are_distinct() -> None:
    assert len({BODY_KEY, HEADERS_KEY, UNIQUE_HEADERS_KEY, ABORT_KEY, LOST_KEY}) == 5


def as_send(cycle: LeanCycle) -> Any:
    return cycle  # the cycle is the app's send (uvicorn types its message argument more narrowly)


class _Transport:
    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def test_an_answer_waits_for_a_paused_socket_to_drain() -> None:
    """Flow control as uvicorn's send: nothing is written while the transport paused writing."""
    transport = _Transport()
    flow = FlowControl(transport)  # type: ignore[arg-type]
    done: list[bool] = []
    cycle = LeanCycle({}, transport, flow, [(b"date", b"now")], True, lambda: done.append(True))  # type: ignore[arg-type, typeddict-item]
    flow.pause_writing()
    assert not answered_now(as_send(cycle), 200, b"{}")
    answer = asyncio.create_task(send_bytes(as_send(cycle), 200, b"{}"))
    await asyncio.sleep(0.05)
    assert transport.written == [] and not answer.done()
    flow.resume_writing()
    async with asyncio.timeout(5):
        await answer
    assert transport.written == [
        b"HTTP/1.1 200 OK\r\ndate: now\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"
    ]
    assert done == [True] and cycle.response_complete and not transport.closed
    # After the response, a second one is a bug, as with uvicorn's send.
    with pytest.raises(RuntimeError):
        await send_bytes(as_send(cycle), 200, b"{}")


async def test_an_answer_to_a_client_gone_is_dropped() -> None:
    transport = _Transport()
    cycle = LeanCycle({}, transport, FlowControl(transport), [], True, lambda: None)  # type: ignore[arg-type, typeddict-item]
    cycle.disconnected = True
    assert answered_now(as_send(cycle), 200, b"{}")
    assert transport.written == []


async def test_lost_watchers_stay_few_and_all_live_ones_learn_of_the_loss() -> None:
    coalescing = CoalescingTransport(_Transport(), asyncio.get_running_loop())  # type: ignore[arg-type]
    for _ in range(100):  # requests on a kept-alive connection: each cancels its watcher when done
        coalescing.watch_lost().cancel()
    live = [coalescing.watch_lost() for _ in range(3)]
    assert len(coalescing._lost_watchers or ()) <= 12
    coalescing.lost()
    assert all(w.done() and not w.cancelled() for w in live)
    assert coalescing.watch_lost().done()  # after the loss, at once
