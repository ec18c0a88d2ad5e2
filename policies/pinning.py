"""Tool definition pinning: trust a tool's definition on first sight, flag every later change.

A backend that changes a tool's description or input schema after it was first seen can change what
a model does with it (descriptions are read as instructions: the "rug pull"). The store pins each
tool's first-seen definition, shared through the bus so that every replica agrees on which one came
first; it reports a change once (audit record and metric) and, in mode "enforce", hides the changed
tool from lists and refuses calls to it until an administrator approves the new definition.

Bus keys: ``pin:{backend}:{tool}`` the pinned fingerprint; ``pinpending:{backend}:{tool}`` the
changed fingerprint awaiting approval; ``pinflag:{backend}:{tool}:{pinned}:{current}`` a claim that
the change was reported (expires after a day, so a definition that flaps is reported daily, not
on every refresh).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import orjson

from gateway.bus.base import BusUnavailable
from gateway.errors import TOOL_PINNED
from gateway.events import Event
from policies.chain import Decision, Outcome, Stage, Target
from policies.principal import Principal

if TYPE_CHECKING:  # policies depend on gateway.events only; these arrive as constructor arguments
    from gateway.audit import AuditLog
    from gateway.bus.base import Bus
    from gateway.metrics import Metrics

log = logging.getLogger(__name__)

MODES = ("off", "warn", "enforce")
_FLAG_TTL_S = 24 * 3600.0


def fingerprint(tool: dict[str, Any]) -> str:
    """sha256 (hex) of the canonical JSON of the parts of a tool a model or a host acts on: what it
    reads (name, title, description, schemas) and the hints a host trusts (annotations such as
    destructiveHint). A change to any of them is a rug pull waiting to happen."""
    canonical = {
        "name": tool.get("name"),
        "title": tool.get("title"),
        "description": tool.get("description"),
        "inputSchema": tool.get("inputSchema"),
        "outputSchema": tool.get("outputSchema"),
        "annotations": tool.get("annotations"),
    }
    return hashlib.sha256(orjson.dumps(canonical, default=str, option=orjson.OPT_SORT_KEYS)).hexdigest()


def _pin_key(backend: str, name: str) -> str:
    return f"pin:{backend}:{name}"


def _pending_key(backend: str, name: str) -> str:
    return f"pinpending:{backend}:{name}"


def _flag_key(backend: str, name: str, pinned: str, current: str) -> str:
    return f"pinflag:{backend}:{name}:{pinned}:{current}"


class PinStore:
    """Pins per (backend, backend's own tool name). ``observe`` and ``approve`` consult the bus;
    ``is_hidden`` answers from a local cache they keep, as list filtering is synchronous."""

    def __init__(self, mode: str, bus: Bus, audit: AuditLog, metrics: Metrics) -> None:
        if mode not in MODES:
            raise ValueError(f"pinning mode must be one of {', '.join(MODES)}, not {mode!r}")
        self.mode = mode
        self._bus = bus
        self._audit = audit
        self._metrics = metrics
        self._pins: dict[tuple[str, str], str] = {}
        self._current: dict[tuple[str, str], str] = {}
        # Tools whose current definition differs from the pin: key -> current fingerprint.
        self._pending: dict[tuple[str, str], str] = {}

    async def observe(self, backend: str, tools: Iterable[dict[str, Any]]) -> None:
        """Take note of a backend's tool list (from tools/list): pin new tools, flag changed ones."""
        if self.mode == "off":
            return
        for tool in tools:
            name = tool.get("name") if isinstance(tool, dict) else None
            if isinstance(name, str):
                try:
                    await self._observe_one(backend, name, fingerprint(tool))
                except BusUnavailable:
                    # Redis away: the pins known here stand (a list must not fail); noted when it is back.
                    self._current.pop((backend, name), None)

    async def _observe_one(self, backend: str, name: str, current: str) -> None:
        key = (backend, name)
        if self._current.get(key) == current and self._pins.get(key) == current:
            return  # unchanged and matching its pin: no bus round trip on every refresh
        self._current[key] = current
        pinned = await self._claim_pin(backend, name, current)
        self._pins[key] = pinned
        if pinned == current:
            stale = self._pending.pop(key, None)
            if stale is not None:
                # Back to the pinned definition before anyone approved the change: nothing to approve
                # (unless another replica recorded a different change since).
                pending_key = _pending_key(backend, name)
                if await self._bus.get(pending_key) == stale.encode():
                    await self._bus.delete(pending_key)
            return
        self._pending[key] = current
        await self._bus.set(_pending_key(backend, name), current.encode())
        reported = await self._bus.set(
            _flag_key(backend, name, pinned, current), b"1", ttl_s=_FLAG_TTL_S, only_if_absent=True
        )
        if not reported:
            return  # this change was already reported (by this replica or another)
        self._metrics.tool_definition_changes.labels(backend).inc()
        self._audit.record(
            "pin_changed",
            backend=backend,
            tool=name,
            pinned=pinned,
            current=current,
            mode=self.mode,
            reason="tool definition differs from the pinned one",
        )
        log.warning(
            "tool %r of backend %r changed its definition (pinned %s, now %s)%s",
            name,
            backend,
            pinned[:12],
            current[:12],
            "; hidden until an administrator approves it" if self.mode == "enforce" else "",
        )

    async def _claim_pin(self, backend: str, name: str, current: str) -> str:
        """The pinned fingerprint, pinning ``current`` if there is none yet. The claim is atomic, so
        replicas that see different definitions at once still agree on one pin."""
        key = _pin_key(backend, name)
        raw = await self._bus.get(key)
        if raw is None:
            if await self._bus.set(key, current.encode(), only_if_absent=True):
                return current
            raw = await self._bus.get(key)
            if raw is None:  # claimed and deleted in between: take it as unpinned, pin again
                await self._bus.set(key, current.encode())
                return current
        return raw.decode()

    @property
    def has_pending(self) -> bool:
        """Whether any tool's changed definition awaits approval (in any mode)."""
        return bool(self._pending)

    def is_hidden(self, backend: str, name: str) -> bool:
        """True in mode "enforce" while the tool's definition differs from its pin, unapproved."""
        return self.mode == "enforce" and (backend, name) in self._pending

    async def refresh(self, backend: str, name: str) -> bool:
        """Re-read the pin from the bus (another replica may have approved the change); returns
        ``is_hidden`` afterwards."""
        if not self.is_hidden(backend, name):
            return False
        key = (backend, name)
        raw = await self._bus.get(_pin_key(backend, name))
        if raw is not None:
            pinned = raw.decode()
            self._pins[key] = pinned
            if self._current.get(key) == pinned:
                self._pending.pop(key, None)
        return self.is_hidden(backend, name)

    async def approve(self, backend: str, name: str, *, fingerprint: str | None = None, by: str | None = None) -> bool:
        """Make the pending definition the pin. With ``fingerprint``, only if that is the one pending
        (an administrator approves what they saw, not what arrived since). False if nothing matched.
        ``by`` names the approver in the audit record."""
        if self.mode == "off":
            return False
        key = (backend, name)
        raw = await self._bus.get(_pending_key(backend, name))
        approved = raw.decode() if raw else self._pending.get(key)
        if approved is None or (fingerprint is not None and fingerprint != approved):
            return False
        raw_pin = await self._bus.get(_pin_key(backend, name))
        previous = raw_pin.decode() if raw_pin else self._pins.get(key)
        await self._bus.set(_pin_key(backend, name), approved.encode())
        await self._bus.delete(_pending_key(backend, name))
        if previous is not None:
            # So that a later change back to this definition is reported again.
            await self._bus.delete(_flag_key(backend, name, previous, approved))
        self._pins[key] = approved
        current = self._current.get(key)
        if current is None or current == approved:
            self._pending.pop(key, None)
        else:
            self._pending[key] = current  # it changed again meanwhile; the next observe reports it
        self._audit.record("pin_approved", backend=backend, tool=name, pinned=approved, previous=previous, principal=by)
        log.info("tool %r of backend %r: definition %s approved", name, backend, approved[:12])
        return True

    def pending(self) -> list[dict[str, str]]:
        """Changed tools awaiting approval, as this replica saw them (for the admin API)."""
        return [
            {"backend": backend, "tool": name, "pinned": self._pins.get((backend, name), ""), "current": current}
            for (backend, name), current in sorted(self._pending.items())
        ]


class PinningPolicy:
    """Refuse calls to tools that changed their definition and await approval (mode "enforce"), and
    hide them from lists meanwhile (a :class:`~policies.chain.Visibility`)."""

    name = "pinning"
    stage: Stage = "dispatch"

    def __init__(self, store: PinStore) -> None:
        self.store = store

    def visible(self, action: str, principal: Principal, target: Target | None = None) -> bool:
        if target is None or target.name is None or not action.startswith("mcp/request:tools/call:"):
            return True
        return not self.store.is_hidden(target.backend, target.name)

    def idle(self) -> bool:
        """Nothing awaits approval (the usual state): the chain skips this member (policies/chain.py)."""
        return self.store.mode != "enforce" or not self.store.has_pending

    async def check(self, event: Event, principal: Principal, target: Target | None = None) -> Decision | None:
        if target is None or event.method != "tools/call":
            return None
        name = target.name if target.name is not None else (target.item or {}).get("name")
        if not isinstance(name, str) or not self.store.is_hidden(target.backend, name):
            return None
        if not await self.store.refresh(target.backend, name):
            return None  # approved meanwhile, possibly on another replica
        return Decision(
            False,
            self.name,
            TOOL_PINNED,
            f"tool {name!r} changed its definition and awaits approval by an administrator",
            {"tool": name, "backend": target.backend},
            outcome=Outcome.PINNED,
        )
