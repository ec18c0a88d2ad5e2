"""MCPL feature sets (§6): what a host turned on, what the operator permits, and tagged-message checks.

Three separate questions, kept apart because they have different owners:

* ``HostSelection``: what one host session enabled or disabled through ``featureSets/update``, in
  the names that host sees (the gateway may prefix a backend's names, e.g. ``mem.memory.retrieval``).
  MCPL says nothing about names no update mentioned; we treat them as disabled, so a backend can do
  nothing a host did not ask for.
* ``OperatorRules``: what the gateway's operator allows at all, whatever hosts ask for, in the
  backend's own names.
* ``check_server_tag``: the §6.5/§6.6 verdict on a server-initiated message tagged with a feature set.

Patterns are globs without a separator (``memory.*`` covers ``memory.a.b``), see ``policies/globs.py``.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import ClassVar

from gateway.errors import FEATURE_SET_NOT_ENABLED, INVALID_PARAMS, UNKNOWN_FEATURE_SET
from gateway.events import Event
from policies.chain import Decision, Outcome, Stage, Target
from policies.globs import compile_glob, is_literal
from policies.principal import Principal

POLICY = "mcpl.feature_sets"

# How many distinct patterns one host session's selection remembers. The patterns come from a remote
# peer, and ``is_enabled`` scans them, so without a bound a host could grow the gateway's memory and
# the cost of every tagged message without limit. Dropping the *oldest* entry can only ever turn a name
# off (see ``HostSelection._trim``), so the bound fails closed.
MAX_PATTERNS = 1024


def _strings(values: object) -> list[str]:
    """The strings among ``values``; a lone string is one pattern, anything not iterable is none."""
    if isinstance(values, str):
        # Iterating it would turn "memory.*" into the patterns "m", "e", ...; and ignoring it would
        # silently drop a host's "disabled", so it counts as the one pattern it plainly is.
        return [values]
    if not isinstance(values, Iterable) or isinstance(values, bytes | bytearray):
        return []
    return [value for value in values if isinstance(value, str)]


class HostSelection:
    """The feature sets one host enabled, as the net effect of all its ``featureSets/update`` deltas.

    Each update only changes the names it matches. Within one update a literal name beats a wildcard,
    and between an enabled and a disabled pattern of the same kind the disabled one wins, so
    ``apply(["memory.*"], ["memory.consolidation"])`` enables every ``memory.`` set but that one.

    Stored as one insertion-ordered pattern -> enabled map in which each update moves its patterns to
    the end, in increasing precedence; a name's state is then simply that of the last pattern that
    matches it, and "unnamed = disabled" is the case where none does.
    """

    __slots__ = ("_patterns",)

    def __init__(self) -> None:
        self._patterns: dict[str, bool] = {}

    def apply(self, enabled: Iterable[str], disabled: Iterable[str]) -> None:
        """Record one update (one ``featureSets/update``, or the selection sent at initialization)."""
        on, off = _strings(enabled), _strings(disabled)
        # Lowest precedence first: each later group overrides the earlier ones for the names it matches.
        groups = (
            ([p for p in on if not is_literal(p)], True),
            ([p for p in off if not is_literal(p)], False),
            ([p for p in on if is_literal(p)], True),
            ([p for p in off if is_literal(p)], False),
        )
        for group, state in groups:
            for pattern in group:
                # Re-inserting moves the pattern to the end, i.e. it is now the newest word on its names.
                self._patterns.pop(pattern, None)
                self._patterns[pattern] = state
        self._trim()

    def _trim(self) -> None:
        # Dropping the oldest entry cannot turn a name on: if it was the last pattern matching a name
        # then, being the oldest, it was the only one, and the name falls back to "unnamed = disabled";
        # otherwise a newer pattern already decided that name and still does.
        excess = len(self._patterns) - MAX_PATTERNS
        if excess > 0:
            for pattern in list(self._patterns)[:excess]:
                del self._patterns[pattern]

    def is_enabled(self, name: str) -> bool:
        for pattern, state in reversed(self._patterns.items()):
            if compile_glob(pattern, None)(name):
                return state
        return False

    def snapshot(self) -> dict[str, bool]:
        """The remembered patterns, oldest first, for the admin/debug view (a copy)."""
        return dict(self._patterns)

    def restore(self, patterns: Iterable[tuple[str, bool]]) -> None:
        """Become a selection another replica recorded (``snapshot``'s items, oldest first)."""
        self._patterns = {p: bool(state) for p, state in patterns if isinstance(p, str)}
        self._trim()

    def __repr__(self) -> str:
        return f"HostSelection({self._patterns!r})"


class OperatorRules:
    """What the operator permits of a backend's feature sets, whatever a host enables.

    Patterns may name a set bare (``memory.*``: that name on any backend) or qualified by the backend
    (``mem.memory.*``: only that backend's). Deny beats allow, and a name no allow pattern matches is
    not allowed.
    """

    __slots__ = ("allow", "deny")

    ALLOW_ALL: ClassVar[OperatorRules]

    def __init__(self, allow: Sequence[str], deny: Sequence[str]) -> None:
        self.allow: tuple[str, ...] = tuple(dict.fromkeys(_strings(allow)))
        self.deny: tuple[str, ...] = tuple(dict.fromkeys(_strings(deny)))

    def _matches(self, patterns: tuple[str, ...], qualified: str, name: str) -> bool:
        return any(compile_glob(p, None)(qualified) or compile_glob(p, None)(name) for p in patterns)

    def allows(self, backend: str, name: str) -> bool:
        """Whether ``backend``'s feature set ``name`` (the backend's own name for it) may be used."""
        qualified = f"{backend}.{name}"
        return not self._matches(self.deny, qualified, name) and self._matches(self.allow, qualified, name)

    def __repr__(self) -> str:
        return f"OperatorRules(allow={list(self.allow)!r}, deny={list(self.deny)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OperatorRules) and (self.allow, self.deny) == (other.allow, other.deny)

    def __hash__(self) -> int:
        return hash((self.allow, self.deny))


OperatorRules.ALLOW_ALL = OperatorRules(["*"], [])


def check_server_tag(
    feature_set: object, declared: Collection[str], enabled_anywhere: bool, can_enable: bool
) -> Decision:
    """The verdict on a server-initiated message (push/event, inference/request, scope/elevate).

    ``feature_set`` is the message's ``params.featureSet`` as received, in the backend's own names, and
    ``declared`` the names that backend declared. ``enabled_anywhere`` is whether some host that could
    receive the message has it enabled; ``can_enable`` goes to the backend as §6.6's ``canEnable``.
    """
    if not isinstance(feature_set, str):
        return Decision(
            False,
            policy=POLICY,
            code=INVALID_PARAMS,
            reason="params.featureSet is required on server-initiated messages (MCPL §6.5)",
            outcome=Outcome.INVALID,
        )
    if feature_set not in declared:
        return Decision(
            False,
            policy=POLICY,
            code=UNKNOWN_FEATURE_SET,
            reason="Unknown feature set",
            data={"featureSet": feature_set},
            outcome=Outcome.DENIED,
        )
    if not enabled_anywhere:
        return Decision(
            False,
            policy=POLICY,
            code=FEATURE_SET_NOT_ENABLED,
            reason="Feature set not enabled",
            data={"featureSet": feature_set, "canEnable": can_enable},
            outcome=Outcome.DENIED,
        )
    return Decision(True, policy=POLICY)


@dataclass(frozen=True, slots=True)
class TagFacts:
    """What the feature-set check of one server-initiated message needs (``Target.facts[POLICY]``)."""

    declared: Collection[str]
    enabled_anywhere: bool
    can_enable: bool


class FeatureSetPolicy:
    """The chain's MCPL feature-set check of messages a backend initiates (dispatch stage)."""

    name = POLICY
    stage: Stage = "dispatch"
    facts_key = POLICY  # fed only through Target.facts: the chain skips it without them

    async def check(self, event: Event, principal: Principal, target: Target | None) -> Decision | None:
        facts = target.facts.get(POLICY) if target is not None and target.facts else None
        if not isinstance(facts, TagFacts):
            return None
        decision = check_server_tag(
            event.params.get("featureSet"), facts.declared, facts.enabled_anywhere, facts.can_enable
        )
        return None if decision.allowed else decision
