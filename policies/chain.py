"""The one ordered chain of decisions every event passes, whatever its dialect or front door.

Two stages: *admission* runs before routing (who may do what, how often); *dispatch* runs once the
request's target is known (which backend, which tool definition), for decisions that need it
(argument validation, pinned tool definitions). Policies are async so that a decision may consult
shared state on the bus (rate limits across replicas).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal, NamedTuple, Protocol, runtime_checkable

from gateway.events import Dialect, Event
from policies.principal import Principal

Stage = Literal["admission", "dispatch"]


class Outcome(StrEnum):
    """What a decision is, typed: doors switch on it, never on a policy's name. Its value is the
    audit outcome label (a StrEnum member is that string), so it goes to the audit log as it is."""

    ALLOWED = "allowed"
    DENIED = "denied"  # the principal lacks a capability (or a scope / feature set it needs)
    RATE_LIMITED = "rate_limited"
    INVALID = "invalid"  # the request is malformed for its target (arguments, missing fields)
    PINNED = "pinned"  # the tool's definition changed and awaits an administrator
    SPOOFED = "spoofed"  # an MCPx envelope whose ``from`` is not its sender's authenticated id
    RESERVED = "reserved"  # an MCPx envelope of a kind only the gateway may send (``system/*``)
    OVERLOADED = "overloaded"  # a load limit (sessions per replica, calls in flight per session)
    # The gateway answered the request itself, by a rule, on someone's behalf (an MCPL scope/elevate
    # a whitelist approves): it stops there like a denial, but says yes.
    ANSWERED = "answered"


@dataclass(frozen=True, slots=True)
class Decision:
    allowed: bool
    policy: str = ""
    code: int = 0
    reason: str = ""
    data: dict[str, object] | None = None
    outcome: Outcome = Outcome.ALLOWED

    def __post_init__(self) -> None:
        # A label given as a plain string (a caller not yet on the enum) still becomes typed;
        # an unknown label fails here, at the policy, not later at a door.
        if type(self.outcome) is not Outcome:
            object.__setattr__(self, "outcome", Outcome(self.outcome))


ALLOW = Decision(True)


class Target(NamedTuple):
    """What a request resolved to: the backend, the backend's own name, and the catalog item.

    ``facts`` carries what routing learned that a dispatch decision needs and the event cannot say
    (MCPL: the feature sets a backend declared and a session enabled, the scope patterns in force),
    keyed by the policy that reads them. Policies stay pure functions of event, principal and target.

    Immutable like a frozen dataclass, but made in a third of the time (one per routed call and per
    listed item): a frozen dataclass sets each field through ``object.__setattr__``.
    """

    backend: str
    name: str | None = None
    item: dict[str, Any] | None = None
    facts: Mapping[str, Any] | None = None


class Policy(Protocol):
    """A member of the chain. Two optional class attributes let the chain skip a member that cannot
    have an opinion, without awaiting it (the chain runs on every request):

    - ``dialects``: a frozenset of the :class:`Dialect` values whose events it decides (MCPx-only
      members); absent or None means every dialect.
    - ``facts_key``: for a dispatch member fed only through ``Target.facts``, the key it reads; it is
      asked only when the target carries that key.
    - ``methods``: for an admission member, the frozenset of methods it decides; it is not asked
      about any other.
    - ``idle``: for a member whose opinion depends on state that is usually empty (no access
      entries, no backend draining, no rate limit configured), a no-argument callable that says it
      has nothing to decide now; it is then skipped (a call costs far less than awaiting the member).
    - ``idle_for_good``: True when the member's configuration, fixed for the life of the process,
      leaves it nothing to decide (e.g. no rate limit configured): the chain leaves it out of its
      walks altogether, where ``idle`` would be asked on every request.
    - ``check_now``: for a member whose ``check`` never awaits, the same decision as a plain method
      (same arguments, same answer); the chain calls it instead of creating and awaiting a coroutine.
      ``check`` stays, for whoever asks the member directly.
    """

    name: str
    stage: Stage

    async def check(self, event: Event, principal: Principal, target: Target | None) -> Decision | None:
        """A denial, or None to let the next policy decide."""


@runtime_checkable
class Visibility(Protocol):
    """A policy that also hides list items: the same rule that refuses a call hides the item whose
    call it would refuse, so lists never show what cannot be used (one authorization check)."""

    def visible(self, action: str, principal: Principal, target: Target | None) -> bool:
        """Whether the item standing for ``action`` (at ``target``, when known) may be shown. Pure
        and synchronous: it runs once per list item."""


def _decides(policy: Policy, dialect: Dialect) -> bool:
    if getattr(policy, "idle_for_good", False):
        return False  # nothing to decide for any event, ever (Policy)
    dialects = getattr(policy, "dialects", None)
    return dialects is None or dialect in dialects


# A member's ``check_now`` (Policy): its decision without a coroutine.
CheckNow = Callable[[Event, Principal, Target | None], Decision | None]
# An admission member with what lets the chain skip it or ask it at once: (policy, methods, idle, check_now).
_AdmissionMember = tuple[Policy, frozenset[str] | None, Callable[[], bool] | None, CheckNow | None]
# A dispatch member likewise: (policy, facts_key, idle, check_now).
_DispatchMember = tuple[Policy, str | None, Callable[[], bool] | None, CheckNow | None]


class PolicyChain:
    """The members in their configured order; per dialect (the enum is small and fixed), the tuples of
    members that decide its events are computed once, so a request walks only those."""

    def __init__(self, policies: Sequence[Policy]) -> None:
        self.policies = tuple(policies)
        admission = [p for p in self.policies if p.stage == "admission"]
        # Per dialect, the admission members that decide its events.
        self._admission: dict[Dialect, tuple[_AdmissionMember, ...]] = {
            d: tuple(
                (p, getattr(p, "methods", None), getattr(p, "idle", None), getattr(p, "check_now", None))
                for p in admission
                if _decides(p, d)
            )
            for d in Dialect
        }
        dispatch = [p for p in self.policies if p.stage == "dispatch"]
        # Per dialect, its dispatch members; and those of them asked when a target carries no facts
        # (members fed only through facts have no opinion then). Order is kept in both.
        self._dispatch: dict[Dialect, tuple[_DispatchMember, ...]] = {
            d: tuple(
                (p, getattr(p, "facts_key", None), getattr(p, "idle", None), getattr(p, "check_now", None))
                for p in dispatch
                if _decides(p, d)
            )
            for d in Dialect
        }
        self._dispatch_factless = {
            d: tuple(member for member in members if member[1] is None) for d, members in self._dispatch.items()
        }
        self.has_dispatch = bool(dispatch)
        self._visibility = tuple(p for p in self.policies if isinstance(p, Visibility))

    async def admit(self, event: Event, principal: Principal) -> Decision:
        return await self._admit_rest(event, principal, self._admission[event.dialect], 0)

    def admit_now(self, event: Event, principal: Principal) -> Decision | Coroutine[Any, Any, Decision]:
        """``admit`` without a coroutine while every member asked is idle or answers at once
        (``check_now``): the decision; or, from the first member that must be awaited, a coroutine
        that finishes the walk (the caller awaits it). Same members, same order, same decision."""
        members = self._admission[event.dialect]
        method = event.method
        for index, (_, methods, idle, now) in enumerate(members):
            if methods is not None and method not in methods:
                continue  # a member that decides other methods only
            if idle is not None and idle():
                continue  # nothing to decide now (e.g. no rate limit configured)
            if now is None:
                return self._admit_rest(event, principal, members, index)
            decision = now(event, principal, None)
            if decision is not None and not decision.allowed:
                return decision
        return ALLOW

    async def _admit_rest(
        self, event: Event, principal: Principal, members: tuple[_AdmissionMember, ...], start: int
    ) -> Decision:
        for policy, methods, idle, now in members[start:] if start else members:
            if methods is not None and event.method not in methods:
                continue
            if idle is not None and idle():
                continue
            decision = now(event, principal, None) if now is not None else await policy.check(event, principal, None)
            if decision is not None and not decision.allowed:
                return decision
        return ALLOW

    async def dispatch(self, event: Event, principal: Principal, target: Target) -> Decision:
        return await self._dispatch_rest(event, principal, target, self._dispatch_members(event, target), 0)

    def dispatch_now(
        self, event: Event, principal: Principal, target: Target
    ) -> Decision | Coroutine[Any, Any, Decision]:
        """``dispatch`` without a coroutine while it can (as :meth:`admit_now`)."""
        facts = target.facts
        # _dispatch_members, inlined (every routed tools/call passes here).
        members = self._dispatch[event.dialect] if facts else self._dispatch_factless[event.dialect]
        for index, (_, facts_key, idle, now) in enumerate(members):
            if facts_key is not None and (not facts or facts_key not in facts):
                continue  # fed only through facts this target does not carry: no opinion
            if idle is not None and idle():
                continue  # nothing to decide now (e.g. an empty access table)
            if now is None:
                return self._dispatch_rest(event, principal, target, members, index)
            decision = now(event, principal, target)
            if decision is not None and not decision.allowed:
                return decision
        return ALLOW

    def _dispatch_members(self, event: Event, target: Target) -> tuple[_DispatchMember, ...]:
        # Without facts, the members fed only through facts have no opinion: they are left out.
        return self._dispatch[event.dialect] if target.facts else self._dispatch_factless[event.dialect]

    async def _dispatch_rest(
        self, event: Event, principal: Principal, target: Target, members: tuple[_DispatchMember, ...], start: int
    ) -> Decision:
        facts = target.facts
        for policy, facts_key, idle, now in members[start:] if start else members:
            if facts_key is not None and (not facts or facts_key not in facts):
                continue
            if idle is not None and idle():
                continue
            decision = (
                now(event, principal, target) if now is not None else await policy.check(event, principal, target)
            )
            if decision is not None and not decision.allowed:
                return decision
        return ALLOW

    def visible(self, action: str, principal: Principal, target: Target | None = None) -> bool:
        """Whether a list item (its would-be action, at ``target``) may be shown to the principal."""
        return all(policy.visible(action, principal, target) for policy in self._visibility)
