"""Legacy sessions shared by every replica through the bus (issue 14, ADR 0016).

A legacy session (Streamable HTTP 2025-xx, HTTP+SSE) may see each of its requests land on another
replica behind a balancer without stickiness. Its shared state is a record in the bus
(``gateway/replicas/records.py``) under ``session:<id>``; any replica serves any request of it:

- **find**: the local copy, brought up to date when another replica announced a change; else the
  record restored as a local copy (an *adopted* session: its facets derived again from the stored
  ``initialize``). A session outlives the replica that created it.
- **settle**: after each request, the record is written when its fingerprint changed (and
  refreshed before its TTL, ``limits.session_idle_s``, runs out), and the change announced on the
  ``sessions`` channel so that other replicas refresh their copies before their next request.
- **the standalone stream** (GET, or the legacy ``/sse`` stream) is held by one replica at a time
  (``holding``): it listens on ``stream:<id>``. A copy elsewhere whose stream is not attached
  forwards what is pushed to it there (``Channel.forward``), so a notification produced on any
  replica reaches the client. A backend's news that every replica hears from its own connection
  (``list_changed``, ``resources/updated``) reaches the client once: the holder drops a forwarded
  copy of what its stream just carried (``IDEMPOTENT``, the latest ``DEDUP_WINDOW`` messages).
- **ended**: a DELETE on any replica ends the session everywhere.

With the memory bus nothing of this runs (``LocalSessions``): one replica, no record.

Invariants: a record never holds a secret (no token; the credentials' kind and name); every bus
operation is bounded by the bus's own timeouts, and a bus failure degrades to the local copy
(logged), never to a failed request; forwarding is bounded (``MAX_FORWARD_QUEUE``; beyond that a
message is dropped and counted).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

import orjson

from gateway.bus.base import json_object
from gateway.replicas.history import History, missed
from gateway.replicas.records import apply, fingerprint, record_of

if TYPE_CHECKING:
    from gateway.bus import Bus
    from gateway.sessions import ClientSession, SessionStore

log = logging.getLogger(__name__)

MAX_FORWARD_QUEUE = 4096
CHANNEL = "sessions"
_HOLDER_TTL_S = 30.0

# Restores a record into a new local session, the whole record applied (None: not restorable here,
# e.g. an unknown view).
Restore = Callable[[str, dict[str, Any]], "ClientSession | None"]


_UNAVAILABLE = object()  # what ``_read`` returns when the bus cannot say


def _key(session_id: str) -> str:
    return f"session:{session_id}"


IDEMPOTENT = frozenset(
    {
        "notifications/tools/list_changed",
        "notifications/prompts/list_changed",
        "notifications/resources/list_changed",
        "notifications/resources/updated",
    }
)
DEDUP_WINDOW = 16  # the latest messages of the stream a forwarded copy is compared with


def _just_carried(session: ClientSession, message: dict[str, Any]) -> bool:
    """A news every replica hears (a list change) that the stream carried a moment ago."""
    return message.get("method") in IDEMPOTENT and message in session.standalone.recent(DEDUP_WINDOW)


class LocalSessions:
    """One replica (memory bus): sessions live here only."""

    def __init__(self, store: SessionStore) -> None:
        self._store = store

    async def find(self, session_id: str) -> ClientSession | None:
        return self._store.get(session_id)

    def find_now(self, session_id: str) -> ClientSession | None:
        """:meth:`find` without a coroutine. A door may use it instead of ``find`` and skip
        :meth:`settle` (nothing to share): only one replica has it."""
        return self._store.get(session_id)

    async def settle(self, session: ClientSession) -> None:
        return None

    async def ended(self, session: ClientSession) -> None:
        return None

    def holding(self, session: ClientSession) -> contextlib.AbstractAsyncContextManager[None]:
        return _NOTHING_HELD  # one shared object: an idle stream holds no generator of its own

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    keeps_history = False

    async def missed(self, session: ClientSession, last_seen: int) -> list[dict[str, Any]] | None:
        return None


_NOTHING_HELD: contextlib.nullcontext[None] = contextlib.nullcontext()


class SharedSessions:
    keeps_history = True

    def __init__(
        self,
        bus: Bus,
        store: SessionStore,
        restore: Restore,
        replica: str,
        ttl_s: float,
        refreshed: Callable[[ClientSession], None] = lambda session: None,
        history_keep: int = 256,
    ) -> None:
        self._history = History(bus, history_keep, ttl_s)
        self._refreshed = refreshed  # a copy took another replica's changes (MCPL: backends told the union)
        self._bus = bus
        self._store = store
        self._restore = restore
        self.replica = replica
        self._ttl_s = ttl_s
        self._written: dict[str, tuple[tuple[Any, ...], float]] = {}  # session -> (fingerprint, when)
        self._stale: set[str] = set()
        # Bus writes that must not block a push, in order: a stream's messages, answers, history.
        self._forward: asyncio.Queue[Callable[[], Awaitable[Any]]] = asyncio.Queue(MAX_FORWARD_QUEUE)
        self._tasks: list[asyncio.Task[None]] = []
        self.dropped = 0
        # Where an answer another replica got for a request this replica's copy sent is handed
        # (``ClientMessages.response``, set when it exists).
        self.answered: Callable[[ClientSession, dict[str, Any]], None] | None = None

    async def start(self) -> None:
        self._was_down = False
        self._bus.on_health(self._bus_health)
        self._tasks = [
            asyncio.create_task(self._listen(), name="sessions-listen"),
            asyncio.create_task(self._pump(), name="sessions-forward"),
        ]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    # ---- the session of a request ------------------------------------------------------------------

    async def find(self, session_id: str) -> ClientSession | None:
        session = self._store.get(session_id)
        if session is not None and session_id not in self._stale:
            return session
        record = await self._read(session_id)
        if record is _UNAVAILABLE:
            return session  # Redis away: the local copy serves (still marked stale for later)
        if record is None:
            if session is not None:
                # No record (expired, or a Redis that came back empty): this copy is the session's
                # state now. An end elsewhere is announced on the channel and ends copies directly.
                self._stale.discard(session_id)
                await self._share(session)
            return session
        assert isinstance(record, dict)
        self._stale.discard(session_id)
        if session is None:
            session = self._restore(session_id, record)
            if session is None:
                return None
            self._adopt(session)
            log.info("session %s adopted from the bus", session_id[:8])
        else:
            apply(session, record)  # a restored copy is built from the record already
        self._refreshed(session)
        self._written[session_id] = (fingerprint(session), time.monotonic())
        return session

    def created(self, session: ClientSession) -> None:
        """A session this replica opened: its stream forwards when held elsewhere."""
        self._adopt(session)

    def _adopt(self, session: ClientSession) -> None:
        session.standalone.forward = lambda message: self._queue(session.id, message)

    async def settle(self, session: ClientSession) -> None:
        """After a request: the record, written when it changed (or is due for refresh)."""
        if session.closed:
            return
        mark = fingerprint(session)
        last = self._written.get(session.id)
        now = time.monotonic()
        if last is None or last[0] != mark or now - last[1] >= self._ttl_s / 4:
            await self._share(session)

    async def _share(self, session: ClientSession) -> None:
        """Write the record as this copy has it; only what was stored counts as shared."""
        if await self._write(session, self.replica if session.standalone.attached else None):
            self._written[session.id] = (fingerprint(session), time.monotonic())

    async def ended(self, session: ClientSession) -> None:
        """Ended on purpose (DELETE): everywhere."""
        self._written.pop(session.id, None)
        try:
            await self._bus.delete(_key(session.id))
            await self._bus.publish(CHANNEL, orjson.dumps({"ended": session.id, "by": self.replica}))
        except Exception as exc:  # the bus is down: the record expires by itself
            log.warning("session %s: could not end it on the bus: %s", session.id[:8], exc)

    async def missed(self, session: ClientSession, last_seen: int) -> list[dict[str, Any]] | None:
        try:
            entries = await self._history.entries(session.id)
        except Exception as exc:
            log.warning("session %s: its stream's history is unavailable: %s", session.id[:8], exc)
            return None
        found = missed(entries, last_seen)
        if found is None:
            return None
        messages, top = found
        session.standalone.restart_above(top)
        return messages

    def answer_elsewhere(self, session: ClientSession, message: dict[str, Any]) -> None:
        """The client answered a request this replica did not send (a backend's elicitation, sampling,
        roots, asked on a call's stream on another replica): to the replica that asked."""
        self._queue_raw(orjson.dumps({"answer": session.id, "message": message, "by": self.replica}))

    # ---- the standalone stream ---------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def holding(self, session: ClientSession) -> AsyncIterator[None]:
        """While a stream of ``session`` is open here: this replica holds it, and what other replicas
        push to the session arrives here."""
        listener = asyncio.create_task(self._receive(session), name=f"stream-{session.id[:8]}")
        sid = session.id
        session.standalone.record = lambda seq, message: self._put(lambda: self._history.append(sid, seq, message), sid)
        await self._write(session, self.replica)
        try:
            yield
        finally:
            session.standalone.record = None
            listener.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await listener
            if not session.closed:
                await self._write(session, None)

    async def _receive(self, session: ClientSession) -> None:
        async for data in self._bus.subscribe(f"stream:{session.id}"):
            message = json_object(data)
            if message is not None and not _just_carried(session, message):
                session.standalone.push_local(message)

    def _queue(self, session_id: str, message: dict[str, Any]) -> None:
        """Pushed to a copy whose stream is not read here: to the holder, and into the history unsent
        (in case nobody holds it)."""
        data = orjson.dumps(message)
        self._put(lambda: self._bus.publish(f"stream:{session_id}", data), session_id)
        self._put(lambda: self._history.append(session_id, None, message), session_id)

    def _queue_raw(self, data: bytes) -> None:
        self._put(lambda: self._bus.publish(CHANNEL, data), "-")

    def _put(self, write: Callable[[], Awaitable[Any]], session_id: str) -> None:
        try:
            self._forward.put_nowait(write)
        except asyncio.QueueFull:
            self.dropped += 1
            log.warning("session %s: a message for its stream on another replica was dropped", session_id[:8])

    async def _pump(self) -> None:
        """Publishes what is forwarded, in order (a stream's messages, answers to other replicas)."""
        while True:
            write = await self._forward.get()
            try:
                await write()
            except Exception as exc:
                self.dropped += 1
                log.warning("a shared write failed: %s", exc)

    # ---- the record ------------------------------------------------------------------------------

    async def _read(self, session_id: str) -> dict[str, Any] | object | None:
        """The record, None when there is none, or ``_UNAVAILABLE`` when the bus cannot say."""
        if not self._bus.healthy:
            return _UNAVAILABLE  # Redis away (the bus logs it once): the local copy serves
        try:
            raw = await self._bus.get(_key(session_id))
        except Exception as exc:
            log.warning("session %s: the bus is unavailable, the local copy serves: %s", session_id[:8], exc)
            return _UNAVAILABLE
        return json_object(raw)

    async def _write(self, session: ClientSession, holder: str | None) -> bool:
        """Store the record and announce it; whether it was stored."""
        record = record_of(session, holder)
        try:
            await self._bus.set(_key(session.id), orjson.dumps(record), ttl_s=self._ttl_s)
            await self._bus.publish(CHANNEL, orjson.dumps({"changed": session.id, "by": self.replica}))
        except Exception as exc:
            log.warning("session %s: could not share its state: %s", session.id[:8], exc)
            return False
        return True

    def _bus_health(self, healthy: bool, problem: str | None) -> None:
        """Redis came back (maybe empty, maybe after missed announcements): every local copy is stored
        again, and refreshed before its next request."""
        if healthy and self._was_down:
            self._written.clear()
            task = asyncio.create_task(self._store_all(), name="sessions-restore")
            self._tasks.append(task)
        self._was_down = not healthy

    async def _store_all(self) -> None:
        for session in list(self._store):
            if not session.closed and session.initialized:
                await self._share(session)

    async def _listen(self) -> None:
        """Other replicas' changes: local copies refresh before their next request; ends end them.
        (A bus subscription outlives a Redis outage: it reconnects by itself, gateway/bus/redis_pubsub.py.)"""
        async for data in self._bus.subscribe(CHANNEL):
            self._on_news(data)

    def _on_news(self, data: bytes) -> None:
        news = json_object(data)
        if news is None or news.get("by") == self.replica:
            return
        changed, ended, answer = news.get("changed"), news.get("ended"), news.get("answer")
        if isinstance(answer, str) and isinstance(news.get("message"), dict) and self.answered is not None:
            session = self._store.peek(answer)
            if session is not None and str(news["message"].get("id")) in session.outgoing:
                self.answered(session, news["message"])
        if isinstance(changed, str) and self._store.peek(changed) is not None:
            self._stale.add(changed)
        if isinstance(ended, str):
            session = self._store.peek(ended)
            if session is not None:
                self._written.pop(ended, None)
                self._store.end(session)
