"""Real OTLP trace receivers for the tests: OTLP/HTTP (protobuf over uvicorn) and OTLP/gRPC (grpcio).

Both decode ``ExportTraceServiceRequest`` with opentelemetry-proto and keep every span as a flat
:class:`Span`; ``wait_for`` polls them with a deadline. They listen on 127.0.0.1, on a free port,
each on a thread of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Self

import uvicorn
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span as ProtoSpan, Status

from tests.raw_asgi import read_body, respond
from tests.support import free_port

KINDS = {
    ProtoSpan.SPAN_KIND_SERVER: "server",
    ProtoSpan.SPAN_KIND_CLIENT: "client",
    ProtoSpan.SPAN_KIND_PRODUCER: "producer",
    ProtoSpan.SPAN_KIND_CONSUMER: "consumer",
    ProtoSpan.SPAN_KIND_INTERNAL: "internal",
}


@dataclass
class Span:
    name: str
    kind: str
    trace_id: str
    span_id: str
    parent_span_id: str
    attributes: dict[str, Any]
    error: bool
    resource: dict[str, Any] = field(default_factory=dict)


def _value(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    if which == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, which) if which else None


def decode(body: bytes) -> list[Span]:
    request = trace_service_pb2.ExportTraceServiceRequest()
    request.ParseFromString(body)
    spans = []
    for resource_spans in request.resource_spans:
        resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append(
                    Span(
                        name=span.name,
                        kind=KINDS.get(span.kind, "unspecified"),
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex(),
                        attributes={a.key: _value(a.value) for a in span.attributes},
                        error=span.status.code == Status.STATUS_CODE_ERROR,
                        resource=resource,
                    )
                )
    return spans


class Receiver:
    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.requests = 0
        self.port = free_port()

    async def wait_for(self, predicate: Callable[[list[Span]], bool], timeout_s: float = 20.0) -> list[Span]:
        deadline = time.monotonic() + timeout_s
        while not predicate(self.spans):
            if time.monotonic() > deadline:
                names = [(s.name, s.kind) for s in self.spans]
                raise AssertionError(f"spans did not arrive within {timeout_s}s; have {names}")
            await asyncio.sleep(0.05)
        return self.spans

    def named(self, name: str, kind: str | None = None) -> list[Span]:
        return [s for s in self.spans if s.name == name and (kind is None or s.kind == kind)]

    async def serve(self, started: threading.Event, stop: asyncio.Event) -> None:
        raise NotImplementedError

    @contextlib.contextmanager
    def running(self) -> Iterator[Self]:
        """Serve on a thread of its own (with its own event loop): the test's loop may block, e.g.
        while a gateway process is stopped and exports its last spans to this receiver."""
        loop = asyncio.new_event_loop()
        stop = asyncio.Event()
        started = threading.Event()
        thread = threading.Thread(target=loop.run_until_complete, args=(self._main(started, stop),), daemon=True)
        thread.start()
        try:
            if not started.wait(10):
                raise TimeoutError("the OTLP receiver did not start")
            yield self
        finally:
            loop.call_soon_threadsafe(stop.set)
            thread.join(10)
            loop.close()

    async def _main(self, started: threading.Event, stop: asyncio.Event) -> None:
        await self.serve(started, stop)


class HttpReceiver(Receiver):
    """``POST /v1/traces`` with an ``application/x-protobuf`` body, as an OTLP/HTTP collector takes it."""

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def app(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = await read_body(receive)
        headers = dict(scope["headers"])
        if scope["path"] != "/v1/traces" or scope["method"] != "POST":
            await _respond(send, 404, b"")
            return
        if headers.get(b"content-encoding") == b"gzip":
            body = gzip.decompress(body)
        self.requests += 1
        self.spans.extend(decode(body))
        await _respond(send, 200, trace_service_pb2.ExportTraceServiceResponse().SerializeToString())

    async def serve(self, started: threading.Event, stop: asyncio.Event) -> None:
        config = uvicorn.Config(
            self.app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="off", interface="asgi3"
        )
        server = uvicorn.Server(config)
        task = asyncio.create_task(server.serve())
        while not server.started and not task.done():  # noqa: ASYNC110 (uvicorn offers only the flag)
            await asyncio.sleep(0.02)
        started.set()
        await stop.wait()
        server.should_exit = True
        await task


async def _respond(send: Any, status: int, body: bytes) -> None:
    await respond(send, status, body, ctype=b"application/x-protobuf")


class GrpcReceiver(Receiver):
    """The ``opentelemetry.proto.collector.trace.v1.TraceService/Export`` RPC on a grpc.aio server."""

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def serve(self, started: threading.Event, stop: asyncio.Event) -> None:
        import grpc

        receiver = self

        class Service(trace_service_pb2_grpc.TraceServiceServicer):
            async def Export(
                self, request: trace_service_pb2.ExportTraceServiceRequest, context: Any
            ) -> trace_service_pb2.ExportTraceServiceResponse:
                receiver.requests += 1
                receiver.spans.extend(decode(request.SerializeToString()))
                return trace_service_pb2.ExportTraceServiceResponse()

        server = grpc.aio.server()
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Service(), server)
        server.add_insecure_port(f"127.0.0.1:{self.port}")
        await server.start()
        started.set()
        await stop.wait()
        await server.stop(grace=None)
