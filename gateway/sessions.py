"""Client sessions: what the gateway remembers about each client between its messages."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import random
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from adapters import codecs
from adapters.codecs import ClientCodec
from adapters.mcp import CLIENT_CAPABILITY_OF, LOG_LEVELS
from gateway import jsonrpc
from gateway.channels import Channel
from gateway.config import Limits
from gateway.events import Dialect
from policies.auth import Credentials
from policies.principal import Principal

if TYPE_CHECKING:
    from gateway.federation import View
    from gateway.mcpc.client import McpcClient
    from gateway.mcpl.state import McplSession
    from gateway.mgp.client import MgpClient
    from gateway.upstreams.connection import BackendConnection, Pending

log = logging.getLogger(__name__)

_MAX_KEPT_STREAMS = 64
_REPLICA_TAG = secrets.token_hex(2)
# Immutable defaults every session starts with, built once (a frozen dataclass costs ~1 µs to make).
_MCP_ONLY: frozenset[Dialect] = frozenset({Dialect.MCP})
_ANONYMOUS = Credentials("anonymous", "anonymous")

# The per-exchange sessions' ids (ClientSession.exchange): 96 bits from this process's own Mersenne
# Twister, seeded from the OS CSPRNG (again in a forked child, so that two processes never share a
# sequence). An exchange id names a session in logs, audit, telemetry and stream ids and keys it in
# this process's tables; it is never a credential (no request is found by it), so it needs to be
# unique, not unpredictable. os.urandom cost a getrandom syscall per request (kernel time that
# callgrind does not even count); a counter would be unique too, but its ids reach clients (an SSE
# answer's event ids start with ``id[:8]``) and would tell them how many requests this process served.
_exchange_ids = random.Random(os.urandom(32))
_exchange_bits = _exchange_ids.getrandbits


def _reseed_exchange_ids() -> None:
    _exchange_ids.seed(os.urandom(32))


os.register_at_fork(after_in_child=_reseed_exchange_ids)


def level_rank(level: str | None) -> int:
    try:
        return LOG_LEVELS.index(level) if level else 0
    except ValueError:
        return 0


@dataclass(slots=True, eq=False)
class Outgoing:
    """A request to this client (sampling, elicitation, roots) awaiting the client's answer.

    Either a backend's own request (``conn``/``upstream_id``: the answer is relayed to it), or one
    the gateway asks on a backend's behalf (``future``: a modern backend's input request).
    """

    conn: BackendConnection | None
    upstream_id: Any
    method: str
    timer: asyncio.TimerHandle | None = None
    future: asyncio.Future[dict[str, Any]] | None = None


class InputSignal:
    """Wakes whoever waits for a modern session's input requests (gateway/eras.py): a plain future
    per wait, where an ``asyncio.Event`` would need a task per wait to race it against the call.

    With ``interrupt``, the first ``set`` also calls it (once; ``interrupted`` then tells why the
    call ended): a call awaited in the exchange's own task, whose client can never be asked."""

    __slots__ = ("_interrupt", "_waiting", "interrupted")

    def __init__(self, interrupt: Callable[[], object] | None = None) -> None:
        self._waiting: list[asyncio.Future[None]] = []
        self._interrupt = interrupt
        self.interrupted = False

    def set(self) -> None:
        interrupt = self._interrupt
        if interrupt is not None:
            self._interrupt = None
            self.interrupted = True
            interrupt()
        waiting, self._waiting = self._waiting, []
        for future in waiting:
            if not future.done():
                future.set_result(None)

    def waiter(self) -> asyncio.Future[None]:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append(future)
        return future

    def discard(self, future: asyncio.Future[None]) -> None:
        if future in self._waiting:
            self._waiting.remove(future)


# The client capabilities a backend's request for input needs: a modern client that declared none of
# them is never asked (gateway/eras.py, gateway/routing/forwarding.py).
ASKABLE = frozenset(CLIENT_CAPABILITY_OF.values())
UNASKABLE = "the client lacks a capability this request needs"


class CancelOnAsk(InputSignal):
    """An unaskable call's signal: the first ``set`` cancels the call (once), nothing ever waits on it.
    Made per call: two slots set in one small ``__init__``, where ``InputSignal(functools.partial(...))``
    built a partial, a list and an ``InputSignal`` (~3k instructions)."""

    __slots__ = ("_conn", "_pending")

    def __init__(self, conn: BackendConnection, pending: Pending) -> None:  # (no super().__init__: no waiters)
        self._conn = conn
        self._pending = pending
        self.interrupted = False

    def set(self) -> None:
        if not self.interrupted:
            self.interrupted = True
            self._conn.cancel(self._pending, UNASKABLE)

    def waiter(self) -> asyncio.Future[None]:
        # Only a call whose client can be asked waits for input (eras._await_or_park, on its own exchange
        # session): a waiter here would never be woken, so asking for one is a bug, said at once.
        raise RuntimeError("an unaskable call's input signal has no waiters")


class ClientSession:
    # Slots: one per session (10,000 idle ones in one process is a target, issue 15); an instance
    # dict of this many attributes cost about 1.6 KB each.
    __slots__ = (
        "_on_close",
        "_out_ids",
        "_short",
        "_standalone",
        "_stream_seq",
        "client_capabilities",
        "client_info",
        "closed",
        "codec",
        "created",
        "created_here",
        "credentials",
        "dialects",
        "id",
        "inflight",
        "initialized",
        "input_ready",
        "input_requests",
        "last_seen",
        "limits",
        "log_level",
        "mcpc",
        "mcpl",
        "mgp",
        "missing_capabilities",
        "outgoing",
        "principal",
        "protocol_version",
        "streams",
        "subscriptions",
        "transport",
        "view",
    )

    def __init__(self, session_id: str, transport: str, view: View, principal: Principal, limits: Limits) -> None:
        self.id = session_id
        self.transport = transport
        self.view = view
        self.principal = principal
        self.limits = limits
        self.protocol_version: str | None = None
        self.client_info: dict[str, Any] = {}
        self.client_capabilities: dict[str, Any] = {}
        self.dialects: frozenset[Dialect] = _MCP_ONLY
        self.credentials: Credentials = _ANONYMOUS
        self.initialized = False
        self.log_level: str | None = None
        self.created = self.last_seen = time.monotonic()
        self.inflight: dict[Any, tuple[BackendConnection, Pending]] = {}
        self.outgoing: dict[str, Outgoing] = {}
        self.subscriptions: set[tuple[str, str]] = set()
        self.closed = False
        # The client's dialect (adapters/codecs.py): legacy until initialize or an envelope says otherwise.
        self.codec: ClientCodec = codecs.LEGACY
        # A client that cannot be asked mid-request (modern): a backend's request to it is collected
        # here and turned into an input_required result (see gateway/eras.py).
        self.input_requests: list[tuple[str, str, Any]] = []
        self.input_ready: InputSignal | None = None
        self.missing_capabilities: list[str] = []
        # An MCPL host's feature-set choices, scopes and approvals (None: not an MCPL host).
        self.mcpl: McplSession | None = None
        # What an MGP client negotiated with the gateway (None: it sees no MGP field; gateway/mgp/).
        self.mgp: MgpClient | None = None
        # An MCPC client's handshake (None: its calls are held until their tasks end; gateway/mcpc/).
        self.mcpc: McpcClient | None = None
        self._short = session_id[:8]
        self._stream_seq = 0  # the last stream number given (an int: no counter object per session)
        self._out_ids: itertools.count[int] | None = None  # made when the client is first asked something
        self._standalone: Channel | None = Channel(f"{self._short}-0", limits.session_queue, limits.sse_replay_events)
        # Many replicas (gateway/replicas/): whether this replica opened it.
        self.created_here = True
        self.streams: dict[str, Channel] = {}  # in the order kept (keep_stream forgets the oldest first)
        self._on_close: list[Callable[[ClientSession], None]] = []

    @staticmethod
    def exchange(
        transport: str,
        view: View,
        principal: Principal,
        limits: Limits,
        credentials: Credentials,
        protocol_version: str,
        client_capabilities: dict[str, Any],
        client_info: dict[str, Any],
        log_level: str | None,
        codec: ClientCodec,
        /,
    ) -> ClientSession:
        """A session that lives for one exchange (the 2026-07-28 era): initialized from the request's
        envelope, never in a :class:`SessionStore`. Its id names it in logs, audit and stream ids only,
        never a credential: 96 random bits as hex, from the process's generator (``_exchange_ids``: no
        syscall per request).

        One is made per modern request, so every attribute is set once, here, rather than by
        ``__init__`` and again (tests/gateway/test_sessions_exchange.py holds the two to the same attributes)."""
        session_id = _exchange_bits(96).to_bytes(12).hex()
        short = session_id[:8]
        session: ClientSession = _ExchangeSession()
        session.id = session_id
        session.transport = transport
        session.view = view
        session.principal = principal
        session.limits = limits
        session.protocol_version = protocol_version
        session.client_info = client_info
        session.client_capabilities = client_capabilities
        session.dialects = _MCP_ONLY
        session.credentials = credentials
        session.initialized = True
        session.log_level = log_level
        session.created = session.last_seen = time.monotonic()
        session.inflight = {}
        session.outgoing = {}
        session.subscriptions = set()
        session.closed = False
        session.codec = codec
        session.input_requests = []
        session.input_ready = None
        session.missing_capabilities = []
        session.mcpl = session.mgp = session.mcpc = None
        session._short = short
        session._stream_seq = 0
        session._out_ids = None
        session._standalone = None  # made when first used: an exchange has a stream of its own
        session.created_here = True
        session.streams = {}
        session._on_close = []
        return session

    @property
    def standalone(self) -> Channel:
        """The session's own stream (a legacy client's GET stream): what belongs to no request."""
        channel = self._standalone
        if channel is None:
            channel = self._standalone = Channel(
                f"{self._short}-0", self.limits.session_queue, self.limits.sse_replay_events
            )
        return channel

    def render(self, message: dict[str, Any]) -> dict[str, Any] | None:
        """A message as this client's dialect expects it on the wire (None: not for it)."""
        return self.codec.render(message)

    def touch(self) -> None:
        self.last_seen = time.monotonic()

    def new_stream(self, resumable: bool = True) -> Channel:
        """A channel for one request's answer. ``resumable`` ones can be found again by a GET with
        ``Last-Event-ID``; a front door registers a stream only once it actually streams."""
        self._stream_seq = seq = self._stream_seq + 1
        channel = Channel(
            f"{self._short}-{seq}",
            self.limits.session_queue,
            self.limits.sse_replay_events,
        )
        if resumable:
            self.keep_stream(channel)
        return channel

    def keep_stream(self, channel: Channel) -> None:
        self.streams[channel.id] = channel
        # Finished streams are kept a while for Last-Event-ID replay; the oldest go first.
        while len(self.streams) > _MAX_KEPT_STREAMS:
            oldest_id, oldest = next(iter(self.streams.items()))
            if not oldest.closed:
                break
            del self.streams[oldest_id]

    def find_stream(self, channel_id: str) -> Channel | None:
        if channel_id == self.standalone.id:
            return self.standalone
        return self.streams.get(channel_id)

    def next_outgoing_id(self) -> str:
        # The replica's tag keeps ids apart when copies of the session on several replicas ask at once
        # (an answer that lands on another replica is handed to the one that asked: gateway/replicas/).
        ids = self._out_ids
        if ids is None:
            ids = self._out_ids = itertools.count(1)
        return f"sb-{_REPLICA_TAG}{self._short}-{next(ids)}"

    async def ask(
        self,
        channel: Channel,
        method: str,
        params: dict[str, Any] | None,
        timeout: float,
        on_id: Callable[[str], None] | None = None,
    ) -> Any:
        """Send this client a request the gateway makes (on ``channel``, else the session's own
        stream) and return its result; an error answer raises it, no answer within ``timeout``
        cancels the request at the client and raises -32091."""
        gid = self.next_outgoing_id()
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.outgoing[gid] = Outgoing(None, None, method, future=future)
        if on_id is not None:
            on_id(gid)
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": gid, "method": method}
        if params is not None:
            message["params"] = params
        try:
            if not (channel.push(message) or self.standalone.push(message)):
                raise jsonrpc.RpcError(jsonrpc.INTERNAL_ERROR, "the client's stream is gone")
            try:
                async with asyncio.timeout(timeout):
                    answer = await future
            except TimeoutError:
                self.standalone.push(
                    jsonrpc.notification("notifications/cancelled", {"requestId": gid, "reason": "timed out"})
                )
                raise jsonrpc.RpcError(
                    jsonrpc.BACKEND_TIMEOUT, f"the client did not answer {method} within {timeout:g}s"
                ) from None
        finally:
            self.outgoing.pop(gid, None)
        if "error" in answer:
            raise jsonrpc.RpcError.from_error(answer["error"] if isinstance(answer["error"], dict) else {})
        return answer.get("result")

    def wants_log(self, level: Any) -> bool:
        if self.log_level is None:
            # Legacy: the server decides until setLevel. Modern: no logLevel in _meta, no logs.
            return self.codec.logs_by_default
        return level_rank(level if isinstance(level, str) else None) >= level_rank(self.log_level)

    def on_close(self, callback: Callable[[ClientSession], None]) -> None:
        self._on_close.append(callback)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        # finish(): a channel that still owes the answer to the request ending the session takes it first.
        self.standalone.finish()
        for channel in self.streams.values():
            channel.finish()
        for callback in self._on_close:
            try:
                callback(self)
            except Exception:
                log.exception("session %s close hook failed", self._short)


class _ExchangeSession(ClientSession):
    """What :meth:`ClientSession.exchange` makes: the same session, made by object's own new and init
    (C only; ``cls.__new__(cls)`` goes through ``tp_new_wrapper``, ~1.6k instructions a request)."""

    __slots__ = ()
    __init__ = object.__init__  # every attribute is set by exchange()


class SessionStore:
    """Sessions of this replica, with an idle reaper. Ids are 192 bits from the OS CSPRNG."""

    def __init__(self, limits: Limits, on_end: Callable[[ClientSession], None]) -> None:
        self._limits = limits
        self._sessions: dict[str, ClientSession] = {}
        self._on_end = on_end
        self._reaper: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        return len(self._sessions)

    def __iter__(self) -> Any:
        return iter(list(self._sessions.values()))

    def peek(self, session_id: str) -> ClientSession | None:
        """The local copy, without counting it as activity."""
        return self._sessions.get(session_id)

    def restore(self, session_id: str, transport: str, view: View, principal: Principal) -> ClientSession:
        """A local copy of a session another replica opened (its state is applied by the caller)."""
        session = ClientSession(session_id, transport, view, principal, self._limits)
        session.created_here = False
        self._sessions[session_id] = session
        return session

    def create(self, transport: str, view: View, principal: Principal) -> ClientSession:
        session = ClientSession(secrets.token_urlsafe(24), transport, view, principal, self._limits)
        self._sessions[session.id] = session
        return session

    def get(self, session_id: str) -> ClientSession | None:
        session = self._sessions.get(session_id)
        if session is not None:
            session.touch()
        return session

    def end(self, session: ClientSession) -> None:
        if self._sessions.pop(session.id, None) is not None:
            session.close()
            self._on_end(session)

    def start(self) -> None:
        self._reaper = asyncio.create_task(self._reap(), name="session-reaper")

    async def _reap(self) -> None:
        interval = min(30.0, self._limits.session_idle_s / 2)
        while True:
            await asyncio.sleep(interval)
            cutoff = time.monotonic() - self._limits.session_idle_s
            for session in list(self._sessions.values()):
                if session.last_seen < cutoff and not session.inflight and not session.standalone.attached:
                    log.info("session %s ended after %.0fs idle", session.id[:8], self._limits.session_idle_s)
                    self.end(session)

    async def stop(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
        for session in list(self._sessions.values()):
            self.end(session)
