"""MCPL context hooks (§10): which backend answers to a host's hook reach that host.

Invariant: a hook answer (``context/beforeInference``, a blocking ``context/afterInference``) is used
only when its result is tagged with a feature set enabled for the session it answers; an untagged
answer, or one tagged with a set the session has not enabled or the backend never declared, is
dropped, so nothing reaches a host that it cannot attribute to a set it turned on (§6.5). ``data``
says why (``why``: untagged | disabled | unknown), the label under which drops are counted.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from gateway.events import Event
from policies.chain import Decision, Outcome, Stage, Target
from policies.principal import Principal

POLICY = "mcpl.hook_answers"


@dataclass(frozen=True, slots=True)
class HookAnswerFacts:
    """What the check of one hook answer needs (``Target.facts[POLICY]``): the answering backend's
    feature sets enabled for the session, and those it declared (both in the backend's own names)."""

    enabled: Collection[str]
    declared: Collection[str]


class HookAnswerPolicy:
    """The chain's check of a backend's answer to a context hook (dispatch stage); the event is the
    answer (its payload's ``result`` carries the ``featureSet`` tag)."""

    name = POLICY
    stage: Stage = "dispatch"
    facts_key = POLICY  # fed only through Target.facts: the chain skips it without them

    async def check(self, event: Event, principal: Principal, target: Target | None) -> Decision | None:
        facts = target.facts.get(POLICY) if target is not None and target.facts else None
        if not isinstance(facts, HookAnswerFacts):
            return None
        result = event.payload.get("result")
        tag = result.get("featureSet") if isinstance(result, dict) else None
        if isinstance(tag, str) and tag in facts.enabled:
            return None
        why = "untagged" if not isinstance(tag, str) else ("disabled" if tag in facts.declared else "unknown")
        data: dict[str, object] = {"why": why, "featureSet": tag if isinstance(tag, str) else None}
        return Decision(False, POLICY, 0, f"hook answer {why} feature set", data, Outcome.DENIED)
