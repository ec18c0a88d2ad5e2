"""gateway/collector.py: the collector settings `run` applies at start-up, and the override."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from gateway.collector import GEN0_THRESHOLD, tune_collector


@pytest.fixture(autouse=True)
def restore_collector() -> Iterator[None]:
    before = gc.get_threshold()
    yield
    gc.set_threshold(*before)
    gc.unfreeze()


def test_the_start_up_objects_are_frozen_and_generation_0_waits_longer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SWITCHBOARD_GC_GEN0", raising=False)
    _, gen1, gen2 = gc.get_threshold()
    tune_collector()
    assert gc.get_threshold() == (GEN0_THRESHOLD, gen1, gen2)
    assert gc.get_freeze_count() > 0
    assert gc.isenabled(), "cycles are still collected"


@pytest.mark.parametrize(("raw", "expected"), [("0", None), ("2500", 2500), ("junk", GEN0_THRESHOLD)])
def test_the_environment_sets_the_threshold(monkeypatch: pytest.MonkeyPatch, raw: str, expected: int | None) -> None:
    monkeypatch.setenv("SWITCHBOARD_GC_GEN0", raw)
    before = gc.get_threshold()
    tune_collector()
    assert gc.get_threshold() == (before if expected is None else (expected, *before[1:]))
