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
import contextlib
import logging
import sys
import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Any, TextIO

import orjson

from gateway.clock import PerSecond, rfc3339_ms
from gateway.telemetry.context import LOG_IDS

if TYPE_CHECKING:
    from gateway.config import Config

QUEUE_SIZE = 10_000
_LINGER_S = 0.02  # after a write, how long the writer lets the next lines gather before it looks again
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
    write the next lines gather for ``_LINGER_S``, so a busy gateway wakes this thread at most about
    50 times a second, never once per line: each wake-up is a GIL hand-over that slows the event
    loop's thread more than a line costs. (Lingering only after a large batch was not enough: a
    writer faster than the lines found one or two at each wake-up and was woken per request, which
    cost the 2026-07-28 wire about 40 µs per call, bench/RESULTS.md.)"""

    def __init__(self, lines: deque[str], handoff: _Handoff, wake: threading.Event, stream: TextIO) -> None:
        super().__init__(name="switchboard-log-writer", daemon=True)
        self._lines = lines
        self._handoff = handoff
        self._wake = wake
        self._stream = stream
        self._stopping = False

    def run(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            stopping = self._stopping
            self._handoff.pending = False  # before draining: a line appended after this wakes us again
            if self._drain() and not stopping:
                time.sleep(_LINGER_S)  # let the next lines gather: one wake-up for many
            if stopping:
                return

    def _drain(self) -> int:
        texts = []
        with contextlib.suppress(IndexError):
            while True:
                texts.append(self._lines.popleft())
        if texts:
            try:
                self._stream.write("\n".join(texts) + "\n")
                self._stream.flush()
            except Exception:  # a closed or broken stderr: nothing better to tell it to
                pass
        return len(texts)

    def finish(self) -> None:
        """Write what is left, then stop."""
        self._stopping = True
        self._wake.set()
        self.join(10)


class AccessLines:
    """The access log's own path to the writer: one line per client request, made here as the
    formatter would make it (same text, same JSON fields), without a ``logging.LogRecord``.

    ``logging`` costs about 40 µs of CPU per request for these lines (a record, its attribute
    dict, the handler lock, the formatter); this costs a few. Used once ``configure`` installed the
    handler and the ``switchboard.access`` logger writes info; otherwise the logger is called."""

    __slots__ = ("_handoff", "_json", "_prefix", "_who")

    def __init__(self, handoff: _Handoff, json: bool, who: str) -> None:
        self._handoff = handoff
        self._json = json
        self._who = who.strip().strip("[]") or None
        self._prefix = f" INFO {who}{ACCESS_LOGGER}: "

    def write(self, message: str, fields: dict[str, Any]) -> None:
        now = time.time()
        if not self._json:
            self._handoff.hand_over(_asctime(now) + self._prefix + message)
            return
        line = _json_head(now, "info", ACCESS_LOGGER, message, self._who)
        for key, value in fields.items():
            line.setdefault(key, value)
        self._handoff.hand_over(orjson.dumps(line, default=str).decode())


ACCESS_LOGGER = "switchboard.access"
# logging's default asctime ("2026-11-24 07:40:01,123", local time).
_LOCAL = PerSecond("%Y-%m-%d %H:%M:%S", local=True)


def _asctime(ts: float) -> str:
    text, ms = _LOCAL.split(ts)
    return f"{text},{ms:03d}"


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
