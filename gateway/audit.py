"""The audit stream: one record per decision, as JSON lines written off the event loop.

``record()`` sits on the hot path (every admitted or refused request), so it only stamps the record
and serializes it; the lines of one event-loop iteration go to the writer thread together, as one
item of its queue, so the thread is woken (and takes the interpreter lock) once per iteration rather
than once per record. The thread does the file I/O and the size-based rotation. The queue is bounded
in records (``queue_size``): when the writer falls behind, records are dropped and counted rather than
stalling the event loop: an audit trail with a counted gap beats a gateway that stops answering.
Order is kept: iterations hand off in order, and ``flush()``/``close()`` hand off what is pending first.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from typing import Any, Final

import orjson

from gateway.clock import rfc3339_ms
from gateway.config import AuditConfig
from gateway.metrics import Metrics

log = logging.getLogger(__name__)

AuditRecord = dict[str, Any]
# Called synchronously, in the thread that called record() (the event loop): it must not block and
# must not mutate the record, which every listener shares. Async work belongs in a task it creates.
Listener = Callable[[AuditRecord], object]

DEFAULT_QUEUE_SIZE = 10_000
_WARN_EVERY_S = 60.0
_BATCH = 512  # lines written between flushes at most


class _Stop(enum.Enum):
    """What tells the writer thread to drain its queue and finish."""

    STOP = enum.auto()


_STOP: Final = _Stop.STOP
_DUMPS_OPTIONS = orjson.OPT_APPEND_NEWLINE | orjson.OPT_NON_STR_KEYS
# The clock as bound methods: calling the PerMillisecond instance goes through its type's __call__ slot
# (no inlined frame on Python 3.11); its bound method is a plain Python call.
_stamp = rfc3339_ms.__call__
_now = time.time


class _Throttle:
    """At most one log line per key per interval: a full queue or a broken listener would otherwise
    write a warning per request, which is its own outage."""

    def __init__(self, every_s: float = _WARN_EVERY_S) -> None:
        self._every_s = every_s
        self._last: dict[str, float] = {}

    def ready(self, key: str) -> bool:
        now = time.monotonic()
        last = self._last.get(key)
        if last is not None and now - last < self._every_s:
            return False
        self._last[key] = now
        return True


class _RotatingFile:
    """Append-only file rotated by size, named like logging.handlers.RotatingFileHandler's
    (``path``, ``path.1`` newest ... ``path.N`` oldest). Used by the writer thread only."""

    def __init__(self, path: str, max_bytes: int, backups: int) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.backups = backups
        self._file = open(path, "ab")
        self._size = os.fstat(self._file.fileno()).st_size

    def write(self, line: bytes) -> None:
        # An empty file is never rotated, so one oversized line still lands (alone) in a file.
        if self._size and self._size + len(line) > self.max_bytes:
            self._rotate()
        self._file.write(line)
        self._size += len(line)

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()

    def _rotate(self) -> None:
        self._file.close()
        try:
            if self.backups > 0:
                for i in range(self.backups - 1, 0, -1):
                    src = f"{self.path}.{i}"
                    if os.path.exists(src):
                        os.replace(src, f"{self.path}.{i + 1}")
                os.replace(self.path, f"{self.path}.1")
                self._file = open(self.path, "ab")
            else:
                # No backups kept: start over, so that the file stays bounded all the same.
                self._file = open(self.path, "wb")
            self._size = 0
        finally:
            if self._file.closed:  # a failed rename: keep appending to the current file
                self._file = open(self.path, "ab")
                self._size = os.fstat(self._file.fileno()).st_size


class AuditLog:
    """Audit records to a JSON lines file (when configured), to metrics and to in-process listeners.

    ``record()`` never blocks and never raises; ``close()`` flushes and stops the writer thread.
    """

    def __init__(self, config: AuditConfig, metrics: Metrics, *, queue_size: int = DEFAULT_QUEUE_SIZE) -> None:
        self.config = config
        self._metrics = metrics
        self._listeners: tuple[Listener, ...] = ()
        self._counted: dict[str, list[float]] = {}  # outcome -> its switchboard_audit_records_total cell
        self._throttle = _Throttle()
        self._dropped_unreported = 0
        self._closed = False
        self._queue: queue.Queue[list[bytes] | threading.Event | _Stop] | None = None
        self._thread: threading.Thread | None = None
        # This iteration's lines, handed to the writer at its end (_hand_off); then the queue holds
        # at most ``queue_size`` records: lines handed off minus lines the writer took, two counters
        # each written by one thread only.
        self._pending: list[bytes] = []
        self._queue_size = queue_size
        self._handed_off = 0
        self._taken = 0
        if config.file:
            # Opened here so that an unwritable path fails at startup, not silently in the thread.
            self._out = _RotatingFile(config.file, config.max_bytes, config.backups)
            self._queue = queue.Queue()
            self._thread = threading.Thread(target=self._run, name="switchboard-audit", daemon=True)
            self._thread.start()

    # ---- the hot path ------------------------------------------------------------------------

    def record(self, outcome: str, /, **fields: Any) -> None:
        """Emit one record: ``ts`` and ``outcome`` first, then ``fields`` (None values left out)."""
        try:
            rec: AuditRecord = {"ts": rfc3339_ms(time.time()), "outcome": outcome}
            for key, value in fields.items():
                if value is not None and key not in rec:
                    rec[key] = value
            self._emit(outcome, rec)
        except Exception:
            if self._throttle.ready("record"):
                log.exception("audit record (outcome %r) could not be emitted", outcome)

    def record_request(
        self,
        outcome: str,
        principal: str,
        dialect: str,
        action: str,
        method: str | None,
        backend: str,
        session: str,
        trace_id: str,
        latency_ms: float,
        reason: str | None,
        result: str | None,
    ) -> None:
        """The router's record of one client request: the same record as ``record(outcome,
        principal=..., dialect=..., ..., latency_ms=..., reason=..., result=...)`` (same keys, same
        order, empty ``reason``/``result`` left out), built without the keyword dict and its loop."""
        try:
            rec: AuditRecord = {
                "ts": _stamp(_now()),
                "outcome": outcome,
                "principal": principal,
                "dialect": dialect,
                "action": action,
                "method": method,
                "backend": backend,
                "session": session,
                "trace_id": trace_id,
                "latency_ms": latency_ms,
            }
            if method is None:
                del rec["method"]
            if reason:
                rec["reason"] = reason
            if result:
                rec["result"] = result
            self._emit(outcome, rec)
        except Exception:
            if self._throttle.ready("record"):
                log.exception("audit record (outcome %r) could not be emitted", outcome)

    def _emit(self, outcome: str, rec: AuditRecord) -> None:
        counted = self._counted.get(outcome)
        if counted is None:  # the counter's live cell for this outcome (a few words: kept)
            counted = self._counted[outcome] = self._metrics.audit_records.cell((outcome,))
        counted[0] += 1
        if self._queue is not None:
            if self._closed:
                self._dropped(1)
            else:
                self._pending.append(orjson.dumps(rec, default=str, option=_DUMPS_OPTIONS))
                if len(self._pending) == 1:
                    self._hand_off_later()
        listeners = self._listeners
        if listeners:
            if len(listeners) == 1:
                try:
                    listeners[0](rec)
                except Exception:
                    self._listener_failed(listeners[0])
            else:
                self._notify(rec)

    def _hand_off_later(self) -> None:
        try:
            asyncio.get_running_loop().call_soon(self._hand_off)
        except RuntimeError:  # no loop running (a synchronous caller): at once
            self._hand_off()

    def _hand_off(self) -> None:
        """Give the writer thread the lines recorded since the last hand-off, as one queue item."""
        lines, self._pending = self._pending, []
        if not lines:
            return
        assert self._queue is not None
        room = 0 if self._closed else self._queue_size - (self._handed_off - self._taken)
        if room > 0:
            kept = lines if len(lines) <= room else lines[:room]
            self._handed_off += len(kept)
            self._queue.put_nowait(kept)  # an unbounded queue, bounded by the count above
            if len(kept) == len(lines):
                return
        self._dropped(len(lines) - max(room, 0))  # the newest ones

    def _dropped(self, count: int) -> None:
        self._metrics.audit_dropped.inc(count)
        self._dropped_unreported += count
        if self._throttle.ready("dropped"):
            why = "the audit log is closed" if self._closed else "the audit writer cannot keep up"
            log.warning(
                "dropped %d audit record(s) in the last minute: %s (file %s)",
                self._dropped_unreported,
                why,
                self.config.file,
            )
            self._dropped_unreported = 0

    def _notify(self, rec: AuditRecord) -> None:
        for listener in self._listeners:
            try:
                listener(rec)
            except Exception:
                self._listener_failed(listener)

    def _listener_failed(self, listener: Listener) -> None:
        """Called from an ``except`` block: logs the exception being handled (throttled)."""
        if self._throttle.ready(f"listener:{id(listener)}"):
            log.exception("audit listener %r failed (further failures this minute not logged)", listener)

    # ---- listeners ---------------------------------------------------------------------------

    def add_listener(self, callback: Listener) -> None:
        """Call ``callback(record)`` for every record from now on (see ``Listener``)."""
        self._listeners = (*self._listeners, callback)

    def remove_listener(self, callback: Listener) -> None:
        """Stop calling ``callback``; unknown callbacks are ignored."""
        listeners = list(self._listeners)
        if callback in listeners:
            listeners.remove(callback)
            self._listeners = tuple(listeners)

    # ---- lifecycle ---------------------------------------------------------------------------

    async def flush(self, timeout: float = 5.0) -> bool:
        """Wait until every record emitted so far is written; False if that took over ``timeout``."""
        if self._queue is None or self._closed:
            return True
        self._hand_off()
        done = threading.Event()

        self._queue.put_nowait(done)  # after every line handed off so far: set once they are written
        return await asyncio.to_thread(done.wait, timeout)

    async def close(self, timeout: float = 5.0) -> None:
        """Write what is queued and stop the writer, waiting ``timeout`` seconds at most.
        Records emitted afterwards still reach metrics and listeners; the file drops them."""
        if self._closed:
            return
        if self._queue is not None:
            self._hand_off()  # what was recorded before close() is written
        self._closed = True
        if self._thread is not None:
            await asyncio.to_thread(self._stop_writer, timeout)

    def _stop_writer(self, timeout: float) -> None:
        assert self._queue is not None and self._thread is not None
        deadline = time.monotonic() + timeout
        self._queue.put_nowait(_STOP)
        self._thread.join(max(0.0, deadline - time.monotonic()))
        if self._thread.is_alive():
            log.warning(
                "audit writer did not finish within %.1fs; about %d queued record(s) may be lost",
                timeout,
                self._queue.qsize(),
            )

    # ---- the writer thread -------------------------------------------------------------------

    def _run(self) -> None:
        assert self._queue is not None
        q = self._queue
        stopping = False
        try:
            while True:
                batch = [q.get()] if not stopping else []
                while len(batch) < _BATCH:  # items: each a hand-off of lines, or a flush or stop mark
                    try:
                        batch.append(q.get_nowait())
                    except queue.Empty:
                        break
                if stopping and not batch:
                    return
                lines: list[bytes] = []
                flushed: list[threading.Event] = []
                for item in batch:
                    if item is _STOP:
                        stopping = True
                    elif isinstance(item, threading.Event):
                        flushed.append(item)
                    else:
                        lines += item
                if lines:
                    self._taken += len(lines)  # out of the queue (this thread's counter, see __init__)
                    self._write(lines)
                for event in flushed:
                    event.set()
        finally:
            try:
                self._out.close()
            except OSError:
                log.exception("closing the audit file %s failed", self.config.file)

    def _write(self, lines: list[bytes]) -> None:
        written = 0
        try:
            for line in lines:
                self._out.write(line)
                written += 1
            self._out.flush()
        except Exception:
            self._metrics.audit_dropped.inc(len(lines) - written)
            if self._throttle.ready("write"):
                log.exception("writing the audit file %s failed", self.config.file)
