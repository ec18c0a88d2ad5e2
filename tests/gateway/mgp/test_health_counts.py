"""The tool counts of an ``mgp/health/status`` answer for a backend (gateway/mgp/health.py ``_count``,
§11.3): the gateway's own count of the backend's cached list wins; before the gateway has fetched
that list, the backend's own §11.3 status numbers are used (not a misleading 0); else 0."""

from __future__ import annotations

from gateway.mgp.health import _count


def test_the_gateways_count_wins_over_what_the_backend_says() -> None:
    assert _count(5, {"tools_available": 3}, "tools_available") == 5
    assert _count(0, {"tools_available": 3}, "tools_available") == 0, "a fetched empty list is known"


def test_before_the_list_is_fetched_the_backends_own_status_is_used() -> None:
    assert _count(None, {"tools_total": 3}, "tools_total") == 3


def test_nothing_usable_is_zero() -> None:
    for answer in ({}, {"tools_total": -1}, {"tools_total": True}, {"tools_total": "3"}, {"tools_total": 2.5}):
        assert _count(None, answer, "tools_total") == 0, answer
