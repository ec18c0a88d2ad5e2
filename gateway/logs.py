"""The gateway's own log lines: ``logging: {format: text|json, level}``, written off the event loop.

``text`` is one readable line per record (``time LEVEL [worker] logger: message``). ``json`` is one
JSON object per line with ``ts`` (RFC 3339, UTC, ms), ``level``, ``logger``, ``message`` and, when
the line was written for a client request, ``trace_id``, ``span_id`` and ``session_id`` (from the
request's context, gateway/telemetry/context.py); access lines (logger ``switchboard.access``, one
per client request, gateway/telemetry/observe.py) add their fields (method, backend, outcome,
duration_ms, principal, session). ``logging.level`` null means the top-level ``log_level``.

Invariants: a record is turned into its final text, request ids included, in the thread that
logged it (the request's context lives there), then appended to a bounded deque; one thread writes
it to stderr (a line after a quiet spell at once, then at most every 0.02 s), so a slow stderr never
blocks the event loop. When 10,000 lines wait, a new one is dropped and counted (said once on
stderr at exit) rather than waiting.
stdout is never written to (it carries the listening banner, or JSON-RPC for the stdio door).
uvicorn's access log stays off.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Any, TextIO

import orjson

from gateway.clock import PerMillisecond, PerSecond, rfc3339_ms
from gateway.telemetry.context import LOG_IDS

if TYPE_CHECKING:
    from gateway.config import Config

QUEUE_SIZE = 10_000
# After a write, how long the writer lets the next lines gather before it looks again. Each look
# costs about 100 µs of CPU on a busy gateway (the thread takes the GIL from the loop's thread twice:
# after its sleep and after its write). 0.1 s measured 0.4 µs of writer CPU per request against
# 1.4-2.6 with 0.02 s (wrk, 2026-07-28 wire, ~3,000 req/s), but lines then reached the file up to a
# tenth of a second late, which people and tests reading a log just after an event notice (CI
# caught it twice); 0.02 s keeps them prompt for about a microsecond per request.
_LINGER_S = 0.02
_TEXT_FORMAT = "%(asctime)s %(levelname)s {who}%(name)s: %(message)s"
# Attributes every LogRecord has: whatever else a record carries came from ``extra=``.
_STANDARD = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "taskName"}


def _json_head(ts: float, level: str, logger: str, message: str, who: str | None) -> dict[str, Any]:
    """A JSON line's first fields, with the request ids of the calling context (when it serves one)."""
    line: dict[str, Any] = {"ts": rfc3339_ms(ts), "level": level, "logger": logger, "message": message}
    if who is not None:
        line["worker"] = who
    ids = LOG_IDS.get()
    if ids is not None:
        if ids.trace_id is not None:
            line["trace_id"] = ids.trace_id
        if ids.span_id is not None:
            line["span_id"] = ids.span_id
        if ids.session_id is not None:
            line["session_id"] = ids.session_id
    return line


class JsonFormatter(logging.Formatter):
    """One JSON object per record; the request ids come from the context of the thread that formats."""

    def __init__(self, who: str = "") -> None:
        super().__init__()
        self._who = who.strip().strip("[]") or None

    def format(self, record: logging.LogRecord) -> str:
        # Formatted in the thread that logged (_Handoff.emit): the request ids are its context's.
        line = _json_head(record.created, record.levelname.lower(), record.name, record.getMessage(), self._who)
        access = getattr(record, "access", None)
        if isinstance(access, dict):
            line.update((k, v) for k, v in access.items() if k not in line)
        for key, value in record.__dict__.items():
            if key not in _STANDARD and key != "access" and key not in line:
                line[key] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return orjson.dumps(line, default=str).decode()


class _Handoff(logging.Handler):
    """Formats in the caller's thread (the request's context lives there) and hands the text over."""

    def __init__(self, lines: deque[str], wake: threading.Event) -> None:
        super().__init__()
        self._lines = lines
        self._wake = wake
        self.pending = False  # the writer was woken and has not taken the lines yet
        self.dropped = 0

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = self.format(record)
        except Exception:
            self.handleError(record)
            return
        self.hand_over(text)

    def hand_over(self, text: str) -> None:
        """Queue one finished line for the writer thread."""
        if len(self._lines) >= QUEUE_SIZE:
            self.dropped += 1  # stderr is behind: a gap beats a stalled event loop
            return
        self._lines.append(text)  # deque.append is atomic: no lock
        if not self.pending:  # only the first line after the writer emptied the deque wakes it
            self.pending = True
            self._wake.set()


class _Writer(threading.Thread):
    """Writes what gathered when woken. A line after a quiet spell is written at once; after every
    write the next lines gather for ``_LINGER_S`` and are written without a wake-up, until a look
    finds nothing: a busy gateway's loop thread never signals this thread (each wake-up costs the
    loop's thread a lock round and a GIL hand-over), and the thread writes at most about 50 times a
    second. (Lingering only after a large batch was not enough: a writer faster than the lines found
    one or two at each wake-up and was woken per request, which cost the 2026-07-28 wire about 40 µs
    per call, bench/RESULTS.md.) A stream with a file descriptor is written with one ``os.write`` per
    batch (one GIL release, no text layer); others (a test's StringIO) through ``write``."""

    def __init__(self, lines: deque[str], handoff: _Handoff, wake: threading.Event, stream: TextIO) -> None:
        super().__init__(name="switchboard-log-writer", daemon=True)
        self._lines = lines
        self._handoff = handoff
        self._wake = wake
        self._stream = stream
        self._fd = _fd_of(stream)
        self._encoding = getattr(stream, "encoding", None) or "utf-8"
        self._stopping = False

    def run(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            while True:
                stopping = self._stopping
                if self._drain():
                    if stopping:
                        return
                    time.sleep(_LINGER_S)  # let the next lines gather: one write for many
                    continue
                if stopping:
                    return
                # Quiet: from now on the next line wakes this thread. The flag drops before a last
                # look, so a line appended meanwhile is either seen here or sets the event.
                self._handoff.pending = False
                if not self._lines:
                    break

    def _drain(self) -> int:
        lines = self._lines
        # Only this thread takes lines out; others only append: the ones there now can all be taken.
        texts = [lines.popleft() for _ in range(len(lines))]
        if texts:
            try:
                self._write("\n".join(texts) + "\n")
            except Exception:  # a closed or broken stderr: nothing better to tell it to
                pass
        return len(texts)

    def _write(self, text: str) -> None:
        if self._fd is None:
            self._stream.write(text)
            self._stream.flush()
            return
        data = memoryview(text.encode(self._encoding, "backslashreplace"))
        while data:
            data = data[os.write(self._fd, data) :]

    def finish(self) -> None:
        """Write what is left, then stop."""
        self._stopping = True
        self._wake.set()
        self.join(10)


def _fd_of(stream: TextIO) -> int | None:
    """The stream's file descriptor, flushed of what it buffered; None for a stream without one."""
    try:
        fd = stream.fileno()
        stream.flush()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is both
        return None
    return fd


class AccessLines:
    """The access log's own path to the writer: one line per client request, made here as the
    formatter would make it (same text, same JSON fields), without a ``logging.LogRecord``.

    ``logging`` costs about 40 µs of CPU per request for these lines (a record, its attribute
    dict, the handler lock, the formatter); this costs a few. Used once ``configure`` installed the
    handler and the ``switchboard.access`` logger writes info; otherwise the logger is called."""

    __slots__ = ("_handoff", "_prefix", "_who", "json")

    def __init__(self, handoff: _Handoff, json: bool, who: str) -> None:
        self._handoff = handoff
        self.json = json  # True: lines are JSON objects with the fields; False: text, the message alone
        self._who = who.strip().strip("[]") or None
        self._prefix = f" INFO {who}{ACCESS_LOGGER}: "

    def write_text(self, message: str) -> None:
        """A text line (``json`` False), which shows the message alone: no fields to make."""
        self._handoff.hand_over(_asctime_of(time.time()) + self._prefix + message)

    def write(self, message: str, fields: dict[str, Any]) -> None:
        now = time.time()
        if not self.json:
            self._handoff.hand_over(_asctime(now) + self._prefix + message)
            return
        line = _json_head(now, "info", ACCESS_LOGGER, message, self._who)
        for key, value in fields.items():
            line.setdefault(key, value)
        self._handoff.hand_over(orjson.dumps(line, default=str).decode())


ACCESS_LOGGER = "switchboard.access"
# logging's default asctime ("2026-11-24 07:40:01,123", local time), kept per millisecond.
_asctime = PerMillisecond(PerSecond("%Y-%m-%d %H:%M:%S", local=True), "%s,%03d")
_asctime_of = _asctime.__call__  # its bound method: a plain Python call, not the type's __call__ slot


_installed: tuple[_Handoff, _Writer] | None = None
_access: AccessLines | None = None


def access_lines() -> AccessLines | None:
    """The access log's fast path, when ``configure`` installed the handler and the access logger
    writes info; None otherwise (then the ``switchboard.access`` logger is called as usual)."""
    return _access


def configure(config: Config, who: str = "", stream: TextIO | None = None) -> None:
    """Route every log record to stderr (or ``stream``) in the configured format and level.

    Called once per process by the CLI; calling it again replaces what it installed before (and
    leaves other handlers, such as a test runner's, alone)."""
    global _installed
    shutdown()
    level = (config.logging.level or config.log_level).upper()
    formatter: logging.Formatter
    if config.logging.format == "json":
        formatter = JsonFormatter(who)
    else:
        formatter = logging.Formatter(_TEXT_FORMAT.format(who=who))
    lines: deque[str] = deque()
    wake = threading.Event()
    handler = _Handoff(lines, wake)
    handler.setFormatter(formatter)
    writer = _Writer(lines, handler, wake, stream or sys.stderr)
    writer.start()
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(level)
    _installed = (handler, writer)
    global _access
    access_logger = logging.getLogger(ACCESS_LOGGER)
    # Only when nothing else listens to the access logger (its records would bypass them).
    if access_logger.isEnabledFor(logging.INFO) and not access_logger.handlers:
        _access = AccessLines(handler, config.logging.format == "json", who)


def shutdown() -> None:
    """Write what is queued and remove the handler ``configure`` installed (also run at exit)."""
    global _installed, _access
    if _installed is None:
        return
    handler, writer = _installed
    _installed = None
    _access = None
    logging.getLogger().removeHandler(handler)
    writer.finish()
    if handler.dropped:
        sys.stderr.write(f"switchboard: {handler.dropped} log lines dropped (stderr could not keep up)\n")


atexit.register(shutdown)
