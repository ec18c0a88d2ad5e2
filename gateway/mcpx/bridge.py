"""MCP backends as MCPx participants (``mcpx.topics.NAME.participants``).

Each listed backend joins its topic with id = backend name once it is connected, announces its
tools in its participant entry, and leaves when it goes down (rejoining when it is back). An
``mcp/request:METHOD[:CONTEXT]`` envelope addressed to it (in ``to``) becomes a real request on the
backend; the answer comes back as ``mcp/response:METHOD[:CONTEXT]`` with ``correlation_id`` = the
request envelope's id, addressed to the requester and, for a fulfilment of a proposal, to the
proposer too (§3.2.1). Being the receiving participant, the bridge always checks that the kind
matches the payload (§4.3): a capability for ``tools/call:echo`` must not run another tool.

At most ``mcpx.max_inflight_per_backend`` topic calls run at once per backend participant; more are
answered at once with a "busy" error.

A participant list may also name a virtual server (issue 17): it joins while one of its backends is
ready, announces its view's tools, and each call is mapped to the real backend by
gateway/mcpx/virtual_routes.py before it takes the same path as a backend's (dispatch checks, the
backend's connection, audit); answers come from the virtual server's id.

Many replicas (ADR 0015): every replica's bridge tries to join its backends, but a participant id
has one registry entry over all replicas, so exactly one bridge holds each backend participant and
answers its calls; the others stand by (retrying every beat) and take over when that entry goes
(the holder's backend went down, or its replica stopped beating). The bridge is given what it uses
(backend connections and catalogs, the topic hub, the chain, audit), not the whole gateway.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from adapters import mcpx
from gateway import jsonrpc
from gateway.mcpx import virtual_routes
from gateway.mcpx.hub import JoinRefused, Participant
from gateway.telemetry.conventions import error_type_of, error_type_of_exception
from policies.chain import Target
from policies.patterns import CapabilitySet
from policies.principal import Principal

if TYPE_CHECKING:
    from gateway.audit import AuditLog
    from gateway.config import Mcpx
    from gateway.federation import BackendCatalog, View
    from gateway.mcpc.calls import McpcCalls
    from gateway.mcpx.hub import TopicHub
    from gateway.routing.catalog import Catalog
    from gateway.telemetry.observe import ClientSpan, Tracing
    from gateway.upstreams.connection import BackendConnection
    from policies.chain import PolicyChain

log = logging.getLogger(__name__)

DEFAULT_CAPABILITIES = ("mcp/response:*",)
_READY_POLL_S = 30.0
_WATCH_S = 1.0
_LIST_TIMEOUT_S = 30.0
# Lifecycle belongs to the gateway's own connection to the backend, never to a topic participant.
_REFUSED_METHODS = frozenset({"initialize", "server/discover", "logging/setLevel"})


class BackendParticipants:
    def __init__(
        self,
        config: Mcpx,
        *,
        topics: TopicHub,
        connections: Mapping[str, BackendConnection],
        catalog: Catalog,
        catalogs: Mapping[str, BackendCatalog],
        views: Mapping[str, View],
        chain: PolicyChain,
        audit: AuditLog,
        mcpc: McpcCalls | None = None,
        tracing: Tracing | None = None,
        virtual: Mapping[str, View] | None = None,
    ) -> None:
        """``catalog`` merges a backend's tools through ``views`` (one single-backend view per
        name); ``catalogs`` are the backends' own, read for pinned definitions and list changes.
        ``tracing``: a CLIENT span per call, under the envelope's span (gateway/telemetry/); None: off.
        ``virtual``: the virtual servers by name, for participant lists that name one."""
        self._cfg = config
        self._max_inflight = config.max_inflight_per_backend
        self._topics = topics
        self._connections = connections
        self._catalog = catalog
        self._catalogs = catalogs
        self._views = views
        self._virtual = virtual if virtual is not None else {}
        self._chain = chain
        self._audit = audit
        self._mcpc = mcpc  # an MCPC backend's task is held to its end (gateway/mcpc/calls.py)
        self._tracing = tracing
        self._tasks: set[asyncio.Task[None]] = set()
        self._inflight: dict[tuple[str, str], int] = {}

    def start(self) -> None:
        for topic, spec in self._cfg.topics.items():
            for name in spec.participants:
                capabilities = CapabilitySet(spec.capabilities.get(name, list(DEFAULT_CAPABILITIES)))
                view = self._virtual.get(name)
                self._spawn(
                    self._attend(topic, name, capabilities)
                    if view is None
                    else self._attend_virtual(topic, name, view, capabilities)
                )

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        # The backends' leaves are written to the shared registry before the bus closes (ADR 0015).
        await self._topics.close()

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _tools(self, name: str, view: View | None = None) -> list[dict[str, Any]]:
        try:
            async with asyncio.timeout(_LIST_TIMEOUT_S):
                merged = await self._catalog.merged(view if view is not None else self._views[name], "tools")
        except (TimeoutError, jsonrpc.RpcError) as exc:
            log.warning("MCPx: tools of backend %s unavailable: %s", name, exc)
            return []
        keys = ("name", "title", "description", "inputSchema", "outputSchema")
        return [{k: t[k] for k in keys if k in t} for t in merged.items]

    async def _attend(self, topic: str, name: str, capabilities: CapabilitySet) -> None:
        """Join while the backend is up, leave while it is down, forever (until stopped)."""
        conn = self._connections[name]
        standing_by = False
        while True:
            if not await conn.wait_ready(_READY_POLL_S):
                continue
            participant = Participant(name, capabilities, self._deliverer(topic, name), "directed")
            participant.tools = await self._tools(name)
            joined = await self._enter(topic, participant, standing_by)
            standing_by = joined is False
            if not joined:
                continue
            log.info("MCPx: backend %s joined topic %s with %d tool(s)", name, topic, len(participant.tools))
            catalog = self._catalogs[name]
            generation = catalog.generation
            try:
                # BackendConnection signals "ready" but not "down"; a 1 s poll is cheap and bounded.
                # The same poll notices a list_changed (the catalog's generation moves): the tools
                # announced in the topic must stay those the backend offers.
                while conn.state == "ready":
                    await asyncio.sleep(_WATCH_S)
                    if catalog.generation != generation:
                        generation = catalog.generation
                        tools = await self._tools(name)
                        if tools != participant.tools:
                            participant.tools = tools
                            self._topics.reannounce(topic, participant)
            finally:
                self._topics.leave(topic, participant)

    async def _enter(self, topic: str, participant: Participant, standing_by: bool) -> bool | None:
        """Join ``topic``: True; False: another replica holds the entry and this one stands by; None:
        refused. Either refusal has waited before it returns (the caller simply tries again)."""
        try:
            await self._topics.enter(topic, participant)
            return True
        except JoinRefused as exc:
            name = participant.id
            if self._topics.span is not None and exc.code == 1008:
                # Another replica's bridge holds this backend's entry: it answers the topic's
                # calls; this one stands by and takes over when that entry goes (ADR 0015).
                if not standing_by:
                    log.info("MCPx: backend %s stands by in topic %s (%s)", name, topic, exc.reason)
                await asyncio.sleep(self._topics.span.beat_s)
                return False
            log.error("MCPx: backend %s cannot join topic %s: %s", name, topic, exc.reason)
            await asyncio.sleep(_READY_POLL_S)
            return None

    async def _attend_virtual(self, topic: str, name: str, view: View, capabilities: CapabilitySet) -> None:
        """A virtual server's :meth:`_attend`: in the topic while one of its backends is ready, its
        announced tools kept to its view's (any of its backends' lists changing)."""
        standing_by = False
        while True:
            if not self._any_ready(view):
                await asyncio.sleep(_WATCH_S)  # polled like _attend's watch: no "some backend ready" signal
                continue
            participant = Participant(name, capabilities, self._deliverer(topic, name), "directed")
            participant.tools = await self._tools(name, view)
            joined = await self._enter(topic, participant, standing_by)
            standing_by = joined is False
            if not joined:
                continue
            log.info("MCPx: virtual server %s joined topic %s with %d tool(s)", name, topic, len(participant.tools))
            generations = self._generations(view)
            try:
                while self._any_ready(view):
                    await asyncio.sleep(_WATCH_S)
                    if self._generations(view) != generations:
                        generations = self._generations(view)
                        tools = await self._tools(name, view)
                        if tools != participant.tools:
                            participant.tools = tools
                            self._topics.reannounce(topic, participant)
            finally:
                self._topics.leave(topic, participant)

    def _any_ready(self, view: View) -> bool:
        return any((conn := self._connections.get(b)) is not None and conn.state == "ready" for b in view.backends)

    def _generations(self, view: View) -> tuple[tuple[str, int], ...]:
        return tuple((b, c.generation) for b in view.backends if (c := self._catalogs.get(b)) is not None)

    def _sender(self, topic_name: str, sender: str) -> Principal:
        """The sender with its capabilities in the topic (this replica's participant, else its
        registry entry on another replica; unknown: none)."""
        topic = self._topics.get(topic_name)
        local = topic.participants.get(sender) if topic is not None else None
        if local is not None:
            return Principal(sender, local.capabilities)
        entry = topic.remote.get(sender) if topic is not None else None
        patterns = entry.data.get("patterns") if entry is not None else None
        return Principal(sender, CapabilitySet(patterns if isinstance(patterns, list) else []))

    def _deliverer(self, topic: str, name: str) -> Any:
        def deliver(envelope: dict[str, Any], _text: str) -> bool:
            kind = envelope.get("kind", "")
            if kind.startswith("mcp/request:") and name in (envelope.get("to") or ()):
                key = (topic, name)
                if self._inflight.get(key, 0) >= self._max_inflight:
                    self._answer(topic, name, envelope, error=(jsonrpc.SESSION_OVERLOADED, f"backend {name} is busy"))
                else:
                    self._inflight[key] = self._inflight.get(key, 0) + 1
                    self._spawn(self._call(topic, name, envelope))
            return True  # never a slow consumer: work is bounded by max_inflight_per_backend instead

        return deliver

    async def _call(self, topic: str, name: str, envelope: dict[str, Any]) -> None:
        try:
            payload = envelope.get("payload") or {}
            if "id" not in payload:
                return  # an MCP notification: nothing to answer
            _kind, method, _context = mcpx.kind_of(envelope["kind"])
            mismatch = mcpx.kind_mismatch(envelope["kind"], payload)
            if mismatch is not None:
                self._answer(topic, name, envelope, error=(jsonrpc.INVALID_PARAMS, mismatch))
                return
            if method is None or method in _REFUSED_METHODS:
                self._answer(topic, name, envelope, error=(jsonrpc.METHOD_NOT_FOUND, f"{method!r} is not available"))
                return
            params = payload.get("params")
            backend = name
            view = self._virtual.get(name)
            if view is not None:  # a virtual server: the real backend and names (virtual_routes.py)
                sender = self._sender(topic, str(envelope.get("from")))
                try:
                    routed = await virtual_routes.route(
                        self._catalog, view, method, params if isinstance(params, dict) else None, sender
                    )
                except jsonrpc.RpcError as exc:
                    self._answer(topic, name, envelope, error=(exc.code, exc.message))
                    return
                if isinstance(routed, dict):
                    self._answer(topic, name, envelope, result=routed)  # a list, answered from the view
                    return
                backend, params = routed
            if method == "tools/call" and self._chain.has_dispatch:
                # The same dispatch-stage decisions as any MCP client's call: argument validation and
                # pinned tool definitions. (Admission - capabilities, rates - ran when the envelope came in.)
                tool = params.get("name") if isinstance(params, dict) else None
                item = next((t for t in self._catalogs[backend].peek("tools") or [] if t.get("name") == tool), None)
                decision = await self._chain.dispatch(
                    mcpx.decode(envelope),
                    Principal(str(envelope.get("from")), CapabilitySet([])),
                    Target(backend, tool if isinstance(tool, str) else None, item),
                )
                if not decision.allowed:
                    self._audit.record(
                        decision.outcome,
                        transport="mcpx",
                        principal=envelope.get("from"),
                        topic=topic,
                        action=envelope["kind"],
                        backend=backend,
                        reason=decision.reason,
                    )
                    self._answer(topic, name, envelope, error=(decision.code, decision.reason))
                    return
            conn = self._connections[backend]
            # Progress and log lines of the call go to the requester, as MCP notification envelopes.
            sink = _RequesterSink(self._topics, topic, name, envelope)
            params = params if isinstance(params, dict) else None
            span: ClientSpan | None = None
            if self._tracing is not None:
                span, params = self._tracing.client(backend, conn, method, params)
            error_type = ""
            try:
                if method == "tools/call" and self._mcpc is not None and params is not None:
                    caller = f"mcpx:{topic}:{envelope.get('from')}"
                    response = await self._mcpc.request(conn, params, sink, caller)
                else:
                    response = await conn.request(method, params, sink)
                error_type = error_type_of(response)
            except BaseException as exc:
                error_type = error_type_of_exception(exc)
                if isinstance(exc, jsonrpc.RpcError):
                    self._answer(topic, name, envelope, error=(exc.code, exc.message))
                    return
                raise
            finally:
                if span is not None:
                    span.end(error_type)
            self._audit.record(
                "allowed", transport="mcpx", principal=envelope.get("from"), topic=topic, action=envelope["kind"]
            )
            if "error" in response:
                self._answer(topic, name, envelope, rpc_error=response["error"])
            else:
                self._answer(topic, name, envelope, result=response.get("result"))
        except Exception:
            log.exception("MCPx: topic call to backend %s failed inside the gateway", name)
            with contextlib.suppress(Exception):
                self._answer(topic, name, envelope, error=(jsonrpc.INTERNAL_ERROR, "internal error in the gateway"))
        finally:
            key = (topic, name)
            self._inflight[key] = self._inflight.get(key, 1) - 1

    def _answer(
        self,
        topic_name: str,
        name: str,
        request: dict[str, Any],
        *,
        result: Any = None,
        error: tuple[int, str] | None = None,
        rpc_error: Any = None,
    ) -> None:
        topic = self._topics.get(topic_name)
        if topic is None:
            return
        rpc_id = (request.get("payload") or {}).get("id")
        body: dict[str, Any] = {"jsonrpc": "2.0", "id": rpc_id}
        if error is not None:
            body["error"] = {"code": error[0], "message": error[1]}
        elif rpc_error is not None:
            body["error"] = rpc_error
        else:
            body["result"] = result if result is not None else {}
        requester = request["from"]
        recipients = [requester]
        proposer = topic.proposer_of(request.get("correlation_id"))
        if proposer is not None and proposer != requester:
            recipients.append(proposer)
        kind = "mcp/response:" + request["kind"].removeprefix("mcp/request:")
        response = mcpx.envelope(name, kind, body, to=recipients, correlation_id=request["id"])
        self._topics.route(topic, name, response)


class _RequesterSink:
    """Where a topic call's progress and log lines go: to the participant that asked, as
    ``mcp/notification:METHOD`` envelopes from the backend correlated with the request."""

    __slots__ = ("_backend", "_request", "_topic", "_topics", "session_id")

    _RELAYED = frozenset({"notifications/progress", "notifications/message"})

    def __init__(self, topics: TopicHub, topic: str, backend: str, request: dict[str, Any]) -> None:
        self._topics = topics
        self._topic = topic
        self._backend = backend
        self._request = request
        self.session_id = f"mcpx:{topic}:{request.get('from')}"

    def deliver(self, message: dict[str, Any]) -> None:
        method = message.get("method")
        topic = self._topics.get(self._topic)
        if method not in self._RELAYED or topic is None:
            return
        kind = f"mcp/notification:{method}"
        requester = str(self._request.get("from"))
        note = mcpx.envelope(self._backend, kind, message, to=[requester], correlation_id=self._request.get("id"))
        self._topics.route(topic, self._backend, note)
