"""OpenTelemetry tracing with the MCP semantic conventions (imported only with the ``[otel]`` extra).

One SERVER span per client message the router handles, one CLIENT span per request to a backend
(forwarded calls and MCPL's hooks, channels and rollbacks), one span per MCPx envelope routed to a
topic. W3C trace context is read from the client's ``params._meta`` first, then from the HTTP
request's ``traceparent``/``tracestate`` headers; toward backends it is written to ``params._meta``
and, over HTTP, to the request's headers.

Invariants: the provider is this gateway's own (no global provider is set, so several gateways in
one process keep their traces apart); spans are exported by a batch processor on its own thread
and flushed by :meth:`OtelTracing.shutdown` off the event loop; sampling is parent-based (a sampled
parent is kept, a new trace is recorded with ``sample_ratio``); a failure of the exporter never
reaches a request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from opentelemetry import context as otel_context, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from gateway.telemetry import conventions as sc
from gateway.telemetry.context import INCOMING_HTTP, LOG_IDS, OUTGOING_HTTP, LogIds

if TYPE_CHECKING:
    from gateway.config_ops import Telemetry
    from gateway.sessions import ClientSession
    from gateway.upstreams.connection import BackendConnection

log = logging.getLogger(__name__)

_PROPAGATOR = TraceContextTextMapPropagator()
_FORWARDED_TRANSPORT = {"stdio": ("pipe", None), "ws": ("tcp", "websocket")}


def exporter_for(config: Telemetry) -> SpanExporter:
    """The OTLP exporter of ``config.protocol``; OTEL_EXPORTER_OTLP_* variables still add headers,
    certificates and timeouts the usual way."""
    endpoint = config.otlp_endpoint
    assert endpoint is not None
    if config.protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter

        return GrpcExporter(endpoint=endpoint, insecure=urlsplit(endpoint).scheme != "https")
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter

    # The collector's base URL gets the signal's path, as OTEL_EXPORTER_OTLP_ENDPOINT does.
    if urlsplit(endpoint).path in ("", "/"):
        endpoint = endpoint.rstrip("/") + "/v1/traces"
    return HttpExporter(endpoint=endpoint)


class _ClientSpan:
    __slots__ = ("_span", "_token")

    def __init__(self, span: trace.Span, headers: dict[str, str]) -> None:
        self._span = span
        # Over HTTP the backend request carries the same context in its headers (upstreams/http.py).
        self._token = OUTGOING_HTTP.set(headers)

    def end(self, error_type: str) -> None:
        with contextlib.suppress(ValueError):  # ended in another context than it began in: still ends
            OUTGOING_HTTP.reset(self._token)
        _fail(self._span, error_type)
        self._span.end()


class _EnvelopeSpan:
    __slots__ = ("_span", "_token")

    def __init__(self, span: trace.Span) -> None:
        self._span = span
        # Current while the envelope is delivered: a backend participant's call (gateway/mcpx/bridge.py)
        # starts in a task made then, and its CLIENT span is the envelope's child.
        self._token = otel_context.attach(trace.set_span_in_context(span))

    def end(self, delivered: int) -> None:
        otel_context.detach(self._token)
        self._span.set_attribute("mcpx.delivered", delivered)
        self._span.end()


def _fail(span: trace.Span, error_type: str) -> None:
    if error_type:
        span.set_attribute(sc.ERROR_TYPE, error_type)
        if error_type.lstrip("-").isdigit():
            span.set_attribute(sc.STATUS_CODE, error_type)
        span.set_status(Status(StatusCode.ERROR))


class OtelTracing:
    def __init__(self, config: Telemetry, version: str, exporter: SpanExporter | None = None) -> None:
        resource = Resource.create({"service.name": config.service_name, "service.version": version})
        self._provider = TracerProvider(resource=resource, sampler=ParentBased(TraceIdRatioBased(config.sample_ratio)))
        self._provider.add_span_processor(BatchSpanProcessor(exporter or exporter_for(config)))
        self._tracer = self._provider.get_tracer("switchboard", version)
        log.info(
            "tracing to %s (%s), service %s, sample ratio %g",
            config.otlp_endpoint,
            config.protocol,
            config.service_name,
            config.sample_ratio,
        )

    # ---- client requests (SERVER spans) ------------------------------------------------------

    def note_http(self, traceparent: str | None, tracestate: str | None) -> None:
        found = None
        if traceparent is not None:
            found = {"traceparent": traceparent}
            if tracestate is not None:
                found["tracestate"] = tracestate
        INCOMING_HTTP.set(found)  # always: a request without them does not inherit an earlier one's

    @staticmethod
    def _parent(params: Any) -> otel_context.Context | None:
        meta = params.get("_meta") if isinstance(params, dict) else None
        if isinstance(meta, dict) and isinstance(meta.get("traceparent"), str):
            return _PROPAGATOR.extract(meta)
        headers = INCOMING_HTTP.get()
        if headers is not None:
            return _PROPAGATOR.extract(headers)
        return None

    async def serve(
        self, session: ClientSession, message: dict[str, Any], handled: Awaitable[dict[str, Any] | None]
    ) -> dict[str, Any] | None:
        try:
            span = self._server_span(session, message)
        except Exception:  # a bug here must not cost the request its answer
            log.exception("tracing: no span for %s", message.get("method"))
            return await handled
        ctx = span.get_span_context()
        attached = otel_context.attach(trace.set_span_in_context(span))
        ids = LOG_IDS.set(LogIds(format(ctx.trace_id, "032x"), format(ctx.span_id, "016x"), session.id))
        error_type = ""
        try:
            response = await handled
            error_type = sc.error_type_of(response)
            return response
        except BaseException as exc:
            error_type = sc.error_type_of_exception(exc)
            raise
        finally:
            LOG_IDS.reset(ids)
            otel_context.detach(attached)
            _fail(span, error_type)
            span.end()

    def _server_span(self, session: ClientSession, message: dict[str, Any]) -> trace.Span:
        method = message.get("method")
        raw = message.get("params")
        params = raw if isinstance(raw, dict) else None
        attributes = sc.request_attributes(method, params, message.get("id"))
        attributes.update(sc.network_attributes(session.transport))
        attributes[sc.PRINCIPAL] = session.principal.name
        if session.protocol_version is not None:
            attributes[sc.PROTOCOL_VERSION] = session.protocol_version
        if not session.codec.modern:
            attributes[sc.SESSION_ID] = session.id  # a modern client has no session (its id is ours alone)
        return self._tracer.start_span(
            sc.span_name(method, params), context=self._parent(params), kind=SpanKind.SERVER, attributes=attributes
        )

    def audited(self, backend: str, outcome: str) -> None:
        span = trace.get_current_span()
        span.set_attribute(sc.BACKEND, backend)
        span.set_attribute(sc.OUTCOME, outcome)

    # ---- backend requests (CLIENT spans) -----------------------------------------------------

    def client(
        self, backend: str, conn: BackendConnection, method: str, params: dict[str, Any] | None
    ) -> tuple[_ClientSpan, dict[str, Any]]:
        attributes = sc.request_attributes(method, params, None)
        attributes[sc.BACKEND] = backend
        if conn.protocol_version:
            attributes[sc.PROTOCOL_VERSION] = conn.protocol_version
        cfg = conn.config
        carrier, protocol = _FORWARDED_TRANSPORT.get(cfg.transport, ("tcp", "http"))
        attributes[sc.NETWORK_TRANSPORT] = carrier
        if protocol is not None:
            attributes[sc.NETWORK_PROTOCOL] = protocol
        if cfg.url:
            url = urlsplit(cfg.url)
            if url.hostname:
                attributes[sc.SERVER_ADDRESS] = url.hostname
            if url.port:
                attributes[sc.SERVER_PORT] = url.port
        # The parent is the current context: the SERVER span of the client request being served.
        span = self._tracer.start_span(sc.span_name(method, params), kind=SpanKind.CLIENT, attributes=attributes)
        headers: dict[str, str] = {}
        _PROPAGATOR.inject(headers, context=trace.set_span_in_context(span))
        meta = params.get("_meta") if params is not None else None
        params = {**(params or {}), "_meta": {**(meta if isinstance(meta, dict) else {}), **headers}}
        return _ClientSpan(span, headers), params

    # ---- MCPx envelopes ----------------------------------------------------------------------

    def envelope(self, topic: str, sender: str, envelope: dict[str, Any]) -> _EnvelopeSpan:
        kind = envelope.get("kind")
        kind = kind if isinstance(kind, str) else "unknown"
        payload = envelope.get("payload")
        params = payload.get("params") if isinstance(payload, dict) else None
        attributes: dict[str, Any] = {"mcpx.topic": topic, "mcpx.kind": kind, "mcpx.from": sender}
        if isinstance(envelope.get("id"), str):
            attributes["mcpx.envelope.id"] = envelope["id"]
        to = envelope.get("to")
        if isinstance(to, list):
            attributes["mcpx.to"] = [str(r) for r in to]
        method = payload.get("method") if isinstance(payload, dict) else None
        if isinstance(method, str):
            attributes.update(sc.request_attributes(method, params if isinstance(params, dict) else None, None))
        # Low cardinality: the kind up to its target (``mcp/request:tools/call``), never the tool.
        name = "mcpx " + ":".join(kind.split(":")[:2])
        span = self._tracer.start_span(
            name, context=self._parent(params), kind=SpanKind.PRODUCER, attributes=attributes
        )
        return _EnvelopeSpan(span)

    # ---- lifecycle ---------------------------------------------------------------------------

    async def shutdown(self) -> None:
        """Flush the batch processor and stop exporting; the export's network I/O runs in a thread."""
        try:
            async with asyncio.timeout(10):
                await asyncio.to_thread(self._provider.shutdown)
        except Exception as exc:  # an unreachable collector must not stop the gateway's shutdown
            log.warning("tracing: flushing spans at shutdown failed: %s", exc)
