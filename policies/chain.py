"""The one ordered chain of decisions every event passes, whatever its dialect or front door."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from gateway.events import Event
from policies.principal import Principal


@dataclass(frozen=True, slots=True)
class Decision:
    allowed: bool
    policy: str = ""
    code: int = 0
    reason: str = ""
    data: dict[str, object] | None = None


ALLOW = Decision(True)


class Policy(Protocol):
    name: str

    def check(self, event: Event, principal: Principal) -> Decision | None:
        """A denial, or None to let the next policy decide."""


class PolicyChain:
    def __init__(self, policies: Sequence[Policy]) -> None:
        self.policies = tuple(policies)

    def decide(self, event: Event, principal: Principal) -> Decision:
        for policy in self.policies:
            decision = policy.check(event, principal)
            if decision is not None and not decision.allowed:
                return decision
        return ALLOW

    def visible(self, action: str, principal: Principal) -> bool:
        """Whether a list item (its would-be action) should be shown to the principal."""
        return principal.capabilities.allows(action)
