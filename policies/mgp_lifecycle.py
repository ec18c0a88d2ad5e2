"""MGP lifecycle (§11.2, §11.4): a backend that is draining takes no new tool calls.

A backend drains after an operator's ``mgp/lifecycle/shutdown`` (``gateway/mgp/drain.py``) or when
it says so itself (``notifications/mgp.lifecycle`` with ``new_state: draining``): its calls in
flight finish, new ones are refused here, before anything is forwarded, with §14.3
``SERVER_DRAINING`` (2001, retryable: another replica or the restarted server may take it) and
the §14.4 ``_mgp`` recovery data.

Which backends drain is the lifecycle's state (``gateway/mgp/lifecycle.py``), read through the
small :class:`DrainingBackends` Protocol, so this member stays a pure function of the event, the
target and that set at the moment of the call.

Invariants: only ``tools/call`` requests are refused (a backend's own requests, and lists, are not
calls to it); a backend not draining is never refused by this member; a refusal carries no
rejection envelope (draining is a lifecycle error, §14.3, not a policy refusal, §14.7).
"""

from __future__ import annotations

from typing import Protocol

from gateway.errors import MgpCode, mgp_error_data
from gateway.events import Event
from policies.chain import Decision, Outcome, Stage, Target
from policies.principal import Principal

POLICY = "mgp.lifecycle"
# A hint for §14.5 ``retry_after_ms``: drains are bounded by their timeout (30 s by default).
RETRY_AFTER_MS = 5_000


class DrainingBackends(Protocol):
    """Which backends refuse new calls now (the lifecycle state machine answers)."""

    def draining(self, backend: str) -> bool: ...

    def any_draining(self) -> bool: ...


class MgpLifecyclePolicy:
    """Refuses a ``tools/call`` to a draining backend with ``SERVER_DRAINING`` (dispatch)."""

    name = POLICY
    stage: Stage = "dispatch"

    def __init__(self, backends: DrainingBackends) -> None:
        self._backends = backends

    def idle(self) -> bool:
        """No backend drains: nothing to decide (the chain skips the member)."""
        return not self._backends.any_draining()

    async def check(self, event: Event, principal: Principal, target: Target | None) -> Decision | None:
        if target is None or event.method != "tools/call" or not self._backends.draining(target.backend):
            return None
        reason = f"server {target.backend!r} is draining (shutting down): it takes no new requests"
        data: dict[str, object] = {
            **mgp_error_data(MgpCode.SERVER_DRAINING, retry_after_ms=RETRY_AFTER_MS),
            "server_id": target.backend,
        }
        return Decision(False, POLICY, int(MgpCode.SERVER_DRAINING), reason, data, Outcome.DENIED)
