"""MCPL scope elevation (§7.6): the operator's and the host's patterns answer a backend's
``scope/elevate`` before any host is asked; only what they leave open reaches the host.

Invariant: an elevation is refused when a blacklist names the label (the operator's first, then the
host's), approved without a prompt when a whitelist names it or the host approved that exact label
earlier in the session, and otherwise goes on to the host, whose answer is final. The gateway never
approves a label a blacklist names, and never refuses one no blacklist names.

The chain reports only what stops a request, so an elevation the rules answer comes back as a
decision that stops it at the gateway (``allowed`` false): a refusal (``Outcome.DENIED``) or an
approval given on the host's behalf (``Outcome.ANSWERED``); ``data`` says which (``approved``) and who
decided (``by``: operator, host or cache). No decision means the host is asked.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.events import Event
from policies.chain import Decision, Outcome, Stage, Target
from policies.principal import Principal
from policies.scopes import ScopeRules, evaluate

POLICY = "mcpl.scope_elevation"


@dataclass(frozen=True, slots=True)
class ElevationFacts:
    """What the answer to one ``scope/elevate`` needs (``Target.facts[POLICY]``): the label, the
    host's and the operator's patterns for the feature set, and the labels the host approved."""

    label: str
    host: ScopeRules
    operator: ScopeRules
    approved: tuple[str, ...] = ()


class ScopeElevationPolicy:
    """The chain's answer to a backend's ``scope/elevate`` where the patterns decide (dispatch stage)."""

    name = POLICY
    stage: Stage = "dispatch"
    facts_key = POLICY  # fed only through Target.facts: the chain skips it without them

    async def check(self, event: Event, principal: Principal, target: Target | None) -> Decision | None:
        facts = target.facts.get(POLICY) if target is not None and target.facts else None
        if not isinstance(facts, ElevationFacts):
            return None
        verdict = evaluate(facts.label, facts.host, facts.operator, facts.approved)
        if verdict.outcome == "ask":
            return None  # the host's decision
        approved = verdict.outcome == "approve"
        data: dict[str, object] = {"approved": approved, "by": verdict.by, "pattern": verdict.pattern}
        return Decision(False, POLICY, 0, verdict.reason, data, Outcome.ANSWERED if approved else Outcome.DENIED)


def approved_by_rules(decision: Decision) -> bool:
    """Whether a decision of this policy approves the elevation (else it refuses it)."""
    return bool(decision.data and decision.data.get("approved") is True)
