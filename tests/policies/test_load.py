"""Load limits as decisions (policies/load.py): the sessions of a replica, the calls of a session."""

from __future__ import annotations

from gateway import errors
from policies.chain import ALLOW, Outcome
from policies.load import LoadPolicy


def test_a_session_is_opened_only_below_the_limit() -> None:
    load = LoadPolicy(max_sessions=2, max_inflight_per_session=8)
    assert load.open_session(0) is ALLOW and load.open_session(1) is ALLOW
    refused = load.open_session(2)
    assert not refused.allowed
    assert (refused.outcome, refused.code, refused.reason) == (
        Outcome.OVERLOADED,
        errors.INTERNAL_ERROR,
        "Too many sessions",
    )
    assert not load.open_session(50).allowed


def test_a_call_is_forwarded_only_below_the_in_flight_limit() -> None:
    load = LoadPolicy(max_sessions=10, max_inflight_per_session=3)
    assert all(load.forward_call(n).allowed for n in range(3))
    refused = load.forward_call(3)
    assert not refused.allowed and refused.outcome is Outcome.OVERLOADED
    assert refused.code == errors.SESSION_OVERLOADED and "limit 3" in refused.reason


def test_a_backend_gets_only_as_many_mcpl_requests_answered_as_the_live_limit_allows() -> None:
    load = LoadPolicy(max_sessions=10, max_inflight_per_session=10)
    assert load.answer_backend(1, limit=2).allowed
    refused = load.answer_backend(2, limit=2)
    assert not refused.allowed and refused.outcome is Outcome.OVERLOADED
    assert (refused.code, refused.reason) == (
        errors.SESSION_OVERLOADED,
        "too many MCPL requests from this backend in flight (limit 2)",
    )
    assert load.answer_backend(2, limit=3).allowed, "the limit is the caller's: it reloads live"
