"""``BackendConnection`` against a scripted in-memory backend: era detection, id and token remapping,
cancellation, death and reconnection.

The fake :class:`FakeCarrier` speaks the Carrier contract (gateway/upstreams/base.py) and records
every message the connection sends; :class:`FakeBackend` decides what a backend of a given era
answers. Only the connection's public surface is used (constructor, start/close/wait_ready,
begin/call/request/cancel/notify, state/era/init_result/capabilities, the handler's callbacks and
what the carrier receives), so these tests hold across refactors of its insides.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, Literal

import pytest

from adapters import mcp_modern
from gateway import errors, jsonrpc
from gateway.config import Backend
from gateway.upstreams.base import Carrier, CarrierClosed, Inbound
from gateway.upstreams.connection import BackendConnection

pytestmark = pytest.mark.timeout(30)

WAIT_S = 5.0
LEGACY_RESULT = {
    "protocolVersion": "2025-11-25",
    "capabilities": {"tools": {}, "logging": {}},
    "serverInfo": {"name": "fake-legacy", "version": "1"},
}
MODERN_DISCOVER = {
    "supportedVersions": [mcp_modern.LATEST_MODERN],
    "capabilities": {"tools": {}},
    "resultType": "complete",
    "_meta": {mcp_modern.SERVER_INFO_KEY: {"name": "fake-modern", "version": "2"}},
    "instructions": "be nice",
}
ProbeAnswer = Literal["method-not-found", "server-error-id", "null-id", "silent", "modern-error", "die"]


# ---- the fake backend ---------------------------------------------------------------------------


class FakeCarrier(Carrier):
    """One connection attempt's carrier. ``blocking`` makes ``send`` of a request return only once
    it is answered, like a request/response carrier (Streamable HTTP)."""

    def __init__(self, backend: FakeBackend, blocking: bool) -> None:
        self.backend = backend
        self.blocking = blocking
        self.inbound: Inbound | None = None
        self.sent: list[tuple[dict[str, Any], Mapping[str, str] | None]] = []
        self.ready_calls = 0
        self.closed = asyncio.Event()
        self.reason = "closed"
        self._answered: dict[Any, asyncio.Event] = {}

    async def open(self, inbound: Inbound) -> None:
        self.inbound = inbound

    async def send(self, message: dict[str, Any], headers: Mapping[str, str] | None = None) -> None:
        if self.closed.is_set():
            raise CarrierClosed(self.reason)
        self.sent.append((message, headers))
        self.backend.wake()
        answered = None
        if self.blocking and "method" in message and "id" in message:
            answered = self._answered.setdefault(message["id"], asyncio.Event())
        self.backend.handle(self, message)
        if answered is not None:
            closed = asyncio.ensure_future(self.closed.wait())
            done = asyncio.ensure_future(answered.wait())
            try:
                await asyncio.wait({closed, done}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                closed.cancel()
                done.cancel()
            if not answered.is_set():
                raise CarrierClosed(self.reason)

    async def ready(self) -> None:
        self.ready_calls += 1

    async def wait_closed(self) -> str:
        await self.closed.wait()
        return self.reason

    async def close(self) -> None:
        self.closed.set()

    def describe(self) -> str:
        return "fake"

    # What the backend does to this carrier:

    def deliver(self, message: dict[str, Any], related: Any = None) -> None:
        assert self.inbound is not None
        self.inbound(message, related)
        rpc_id = message.get("id")
        if "method" not in message and isinstance(rpc_id, (str, int)) and rpc_id in self._answered:
            self._answered[rpc_id].set()

    def answer(self, rpc_id: Any, result: Any, related: Any = None) -> None:
        self.deliver(jsonrpc.result(rpc_id, result), related)

    def die(self, reason: str) -> None:
        self.reason = reason
        self.closed.set()

    def methods(self) -> list[str]:
        return [str(m.get("method")) for m, _ in self.sent if "method" in m]

    def find(self, method: str) -> list[dict[str, Any]]:
        return [m for m, _ in self.sent if m.get("method") == method]


class FakeBackend:
    """What a backend of one era answers to the handshake; other requests wait in ``held`` for the
    test to answer (in any order)."""

    def __init__(
        self,
        era: Literal["legacy", "modern"] = "legacy",
        probe_answer: ProbeAnswer = "method-not-found",
        blocking: bool = False,
        modern_caps: dict[str, Any] | None = None,
    ) -> None:
        self.era = era
        self.probe_answer = probe_answer
        self.blocking = blocking
        self.modern_caps = modern_caps
        self.init_result: Any = LEGACY_RESULT
        self.die_on_initialize = False
        self.hang_on_initialize = False
        self.carriers: list[FakeCarrier] = []
        self.held: list[tuple[FakeCarrier, dict[str, Any]]] = []
        self._changed = asyncio.Event()

    def factory(self) -> Carrier:
        carrier = FakeCarrier(self, self.blocking)
        self.carriers.append(carrier)
        self.wake()
        return carrier

    @property
    def carrier(self) -> FakeCarrier:
        return self.carriers[-1]

    def wake(self) -> None:
        self._changed.set()

    async def until(self, condition: Callable[[], bool]) -> None:
        """Wait (bounded) until ``condition`` holds; re-checked whenever the backend sees something."""
        async with asyncio.timeout(WAIT_S):
            while not condition():
                self._changed.clear()
                waiter = asyncio.ensure_future(self._changed.wait())
                try:
                    await asyncio.wait({waiter}, timeout=0.01)
                finally:
                    waiter.cancel()

    async def held_request(self, method: str, count: int = 1) -> list[tuple[FakeCarrier, dict[str, Any]]]:
        await self.until(lambda: len([h for h in self.held if h[1]["method"] == method]) >= count)
        return [h for h in self.held if h[1]["method"] == method]

    def handle(self, carrier: FakeCarrier, message: dict[str, Any]) -> None:
        method = message.get("method")
        rpc_id = message.get("id")
        if method is None or rpc_id is None:
            return  # notifications and our answers to server requests are only recorded
        if method == "initialize":
            if self.die_on_initialize:
                carrier.die("exited with code 1 during initialize")
            elif self.hang_on_initialize:
                pass
            elif self.era == "legacy":
                carrier.answer(rpc_id, self.init_result)
            else:
                carrier.deliver(jsonrpc.error(rpc_id, errors.INVALID_REQUEST, "initialize is not served here"))
            return
        if method == "server/discover":
            if self.era == "modern":
                result = dict(MODERN_DISCOVER)
                if self.modern_caps is not None:
                    result["capabilities"] = self.modern_caps
                carrier.answer(rpc_id, result)
            elif self.probe_answer == "method-not-found":
                carrier.deliver(jsonrpc.error(rpc_id, errors.METHOD_NOT_FOUND, "Method not found"))
            elif self.probe_answer == "server-error-id":
                # Python SDK 1.x before a session exists: an error under an id of its own.
                carrier.deliver(jsonrpc.error("server-error", errors.INVALID_REQUEST, "Bad Request: No session"))
            elif self.probe_answer == "null-id":
                carrier.deliver(jsonrpc.error(None, errors.INVALID_REQUEST, "Bad Request"))
            elif self.probe_answer == "modern-error":
                carrier.deliver(jsonrpc.error(rpc_id, errors.UNSUPPORTED_PROTOCOL_VERSION, "no such version"))
            elif self.probe_answer == "die":
                carrier.die("the server choked on an unknown method")  # a strict legacy server
            return  # "silent": a legacy server that ignores requests before initialize
        if method == "ping":
            carrier.answer(rpc_id, {})
            return
        self.held.append((carrier, message))
        self.wake()


class Recorder:
    """A ConnectionHandler that writes down what the connection tells it."""

    def __init__(self) -> None:
        self.connected: list[BackendConnection] = []
        self.disconnected: list[str] = []
        self.server_requests: list[tuple[dict[str, Any], Any]] = []
        self.notifications: list[dict[str, Any]] = []

    def on_connected(self, conn: BackendConnection) -> None:
        self.connected.append(conn)

    def on_disconnected(self, conn: BackendConnection, reason: str) -> None:
        self.disconnected.append(reason)

    def on_server_request(self, conn: BackendConnection, message: dict[str, Any], owner: Any) -> None:
        self.server_requests.append((message, owner))

    def on_notification(self, conn: BackendConnection, message: dict[str, Any]) -> None:
        self.notifications.append(message)


class Owner:
    """A calling client's stream, as the connection sees it."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.log_level = None
        self.delivered: list[dict[str, Any]] = []

    def deliver(self, message: dict[str, Any]) -> None:
        self.delivered.append(message)


def config(transport: str = "http", **extra: Any) -> Backend:
    where = {"command": "fake-server"} if transport == "stdio" else {"url": "http://backend.test/mcp"}
    return Backend.model_validate(
        {
            "transport": transport,
            **where,
            "connect_timeout_s": 10,
            "timeout_s": 10,
            "restart": {"initial_backoff_s": 0.01, "max_backoff_s": 0.05},
            **extra,
        }
    )


class Rig:
    def __init__(self, backend: FakeBackend, conn: BackendConnection, handler: Recorder) -> None:
        self.backend = backend
        self.conn = conn
        self.handler = handler


RIGS: list[BackendConnection] = []


async def rig(backend: FakeBackend, cfg: Backend, *, ready: bool = True, **kw: Any) -> Rig:
    handler = Recorder()
    conn = BackendConnection("fake", cfg, backend.factory, handler, {"name": "switchboard-test", "version": "0"}, **kw)
    RIGS.append(conn)
    await conn.start()
    if ready:
        assert await conn.wait_ready(WAIT_S), conn.last_error
    return Rig(backend, conn, handler)


@pytest.fixture(autouse=True)
async def close_connections() -> AsyncIterator[None]:
    yield
    while RIGS:
        conn = RIGS.pop()
        async with asyncio.timeout(WAIT_S):
            await conn.close()


async def finished(task: asyncio.Task[Any]) -> Any:
    async with asyncio.timeout(WAIT_S):
        return await task


# ---- era detection ------------------------------------------------------------------------------


async def test_auto_over_http_probes_then_falls_back_to_the_legacy_handshake() -> None:
    r = await rig(FakeBackend("legacy", "method-not-found"), config("http"))
    carrier = r.backend.carrier
    assert carrier.methods() == ["server/discover", "initialize", "notifications/initialized"]
    assert r.conn.era == "legacy" and r.conn.state == "ready"
    assert r.conn.init_result == LEGACY_RESULT
    assert r.conn.capabilities == {"tools": {}, "logging": {}}
    assert carrier.ready_calls == 1, "the carrier hears once that the handshake completed"
    assert r.handler.connected == [r.conn]
    init = carrier.find("initialize")[0]
    assert init["params"]["protocolVersion"] == "2025-11-25"
    assert init["params"]["clientInfo"] == {"name": "switchboard-test", "version": "0"}
    assert "mcpl" in init["params"]["capabilities"]["experimental"], "every backend is offered MCPL"
    assert "_meta" not in init["params"], "the legacy handshake goes out without the modern envelope"
    assert carrier.sent[1][1] is None, "no modern routing headers on a legacy request"


async def test_auto_over_http_finds_a_modern_backend_with_server_discover() -> None:
    r = await rig(FakeBackend("modern"), config("http"))
    carrier = r.backend.carrier
    assert carrier.methods() == ["server/discover"], "no initialize for a modern backend"
    assert r.conn.era == "modern" and r.conn.state == "ready"
    assert r.conn.init_result == {
        "protocolVersion": mcp_modern.LATEST_MODERN,
        "capabilities": {"tools": {}},
        "serverInfo": {"name": "fake-modern", "version": "2"},
        "instructions": "be nice",
    }
    probe, headers = carrier.sent[0]
    meta = probe["params"]["_meta"]
    assert meta[mcp_modern.PROTOCOL_VERSION_KEY] == mcp_modern.LATEST_MODERN
    assert meta[mcp_modern.CLIENT_INFO_KEY] == {"name": "switchboard-test", "version": "0"}
    assert isinstance(meta[mcp_modern.CLIENT_CAPABILITIES_KEY], dict)
    assert headers is not None
    assert headers["Mcp-Method"] == "server/discover"
    assert headers["MCP-Protocol-Version"] == mcp_modern.LATEST_MODERN


async def test_a_modern_call_carries_the_envelope_and_the_routing_headers() -> None:
    r = await rig(FakeBackend("modern"), config("http"))
    call = asyncio.create_task(r.conn.request("tools/call", {"name": "echo", "arguments": {"text": "hi"}}))
    [(carrier, message)] = await r.backend.held_request("tools/call")
    assert message["params"]["name"] == "echo"
    assert message["params"]["_meta"][mcp_modern.PROTOCOL_VERSION_KEY] == mcp_modern.LATEST_MODERN
    headers = next(h for m, h in carrier.sent if m is message)
    assert headers is not None and headers["Mcp-Method"] == "tools/call" and headers["Mcp-Name"] == "echo"
    carrier.answer(message["id"], {"content": [], "resultType": "complete"})
    assert (await finished(call))["result"] == {"content": [], "resultType": "complete"}


async def test_over_stdio_initialize_goes_first_and_a_legacy_server_never_sees_server_discover() -> None:
    r = await rig(FakeBackend("legacy"), config("stdio"))
    assert r.backend.carrier.methods() == ["initialize", "notifications/initialized"]
    assert r.conn.era == "legacy"
    assert r.conn.init_result["serverInfo"] == {"name": "fake-legacy", "version": "1"}


async def test_over_stdio_a_server_that_refuses_initialize_is_asked_server_discover() -> None:
    r = await rig(FakeBackend("modern"), config("stdio"))
    assert r.backend.carrier.methods() == ["initialize", "server/discover"]
    assert r.conn.era == "modern"
    assert r.conn.init_result["serverInfo"] == {"name": "fake-modern", "version": "2"}


@pytest.mark.parametrize("probe_answer", ["server-error-id", "null-id"])
async def test_a_probe_refused_under_an_id_of_its_own_is_a_decisive_no_at_once(probe_answer: ProbeAnswer) -> None:
    # The probe may wait up to min(5 s, connect timeout); a decisive "no" must not wait at all.
    loop = asyncio.get_running_loop()
    started = loop.time()
    r = await rig(FakeBackend("legacy", probe_answer), config("http"), ready=False)
    assert await r.conn.wait_ready(1.0), r.conn.last_error
    assert loop.time() - started < 1.0
    assert r.conn.era == "legacy"
    assert r.backend.carrier.methods() == ["server/discover", "initialize", "notifications/initialized"]
    assert len(r.backend.carriers) == 1, "no reconnect was needed"


async def test_an_error_only_a_modern_server_uses_fails_the_connect() -> None:
    r = await rig(FakeBackend("legacy", "modern-error"), config("http"), ready=False)
    assert await r.conn.wait_settled(WAIT_S)
    assert r.conn.state in ("down", "connecting")
    assert r.conn.last_error is not None and "refused the modern envelope" in r.conn.last_error
    assert "initialize" not in r.backend.carriers[0].methods()


async def test_a_probe_that_kills_the_connection_is_remembered_and_the_retry_initializes() -> None:
    r = await rig(FakeBackend("legacy", "die", blocking=True), config("http"))
    first, second = r.backend.carriers
    assert first.methods() == ["server/discover"]
    assert second.methods() == ["initialize", "notifications/initialized"], "no second probe"
    assert r.conn.era == "legacy" and r.conn.init_result == LEGACY_RESULT


@pytest.mark.parametrize(
    ("init_result", "reason"),
    [
        pytest.param({"capabilities": {}}, "lacks protocolVersion", id="no-version"),
        pytest.param(["not", "an", "object"], "lacks protocolVersion", id="not-an-object"),
    ],
)
async def test_a_malformed_initialize_result_fails_the_connect(init_result: Any, reason: str) -> None:
    backend = FakeBackend("legacy")
    backend.init_result = init_result
    r = await rig(backend, config("http", era="legacy"), ready=False)
    assert await r.conn.wait_settled(WAIT_S)
    assert r.conn.last_error is not None and reason in r.conn.last_error
    assert "notifications/initialized" not in backend.carriers[0].methods()


async def test_an_unknown_legacy_version_is_accepted() -> None:
    backend = FakeBackend("legacy")
    backend.init_result = {**LEGACY_RESULT, "protocolVersion": "2030-01-01"}
    r = await rig(backend, config("http", era="legacy"))
    assert r.conn.protocol_version == "2030-01-01" and r.conn.state == "ready"


async def test_a_backend_that_dies_during_the_handshake_fails_the_attempt_at_once() -> None:
    backend = FakeBackend("legacy")
    backend.die_on_initialize = True
    r = await rig(backend, config("stdio"), ready=False)  # connect_timeout_s is 10
    settled = await r.conn.wait_settled(1.0)
    assert settled, "the attempt is still waiting for an answer from a dead backend"
    assert r.conn.last_error is not None and "during initialize" in r.conn.last_error


async def test_era_legacy_skips_the_probe() -> None:
    r = await rig(FakeBackend("legacy"), config("http", era="legacy"))
    assert r.backend.carrier.methods() == ["initialize", "notifications/initialized"]


async def test_era_modern_does_not_fall_back_to_initialize() -> None:
    r = await rig(FakeBackend("legacy"), config("http", era="modern"), ready=False)
    assert await r.conn.wait_settled(WAIT_S)
    assert not await r.conn.wait_ready(0.05)
    assert r.conn.last_error is not None and "2026-07-28" in r.conn.last_error
    assert all("initialize" not in c.methods() for c in r.backend.carriers)


async def test_a_refused_handshake_is_retried_with_backoff() -> None:
    r = await rig(FakeBackend("modern"), config("http", era="legacy"), ready=False)
    assert await r.conn.wait_settled(WAIT_S)
    assert r.conn.last_error is not None and "initialize refused" in r.conn.last_error
    await r.backend.until(lambda: len(r.backend.carriers) >= 3)
    assert r.handler.connected == [] and r.handler.disconnected == [], "never up, so never announced down"
    with pytest.raises(jsonrpc.RpcError) as refused:
        await r.conn.request("tools/list", {})
    assert refused.value.code == errors.BACKEND_UNAVAILABLE


async def test_mcpl_can_be_left_out_of_the_offer() -> None:
    r = await rig(FakeBackend("legacy"), config("http", era="legacy"), offer_mcpl=False)
    init = r.backend.carrier.find("initialize")[0]
    assert "experimental" not in init["params"]["capabilities"]


# ---- ids and progress tokens ---------------------------------------------------------------------


async def test_concurrent_calls_answered_out_of_order_reach_their_own_callers() -> None:
    r = await rig(FakeBackend("legacy"), config("http"))
    first = asyncio.create_task(r.conn.request("tools/call", {"name": "a", "arguments": {}}, Owner("s1")))
    second = asyncio.create_task(r.conn.request("tools/call", {"name": "b", "arguments": {}}, Owner("s2")))
    held = await r.backend.held_request("tools/call", 2)
    by_name = {m["params"]["name"]: (c, m) for c, m in held}
    ids = [m["id"] for _, m in held]
    assert len(set(ids)) == 2, "each request gets its own upstream id"
    assert all(isinstance(i, int) for i in ids)
    carrier_b, message_b = by_name["b"]
    carrier_b.answer(message_b["id"], {"content": [{"type": "text", "text": "B"}]})
    assert (await finished(second))["result"]["content"][0]["text"] == "B"
    assert not first.done()
    carrier_a, message_a = by_name["a"]
    carrier_a.answer(message_a["id"], {"content": [{"type": "text", "text": "A"}]})
    assert (await finished(first))["result"]["content"][0]["text"] == "A"
    assert r.conn.inflight == 0


async def test_an_answer_under_our_id_as_a_string_still_matches() -> None:
    r = await rig(FakeBackend("legacy"), config("http"))
    call = asyncio.create_task(r.conn.request("tools/call", {"name": "a", "arguments": {}}))
    [(carrier, message)] = await r.backend.held_request("tools/call")
    carrier.answer(str(message["id"]), {"ok": True})
    assert (await finished(call))["result"] == {"ok": True}


async def test_the_same_client_token_from_two_sessions_is_two_upstream_tokens() -> None:
    r = await rig(FakeBackend("legacy"), config("http"))
    alice, bob = Owner("alice"), Owner("bob")
    params: dict[str, Any] = {"name": "slow", "arguments": {}, "_meta": {"progressToken": "t"}}
    calls = [
        asyncio.create_task(r.conn.request("tools/call", params, alice)),
        asyncio.create_task(r.conn.request("tools/call", params, bob)),
    ]
    held = await r.backend.held_request("tools/call", 2)
    tokens = [m["params"]["_meta"]["progressToken"] for _, m in held]
    assert len(set(tokens)) == 2 and "t" not in tokens
    assert params["_meta"]["progressToken"] == "t", "the caller's params are not changed"
    (carrier, first), (_, second) = held
    carrier.deliver(jsonrpc.notification("notifications/progress", {"progressToken": tokens[1], "progress": 1}))
    carrier.deliver(jsonrpc.notification("notifications/progress", {"progressToken": tokens[0], "progress": 7}))
    # A token naming no call (or an array, which names nothing) is dropped.
    carrier.deliver(jsonrpc.notification("notifications/progress", {"progressToken": 999, "progress": 1}))
    carrier.deliver(jsonrpc.notification("notifications/progress", {"progressToken": [1], "progress": 1}))
    owners = {first["id"]: alice, second["id"]: bob}
    assert owners[second["id"]].delivered == [
        {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": "t", "progress": 1}}
    ]
    assert owners[first["id"]].delivered == [
        {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": "t", "progress": 7}}
    ]
    assert r.handler.notifications == [], "progress is only ever the caller's"
    for c, m in held:
        c.answer(m["id"], {})
    for call in calls:
        await finished(call)
    carrier.deliver(jsonrpc.notification("notifications/progress", {"progressToken": tokens[0], "progress": 8}))
    assert len(alice.delivered) + len(bob.delivered) == 2, "progress after the result goes nowhere"


async def test_messages_related_to_a_call_go_to_its_owner_and_global_ones_to_the_handler() -> None:
    r = await rig(FakeBackend("legacy"), config("http"))
    owner = Owner("s")
    call = asyncio.create_task(r.conn.request("tools/call", {"name": "a", "arguments": {}}, owner))
    [(carrier, message)] = await r.backend.held_request("tools/call")
    log_line = jsonrpc.notification("notifications/message", {"level": "info", "data": "x"})
    carrier.deliver(log_line, related=message["id"])
    changed = jsonrpc.notification("notifications/tools/list_changed")
    carrier.deliver(changed, related=message["id"])
    sampling = jsonrpc.request("srv-1", "sampling/createMessage", {"messages": []})
    carrier.deliver(sampling, related=message["id"])
    unrelated = jsonrpc.request("srv-2", "roots/list", {})
    carrier.deliver(unrelated)
    assert owner.delivered == [log_line]
    assert r.handler.notifications == [changed], "a list change concerns every session"
    assert r.handler.server_requests == [(sampling, owner), (unrelated, None)]
    carrier.answer(message["id"], {})
    await finished(call)


async def test_a_log_line_without_relation_goes_to_the_one_call_in_flight_else_to_everyone() -> None:
    r = await rig(FakeBackend("legacy"), config("stdio"))
    first, second = Owner("1"), Owner("2")
    one = asyncio.create_task(r.conn.request("tools/call", {"name": "a", "arguments": {}}, first))
    await r.backend.held_request("tools/call")
    carrier = r.backend.carrier
    line = jsonrpc.notification("notifications/message", {"level": "info", "data": "one"})
    carrier.deliver(line)
    assert first.delivered == [line]
    two = asyncio.create_task(r.conn.request("tools/call", {"name": "b", "arguments": {}}, second))
    held = await r.backend.held_request("tools/call", 2)
    other = jsonrpc.notification("notifications/message", {"level": "info", "data": "two"})
    carrier.deliver(other)
    assert first.delivered == [line] and second.delivered == [] and r.handler.notifications == [other]
    for c, m in held:
        c.answer(m["id"], {})
    await finished(one)
    await finished(two)


async def test_answers_to_server_requests_go_back_to_the_backend_as_sent() -> None:
    r = await rig(FakeBackend("legacy"), config("http"))
    carrier = r.backend.carrier
    carrier.deliver(jsonrpc.request("srv-9", "roots/list", {}))
    [(message, owner)] = r.handler.server_requests
    assert message["id"] == "srv-9" and owner is None
    await r.conn.send(jsonrpc.result("srv-9", {"roots": []}))
    assert carrier.sent[-1] == ({"jsonrpc": "2.0", "id": "srv-9", "result": {"roots": []}}, None)


async def test_an_answer_with_an_array_or_object_id_is_dropped_and_the_connection_lives() -> None:
    r = await rig(FakeBackend("legacy"), config("http"))
    call = asyncio.create_task(r.conn.request("tools/call", {"name": "a", "arguments": {}}))
    [(carrier, message)] = await r.backend.held_request("tools/call")
    for bad_id in ([message["id"]], {"id": message["id"]}):
        carrier.deliver({"jsonrpc": "2.0", "id": bad_id, "result": {"wrong": True}})  # must not raise
    carrier.deliver({"jsonrpc": "2.0", "method": 42})  # a method that is no string: dropped too
    carrier.deliver({"jsonrpc": "2.0", "id": 12345, "result": {}})  # an id we never used: ignored
    assert r.conn.state == "ready" and not call.done()
    carrier.answer(message["id"], {"right": True})
    assert (await finished(call))["result"] == {"right": True}
    assert (await r.conn.request("ping", {}))["result"] == {}
    assert len(r.backend.carriers) == 1, "the connection was never dropped"


# ---- cancellation and timeouts -------------------------------------------------------------------


async def test_cancel_tells_a_legacy_backend_and_answers_the_caller_with_32800() -> None:
    r = await rig(FakeBackend("legacy"), config("http"))
    pending = r.conn.begin("tools/call", {"name": "a", "arguments": {}}, Owner("s"))
    call = asyncio.create_task(r.conn.call(pending))
    [(carrier, message)] = await r.backend.held_request("tools/call")
    r.conn.cancel(pending, "the user gave up")
    answer = await finished(call)
    assert answer["error"]["code"] == errors.REQUEST_CANCELLED
    await r.backend.until(lambda: bool(carrier.find("notifications/cancelled")))
    [note] = carrier.find("notifications/cancelled")
    assert note["params"] == {"requestId": message["id"], "reason": "the user gave up"}
    assert "id" not in note
    carrier.answer(message["id"], {"late": True})  # the backend answers anyway: nobody is waiting
    assert r.conn.inflight == 0 and r.conn.state == "ready"


async def test_cancel_of_a_modern_http_call_cuts_the_exchange_without_a_notification() -> None:
    r = await rig(FakeBackend("modern", blocking=True), config("http"))
    pending = r.conn.begin("tools/call", {"name": "a", "arguments": {}}, Owner("s"))
    call = asyncio.create_task(r.conn.call(pending))
    [(carrier, _)] = await r.backend.held_request("tools/call")
    r.conn.cancel(pending, "bye")
    answer = await finished(call)
    assert answer["error"]["code"] == errors.REQUEST_CANCELLED
    await asyncio.sleep(0.02)
    assert carrier.find("notifications/cancelled") == [], "closing the stream is the modern era's cancel"
    assert r.conn.state == "ready"


async def test_cancel_after_the_answer_is_a_no_op() -> None:
    r = await rig(FakeBackend("legacy"), config("http"))
    pending = r.conn.begin("tools/call", {"name": "a", "arguments": {}}, Owner("s"))
    call = asyncio.create_task(r.conn.call(pending))
    [(carrier, message)] = await r.backend.held_request("tools/call")
    carrier.answer(message["id"], {"done": True})
    assert (await finished(call))["result"] == {"done": True}
    r.conn.cancel(pending, "too late")
    await asyncio.sleep(0.02)
    assert carrier.find("notifications/cancelled") == [], "nothing to cancel once answered"


async def test_a_modern_http_call_that_times_out_is_abandoned_without_a_notification() -> None:
    r = await rig(FakeBackend("modern", blocking=True), config("http"))
    with pytest.raises(jsonrpc.RpcError) as timed_out:
        await r.conn.request("tools/call", {"name": "a", "arguments": {}}, timeout=0.05)
    assert timed_out.value.code == errors.BACKEND_TIMEOUT
    await asyncio.sleep(0.02)
    assert r.backend.carrier.find("notifications/cancelled") == []
    assert r.conn.inflight == 0 and r.conn.state == "ready"


async def test_a_call_that_times_out_is_cancelled_upstream() -> None:
    r = await rig(FakeBackend("legacy"), config("http"))
    with pytest.raises(jsonrpc.RpcError) as timed_out:
        await r.conn.request("tools/call", {"name": "a", "arguments": {}}, timeout=0.05)
    assert timed_out.value.code == errors.BACKEND_TIMEOUT
    [(carrier, message)] = await r.backend.held_request("tools/call")
    await r.backend.until(lambda: bool(carrier.find("notifications/cancelled")))
    assert carrier.find("notifications/cancelled")[0]["params"]["requestId"] == message["id"]
    assert r.conn.inflight == 0


async def test_a_caller_that_goes_away_abandons_its_call_upstream() -> None:
    r = await rig(FakeBackend("legacy"), config("http"))
    call = asyncio.create_task(r.conn.request("tools/call", {"name": "a", "arguments": {}}))
    [(carrier, message)] = await r.backend.held_request("tools/call")
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await finished(call)
    await r.backend.until(lambda: bool(carrier.find("notifications/cancelled")))
    assert carrier.find("notifications/cancelled")[0]["params"]["requestId"] == message["id"]
    assert r.conn.inflight == 0


# ---- death and reconnection ----------------------------------------------------------------------


async def test_a_dying_backend_fails_calls_in_flight_and_is_reconnected() -> None:
    r = await rig(FakeBackend("legacy"), config("http"))
    first = r.backend.carrier
    calls = [asyncio.create_task(r.conn.request("tools/call", {"name": n, "arguments": {}})) for n in "ab"]
    await r.backend.held_request("tools/call", 2)
    first.die("process exited with code 1")
    for call in calls:
        answer = await finished(call)
        assert answer["error"]["code"] == errors.BACKEND_UNAVAILABLE
        assert "process exited with code 1" in answer["error"]["message"]
    await r.backend.until(lambda: len(r.handler.connected) == 2)
    assert r.handler.disconnected == ["process exited with code 1"]
    assert r.conn.state == "ready" and r.conn.restarts == 1
    second = r.backend.carrier
    assert second is not first and len(r.backend.carriers) == 2
    assert second.methods() == ["initialize", "notifications/initialized"], "the era is remembered"
    call = asyncio.create_task(r.conn.request("tools/call", {"name": "c", "arguments": {}}))
    held = await r.backend.held_request("tools/call", 3)
    carrier, message = held[-1]
    assert carrier is second
    carrier.answer(message["id"], {"again": True})
    assert (await finished(call))["result"] == {"again": True}


async def test_a_modern_backend_stays_modern_across_a_reconnect() -> None:
    r = await rig(FakeBackend("modern"), config("http"))
    r.backend.carrier.die("stream reset")
    await r.backend.until(lambda: len(r.handler.connected) == 2)
    assert r.conn.era == "modern"
    assert r.backend.carrier.methods() == ["server/discover"]


async def test_while_down_calls_fail_fast_and_notifications_are_dropped() -> None:
    backend = FakeBackend("legacy")
    r = await rig(backend, config("http", restart={"initial_backoff_s": 5, "max_backoff_s": 5}))
    r.backend.carrier.die("gone")
    await r.backend.until(lambda: r.conn.state == "down")
    with pytest.raises(jsonrpc.RpcError) as refused:
        await r.conn.request("ping", {})
    assert refused.value.code == errors.BACKEND_UNAVAILABLE
    assert "gone" in refused.value.message
    await r.conn.notify("notifications/roots/list_changed")  # dropped quietly, no exception
    assert "notifications/roots/list_changed" not in r.backend.carrier.methods()


async def test_close_fails_what_is_in_flight_and_stops_reconnecting() -> None:
    r = await rig(FakeBackend("legacy"), config("http"))
    call = asyncio.create_task(r.conn.request("tools/call", {"name": "a", "arguments": {}}))
    await r.backend.held_request("tools/call")
    await r.conn.close()
    answer = await finished(call)
    assert answer["error"]["code"] == errors.BACKEND_UNAVAILABLE
    assert r.conn.state == "closed"
    assert r.backend.carrier.closed.is_set()
    await asyncio.sleep(0.05)
    assert len(r.backend.carriers) == 1, "a closed connection does not reconnect"
    assert r.handler.disconnected == [], "closing on purpose is no outage"


async def test_close_during_the_handshake_returns_promptly() -> None:
    backend = FakeBackend("legacy")
    backend.hang_on_initialize = True
    r = await rig(backend, config("stdio"), ready=False)
    await backend.until(lambda: bool(backend.carriers) and "initialize" in backend.carrier.methods())
    async with asyncio.timeout(1.0):
        await r.conn.close()
    assert r.conn.state == "closed"
    assert not await r.conn.wait_ready(0.01)
    assert backend.carrier.closed.is_set()
    assert r.handler.connected == [] and r.handler.disconnected == []


async def test_notify_reaches_a_ready_backend() -> None:
    r = await rig(FakeBackend("legacy"), config("http"))
    await r.conn.notify("notifications/roots/list_changed", {"x": 1})
    assert r.backend.carrier.find("notifications/roots/list_changed") == [
        {"jsonrpc": "2.0", "method": "notifications/roots/list_changed", "params": {"x": 1}}
    ]


# ---- the modern listen stream --------------------------------------------------------------------


async def listen_stream(caps: dict[str, Any]) -> tuple[Rig, FakeCarrier, dict[str, Any]]:
    r = await rig(FakeBackend("modern", modern_caps=caps), config("http"))
    [(carrier, listen)] = await r.backend.held_request("subscriptions/listen")
    tagged = {mcp_modern.SUBSCRIPTION_ID_KEY: listen["id"]}
    ack = jsonrpc.notification("notifications/subscriptions/acknowledged", {"_meta": tagged})
    carrier.deliver(ack, related=listen["id"])
    return r, carrier, listen


async def test_a_modern_backend_with_list_changes_gets_one_listen_stream() -> None:
    r, carrier, listen = await listen_stream({"tools": {"listChanged": True}, "resources": {"subscribe": True}})
    assert listen["params"]["notifications"] == {
        "toolsListChanged": True,
        "promptsListChanged": False,
        "resourcesListChanged": False,
        "resourceSubscriptions": [],
    }
    assert r.handler.notifications == [], "the acknowledgement is the stream's own business"
    tagged = {mcp_modern.SUBSCRIPTION_ID_KEY: listen["id"], "other": 1}
    log_line = jsonrpc.notification("notifications/message", {"level": "info", "data": "x", "_meta": tagged})
    carrier.deliver(log_line, related=listen["id"])
    changed = jsonrpc.notification("notifications/tools/list_changed", {"_meta": tagged})
    carrier.deliver(changed, related=listen["id"])
    assert [n["method"] for n in r.handler.notifications] == [
        "notifications/message",
        "notifications/tools/list_changed",
    ]
    assert r.handler.notifications[0]["params"] == {"level": "info", "data": "x", "_meta": {"other": 1}}
    assert r.backend.carrier.methods().count("subscriptions/listen") == 1


@pytest.mark.parametrize(
    ("method", "params"),
    [
        ("notifications/tools/list_changed", {}),
        ("notifications/resources/updated", {"uri": "demo://r"}),
    ],
)
async def test_what_the_listen_stream_carries_arrives_without_its_subscription_id(
    method: str, params: dict[str, Any]
) -> None:
    r, carrier, listen = await listen_stream({"tools": {"listChanged": True}, "resources": {"subscribe": True}})
    tagged = {**params, "_meta": {mcp_modern.SUBSCRIPTION_ID_KEY: listen["id"]}}
    carrier.deliver(jsonrpc.notification(method, tagged), related=listen["id"])
    assert r.handler.notifications == [{"jsonrpc": "2.0", "method": method, "params": params}]


async def test_a_listen_stream_refused_as_method_not_found_is_not_reopened() -> None:
    r, carrier, listen = await listen_stream({"tools": {"listChanged": True}})
    carrier.deliver(jsonrpc.error(listen["id"], errors.METHOD_NOT_FOUND, "Method not found"))
    await asyncio.sleep(0.1)  # several restart backoffs (10-50 ms)
    assert carrier.methods().count("subscriptions/listen") == 1
    assert r.conn.state == "ready"


async def test_a_listen_stream_that_ends_is_reopened() -> None:
    r, carrier, listen = await listen_stream({"tools": {"listChanged": True}})
    carrier.answer(listen["id"], {"resultType": "complete"})
    await r.backend.held_request("subscriptions/listen", 2)
    assert r.conn.state == "ready"


async def test_a_modern_backend_without_list_changes_gets_no_listen_stream() -> None:
    r = await rig(FakeBackend("modern"), config("http"))
    assert (await r.conn.request("ping", {}))["result"] == {}
    assert "subscriptions/listen" not in r.backend.carrier.methods()
