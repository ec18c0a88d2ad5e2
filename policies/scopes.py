"""MCPL scoped access (§7): whether a scope label may be acted in, with an operator layer over the host's.

A host whitelists and blacklists scope labels per feature set (``featureSets/update``); the gateway's
operator may add lists of its own. The operator is the party the gateway answers to, so an operator
blacklist wins over everything a host says, while an operator whitelist merely spares the host a prompt.
Labels are matched as ``/``-separated globs (``/project/**``, ``#dev-*``), see ``policies/globs.py``.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from gateway.errors import CAPABILITY_DENIED
from gateway.events import Event
from policies.chain import Decision, Outcome as DecisionOutcome, Stage, Target
from policies.globs import compile_glob, matches_any
from policies.principal import Principal

SEPARATOR = "/"

Outcome = Literal["approve", "deny", "ask"]
By = Literal["operator", "host", "cache", "none"]


def _patterns(value: object) -> tuple[str, ...]:
    if not isinstance(value, list | tuple):
        return ()
    return tuple(dict.fromkeys(item for item in value if isinstance(item, str)))


@dataclass(frozen=True, slots=True)
class ScopeRules:
    whitelist: tuple[str, ...] = ()
    blacklist: tuple[str, ...] = ()

    @staticmethod
    def from_wire(value: object) -> ScopeRules:
        """Rules from a ``scopes`` entry of ``featureSets/update``; whatever a peer sends, never raises.

        A whitelist or blacklist that is not a list counts as absent, and non-string entries are
        dropped: a host's wrong types must not cost it its session, and what it meant cannot be known.
        """
        if not isinstance(value, Mapping):
            return ScopeRules()
        return ScopeRules(_patterns(value.get("whitelist")), _patterns(value.get("blacklist")))


@dataclass(frozen=True, slots=True)
class ScopeVerdict:
    outcome: Outcome
    reason: str
    # The pattern that decided, for audit and for the reason a backend is told.
    pattern: str | None = None
    by: By = "none"


def _layers(host: ScopeRules, operator: ScopeRules) -> tuple[tuple[By, ScopeRules], ...]:
    return (("operator", operator), ("host", host))  # the operator's word is checked first


def _blacklisted(label: str, host: ScopeRules, operator: ScopeRules) -> ScopeVerdict | None:
    for by, rules in _layers(host, operator):
        pattern = matches_any(rules.blacklist, label, SEPARATOR)
        if pattern is not None:
            return ScopeVerdict("deny", f"{label!r} is blacklisted by the {by} ({pattern!r})", pattern, by)
    return None


def _whitelisted(label: str, host: ScopeRules, operator: ScopeRules) -> ScopeVerdict | None:
    for by, rules in _layers(host, operator):
        pattern = matches_any(rules.whitelist, label, SEPARATOR)
        if pattern is not None:
            return ScopeVerdict("approve", f"{label!r} is whitelisted by the {by} ({pattern!r})", pattern, by)
    return None


def evaluate(label: str, host: ScopeRules, operator: ScopeRules, approved: Collection[str] = ()) -> ScopeVerdict:
    """The answer to a backend's ``scope/elevate`` (§7.6), before anyone is asked.

    Blacklists first (operator, then host), then either whitelist, then labels approved earlier this
    session (exact labels only: an approval of ``/etc/hosts`` says nothing about ``/etc/passwd``), and
    otherwise "ask": the host decides.
    """
    verdict = _blacklisted(label, host, operator) or _whitelisted(label, host, operator)
    if verdict is not None:
        return verdict
    if label in approved:
        return ScopeVerdict("approve", f"{label!r} was approved earlier this session", None, "cache")
    return ScopeVerdict("ask", f"{label!r} is neither whitelisted nor blacklisted", None, "none")


def permits(label: str, host: ScopeRules, operator: ScopeRules) -> ScopeVerdict:
    """Whether the host may act in ``label`` itself (a scoped ``tools/call``, a channel publish).

    The host asked for the action, so no whitelist is needed; the blacklists still hold, the host's
    included (§7.7: hosts validate the scope against whitelist and blacklist before executing).
    """
    verdict = _blacklisted(label, host, operator) or _whitelisted(label, host, operator)
    if verdict is not None:
        return verdict
    return ScopeVerdict("approve", f"{label!r} was requested by the host", None, "none")


def merge_for_backend(rules: Iterable[ScopeRules]) -> ScopeRules:
    """What one backend connection shared by several host sessions is told, as one rule set.

    The backend acts on one set of lists for all of them, so it must not act without asking where any
    session would object: every blacklist counts, and only whitelist patterns every session has. This
    compares patterns, not the labels they match (``/a/**`` and ``/a/b/**`` share nothing), which can
    only err towards asking.
    """
    sets = list(rules)
    if not sets:
        return ScopeRules()
    blacklist = dict.fromkeys(pattern for rule in sets for pattern in rule.blacklist)
    others = [set(rule.whitelist) for rule in sets[1:]]
    whitelist = dict.fromkeys(p for p in sets[0].whitelist if all(p in other for other in others))
    return ScopeRules(tuple(whitelist), tuple(blacklist))


def for_feature_set(table: Iterable[tuple[str, Any]], *names: str) -> ScopeRules:
    """The scope patterns a table keyed by feature-set pattern holds for a feature set known by any
    of ``names``: every matching entry's patterns, added up (entries need ``whitelist``/``blacklist``)."""
    white: list[str] = []
    black: list[str] = []
    for key, rules in table:
        match = compile_glob(key, None)
        if any(match(name) for name in names):
            white += rules.whitelist
            black += rules.blacklist
    return ScopeRules(tuple(white), tuple(black))


def to_wire(rules: ScopeRules) -> dict[str, list[str]]:
    """The ``scopes`` entry of a ``featureSets/update`` for ``rules``."""
    return {"whitelist": list(rules.whitelist), "blacklist": list(rules.blacklist)}


SCOPES_POLICY = "mcpl.scopes"
SCOPE_DENIED = CAPABILITY_DENIED  # the gateway's "a policy refused this" code


@dataclass(frozen=True, slots=True)
class ScopedCallFacts:
    """What the check of a scoped ``tools/call`` (MCPL §7.7) needs (``Target.facts[SCOPES_POLICY]``).

    ``candidates`` are the feature sets that may govern the tool, as (name as the host sees it, host
    patterns, operator patterns, enabled for this session). ``named_unknown`` is a ``featureSet`` the
    call named that the backend does not declare. ``needs_enabled`` is false for a client that did
    not negotiate MCPL (it meets the operator's blacklist, not the host-side feature-set rules).
    """

    label: object
    candidates: tuple[tuple[str, ScopeRules, ScopeRules, bool], ...]
    needs_enabled: bool
    can_enable: bool
    named_unknown: str | None = None


class ScopePolicy:
    """The chain's check of a scoped ``tools/call``: a blacklisted label or a disabled feature set
    stops it before it is forwarded (dispatch stage)."""

    name = SCOPES_POLICY
    stage: Stage = "dispatch"
    facts_key = SCOPES_POLICY  # fed only through Target.facts: the chain skips it without them

    async def check(self, event: Event, principal: Principal, target: Target | None) -> Decision | None:
        facts = target.facts.get(SCOPES_POLICY) if target is not None and target.facts else None
        if not isinstance(facts, ScopedCallFacts):
            return None
        if facts.named_unknown is not None:
            return Decision(
                False,
                SCOPES_POLICY,
                -32003,
                "Unknown feature set",
                {"featureSet": facts.named_unknown},
                DecisionOutcome.DENIED,
            )
        if not isinstance(facts.label, str):
            return Decision(
                False, SCOPES_POLICY, -32602, "params.scope.label must be a string", outcome=DecisionOutcome.INVALID
            )
        for feature_set, host, operator, _enabled in facts.candidates:
            verdict = permits(facts.label, host, operator)
            if verdict.outcome == "deny":
                data: dict[str, object] = {"featureSet": feature_set, "scope": facts.label}
                return Decision(False, SCOPES_POLICY, SCOPE_DENIED, verdict.reason, data, DecisionOutcome.DENIED)
        if facts.needs_enabled and facts.candidates and not any(c[3] for c in facts.candidates):
            data = {"featureSet": facts.candidates[0][0], "canEnable": facts.can_enable}
            return Decision(False, SCOPES_POLICY, -32001, "Feature set not enabled", data, DecisionOutcome.DENIED)
        return None
