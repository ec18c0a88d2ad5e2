"""Context hooks (MCPL §10) fanned out from one host to every backend whose enabled feature sets use them.

``beforeInference`` goes to all of them in parallel, each with its own timeout (on timeout the host
proceeds without that contribution, §10.6); injections are grouped by position and ordered by a
stable, configurable backend order, each marked with the server and feature set it came from.
A blocking ``afterInference`` is a chain: each blocking backend sees the previous one's
``modifiedResponse``. While a backend is inside a hook call it may not ask for inference (§10.7).
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from adapters import mcpl
from gateway import jsonrpc
from gateway.mcpl.state import exposed
from gateway.sessions import ClientSession

if TYPE_CHECKING:
    from gateway.mcpl.relay import McplRelay


class HookFanout:
    def __init__(self, relay: McplRelay) -> None:
        self._relay = relay

    def _targets(self, session: ClientSession, uses: str) -> list[tuple[str, list[str]]]:
        """(backend, enabled feature sets using the hook) in hook order, connected backends only."""
        relay = self._relay
        out = []
        for backend in relay.order(session.view):
            conn = relay.gateway.connections[backend]
            if conn.state != "ready" or not relay.is_mcpl(backend):
                continue
            enabled = relay.effective(session, backend)
            sets = [fs for fs in relay.backend(backend).using(uses) if fs in enabled]
            if sets:
                out.append((backend, sets))
        return out

    def _remember(self, session: ClientSession, params: dict[str, Any]) -> None:
        conversation = params.get("conversationId")
        if isinstance(conversation, str):
            self._relay.pin_conversation(conversation, session)
        model = params.get("model")
        if isinstance(model, dict):
            self._relay.last_model = model

    async def _call(self, backend: str, method: str, params: dict[str, Any], timeout: float) -> tuple[str, Any]:
        """(status, result or reason) of one hook call; ``status`` is ok | timeout | error."""
        relay = self._relay
        relay.in_hook[backend] += 1
        started = time.perf_counter()
        try:
            response = await relay.call_backend(backend, method, params, timeout)
        except jsonrpc.RpcError as exc:
            status = "timeout" if exc.code == jsonrpc.BACKEND_TIMEOUT else "error"
            return status, exc.message
        finally:
            relay.in_hook[backend] -= 1
            if not relay.in_hook[backend]:
                del relay.in_hook[backend]
            relay.gateway.metrics.mcpl_hook_seconds.labels(method).observe(time.perf_counter() - started)
        if "error" in response:
            error = response["error"] if isinstance(response["error"], dict) else {}
            return "error", str(error.get("message") or "error")
        result = response.get("result")
        return "ok", result if isinstance(result, dict) else {}

    def _tag_ok(self, session: ClientSession, backend: str, method: str, result: dict[str, Any]) -> str | None:
        """The feature set a hook answer is tagged with, when it is enabled for the session; an
        answer tagged with a disabled or unknown set is dropped and counted (None)."""
        relay = self._relay
        fs = result.get("featureSet")
        if isinstance(fs, str) and fs in relay.effective(session, backend):
            return fs
        reason = (
            "untagged"
            if not isinstance(fs, str)
            else ("disabled" if fs in relay.backend(backend).feature_sets else "unknown")
        )
        relay.gateway.metrics.mcpl_dropped.labels(method, reason).inc()
        relay.audit(
            "dropped",
            session,
            backend,
            method,
            feature_set=fs if isinstance(fs, str) else None,
            reason=f"hook answer {reason} feature set",
        )
        return None

    async def before(self, session: ClientSession, params: dict[str, Any]) -> dict[str, Any]:
        relay = self._relay
        self._remember(session, params)
        targets = self._targets(session, mcpl.USES_BEFORE)
        timeout = relay.config.before_inference_timeout_s
        method = "context/beforeInference"
        outcomes = await asyncio.gather(
            *(self._call(b, method, relay.channels.params_for(session, b, params), timeout) for b, _ in targets)
        )
        groups: dict[str, list[dict[str, Any]]] = {p: [] for p in mcpl.POSITIONS}
        tags: set[str] = set()
        for (backend, _sets), (status, value) in zip(targets, outcomes, strict=True):
            if status != "ok":
                relay.audit(status, session, backend, method, reason=value, inference_id=params.get("inferenceId"))
                continue
            fs = self._tag_ok(session, backend, method, value)
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
            relay.audit(
                "ok", session, backend, method, feature_set=fs, injections=taken, inference_id=params.get("inferenceId")
            )
        result: dict[str, Any] = {"contextInjections": [i for p in mcpl.POSITIONS for i in groups[p]]}
        if len(tags) == 1:
            result["featureSet"] = next(iter(tags))
        return result

    def after_notification(self, session: ClientSession, params: dict[str, Any]) -> None:
        """The notification form: every backend with an enabled afterInference set hears it."""
        relay = self._relay
        self._remember(session, params)
        for backend, sets in self._targets(session, mcpl.USES_AFTER):
            conn = relay.gateway.connections[backend]
            conn.spawn(conn.notify("context/afterInference", params))
            relay.audit("notified", session, backend, "context/afterInference", feature_set=",".join(sets))

    async def after(self, session: ClientSession, params: dict[str, Any]) -> dict[str, Any]:
        """The blocking form: a chain through the blocking backends in order; the others are told."""
        relay = self._relay
        self._remember(session, params)
        method = "context/afterInference"
        text = params.get("assistantMessage")
        steps: list[dict[str, Any]] = []
        last_fs: str | None = None
        for backend, sets in self._targets(session, mcpl.USES_AFTER):
            if not relay.backend(backend).after_blocking:
                conn = relay.gateway.connections[backend]
                conn.spawn(conn.notify(method, params))
                relay.audit("notified", session, backend, method, feature_set=",".join(sets))
                continue
            status, value = await self._call(
                backend, method, {**params, "assistantMessage": text}, relay.config.after_inference_timeout_s
            )
            if status != "ok":
                relay.audit(status, session, backend, method, reason=value, inference_id=params.get("inferenceId"))
                if relay.config.after_inference_failure == "closed":
                    code = jsonrpc.BACKEND_TIMEOUT if status == "timeout" else jsonrpc.INTERNAL_ERROR
                    raise jsonrpc.RpcError(
                        code, f"blocking afterInference hook of {backend} failed ({status}: {value}); failing closed"
                    )
                continue
            fs = self._tag_ok(session, backend, method, value)
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
            relay.audit("ok", session, backend, method, feature_set=fs, modified=isinstance(modified, str))
        result: dict[str, Any] = {}
        if last_fs is not None:
            result["modifiedResponse"] = text
            result["featureSet"] = last_fs
        if steps:
            result["metadata"] = {"chain": steps}
        return result
