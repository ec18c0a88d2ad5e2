"""The gateway's log lines (gateway/logs.py): text and JSON formats, request ids, the access log, and a
writer that never makes the logging thread wait. In-process tests with a real stream and the real
writer thread, then a real gateway process driven over HTTP."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from gateway import logs
from gateway.config import Config
from gateway.telemetry.context import LOG_IDS, LogIds
from tests.support import JSON_HEADERS, initialize_request, run_gateway

pytestmark = [pytest.mark.timeout(60)]


@pytest.fixture(autouse=True)
def _restore_root() -> Iterator[None]:
    root = logging.getLogger()
    level = root.level
    yield
    logs.shutdown()
    root.setLevel(level)


def configured(stream: Any, who: str = "", **logging_section: Any) -> None:
    logs.configure(Config.model_validate({"logging": logging_section}), who, stream=stream)


def written(stream: io.StringIO) -> list[str]:
    logs.shutdown()  # the writer thread has written everything once this returns
    return stream.getvalue().splitlines()


def test_json_lines_carry_the_request_ids_and_extra_fields() -> None:
    stream = io.StringIO()
    configured(stream, "[worker 2] ", format="json", level="info")
    log = logging.getLogger("switchboard.test")
    log.debug("not at info")
    log.info("outside any request")
    token = LOG_IDS.set(LogIds("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", "session-1"))
    try:
        log.warning("inside %s", "a request", extra={"backend": "echo"})
        try:
            raise ValueError("boom")
        except ValueError:
            log.exception("failed")
    finally:
        LOG_IDS.reset(token)
    lines = [json.loads(line) for line in written(stream)]
    assert [line["message"] for line in lines] == ["outside any request", "inside a request", "failed"]
    outside, inside, failed = lines
    assert outside["level"] == "info" and outside["logger"] == "switchboard.test"
    assert outside["worker"] == "worker 2"
    assert outside["ts"].endswith("Z") and outside["ts"][10] == "T"
    assert "trace_id" not in outside and "session_id" not in outside
    assert inside["level"] == "warning" and inside["backend"] == "echo"
    assert inside["trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert inside["span_id"] == "00f067aa0ba902b7" and inside["session_id"] == "session-1"
    assert failed["level"] == "error" and "ValueError: boom" in failed["exception"]


def test_text_lines_and_the_level_fallback() -> None:
    stream = io.StringIO()
    # logging.level null: the top-level log_level decides.
    logs.configure(Config.model_validate({"log_level": "warning"}), "[w] ", stream=stream)
    log = logging.getLogger("switchboard.test")
    log.info("hidden")
    log.warning("shown %d", 1)
    (line,) = written(stream)
    assert line.endswith(" WARNING [w] switchboard.test: shown 1")


def test_a_stuck_stderr_never_makes_the_logger_wait(capsys: pytest.CaptureFixture[str]) -> None:
    entered, release = threading.Event(), threading.Event()

    class Stuck(io.StringIO):
        def write(self, text: str) -> int:
            entered.set()
            release.wait(30)  # a terminal nobody reads, a full pipe
            return super().write(text)

    stream = Stuck()
    configured(stream, format="json", level="info")
    log = logging.getLogger("switchboard.test")
    log.info("first")
    assert entered.wait(5), "the writer never wrote"
    started = time.monotonic()
    for i in range(logs.QUEUE_SIZE + 500):
        log.info("line %d", i)
    elapsed = time.monotonic() - started
    release.set()
    lines = written(stream)
    assert elapsed < 10, f"logging waited for the stream ({elapsed:.1f}s)"
    assert len(lines) == 1 + logs.QUEUE_SIZE, "what waited is written, the rest is dropped"
    assert json.loads(lines[-1])["message"] == f"line {logs.QUEUE_SIZE - 1}"
    assert "switchboard: 500 log lines dropped" in capsys.readouterr().err


def test_a_stream_with_a_file_descriptor_gets_every_line_in_order(tmp_path: Any) -> None:
    path = tmp_path / "stderr.log"
    with open(path, "w", encoding="utf-8") as stream:
        configured(stream, level="info")
        access = logs.access_lines()
        assert access is not None and not access.json
        log = logging.getLogger("switchboard.test")
        for i in range(300):
            log.info("line %d é \udcff", i)  # not ASCII, and a lone surrogate (written escaped)
            access.write_text(f"access {i}")
            if i % 50 == 0:
                time.sleep(0.03)  # quiet spells: the writer goes idle and is woken again
        logs.shutdown()
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 600
    assert [line.rsplit(": ", 1)[1] for line in lines[:2]] == ["line 0 é \\udcff", "access 0"]
    assert lines[-1].endswith("switchboard.access: access 299")


def test_a_busy_writer_is_not_woken_per_line() -> None:
    stream = io.StringIO()
    configured(stream, level="info")
    handler, _ = logs._installed  # type: ignore[misc]
    wake = handler._wake
    woken = 0
    real_set = wake.set

    def counting_set() -> None:
        nonlocal woken
        woken += 1
        real_set()

    wake.set = counting_set  # type: ignore[method-assign]
    log = logging.getLogger("switchboard.test")
    for i in range(200):
        log.info("line %d", i)
        time.sleep(0.001)
    lines = written(stream)
    assert len(lines) == 200
    assert woken <= 5, f"woken {woken} times for 200 lines: it gathers while lines keep coming"


async def test_a_gateway_writes_json_lines_with_session_and_trace_ids() -> None:
    config = {"backends": {"demo": {"transport": "builtin", "required": True}}, "logging": {"format": "json"}}
    trace_id = "5bf92f3577b34da6a3ce929d0e0e4736"
    with run_gateway(config) as gw:
        async with httpx.AsyncClient(timeout=10) as http:
            opened = await http.post(gw.mcp, json=initialize_request(1), headers=JSON_HEADERS)
            session = opened.headers["mcp-session-id"]
            headers = {**JSON_HEADERS, "mcp-session-id": session, "mcp-protocol-version": "2025-11-25"}
            await http.post(gw.mcp, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers)
            call = {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {
                    "name": "echo",
                    "arguments": {"text": "hi"},
                    "_meta": {"traceparent": f"00-{trace_id}-00f067aa0ba902b7-01"},
                },
            }
            answer = await http.post(gw.mcp, json=call, headers=headers)
            assert answer.status_code == 200, answer.text
        deadline = time.monotonic() + 10
        while True:
            lines = [json.loads(raw) for raw in gw.log().splitlines() if raw.startswith("{")]
            access = [line for line in lines if line["logger"] == "switchboard.access"]
            if any(line["method"] == "tools/call" for line in access) or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.05)
    (call_line,) = [line for line in access if line["method"] == "tools/call"]
    assert call_line["session_id"] == session and call_line["session"] == session
    assert call_line["trace_id"] == trace_id
    assert call_line["backend"] == "demo" and call_line["outcome"] == "allowed" and call_line["result"] == "ok"
    assert call_line["rpc_id"] == 2 and call_line["duration_ms"] >= 0
    assert call_line["message"].startswith("tools/call backend=demo outcome=allowed ")
    assert any(line["logger"] == "switchboard.access" and line["method"] == "initialize" for line in access)
    # uvicorn's own lines go through the same handler (its access log stays off).
    assert any(line["logger"].startswith("uvicorn") for line in lines)
    assert not any(line["logger"] == "uvicorn.access" for line in lines)


def test_a_gateway_writes_text_access_lines_by_default() -> None:
    with run_gateway({"backends": {"demo": {"transport": "builtin", "required": True}}}) as gw:
        opened = httpx.post(gw.mcp, json=initialize_request(1), headers=JSON_HEADERS, timeout=10)
        assert opened.status_code == 200
        deadline = time.monotonic() + 10
        while "switchboard.access: initialize backend=gateway outcome=allowed" not in gw.log():
            assert time.monotonic() < deadline, gw.log()
            time.sleep(0.05)
