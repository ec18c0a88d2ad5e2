"""MGP §5 access entries made at runtime, stored through the bus so that every replica agrees.

``mgp/access/grant`` and ``revoke`` (and their kernel tools) change the runtime entries of the
access table (``policies/mgp_access.py``). With one replica the in-memory bus keeps them; with
``bus: {kind: redis}`` every replica sees every change at once (issue 12: "stored through the bus").

How: an append-only log of operations on the bus (``incr`` numbers an operation, ``set`` stores it,
``publish`` tells the other replicas), replayed in order into a local mirror. Reads stay local and
synchronous (the chain's access member runs for every call and every listed tool).

Invariants: operations apply in log order on every replica; a replica that starts late replays the
whole log; a lost notification is made good by the next one or by the poll every ``poll_s``; an
operation whose writer died between numbering and storing it is skipped after ``gap_s``, so the log
never stalls; a change made on another replica calls ``on_change`` (clients list again).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import time
from collections.abc import Callable
from typing import Any

from gateway.bus import Bus
from gateway.bus.base import BusUnavailable
from policies.mgp_access import AccessEntry, EntryKey

log = logging.getLogger(__name__)

_SEQ = "mgp:access:seq"
_OP = "mgp:access:op:"
_CHANNEL = "mgp:access:changed"


def _encode(op: str, entry: AccessEntry | None, key: EntryKey) -> bytes:
    body: dict[str, Any] = {"op": op, "key": list(key)}
    if entry is not None:
        body["entry"] = dataclasses.asdict(entry)
    return json.dumps(body, separators=(",", ":")).encode()


def _decode(raw: bytes) -> tuple[str, EntryKey, AccessEntry | None]:
    body = json.loads(raw)
    agent, server, tool = body["key"]
    entry = AccessEntry(**body["entry"]) if "entry" in body else None
    return body["op"], (agent, server, tool), entry


class BusAccessStore:
    """An :class:`~policies.mgp_access.AccessStore` shared by every replica on one bus."""

    def __init__(
        self, bus: Bus, on_change: Callable[[], None] = lambda: None, *, poll_s: float = 1.0, gap_s: float = 5.0
    ) -> None:
        self._bus = bus
        self._on_change = on_change
        self._poll_s = poll_s
        self._gap_s = gap_s
        self._entries: dict[EntryKey, AccessEntry] = {}
        self._applied = 0
        self._own: set[int] = set()  # operations of this replica (already told to its clients)
        self._gap_since: float | None = None
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None

    # ---- AccessStore ---------------------------------------------------------------------------

    def get(self, key: EntryKey) -> AccessEntry | None:
        return self._entries.get(key)

    def entries(self) -> list[AccessEntry]:
        return list(self._entries.values())

    def __len__(self) -> int:
        return len(self._entries)

    async def put(self, entry: AccessEntry) -> None:
        await self._append(_encode("put", entry, entry.key))

    async def delete(self, key: EntryKey) -> bool:
        had = key in self._entries
        await self._append(_encode("delete", None, key))
        return had

    # ---- the log -------------------------------------------------------------------------------

    async def _append(self, op: bytes) -> None:
        number = await self._bus.incr(_SEQ)
        await self._bus.set(f"{_OP}{number}", op)
        self._own.add(number)  # stored: from here on it is acknowledged
        await self._bus.publish(_CHANNEL, str(number).encode())
        with contextlib.suppress(BusUnavailable):
            await self.catch_up()  # ours applies now, in order after any earlier one (else: the next poll)

    async def catch_up(self) -> None:
        """Apply every operation after the last applied one, in order."""
        async with self._lock:
            raw_seq = await self._bus.get(_SEQ)
            current = int(raw_seq) if raw_seq else 0
            remote = False
            while self._applied < current:
                number = self._applied + 1
                raw = await self._bus.get(f"{_OP}{number}")
                if raw is None:
                    # Numbered but not stored yet (its writer is between incr and set), or never.
                    now = time.monotonic()
                    self._gap_since = self._gap_since or now
                    if now - self._gap_since < self._gap_s:
                        break
                    log.warning("MGP access log: operation %d never arrived; skipped", number)
                else:
                    try:
                        self._apply(*_decode(raw))
                    except (ValueError, KeyError, TypeError):
                        log.warning("MGP access log: operation %d is malformed; skipped", number)
                    remote = remote or number not in self._own
                self._own.discard(number)
                self._gap_since = None
                self._applied = number
        if remote:
            self._on_change()

    def _apply(self, op: str, key: EntryKey, entry: AccessEntry | None) -> None:
        if op == "put" and entry is not None:
            self._entries[key] = entry
        elif op == "delete":
            self._entries.pop(key, None)
        else:
            raise ValueError(f"unknown operation {op!r}")

    # ---- following the other replicas -------------------------------------------------------------

    async def start(self) -> None:
        try:
            await self.catch_up()
        except BusUnavailable as exc:  # Redis away at start: serve the config's table, follow when it is back
            log.warning("MGP access log: not caught up at start (%s); following when the bus is back", exc)
        self._task = asyncio.create_task(self._follow(), name="mgp-access-follow")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _follow(self) -> None:
        told = asyncio.Event()

        async def listen() -> None:
            async for _ in self._bus.subscribe(_CHANNEL, max_queue=64):
                told.set()

        async with asyncio.TaskGroup() as group:
            group.create_task(listen())
            while True:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._poll_s):
                        await told.wait()
                told.clear()
                try:
                    await self.catch_up()
                except BusUnavailable:
                    pass  # Redis away (the bus says so, once): the next round tries again
                except Exception:  # a bus hiccup: the next round tries again
                    log.warning("MGP access log: catching up failed", exc_info=True)
