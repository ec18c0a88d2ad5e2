"""MCPL context hooks and inference (§10.7): a hook must not trigger inference.

Invariant: a backend's ``inference/request`` is refused (-32600) while that backend has a context-hook
call in flight. Over carriers without relation (stdio, WebSocket) the gateway cannot tell which call
a request belongs to, so "inside a hook" means "has a hook call in flight" (ADR 0009), which can
only err towards refusing.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.errors import INVALID_REQUEST
from gateway.events import Event
from policies.chain import Decision, Outcome, Stage, Target
from policies.principal import Principal

POLICY = "mcpl.hook_inference"
REASON = "inference/request from inside a context hook is refused (MCPL §10.7: hooks must not trigger inference)"


@dataclass(frozen=True, slots=True)
class HookCallsFacts:
    """How many context-hook calls the requesting backend has in flight (``Target.facts[POLICY]``)."""

    in_flight: int


class InferenceInHookPolicy:
    """The chain's §10.7 check of a backend's ``inference/request`` (dispatch stage)."""

    name = POLICY
    stage: Stage = "dispatch"
    facts_key = POLICY  # fed only through Target.facts: the chain skips it without them

    async def check(self, event: Event, principal: Principal, target: Target | None) -> Decision | None:
        facts = target.facts.get(POLICY) if target is not None and target.facts else None
        if not isinstance(facts, HookCallsFacts) or facts.in_flight <= 0:
            return None
        return Decision(False, POLICY, INVALID_REQUEST, REASON, outcome=Outcome.DENIED)
