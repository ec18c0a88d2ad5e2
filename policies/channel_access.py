"""MCPL channels (§14): whether a host may publish to a backend's channel, and whether a backend may
observe a host's outgoing messages on a channel.

Invariant: a backend that declares feature sets using ``channels.publish`` (or ``channels.observe``)
gates that use: it is permitted only through one of those sets that is enabled for the session and
under which neither the host's scope patterns (matched against the channel id the host sees) nor the
operator's (matched against the backend's own id) blacklist the channel. A backend that declares no
such set is ungated. Whitelists are not needed: the host asked for the action itself (§7.7).
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.errors import CHANNEL_NOT_PERMITTED
from gateway.events import Event
from policies.chain import Decision, Outcome, Stage, Target
from policies.principal import Principal
from policies.scopes import ScopeRules, permits

POLICY = "mcpl.channels"


@dataclass(frozen=True, slots=True)
class ChannelGate:
    """One enabled feature set that may permit the use, with the host's and the operator's patterns."""

    feature_set: str
    host: ScopeRules
    operator: ScopeRules


@dataclass(frozen=True, slots=True)
class ChannelFacts:
    """What the check of one channel use needs (``Target.facts[POLICY]``).

    ``gating`` are the backend's feature sets using ``uses`` (empty: ungated), ``enabled`` those of
    them enabled for the session. ``host_label`` is the channel as the host names it, ``own_id`` as
    the backend does; ``channel_id`` is what the host sent, returned in the error's data.
    """

    uses: str
    gating: tuple[str, ...]
    enabled: tuple[ChannelGate, ...]
    host_label: str
    own_id: str
    channel_id: object = None


def _deny(facts: ChannelFacts, reason: str) -> Decision:
    data: dict[str, object] = {"channelId": facts.channel_id, "reason": reason}
    return Decision(False, POLICY, CHANNEL_NOT_PERMITTED, reason, data, Outcome.DENIED)


class ChannelPolicy:
    """The chain's check of a channel publish or observation (dispatch stage)."""

    name = POLICY
    stage: Stage = "dispatch"
    facts_key = POLICY  # fed only through Target.facts: the chain skips it without them

    async def check(self, event: Event, principal: Principal, target: Target | None) -> Decision | None:
        facts = target.facts.get(POLICY) if target is not None and target.facts else None
        if not isinstance(facts, ChannelFacts) or not facts.gating:
            return None
        if not facts.enabled:
            return _deny(facts, f"no feature set using {facts.uses} is enabled ({', '.join(facts.gating)})")
        reason = ""
        for gate in facts.enabled:
            host = permits(facts.host_label, gate.host, ScopeRules())
            operator = permits(facts.own_id, ScopeRules(), gate.operator)
            if host.outcome == "approve" and operator.outcome == "approve":
                return None
            reason = operator.reason if operator.outcome == "deny" else host.reason
        return _deny(facts, reason)
