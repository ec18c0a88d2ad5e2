"""Load limits as decisions: how many sessions a replica holds, how many calls a session runs at once,
how many MCPL requests of one backend the gateway answers at once.

They bound resources, but refusing is a decision like any other: it has a typed outcome
(``Outcome.OVERLOADED``), a reason, a code from the one error table, and it is audited. The
gateway counts (sessions open, a session's calls in flight) and hands the count to this policy as
a fact; the policy alone decides.

Invariants: a replica never opens a session beyond ``limits.max_sessions``; a session never has
more than ``limits.max_inflight_per_session`` calls forwarded at once; a backend never has more than
``mcpl.max_serving_per_backend`` MCPL requests being answered; a refusal costs no backend
work and leaves what is already running untouched.
"""

from __future__ import annotations

from gateway import errors
from policies.chain import ALLOW, Decision, Outcome


class LoadPolicy:
    name = "load"

    def __init__(self, max_sessions: int, max_inflight_per_session: int) -> None:
        self.max_sessions = max_sessions
        self.max_inflight_per_session = max_inflight_per_session

    def open_session(self, open_sessions: int) -> Decision:
        """Whether one more session may be opened while ``open_sessions`` are."""
        if open_sessions < self.max_sessions:
            return ALLOW
        return Decision(
            False,
            self.name,
            errors.INTERNAL_ERROR,
            "Too many sessions",
            outcome=Outcome.OVERLOADED,
        )

    def answer_backend(self, serving: int, limit: int) -> Decision:
        """Whether the gateway takes on one more MCPL request of a backend while it answers
        ``serving`` of them (``mcpl.max_serving_per_backend``, passed in: it reloads live). Each may
        wait on a host for a while, so a flooding backend is refused at once, never queued."""
        if serving < limit:
            return ALLOW
        return Decision(
            False,
            self.name,
            errors.SESSION_OVERLOADED,
            f"too many MCPL requests from this backend in flight (limit {limit})",
            outcome=Outcome.OVERLOADED,
        )

    def forward_call(self, inflight: int) -> Decision:
        """Whether a session with ``inflight`` calls running may start one more."""
        if inflight < self.max_inflight_per_session:
            return ALLOW
        return Decision(
            False,
            self.name,
            errors.SESSION_OVERLOADED,
            f"too many requests in flight on this session (limit {self.max_inflight_per_session})",
            outcome=Outcome.OVERLOADED,
        )
