"""The bridge between the two MCP eras: requests for input (MRTR, 2026-07-28) in both directions.

A legacy backend asks its client for input with real requests (sampling, elicitation, roots); a
modern backend answers ``input_required`` and expects the call to be retried with the answers. The
gateway translates where the client speaks the other era:

- **Modern client** (``session.codec.modern``): a legacy backend's requests are collected, not sent; the
  call is parked (gateway/mrtr.py) and the client gets an ``input_required`` result whose
  ``requestState`` is signed and bound to its principal and backend. The retry resumes the parked
  call with the answers. Toward a modern backend, MRTR passes through, the backend's own state
  wrapped so that the client cannot alter or replay it.
- **Legacy client**: a modern backend's ``input_required`` becomes real requests on the call's own
  stream, and the call is retried with the answers, at most ``MAX_INPUT_ROUNDS`` times.

A modern client's call toward a legacy backend runs in a task of its own only when the client could
be asked something (it declared sampling, elicitation or roots): only then may the call have to be
parked, outliving the exchange. A client that declared none of them is never asked (a backend's
request to it is refused at once, gateway/routing/backend_events.py), so its call is awaited in the
exchange's own task, and such a request only interrupts it with -32021, as the parking path does.
Such a call is served by ``Forwarder._awaited`` (gateway/routing/forwarding.py; ``never_asks`` tells
it apart, and with no stream, task or span it is timed there too, one coroutine per call); this bridge
serves the others.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from adapters import mcp_modern
from adapters.mcp import CLIENT_CAPABILITY_OF
from gateway import jsonrpc
from gateway.routing.call import Call, CallSink
from gateway.routing.forwarding import call_backend, finish
from gateway.sessions import InputSignal

if TYPE_CHECKING:
    from gateway.channels import Channel
    from gateway.config import Limits
    from gateway.mrtr import Parking
    from gateway.sessions import ClientSession
    from gateway.upstreams.connection import BackendConnection

# How many input_required rounds a modern backend may ask for one call.
MAX_INPUT_ROUNDS = 16


def _missing_capabilities(session: ClientSession) -> jsonrpc.RpcError:
    missing = sorted(set(session.missing_capabilities))
    return jsonrpc.RpcError(
        mcp_modern.MISSING_REQUIRED_CLIENT_CAPABILITY,
        f"this request needs the client capabilities {missing}, which the request did not declare",
        {"requiredCapabilities": {name: {} for name in missing}},
    )


class EraBridge:
    def __init__(self, parking: Parking, limits: Limits) -> None:
        self._parking = parking
        self._limits = limits

    # The -32021 a call ends with when its backend asks the client for what it did not declare.
    missing_capabilities = staticmethod(_missing_capabilities)

    # ---- toward a modern client --------------------------------------------------------------

    async def through_mrtr(
        self,
        call: Call,
        backend: str,
        conn: BackendConnection,
        params: dict[str, Any] | None,
        stream_sink: CallSink | None,
    ) -> dict[str, Any]:
        """A modern client's call that may need MRTR: to a modern backend (MRTR passes through), the
        retry of a call that needed input, or a call that may have to be parked (its client can be
        asked). Requests for input become ``input_required`` results, never requests. (The rest, a
        new call of a client that can never be asked to a legacy backend, is ``Forwarder._awaited``'s.)

        ``stream_sink``: an MGP streamed call's (§12, gateway/mgp/streaming.py); it then owns the
        call upstream, so chunks and progress reach the exchange's stream under the client's id. A
        resumed (parked) call keeps the sink it was parked with."""
        session, event, channel = call.session, call.event, call.channel
        method = event.method or ""
        parking = self._parking
        principal = session.principal.name
        state = responses = None
        clean = params or {}
        if "requestState" in clean or "inputResponses" in clean:
            state, responses = clean.get("requestState"), clean.get("inputResponses")
            clean = {k: v for k, v in clean.items() if k not in ("requestState", "inputResponses")}
        if conn.era == "modern":
            # Both ends speak MRTR: pass it through, with the backend's state wrapped and bound.
            forward = dict(clean)
            if state is not None:
                forward["requestState"] = parking.unwrap(state, principal, backend)
            if responses is not None:
                forward["inputResponses"] = responses
            response = await call_backend(session, event.rpc_id, conn, method, forward, channel, stream_sink)
            result = response.get("result")
            if isinstance(result, dict) and isinstance(result.get("requestState"), str):
                response = {
                    **response,
                    "result": {**result, "requestState": parking.wrap(result["requestState"], principal, backend)},
                }
            return finish(session, event.rpc_id, backend, method, response)
        if state is not None:
            parked = parking.resume(state, principal, backend, method)
            answers = responses if isinstance(responses, dict) else {}
            for key, gid in list(parked.keys.items()):
                if key not in answers:
                    continue
                out = parked.session.outgoing.pop(gid, None)
                if out is not None and out.conn is not None:
                    out.conn.spawn(out.conn.send(jsonrpc.result(out.upstream_id, answers[key])))
                del parked.keys[key]
            work_session, sink, task = parked.session, parked.sink, parked.task
            work_session.client_capabilities = session.client_capabilities
            work_session.log_level = session.log_level
            sink.channel = channel
            if parked.keys:  # some answers are missing: ask for exactly those again
                return self.input_required(
                    event.rpc_id,
                    parking.park(
                        backend=backend,
                        method=method,
                        principal=principal,
                        task=task,
                        session=work_session,
                        sink=sink,
                        keys=parked.keys,
                        requests={k: parked.requests[k] for k in parked.keys},
                    ),
                    {k: parked.requests[k] for k in parked.keys},
                )
        else:
            work_session = session
            sink = stream_sink or CallSink(session, channel)
            pending = conn.begin(method, clean or None, sink)
            sink.began(conn, pending)
            task = asyncio.ensure_future(conn.call(pending))
            session.inflight[event.rpc_id] = (conn, pending)
        return await self._await_or_park(work_session, event.rpc_id, backend, method, task, sink)

    async def _await_or_park(
        self,
        session: ClientSession,
        client_id: Any,
        backend: str,
        method: str,
        task: asyncio.Task[dict[str, Any]],
        sink: CallSink,
    ) -> dict[str, Any]:
        signal = session.input_ready
        if signal is None:
            signal = session.input_ready = InputSignal()
        while not session.input_requests and not session.missing_capabilities:
            wake = signal.waiter()

            def ring(_done: object, wake: asyncio.Future[None] = wake) -> None:
                if not wake.done():
                    wake.set_result(None)

            task.add_done_callback(ring)
            try:
                await wake
            except asyncio.CancelledError:
                task.cancel()  # the client closed its stream: that cancels the backend call too
                raise
            finally:
                task.remove_done_callback(ring)
                signal.discard(wake)
            if task.done():
                session.inflight.pop(client_id, None)
                return finish(session, client_id, backend, method, task.result())
        if session.missing_capabilities:
            task.cancel()
            session.inflight.pop(client_id, None)
            raise _missing_capabilities(session)
        await asyncio.sleep(0)  # let requests the backend sent together arrive together
        keys: dict[str, str] = {}
        requests: dict[str, Any] = {}
        for n, (gid, req_method, req_params) in enumerate(session.input_requests, 1):
            key = f"input-{n}"
            keys[key] = gid
            requests[key] = {"method": req_method, **({"params": req_params} if req_params is not None else {})}
        session.input_requests.clear()
        state = self._parking.park(
            backend=backend,
            method=method,
            principal=session.principal.name,
            task=task,
            session=session,
            sink=sink,
            keys=keys,
            requests=requests,
        )
        return self.input_required(client_id, state, requests)

    @staticmethod
    def input_required(client_id: Any, state: str, requests: dict[str, Any]) -> dict[str, Any]:
        return jsonrpc.result(
            client_id, {"resultType": "input_required", "inputRequests": requests, "requestState": state}
        )

    # ---- toward a legacy client --------------------------------------------------------------

    async def fulfil_input_requests(
        self, call: Call, conn: BackendConnection, params: dict[str, Any] | None, response: dict[str, Any]
    ) -> dict[str, Any]:
        """A modern backend answered ``input_required``: ask this (legacy) client for real, with
        sampling/elicitation/roots requests on the call's own stream, and retry with the answers."""
        method = call.event.method or ""
        for _ in range(MAX_INPUT_ROUNDS):
            result = response.get("result")
            if not isinstance(result, dict) or result.get("resultType") != "input_required":
                return response
            requests = result.get("inputRequests") or {}
            if not isinstance(requests, dict):
                raise jsonrpc.RpcError(jsonrpc.INTERNAL_ERROR, f"backend {conn.name} sent malformed inputRequests")
            answers = await self._ask_client_all(call.session, call.channel, requests)
            retry = {k: v for k, v in (params or {}).items() if k not in ("inputResponses", "requestState")}
            retry["inputResponses"] = answers
            if "requestState" in result:
                retry["requestState"] = result["requestState"]
            response = await call_backend(call.session, call.rpc_id, conn, method, retry, call.channel)
        raise jsonrpc.RpcError(
            jsonrpc.INTERNAL_ERROR, f"backend {conn.name} still needed input after {MAX_INPUT_ROUNDS} rounds"
        )

    async def _ask_client_all(
        self, session: ClientSession, channel: Channel, requests: dict[str, Any]
    ) -> dict[str, Any]:
        keys = list(requests)
        answers = await asyncio.gather(*(self._ask_client(session, channel, requests[k]) for k in keys))
        return dict(zip(keys, answers, strict=True))

    async def _ask_client(self, session: ClientSession, channel: Channel, request: Any) -> Any:
        """Send one request to the client on the call's stream and return its result."""
        if not isinstance(request, dict) or not isinstance(request.get("method"), str):
            raise jsonrpc.RpcError(jsonrpc.INTERNAL_ERROR, "a backend input request lacks a method")
        method = request["method"]
        needed = CLIENT_CAPABILITY_OF.get(method)
        if needed is not None and needed not in session.client_capabilities:
            raise jsonrpc.RpcError(
                jsonrpc.INVALID_REQUEST,
                f"the backend needs {method} from the client, which did not declare the {needed!r} capability",
            )
        params = request.get("params") if isinstance(request.get("params"), dict) else None
        return await session.ask(channel, method, params, self._limits.client_request_timeout_s)
