"""MCPC messages to MCPL hosts: ``push/event`` under the feature set ``mcpc`` of an MCPC backend (issue 13).

An MCPC backend's task messages and server events reach MCPL hosts as push events tagged with a
feature set the *gateway* declares for that backend (``RelayState.gateway_sets``). Invariants:

* The set exists exactly while the gateway knows the backend speaks MCPC (``declare``), whether or
  not the backend speaks MCPL. Hosts see it among the backend's feature sets under the same exposed
  name as the backend's own (``state.exposed``), at initialize and through ``featureSets/changed``
  when it comes or goes, and enable or disable it like any other.
* The backend never hears of it: its ``featureSets/update`` is built from what it declared only
  (``McplRelay.backend_config`` reads ``BackendMcpl.feature_sets``, ``McplDirectory.effective``).
* A host gets a push only when it is an MCPL host whose view includes the backend, supports push
  events, enabled the set, and the operator allows the set to its principal
  (``McplDirectory.gateway_enabled``, i.e. ``policies.feature_sets.OperatorRules``); the message
  then passes the chain's feature-set check (``policies.feature_sets.FeatureSetPolicy``) exactly as
  a backend's own ``push/event`` does. Every decision is audited; delivery outcomes are counted in
  the same metric as a backend's pushes.
* ``push`` never raises (a host that refuses or does not answer in time only lowers the count), and
  is not de-duplicated through the bus: the gateway makes each event id once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from typing import Any

from adapters import mcpl
from gateway import jsonrpc
from gateway.clock import rfc3339_ms
from gateway.mcpl.directory import McplDirectory
from gateway.mcpl.plumbing import McplAudit, Peers, announce_feature_sets, backend_principal, backend_request
from gateway.mcpl.state import RelayState, exposed
from gateway.metrics import Metrics
from gateway.sessions import ClientSession
from policies.chain import PolicyChain, Target
from policies.feature_sets import POLICY as FEATURE_SETS_POLICY, TagFacts

log = logging.getLogger(__name__)

MCPC_FEATURE_SET = "mcpc"
MCPC_DECLARATION: dict[str, Any] = {
    "description": "MCPC task messages and server events of this backend, pushed as events",
    "uses": [mcpl.USES_PUSH],
}


class McpcPush:
    def __init__(
        self,
        state: RelayState,
        directory: McplDirectory,
        peers: Peers,
        chain: PolicyChain,
        audit: McplAudit,
        metrics: Metrics,
    ) -> None:
        self._state = state
        self._dir = directory
        self._peers = peers
        self._chain = chain
        self._audit = audit
        self._metrics = metrics

    def declare(self, backend: str, speaks: bool) -> None:
        """``backend`` was found to speak MCPC (or lost it): its ``mcpc`` set comes or goes, and its
        hosts are told; nothing happens when that is already so."""
        sets = self._state.gateway_sets
        has = MCPC_FEATURE_SET in sets.get(backend, {})
        if speaks == has:
            return
        if speaks:
            decl = {**MCPC_DECLARATION, "uses": list(MCPC_DECLARATION["uses"])}  # nobody shares the constant
            sets.setdefault(backend, {})[MCPC_FEATURE_SET] = decl
            added, removed = {MCPC_FEATURE_SET: decl}, []
        else:
            del sets[backend][MCPC_FEATURE_SET]
            if not sets[backend]:
                del sets[backend]
            added, removed = {}, [MCPC_FEATURE_SET]
        announce_feature_sets(self._dir.sessions_of(backend), backend, added, removed)

    async def push(
        self, backend: str, event_id: str, payload: dict[str, Any], sessions: Iterable[ClientSession]
    ) -> int:
        """Deliver one MCPC message as ``push/event`` to those of ``sessions`` that may have it; how
        many hosts accepted it. Never raises."""
        try:
            return await self._push(backend, event_id, payload, sessions)
        except Exception:  # the MCPC side must go on whatever happened to the MCPL side
            log.exception("backend %s: MCPC push %s to MCPL hosts failed", backend, event_id)
            return 0

    async def _push(
        self, backend: str, event_id: str, payload: dict[str, Any], sessions: Iterable[ClientSession]
    ) -> int:
        directory = self._dir
        fs = MCPC_FEATURE_SET
        # Only MCPL hosts that see the backend can have its set enabled; for none, there is nothing to decide.
        candidates = [s for s in sessions if not s.closed and s.mcpl is not None and backend in s.view.backends]
        if not candidates:
            return 0
        eligible = [s for s in candidates if fs in directory.gateway_enabled(s, backend)]
        declared = self._state.gateway_declared(backend)
        params: dict[str, Any] = {
            "featureSet": fs,
            "eventId": event_id,
            "timestamp": rfc3339_ms(time.time()),
            "payload": payload,
        }
        can = directory.can_enable(backend, fs, candidates) if fs in declared else False
        decision = await self._chain.dispatch(
            backend_request(backend, "push/event", params),
            backend_principal(backend),
            Target(backend, facts={FEATURE_SETS_POLICY: TagFacts(declared, bool(eligible), can)}),
        )
        if not decision.allowed:
            self._audit(
                decision.outcome,
                None,
                backend,
                "push/event",
                feature_set=fs,
                event_id=event_id,
                via="mcpc",
                reason=decision.reason,
            )
            return 0
        hosts = [s for s in eligible if s.mcpl is not None and s.mcpl.supports("pushEvents")]
        conn = self._peers.find(backend)
        answers = await asyncio.gather(
            *(
                self._peers.ask_host(s, "push/event", {**params, "featureSet": exposed(s.view, backend, fs)}, conn=conn)
                for s in hosts
            ),
            return_exceptions=True,
        )
        accepted = sum(1 for a in answers if isinstance(a, dict) and a.get("accepted") is True)
        if accepted:
            self._metrics.mcpl_push.labels("accepted").inc()
            self._audit(
                "delivered", None, backend, "push/event", feature_set=fs, event_id=event_id, via="mcpc", hosts=accepted
            )
            return accepted
        reasons = [a.get("reason") for a in answers if isinstance(a, dict) and isinstance(a.get("reason"), str)]
        reasons += [e.message for e in answers if isinstance(e, jsonrpc.RpcError)]
        reason = reasons[0] if reasons else "no host session accepts push events"
        self._metrics.mcpl_push.labels("rejected").inc()
        self._audit(
            "rejected", None, backend, "push/event", feature_set=fs, event_id=event_id, via="mcpc", reason=reason
        )
        return 0
