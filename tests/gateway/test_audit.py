"""gateway/audit.py: JSON lines off the event loop, rotation, bounded queue, listeners."""

from __future__ import annotations

import asyncio
import logging
import re
import threading
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.audit import AuditLog
from gateway.clock import rfc3339_ms
from gateway.config import AuditConfig
from gateway.metrics import Metrics


def sample(metrics: Metrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


def lines(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def stall(audit: AuditLog) -> tuple[threading.Event, threading.Event]:
    """Make the writer thread stop on its next write: (entered: it is stuck there, release: let it go on)."""
    entered, release = threading.Event(), threading.Event()
    real_write = audit._write

    def stalled_write(batch: list[bytes]) -> None:
        entered.set()
        release.wait(10)
        real_write(batch)

    audit._write = stalled_write  # type: ignore[method-assign]
    return entered, release


def names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def test_timestamps_are_rfc3339_utc_with_milliseconds() -> None:
    assert rfc3339_ms(0.0) == "1970-01-01T00:00:00.000Z"
    assert rfc3339_ms(1_700_000_000.1239) == "2023-11-14T22:13:20.123Z"


def test_the_millisecond_cache_never_serves_another_millisecond() -> None:
    assert rfc3339_ms(1_700_000_000.1231) == "2023-11-14T22:13:20.123Z"
    assert rfc3339_ms(1_700_000_000.1239) == "2023-11-14T22:13:20.123Z"  # the same millisecond, cached
    assert rfc3339_ms(1_700_000_000.1241) == "2023-11-14T22:13:20.124Z"
    assert rfc3339_ms(1_700_000_001.1241) == "2023-11-14T22:13:21.124Z"  # same ms digits, next second
    assert rfc3339_ms(1_700_000_000.1231) == "2023-11-14T22:13:20.123Z"  # back in time


async def test_the_routers_record_is_the_same_as_a_keyword_record() -> None:
    seen: list[dict[str, Any]] = []
    audit = AuditLog(AuditConfig(), Metrics())
    audit.add_listener(seen.append)
    fields = {
        "principal": "alice",
        "dialect": "mcp",
        "action": "mcp/request:tools/call:echo",
        "method": "tools/call",
        "backend": "demo",
        "session": "abcd1234",
        "trace_id": "t-1",
        "latency_ms": 1.5,
    }
    for method, reason, result in [("tools/call", None, "ok"), ("tools/call", "no", None), (None, "", "error")]:
        keywords: dict[str, Any] = {**fields, "method": method, "reason": reason or None, "result": result}
        audit.record("allowed", **keywords)
        audit.record_request(
            "allowed",
            "alice",
            "mcp",
            "mcp/request:tools/call:echo",
            method,
            "demo",
            "abcd1234",
            "t-1",
            1.5,
            reason,
            result,
        )
        by_keywords, by_router = seen[-2], seen[-1]
        by_keywords.pop("ts"), by_router.pop("ts")
        assert list(by_router.items()) == list(by_keywords.items())  # same keys, same order
    await audit.close()


async def test_records_land_as_json_lines_with_their_fields(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    metrics = Metrics()
    audit = AuditLog(AuditConfig(file=str(path)), metrics)
    audit.record(
        "allowed",
        principal="alice",
        dialect="mcp",
        action="mcp/request:tools/call:echo",
        method="tools/call",
        backend="demo",
        trace_id="t-1",
        session=None,
        latency_ms=1.5,
    )
    audit.record("denied", principal="bob", reason="no capability", code=-32093)
    assert await audit.flush()
    first, second = lines(path)
    await audit.close()

    assert list(first)[:2] == ["ts", "outcome"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", first["ts"])
    assert first["outcome"] == "allowed"
    assert first["principal"] == "alice"
    assert first["backend"] == "demo"
    assert first["latency_ms"] == 1.5
    assert "session" not in first  # None fields are left out
    assert second["outcome"] == "denied"
    assert second["code"] == -32093
    assert sample(metrics, "switchboard_audit_records_total", outcome="allowed") == 1
    assert sample(metrics, "switchboard_audit_records_total", outcome="denied") == 1


async def test_unserializable_values_are_written_as_strings(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    audit = AuditLog(AuditConfig(file=str(path)), Metrics())
    audit.record("allowed", backend=Path("/x"), weird={1: object})
    await audit.close()
    (rec,) = lines(path)
    assert rec["backend"] == "/x"
    assert rec["weird"]["1"].startswith("<class")


async def test_an_existing_file_is_appended_to(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    path.write_bytes(b'{"outcome":"old"}\n')
    audit = AuditLog(AuditConfig(file=str(path)), Metrics())
    audit.record("new")
    await audit.close()
    assert [r["outcome"] for r in lines(path)] == ["old", "new"]


@pytest.mark.parametrize("backups", [1, 3])
async def test_rotation_keeps_the_configured_number_of_backups(tmp_path: Path, backups: int) -> None:
    path = tmp_path / "audit.jsonl"
    audit = AuditLog(AuditConfig(file=str(path), max_bytes=4096, backups=backups), Metrics())
    filler = "x" * 200
    for i in range(200):  # ~48 kB: a dozen rotations
        audit.record("allowed", n=i, filler=filler)
    await audit.close()

    rotated = [name for name in names(tmp_path) if name != "audit.jsonl"]
    assert rotated == [f"audit.jsonl.{i}" for i in range(1, backups + 1)]
    for p in [path, *(tmp_path / name for name in rotated)]:
        assert p.stat().st_size <= 4096
        assert lines(p)  # each one whole JSON lines
    # Newest last: the live file ends with the last record, .1 holds the ones just before it.
    live, newest_backup = lines(path), lines(tmp_path / "audit.jsonl.1")
    assert live[-1]["n"] == 199
    assert newest_backup[-1]["n"] == live[0]["n"] - 1
    if backups > 1:
        assert lines(tmp_path / f"audit.jsonl.{backups}")[-1]["n"] < newest_backup[0]["n"]


async def test_zero_backups_starts_the_file_over(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    audit = AuditLog(AuditConfig(file=str(path), max_bytes=4096, backups=0), Metrics())
    for i in range(100):
        audit.record("allowed", n=i, filler="x" * 200)
    await audit.close()
    assert names(tmp_path) == ["audit.jsonl"]
    assert path.stat().st_size <= 4096
    assert lines(path)[-1]["n"] == 99


async def test_a_full_queue_drops_and_counts_instead_of_blocking(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "audit.jsonl"
    metrics = Metrics()
    audit = AuditLog(AuditConfig(file=str(path)), metrics, queue_size=10)
    entered, release = stall(audit)
    audit.record("allowed", n=0)
    await asyncio.sleep(0)  # the iteration ends: its lines go to the writer
    assert await asyncio.to_thread(entered.wait, 5)  # the writer holds record 0 and is stuck on the disk

    caplog.set_level(logging.WARNING, logger="gateway.audit")
    started = time.perf_counter()
    for i in range(1, 26):  # 10 fit in the queue, 15 do not
        audit.record("allowed", n=i)
    await asyncio.sleep(0)  # handed off at the end of the iteration: the newest 15 are dropped
    assert time.perf_counter() - started < 0.5
    assert sample(metrics, "switchboard_audit_dropped_total") == 15
    assert sample(metrics, "switchboard_audit_records_total", outcome="allowed") == 26
    drop_warnings = [r for r in caplog.records if "dropped" in r.getMessage()]
    assert len(drop_warnings) == 1  # once a minute, not once per record

    release.set()
    await audit.close()
    assert [r["n"] for r in lines(path)] == list(range(11))


async def test_the_records_of_one_loop_iteration_reach_the_writer_together(tmp_path: Path) -> None:
    """One queue item (one wake-up of the writer thread) per event-loop iteration, not per record."""
    path = tmp_path / "audit.jsonl"
    audit = AuditLog(AuditConfig(file=str(path)), Metrics())
    entered, release = stall(audit)
    audit.record("allowed", n=0)
    await asyncio.sleep(0)
    assert await asyncio.to_thread(entered.wait, 5)  # the writer is busy with record 0
    for i in range(1, 101):
        audit.record("allowed", n=i)
    assert audit._queue is not None and audit._queue.qsize() == 0, "nothing handed off mid-iteration"
    await asyncio.sleep(0)
    assert audit._queue.qsize() == 1, "the iteration's 100 records are one item"
    release.set()
    await audit.close()
    assert [r["n"] for r in lines(path)] == list(range(101)), "all of them, in order"


async def test_listeners_receive_records_and_a_failing_one_is_kept_apart(caplog: pytest.LogCaptureFixture) -> None:
    audit = AuditLog(AuditConfig(), Metrics())
    got: list[dict[str, Any]] = []
    also: list[dict[str, Any]] = []

    def broken(rec: dict[str, Any]) -> None:
        raise RuntimeError("listener bug")

    audit.add_listener(broken)
    audit.add_listener(got.append)
    audit.add_listener(also.append)
    with caplog.at_level(logging.ERROR, logger="gateway.audit"):
        audit.record("denied", principal="bob")
        audit.record("allowed", principal="alice")
    assert [r["outcome"] for r in got] == ["denied", "allowed"]
    assert got == also
    assert got[0]["principal"] == "bob" and "ts" in got[0]
    assert len([r for r in caplog.records if "listener" in r.getMessage()]) == 1  # throttled

    audit.remove_listener(got.append)
    audit.remove_listener(got.append)  # unknown: ignored
    audit.record("allowed")
    assert len(got) == 2
    assert len(also) == 3
    await audit.close()


async def test_record_after_close_does_not_raise_and_is_counted_as_dropped(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    metrics = Metrics()
    audit = AuditLog(AuditConfig(file=str(path)), metrics)
    got: list[dict[str, Any]] = []
    audit.add_listener(got.append)
    audit.record("allowed", n=1)
    await audit.close()
    await audit.close()  # twice is fine
    audit.record("allowed", n=2)
    assert [r["n"] for r in lines(path)] == [1]
    assert [r["n"] for r in got] == [1, 2]
    assert sample(metrics, "switchboard_audit_dropped_total") == 1
    assert await audit.flush()


async def test_without_a_file_only_metrics_and_listeners(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    metrics = Metrics()
    audit = AuditLog(AuditConfig(), metrics)
    assert audit._thread is None  # no writer thread
    audit.record("rate_limited", principal="alice")
    audit.record("rate_limited", principal="alice")
    await audit.close()
    assert names(tmp_path) == []
    assert sample(metrics, "switchboard_audit_records_total", outcome="rate_limited") == 2
    assert sample(metrics, "switchboard_audit_dropped_total") == 0


async def test_close_stops_the_writer_thread(tmp_path: Path) -> None:
    audit = AuditLog(AuditConfig(file=str(tmp_path / "a.jsonl")), Metrics())
    thread = audit._thread
    assert thread is not None and thread.is_alive()
    await audit.close()
    assert not thread.is_alive()


def test_an_unwritable_path_fails_at_startup(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        AuditLog(AuditConfig(file=str(tmp_path / "missing" / "audit.jsonl")), Metrics())
