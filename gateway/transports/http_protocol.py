"""The gateway's HTTP/1.1 server protocol: uvicorn's httptools protocol with the coalescing transport
(transports/coalesce.py), the lean cycle for plain POSTs to the MCP doors (transports/lean.py), and every
client held to the ``limits`` (gateway/config.py) by its base, transports/client_limits.py (timeouts, the
exact head cap, refusals and their lingering close). A request httptools cannot parse gets its 400 as a
JSON-RPC error, not uvicorn's plain text. An upgrade the gateway does not take (h2c) is served as
HTTP/1.1, body included (refused_upgrade.py).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import resource
from typing import Any, cast

import httptools
from uvicorn._types import ASGI3Application
from uvicorn.protocols.http.flow_control import HIGH_WATER_LIMIT
from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

from gateway.config import Limits
from gateway.transports.client_limits import OWES_BODY, OWES_HEAD, OWES_NOTHING, ClientLimitsProtocol, PerConnection
from gateway.transports.coalesce import ABORT_KEY, HOLD_KEY, LOST_KEY, CoalescingTransport
from gateway.transports.lean import HEADERS_KEY, UNIQUE_HEADERS_KEY, LeanCycle
from gateway.transports.refused_upgrade import AfterRefusedUpgrade, body_framing, framing_head


class CoalescingHttpToolsProtocol(ClientLimitsProtocol):
    """uvicorn's protocol with the coalescing transport, the gateway's scope keys, the lean cycle for
    plain POSTs to the MCP doors (transports/lean.py) and a keep-alive timer armed once per idle
    period rather than once per response.

    Relies on uvicorn's HttpToolsProtocol internals (pinned by tests/gateway/transports/test_lean_cycle.py):
    its parser callbacks, ``cycle``/``pipeline``/``_start_asgi_task``, and ``_unset_keepalive_if_required``
    being what ``data_received`` calls on every segment. A lean request's body callbacks (``on_body``,
    ``on_message_complete``) are this class's own."""

    # Like uvicorn's own, this narrows asyncio.Protocol's BaseTransport parameter to a Transport.
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]  # uvicorn's signature
        loop = asyncio.get_running_loop()
        coalescing = CoalescingTransport(transport, loop)
        super().connection_made(coalescing)  # type: ignore[arg-type]  # a duck-typed Transport (it forwards)
        app = self.app
        limits: Limits = getattr(app, "client_limits", None) or _DEFAULT_LIMITS
        # The paths FastPath (gateway/app.py) serves straight from a door (raw path -> its path and what
        # serves a POST to it, made once by the app), or another app's: its dispatch (the app without a
        # coroutine frame of its own) or itself.
        lean_posts: dict[bytes, tuple[str, ASGI3Application]] = getattr(app, "lean_doors", None) or {
            p: (p.decode("ascii"), getattr(app, "dispatch", app)) for p in getattr(app, "lean_posts", ())
        }
        self._conn = PerConnection(
            transport,
            coalescing.watch_lost,
            # Settings that keep every request off the lean cycle (uvicorn's limit on concurrency answers
            # 503 in its own cycle; a root path changes the path the app sees).
            self.limit_concurrency is None and not self.root_path,
            lean_posts,
            getattr(app, "lean_body_limit", 0),
            limits,
            # A new connection is idle until its first byte: without the timer below one that never
            # sends anything stayed open for good (uvicorn arms its timer only after a response).
            loop.time(),
        )
        coalescing.linger_s = limits.response_send_timeout_s
        self.timeout_keep_alive_task = self.loop.call_later(self.timeout_keep_alive, self._keep_alive_due)
        cap = connection_cap(limits.max_client_connections)
        if len(self.connections) > cap:
            # Refused at once, per connection rather than per request (uvicorn's limit_concurrency
            # would do it per request, and keep every request off the lean cycle). Said once a minute
            # at most: a flood of connections must not become a flood of log lines.
            now = self.loop.time()
            if now >= _refusals_logged[0] + 60.0:
                _refusals_logged[0] = now
                self.logger.warning("Client connections over %d: new ones refused (503).", cap)
            self._refuse(b"503 Service Unavailable", f"Over {cap} client connections; try again later")

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        if self.timeout_keep_alive_task is not None:
            self.timeout_keep_alive_task.cancel()
            self.timeout_keep_alive_task = None
        cast(CoalescingTransport, self.transport).lost()

    def data_received(self, data: bytes) -> None:
        # uvicorn's (the parser fed, a bad request answered 400, an upgrade handed over), with the
        # keep-alive flag set here rather than in a call, and then the one question the request
        # timeouts need: did this segment leave a request unfinished? For a request that arrives
        # whole (every plain POST) the answer costs a few attribute reads and no clock. Before it, the
        # one question the head limit needs: might the segment hold a head over it?
        conn = self._conn
        if len(data) > conn.fast_max:
            self._gauged(data)
            return
        idle_since = conn.idle_since
        conn.idle_since = None  # busy: the pending keep-alive timer will not close
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._unparsable(exc)
            return
        except httptools.HttpParserUpgrade as exc:
            if not self._upgrade(memoryview(data)[exc.args[0] :]):
                return
        cycle = self.cycle
        if cycle is not None and cycle.scope is self.scope and not cycle.more_body:
            if conn.owed:  # the request that was owed is whole now
                conn.owed = OWES_NOTHING
                conn.body_left = 0
                cast(CoalescingTransport, self.transport).close_while_sending = None
            elif cycle.response_complete:
                # Nothing but empty lines since the last answer (llhttp skips them before a request line, RFC
                # 9112 §2.2): still idle since then. Marked busy, the connection was never closed again (a
                # CRLF now and then held it open for good).
                conn.idle_since = idle_since
            return
        # A head begun (its scope has no cycle yet) or a body unfinished: the client owes the rest.
        self._owe(OWES_HEAD if cycle is None or cycle.scope is not self.scope else OWES_BODY, data)

    def _upgrade(self, rest: memoryview) -> bool:
        """An upgrade request, and what its segment holds after its head: a WebSocket one is handed over
        (uvicorn's way); any other is served as HTTP/1.1, its body and what follows read by a new parser,
        upgrade after upgrade (a loop, not a recursion; the segment is never copied). False: the
        connection is no longer this protocol's to read (handed over, or refused with a 400)."""
        while True:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
                return False
            if not self._upgrade_not_taken():
                return False
            try:
                if rest:
                    self.parser.feed_data(rest)
                return True
            except httptools.HttpParserError as exc:
                self._unparsable(exc)
                return False
            except httptools.HttpParserUpgrade as exc:
                rest = rest[exc.args[0] :]

    def _upgrade_not_taken(self) -> bool:
        """Serve a request whose upgrade the gateway does not take as HTTP/1.1 (refused_upgrade.py): a new
        parser, told the request's framing, reads its body, then the connection's next requests. False:
        that framing does not parse, and the 400 was sent."""
        if self.logger.isEnabledFor(logging.DEBUG):  # (_get_upgrade scans the headers: only when it is said)
            self.logger.debug("Upgrade to %r not taken: served as HTTP/1.1.", self._get_upgrade())
        framing = body_framing(self.headers)
        parser = httptools.HttpRequestParser(AfterRefusedUpgrade(self, framing is not None))
        self.parser = parser
        if framing is None:
            return True
        cycle = self.cycle
        if cycle is not None:  # (the upgrade request's head made it; its app has not run yet)
            cycle.more_body = True  # httptools marked it complete at its head
        try:
            parser.feed_data(framing_head(framing))
        except httptools.HttpParserError as exc:
            self._unparsable(exc)
            return False
        return True

    def on_headers_complete(self) -> None:
        if self.url in self._conn.lean_posts and self._lean_start():
            return
        super().on_headers_complete()
        # A door that must drop a client which stopped reading cannot finish its response (the
        # send is blocked on a full socket); aborting the connection is the clean way out.
        # The scope is a plain dict at runtime; uvicorn's HTTPScope TypedDict lists only the ASGI spec's keys.
        scope: dict[str, Any] = self.scope  # type: ignore[assignment]  # a plain dict; HTTPScope lists the spec's keys
        conn = self._conn
        scope[ABORT_KEY] = conn.abort
        scope[LOST_KEY] = conn.watch_lost
        scope[HOLD_KEY] = self.transport

    def _lean_start(self) -> bool:
        """Start a plain POST to a door path on the lean cycle; False (nothing done) for anything else."""
        parser = self.parser
        conn = self._conn
        if (
            self.expect_100_continue
            or not conn.lean_allowed
            or parser.get_method() != b"POST"
            or not parser.should_keep_alive()  # HTTP/1.0 without keep-alive, or Connection: close
            or parser.should_upgrade()
        ):
            return False
        headers = self.headers
        table = dict(headers)
        if len(table) != len(headers) or b"transfer-encoding" in table:
            return False  # a repeated header (Host, Origin, Content-Length...) or a chunked body: uvicorn's way
        # Kept alive without a Connection header is HTTP/1.1 (llhttp); only with one ask the version,
        # which costs more than everything else here (httptools formats it).
        if b"connection" in table and parser.get_http_version() != "1.1":
            return False
        declared = table.get(b"content-length")
        if declared is None or not declared.isdigit() or int(declared) > conn.lean_limit:
            return False  # the door answers 411/413 the usual way
        scope: dict[str, Any] = self.scope  # type: ignore[assignment]  # a plain dict; HTTPScope lists the spec's keys
        scope["method"] = "POST"
        scope["path"], app = conn.lean_posts[self.url]
        scope["raw_path"] = self.url
        scope["query_string"] = b""
        scope[HEADERS_KEY] = table
        scope[UNIQUE_HEADERS_KEY] = table
        scope[ABORT_KEY] = conn.abort
        scope[LOST_KEY] = conn.watch_lost
        scope[HOLD_KEY] = self.transport
        existing = self.cycle
        cycle = LeanCycle(
            self.scope,
            self.transport,
            self.flow,
            self.server_state.default_headers,
            True,
            self.on_response_complete,
            self.tasks,
            self.loop,
        )
        self.cycle = cycle
        if existing is None or existing.response_complete:
            self._start_asgi_task(cycle, app)
        else:  # pipelined behind a response still under way, as uvicorn queues it
            self.flow.pause_reading()
            self.pipeline.appendleft((cycle, app))
        return True

    # A lean request is never an upgrade (_lean_start refuses one): its body needs none of the
    # parser questions uvicorn asks of every segment, nor the message_event lookup.

    def on_body(self, body: bytes) -> None:
        cycle = self.cycle
        if type(cycle) is not LeanCycle:
            super().on_body(body)
        elif not cycle.response_complete:
            cycle.body += body
            if len(cycle.body) > HIGH_WATER_LIMIT:
                self.flow.pause_reading()
            if cycle._event is not None:  # LeanCycle.set, inline (one call less per piece of body)
                cycle._event.set()

    def on_message_complete(self) -> None:
        cycle = self.cycle
        if type(cycle) is not LeanCycle:
            super().on_message_complete()
        elif not cycle.response_complete:
            cycle.more_body = False
            if cycle._event is not None:  # LeanCycle.set, inline
                cycle._event.set()

    def _start_asgi_task(self, cycle: RequestResponseCycle, app: ASGI3Application) -> None:
        # A lean cycle leaves uvicorn's task set itself when run_asgi ends (transports/lean.py):
        # uvicorn's add_done_callback(tasks.discard) would cost one more loop callback per request.
        if type(cycle) is not LeanCycle or self.config.reset_contextvars:
            super()._start_asgi_task(cycle, app)
            return
        self.tasks.add(self.loop.create_task(cycle.run_asgi(app)))


_DEFAULT_LIMITS = Limits()  # for an app that names none (tests' own apps)
_refusals_logged = [float("-inf")]  # when a refused connection was last logged (loop time)


@functools.cache
def connection_cap(configured: int | None) -> int:
    """``limits.max_client_connections``, or by default the process's soft open-file limit less a tenth
    of it (at least 64) for backends, logs and files: the 503 comes before accept() runs out of
    descriptors. Read once per process (the limit is set before the server starts)."""
    if configured is not None:
        return configured
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 1_000_000
    return max(1, soft - max(64, soft // 10))
