"""Context hooks (MCPL §10) fanned out from one host to every backend whose enabled feature sets use them.

``beforeInference`` goes to all of them in parallel, each with its own timeout (on timeout the host
proceeds without that contribution, §10.6); injections are grouped by position and ordered by a
stable, configurable backend order, each marked with the server and feature set it came from.
A blocking ``afterInference`` is a chain: each blocking backend sees the previous one's
``modifiedResponse``. While a backend is inside a hook call it may not ask for inference (§10.7).
Which answers are used is the policy chain's decision (``policies.hook_answers``): one tagged with a
feature set the session has not enabled is dropped and counted.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from adapters import mcpl
from gateway import jsonrpc
from gateway.mcpl.directory import McplDirectory
from gateway.mcpl.plumbing import McplAudit, Peers, backend_answer, backend_principal
from gateway.mcpl.state import RelayState, exposed
from gateway.metrics import Metrics
from gateway.sessions import ClientSession
from policies.chain import PolicyChain, Target
from policies.hook_answers import POLICY as HOOK_ANSWERS_POLICY, HookAnswerFacts

# Hook params with the §14.4 channel context in one backend's channel ids (ChannelRouter.params_for).
ParamsFor = Callable[[ClientSession, str, dict[str, Any]], dict[str, Any]]


class HookFanout:
    def __init__(
        self,
        state: RelayState,
        directory: McplDirectory,
        peers: Peers,
        chain: PolicyChain,
        audit: McplAudit,
        metrics: Metrics,
        params_for: ParamsFor,
    ) -> None:
        self._state = state
        self._dir = directory
        self._peers = peers
        self._chain = chain
        self._audit = audit
        self._metrics = metrics
        self._params_for = params_for

    def _targets(self, session: ClientSession, uses: str) -> list[tuple[str, list[str]]]:
        """(backend, enabled feature sets using the hook) in hook order, connected backends only."""
        out = []
        for backend in self._dir.order(session.view):
            conn = self._peers.connection(backend)
            if conn.state != "ready" or not self._state.is_mcpl(backend):
                continue
            enabled = self._dir.effective(session, backend)
            sets = [fs for fs in self._state.backend(backend).using(uses) if fs in enabled]
            if sets:
                out.append((backend, sets))
        return out

    def _remember(self, session: ClientSession, params: dict[str, Any]) -> None:
        conversation = params.get("conversationId")
        if isinstance(conversation, str):
            self._state.pin_conversation(conversation, session.id)
        model = params.get("model")
        if isinstance(model, dict):
            self._state.last_model = model

    async def _call(self, backend: str, method: str, params: dict[str, Any], timeout: float) -> tuple[str, Any]:
        """(status, result or reason) of one hook call; ``status`` is ok | timeout | error."""
        in_hook = self._state.in_hook
        in_hook[backend] += 1
        started = time.perf_counter()
        try:
            response = await self._peers.call_backend(backend, method, params, timeout)
        except jsonrpc.RpcError as exc:
            status = "timeout" if exc.code == jsonrpc.BACKEND_TIMEOUT else "error"
            return status, exc.message
        finally:
            in_hook[backend] -= 1
            if not in_hook[backend]:
                del in_hook[backend]
            self._metrics.mcpl_hook_seconds.labels(method).observe(time.perf_counter() - started)
        if "error" in response:
            error = response["error"] if isinstance(response["error"], dict) else {}
            return "error", str(error.get("message") or "error")
        result = response.get("result")
        return "ok", result if isinstance(result, dict) else {}

    async def _accepted(self, session: ClientSession, backend: str, method: str, result: dict[str, Any]) -> str | None:
        """The feature set a hook answer is tagged with, when the chain lets the session have it
        (``policies.hook_answers``); a dropped answer is counted and audited (None)."""
        facts = HookAnswerFacts(self._dir.effective(session, backend), self._state.backend(backend).feature_sets)
        decision = await self._chain.dispatch(
            backend_answer(backend, method, result),
            backend_principal(backend),
            Target(backend, facts={HOOK_ANSWERS_POLICY: facts}),
        )
        fs = result.get("featureSet")
        if decision.allowed and isinstance(fs, str):
            return fs
        why = (decision.data or {}).get("why")
        self._metrics.mcpl_dropped.labels(method, str(why)).inc()
        self._audit(
            "dropped",
            session,
            backend,
            method,
            feature_set=fs if isinstance(fs, str) else None,
            reason=decision.reason,
        )
        return None

    async def before(self, session: ClientSession, params: dict[str, Any]) -> dict[str, Any]:
        self._remember(session, params)
        targets = self._targets(session, mcpl.USES_BEFORE)
        timeout = self._state.config.before_inference_timeout_s
        method = "context/beforeInference"
        outcomes = await asyncio.gather(
            *(self._call(b, method, self._params_for(session, b, params), timeout) for b, _ in targets)
        )
        groups: dict[str, list[dict[str, Any]]] = {p: [] for p in mcpl.POSITIONS}
        tags: set[str] = set()
        for (backend, _sets), (status, value) in zip(targets, outcomes, strict=True):
            if status != "ok":
                self._audit(status, session, backend, method, reason=value, inference_id=params.get("inferenceId"))
                continue
            fs = await self._accepted(session, backend, method, value)
            if fs is None:
                continue
            name = exposed(session.view, backend, fs)
            injections = value.get("contextInjections")
            taken = 0
            for injection in injections if isinstance(injections, list) else []:
                if isinstance(injection, dict) and injection.get("position") in groups:
                    groups[injection["position"]].append({**injection, "server": backend, "featureSet": name})
                    taken += 1
            tags.add(name)
            self._audit(
                "ok", session, backend, method, feature_set=fs, injections=taken, inference_id=params.get("inferenceId")
            )
        result: dict[str, Any] = {"contextInjections": [i for p in mcpl.POSITIONS for i in groups[p]]}
        if len(tags) == 1:
            result["featureSet"] = next(iter(tags))
        return result

    def after_notification(self, session: ClientSession, params: dict[str, Any]) -> None:
        """The notification form: every backend with an enabled afterInference set hears it."""
        self._remember(session, params)
        for backend, sets in self._targets(session, mcpl.USES_AFTER):
            conn = self._peers.connection(backend)
            conn.spawn(conn.notify("context/afterInference", params))
            self._audit("notified", session, backend, "context/afterInference", feature_set=",".join(sets))

    async def after(self, session: ClientSession, params: dict[str, Any]) -> dict[str, Any]:
        """The blocking form: a chain through the blocking backends in order; the others are told."""
        config = self._state.config
        self._remember(session, params)
        method = "context/afterInference"
        text = params.get("assistantMessage")
        steps: list[dict[str, Any]] = []
        last_fs: str | None = None
        for backend, sets in self._targets(session, mcpl.USES_AFTER):
            if not self._state.backend(backend).after_blocking:
                conn = self._peers.connection(backend)
                conn.spawn(conn.notify(method, params))
                self._audit("notified", session, backend, method, feature_set=",".join(sets))
                continue
            status, value = await self._call(
                backend, method, {**params, "assistantMessage": text}, config.after_inference_timeout_s
            )
            if status != "ok":
                self._audit(status, session, backend, method, reason=value, inference_id=params.get("inferenceId"))
                if config.after_inference_failure == "closed":
                    code = jsonrpc.BACKEND_TIMEOUT if status == "timeout" else jsonrpc.INTERNAL_ERROR
                    raise jsonrpc.RpcError(
                        code, f"blocking afterInference hook of {backend} failed ({status}: {value}); failing closed"
                    )
                continue
            fs = await self._accepted(session, backend, method, value)
            if fs is None:
                continue
            modified = value.get("modifiedResponse")
            step: dict[str, Any] = {"server": backend, "featureSet": exposed(session.view, backend, fs)}
            if isinstance(modified, str):
                text = modified
                step["modified"] = True
                last_fs = step["featureSet"]
            if isinstance(value.get("metadata"), dict):
                step["metadata"] = value["metadata"]
            steps.append(step)
            self._audit("ok", session, backend, method, feature_set=fs, modified=isinstance(modified, str))
        result: dict[str, Any] = {}
        if last_fs is not None:
            result["modifiedResponse"] = text
            result["featureSet"] = last_fs
        if steps:
            result["metadata"] = {"chain": steps}
        return result
