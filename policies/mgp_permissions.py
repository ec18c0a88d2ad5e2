"""MGP permissions (§3; draft 0.8 §3.3 to §3.8): the gateway, as the kernel, answers a backend's
``permissions_required`` and refuses calls to tools whose permissions it did not grant.

Three pieces, all pure (no I/O; time comes from an injectable clock):

- :class:`PermissionDecider` applies ``mgp.permission_policy`` (§3.3): ``auto_approve`` grants all,
  ``deny_all`` denies all, ``config_only`` grants what ``mgp.approved_permissions`` names (globs matched
  per dot-separated segment with :mod:`policies.globs`: ``filesystem.*`` covers ``filesystem.read``, not
  ``com.filesystem.x``; ``**`` covers every name) and denies the rest; ``interactive`` grants the same
  pre-approved names and leaves the others *pending* for an operator. Grants go to the backend in the
  object form the real kernel sends (WIRE.md, draft §3.6): ``{"perm": {"decision": "approved",
  "expires_at": "...Z"}}``, ``expires_at`` = now + ``mgp.grant_ttl_s``.
- :class:`PendingPermissions` is the store behind ``interactive``: one ``request_id`` per request (the
  id sent in ``mgp/permission/await``), listed and answered by the admin API, bounded in size, and every
  request expires (unanswered permissions are then denied), so nothing waits forever.
- :func:`missing` and :class:`MgpPermissionPolicy` (dispatch stage, fed through ``Target.facts``) refuse
  a ``tools/call`` whose ``permissions_required`` are not all granted and unexpired: the call is never
  forwarded (issue 12: TOOL_BLOCKED); as a :class:`~policies.chain.Visibility` it also hides such a tool
  from a list whose item carries the same facts.

Invariants: a permission is granted only by the policy's rule or an operator's explicit ``approved``;
anything else (denied, deferred, unanswered, expired, unknown) counts as not granted; a grant is valid
strictly before its ``expires_at``; a pending request never outlives its timeout and the store never holds
more than ``max_pending`` requests (beyond that new requests are refused, never queued: fail closed).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from gateway.errors import MgpCode
from gateway.events import Event
from policies.chain import Decision, Outcome, Stage, Target
from policies.globs import matches_any
from policies.principal import Principal

POLICY = "mgp.permissions"

Clock = Callable[[], float]
PermissionPolicyName = Literal["interactive", "auto_approve", "deny_all", "config_only"]
GrantDecision = Literal["approved", "denied", "deferred"]
_DECISIONS: frozenset[str] = frozenset({"approved", "denied", "deferred"})
_POLICIES: frozenset[str] = frozenset({"interactive", "auto_approve", "deny_all", "config_only"})

# MGP §14.3 PERMISSION_DENIED ("caller lacks required permission"), for the JSON-RPC error form.
MGP_PERMISSION_DENIED = int(MgpCode.PERMISSION_DENIED)
# The §6.4 audit event type of a call the kernel blocked, also the rejection code used here: the draft's
# §14.7.3 registry has no code for "a permission the tool needs was not granted". Moves to gateway/errors.py.
TOOL_BLOCKED = "TOOL_BLOCKED"


def iso(ts: float) -> str:
    """An epoch time as the RFC 3339 UTC string MGP uses (``2026-03-01T00:00:00Z``)."""
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def parse_iso(value: str) -> float:
    """An RFC 3339 date-time (``Z`` or an offset; naive means UTC) as epoch seconds; ValueError otherwise."""
    parsed = datetime.fromisoformat(value)
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


@dataclass(frozen=True, slots=True)
class Grant:
    """One permission's decision (draft §3.6). ``expires_at`` is epoch seconds (None: no expiry);
    ``scope`` the §3.7 constraints, passed through opaquely."""

    decision: GrantDecision
    expires_at: float | None = None
    scope: Mapping[str, Any] | None = None

    def valid(self, now: float) -> bool:
        """Whether this grant lets a tool be called at ``now``."""
        return self.decision == "approved" and (self.expires_at is None or now < self.expires_at)

    def wire(self) -> dict[str, Any]:
        """The object form of the grant (``{"decision": ..., "expires_at": ..., "scope": ...}``)."""
        out: dict[str, Any] = {"decision": self.decision}
        if self.expires_at is not None:
            out["expires_at"] = iso(self.expires_at)
        if self.scope is not None:
            out["scope"] = dict(self.scope)
        return out


def parse_grants(raw: object, default_expires_at: float | None = None) -> dict[str, Grant]:
    """Grants in either §3.6 form (``"approved"`` or ``{"decision": "approved", ...}``), as :class:`Grant`.

    A grant without its own ``expires_at`` gets ``default_expires_at``. ValueError names the first bad entry.
    """
    if not isinstance(raw, Mapping):
        raise ValueError("grants must be an object mapping permission names to decisions")
    out: dict[str, Grant] = {}
    for name, value in raw.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"grant key {name!r} is not a permission name")
        expires_at, scope = default_expires_at, None
        if isinstance(value, Mapping):
            decision = value.get("decision")
            if "expires_at" in value and value["expires_at"] is not None:
                if not isinstance(value["expires_at"], str):
                    raise ValueError(f"grant {name!r}: expires_at must be a date-time string")
                expires_at = parse_iso(value["expires_at"])
            raw_scope = value.get("scope")
            if raw_scope is not None and not isinstance(raw_scope, Mapping):
                raise ValueError(f"grant {name!r}: scope must be an object")
            scope = raw_scope
        else:
            decision = value
        if decision not in _DECISIONS:
            raise ValueError(f"grant {name!r}: decision must be one of approved, denied, deferred")
        out[name] = Grant(decision, expires_at if decision == "approved" else None, scope)
    return out


def wire_grants(grants: Mapping[str, Grant]) -> dict[str, dict[str, Any]]:
    """The ``grants`` member of ``mgp/permission/grant`` params, object form."""
    return {name: grant.wire() for name, grant in grants.items()}


def granted_names(grants: Mapping[str, Grant], now: float) -> frozenset[str]:
    """The permissions ``grants`` let a tool use at ``now``."""
    return frozenset(name for name, grant in grants.items() if grant.valid(now))


@dataclass(frozen=True, slots=True)
class PermissionAnswer:
    """The kernel's answer to one backend's ``permissions_required``: decided ``grants`` and the
    permissions still ``pending`` an operator (``interactive`` only)."""

    grants: dict[str, Grant]
    pending: tuple[str, ...] = ()

    def merged(self, later: PermissionAnswer) -> PermissionAnswer:
        """This answer completed by ``later`` (an operator's answer to what was pending): ``later``'s
        grants win, and what either still leaves pending stays pending unless decided."""
        grants = {**self.grants, **later.grants}
        pending = tuple(p for p in dict.fromkeys([*self.pending, *later.pending]) if p not in grants)
        return PermissionAnswer(grants, pending)

    def params(self, request_id: str, approved_by: str = "switchboard") -> dict[str, Any]:
        """``mgp/permission/grant`` params (draft §3.6) for the decided grants; the top-level
        ``expires_at`` is the earliest of the approved grants' (None when nothing was approved)."""
        expiries = [g.expires_at for g in self.grants.values() if g.decision == "approved" and g.expires_at]
        return {
            "request_id": request_id,
            "grants": wire_grants(self.grants),
            "approved_by": approved_by,
            "expires_at": iso(min(expiries)) if expiries else None,
        }


class PermissionDecider:
    """``mgp.permission_policy`` applied to a list of permission names (§3.3). Pure: time from ``clock``."""

    def __init__(
        self,
        policy: PermissionPolicyName | str,
        approved: Sequence[str] = (),
        grant_ttl_s: float = 86400.0,
        clock: Clock = time.time,
    ) -> None:
        if policy not in _POLICIES:
            raise ValueError(f"unknown permission policy {policy!r}")
        if grant_ttl_s <= 0:
            raise ValueError("grant_ttl_s must be positive")
        self.policy = policy
        self.approved = tuple(approved)
        self.grant_ttl_s = grant_ttl_s
        self.clock = clock

    def pattern_for(self, permission: str) -> str | None:
        """The ``approved_permissions`` entry that pre-approves ``permission``, or None."""
        return matches_any(self.approved, permission, ".")

    def decide(self, permissions: Iterable[str]) -> PermissionAnswer:
        """Per permission: approved (expiring after ``grant_ttl_s``), denied, or pending (interactive)."""
        expires_at = self.clock() + self.grant_ttl_s
        approve = Grant("approved", expires_at)
        deny = Grant("denied")
        grants: dict[str, Grant] = {}
        pending: list[str] = []
        for permission in dict.fromkeys(permissions):  # in order, once each
            if self.policy == "auto_approve":
                grants[permission] = approve
            elif self.policy == "deny_all":
                grants[permission] = deny
            elif self.pattern_for(permission) is not None:
                grants[permission] = approve
            elif self.policy == "interactive":
                pending.append(permission)
            else:
                grants[permission] = deny
        return PermissionAnswer(grants, tuple(pending))


# ---- interactive: requests waiting for an operator ---------------------------------------------


OWNER_MARK = "@"
"""Between a request id and the replica that holds it (many replicas: the answer is run there)."""


def owner_of(request_id: str) -> str | None:
    """The replica a permission request id names, or None."""
    _, mark, owner = request_id.rpartition(OWNER_MARK)
    return owner if mark and owner else None


class PendingFull(Exception):
    """More permission requests are waiting than ``max_pending``: the new one is refused (denied)."""


@dataclass(slots=True)
class PendingRequest:
    request_id: str
    server_id: str
    permissions: tuple[str, ...]
    created_at: float
    expires_at: float
    message: str
    answer: PermissionAnswer | None = None
    answered_by: str | None = None
    future: asyncio.Future[PermissionAnswer] | None = field(default=None, repr=False)

    def listing(self) -> dict[str, Any]:
        """The request as the admin API lists it (and as ``mgp/permission/await`` params describe it)."""
        return {
            "request_id": self.request_id,
            "server_id": self.server_id,
            "permissions": list(self.permissions),
            "policy": "interactive",
            "message": self.message,
            "created_at": iso(self.created_at),
            "expires_at": iso(self.expires_at),
        }

    def await_params(self) -> dict[str, Any]:
        """``mgp/permission/await`` params (draft §3.5)."""
        return {
            "request_id": self.request_id,
            "permissions": list(self.permissions),
            "policy": "interactive",
            "message": self.message,
        }


class PendingPermissions:
    """Permission requests awaiting an operator (``interactive``), for an admin endpoint to list and answer.

    Pure and async-safe: every method but :meth:`wait` is synchronous and does not yield, so under asyncio
    each runs whole; a request is resolved once (answered, expired, cancelled), and its waiter gets that
    resolution. Expiry is checked against ``clock`` on every access (:meth:`sweep`), and :meth:`wait`
    also times out in real time, so a request nobody answers ends denied after ``timeout_s``.

    ``on_change(request, opened)`` (optional) is told of every request opened (True) and of every
    resolution (False: answered, expired, cancelled), once each, synchronously: it must not raise
    nor block (many replicas mirror the waiting requests: gateway/replicas/permission_board.py).
    """

    def __init__(
        self,
        timeout_s: float = 300.0,
        max_pending: int = 256,
        grant_ttl_s: float = 86400.0,
        clock: Clock = time.time,
        new_id: Callable[[], str] = lambda: f"perm-{uuid.uuid4().hex[:16]}",
        on_change: Callable[[PendingRequest, bool], None] | None = None,
    ) -> None:
        if timeout_s <= 0 or max_pending < 1 or grant_ttl_s <= 0:
            raise ValueError("timeout_s and grant_ttl_s must be positive and max_pending at least 1")
        self.timeout_s = timeout_s
        self.max_pending = max_pending
        self.grant_ttl_s = grant_ttl_s
        self.clock = clock
        self._new_id = new_id
        self._on_change = on_change
        self._requests: dict[str, PendingRequest] = {}

    def __len__(self) -> int:
        return len(self._requests)

    def open(self, server_id: str, permissions: Iterable[str], message: str = "") -> PendingRequest:
        """A new pending request for ``permissions`` of backend ``server_id``; PendingFull when full."""
        self.sweep()
        if len(self._requests) >= self.max_pending:
            raise PendingFull(f"{len(self._requests)} permission requests already await an operator")
        now = self.clock()
        request_id = self._new_id()
        while request_id in self._requests:
            request_id = self._new_id()
        request = PendingRequest(
            request_id,
            server_id,
            tuple(dict.fromkeys(permissions)),
            now,
            now + self.timeout_s,
            message or f"Waiting for operator approval of {server_id}'s permissions",
        )
        self._requests[request_id] = request
        if self._on_change is not None:
            self._on_change(request, True)
        return request

    def sweep(self) -> list[str]:
        """Resolve every request past its ``expires_at`` as all denied; their ids."""
        now = self.clock()
        expired = [rid for rid, r in self._requests.items() if now >= r.expires_at]
        for request_id in expired:
            request = self._requests.pop(request_id)
            self._resolve(request, PermissionAnswer({p: Grant("denied") for p in request.permissions}), "timeout")
        return expired

    def list(self) -> list[dict[str, Any]]:
        """The requests still waiting, oldest first, JSON-ready."""
        self.sweep()
        return [r.listing() for r in sorted(self._requests.values(), key=lambda r: r.created_at)]

    def get(self, request_id: str) -> PendingRequest | None:
        self.sweep()
        return self._requests.get(request_id)

    def answer(self, request_id: str, grants: object, approved_by: str = "admin") -> PermissionAnswer:
        """Resolve a waiting request with an operator's ``grants`` (either §3.6 form). Approved grants expire
        after ``grant_ttl_s`` unless the operator gives an ``expires_at``; a requested permission the answer
        leaves out is denied. KeyError: no such waiting request (unknown, answered or expired); ValueError:
        malformed grants or one for a permission that was not requested (the request stays waiting)."""
        self.sweep()
        request = self._requests.get(request_id)
        if request is None:
            raise KeyError(request_id)
        decided = parse_grants(grants, self.clock() + self.grant_ttl_s)
        extra = [name for name in decided if name not in request.permissions]
        if extra:
            raise ValueError(f"not requested: {', '.join(extra)}")
        resolved = {p: decided.get(p, Grant("denied")) for p in request.permissions}
        del self._requests[request_id]
        answer = PermissionAnswer(resolved)
        self._resolve(request, answer, approved_by)
        return answer

    def cancel(self, request_id: str) -> bool:
        """Drop a waiting request (its backend went away); its waiter gets all denied. Whether it waited."""
        request = self._requests.pop(request_id, None)
        if request is None:
            return False
        self._resolve(request, PermissionAnswer({p: Grant("denied") for p in request.permissions}), "cancelled")
        return True

    async def wait(self, request: PendingRequest) -> PermissionAnswer:
        """The operator's answer to ``request``, or all denied once it expires (in real time too)."""
        if request.answer is not None:
            return request.answer
        if request.future is None:
            request.future = asyncio.get_running_loop().create_future()
        remaining = max(0.0, request.expires_at - self.clock())
        try:
            return await asyncio.wait_for(asyncio.shield(request.future), remaining)
        except TimeoutError:
            if self._requests.get(request.request_id) is request:
                del self._requests[request.request_id]
                denied = PermissionAnswer({p: Grant("denied") for p in request.permissions})
                self._resolve(request, denied, "timeout")
            assert request.answer is not None
            return request.answer
        except asyncio.CancelledError:
            # The waiter (its backend's handshake) is gone: nobody is left to answer for.
            self.cancel(request.request_id)
            raise

    def _resolve(self, request: PendingRequest, answer: PermissionAnswer, by: str) -> None:
        if request.answer is not None:
            return
        request.answer, request.answered_by = answer, by
        if request.future is not None and not request.future.done():  # a cancelled waiter's is done
            request.future.set_result(answer)
        if self._on_change is not None:
            self._on_change(request, False)


# ---- the gate on tools/call --------------------------------------------------------------------


def required_permissions(tool_security: Mapping[str, Any] | None) -> list[str]:
    """A tool's ``permissions_required`` (§4.3), in order, once each. Metadata is validated where it is
    read (adapter, config); here a lone name counts as a list of one (never dropped: that would widen)."""
    if not tool_security:
        return []
    raw = tool_security.get("permissions_required")
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list):
        return []
    return list(dict.fromkeys(p for p in raw if isinstance(p, str) and p))


def missing(tool_security: Mapping[str, Any] | None, granted: Collection[str]) -> list[str]:
    """The permissions ``tool_security`` requires that are not in ``granted``, in declared order."""
    return [p for p in required_permissions(tool_security) if p not in granted]


def rejection(code: str, reason: str, remediation_hint: str, retryable: bool = True) -> dict[str, Any]:
    """The draft's §14.7.2 tool rejection body (the text of an ``isError`` result, as an object)."""
    return {
        "status": "denied",
        "code": code,
        "reason": reason,
        "retryable": retryable,
        "remediation_hint": remediation_hint,
    }


@dataclass(frozen=True, slots=True)
class PermissionFacts:
    """What the gate needs (``Target.facts[POLICY]``): the tool's effective security metadata and the
    grants its backend holds (an MGP backend's handshake grants; for a plain MCP backend, the kernel's
    own decision on the permissions config attached to its tools)."""

    security: Mapping[str, Any] | None
    grants: Mapping[str, Grant]


class MgpPermissionPolicy:
    """Refuses a call to a tool whose ``permissions_required`` are not all granted and unexpired (dispatch)."""

    name = POLICY
    stage: Stage = "dispatch"
    facts_key = POLICY  # fed only through Target.facts: the chain skips it without them

    def __init__(self, clock: Clock = time.time) -> None:
        self.clock = clock

    def _lacking(self, target: Target | None) -> list[str] | None:
        facts = target.facts.get(POLICY) if target is not None and target.facts else None
        if not isinstance(facts, PermissionFacts):
            return None
        return missing(facts.security, granted_names(facts.grants, self.clock()))

    def visible(self, action: str, principal: Principal, target: Target | None) -> bool:
        """A tool whose call this gate would refuse is not listed either (when the list item's target
        carries the facts; without them the gate has no opinion)."""
        return not self._lacking(target)

    async def check(self, event: Event, principal: Principal, target: Target | None) -> Decision | None:
        lacking = self._lacking(target)
        if target is None or not lacking:
            return None
        tool = target.name or ""
        reason = (
            f"The tool {tool!r} of server {target.backend!r} needs the permission(s) {', '.join(lacking)}, "
            "which the operator has not granted; the call was not executed."
        )
        data: dict[str, object] = {
            "rejection": rejection(TOOL_BLOCKED, reason, "Ask the operator to grant the permission(s)."),
            "_mgp": {"category": "security", "retryable": False},
            "event_type": TOOL_BLOCKED,
            "server_id": target.backend,
            "tool_name": tool,
            "missing": lacking,
        }
        return Decision(False, POLICY, MGP_PERMISSION_DENIED, reason, data, Outcome.DENIED)
