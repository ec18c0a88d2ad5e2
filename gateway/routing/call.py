"""One client request on its way through the router, and where the messages of its backend call go.

A :class:`Call` is what every handler of the pipeline works on: the session, the decoded event,
the stream that carries the answer, and the principal of *this* request (on a session, each request
is held to the credential it presents, which may grant less than the one that opened it). It
replaces the arguments that were threaded one by one through the router's methods.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from adapters.mgp import streaming as mgp_streaming, strip as mgp_strip
from gateway import jsonrpc
from gateway.channels import Channel
from gateway.events import Event
from gateway.sessions import ClientSession
from policies.chain import Decision
from policies.principal import Principal

if TYPE_CHECKING:
    from gateway.upstreams.connection import BackendConnection, Pending


@dataclass(slots=True, init=False)
class Call:
    session: ClientSession
    event: Event
    channel: Channel
    principal: Principal
    # The event's JSON-RPC id, stored when made (read on every forwarded call; a property costs a frame).
    # A Call's event is never replaced: a handler that needs another id makes a new Call.
    rpc_id: Any = field(repr=False, compare=False)

    def __init__(self, session: ClientSession, event: Event, channel: Channel, principal: Principal) -> None:
        self.session = session
        self.event = event
        self.channel = channel
        self.principal = principal
        self.rpc_id = event.rpc_id

    @property
    def params(self) -> dict[str, Any]:
        return self.event.params


@dataclass(slots=True)
class Routed:
    """A handler's answer, and the backend that produced it (``"gateway"`` when answered here).

    ``error_type``: the answer's ``error.type`` (gateway/telemetry/conventions.py) when its maker
    already computed it (the forwarder, for its client metric), so the router need not again; None:
    not known. Whoever changes ``response`` makes a new Routed (none mutates one in place)."""

    response: dict[str, Any]
    backend: str = "gateway"
    error_type: str | None = None


Handler = Callable[[Call], Awaitable[Routed]]


class PolicyDenied(jsonrpc.RpcError):
    """A dispatch-stage policy said no (the request's target was already known).

    ``result``: the refusal as a result instead of an error, for a client whose dialect answers a
    refused call that way (MGP's tool rejection envelope, §14.7); it is audited as a refusal all the same.
    """

    def __init__(self, decision: Decision, backend: str, result: dict[str, Any] | None = None) -> None:
        super().__init__(decision.code, decision.reason, decision.data)
        self.decision = decision
        self.backend = backend
        self.result = result

    def response(self, rpc_id: Any) -> dict[str, Any]:
        return jsonrpc.result(rpc_id, self.result) if self.result is not None else jsonrpc.error_from(rpc_id, self)


class CallSink:
    """Delivers the messages related to one forwarded call to the stream that carries the call."""

    __slots__ = ("channel", "session", "session_id")

    def __init__(self, session: ClientSession, channel: Channel) -> None:
        self.session = session
        self.session_id = session.id
        self.channel = channel

    @property
    def client_capabilities(self) -> dict[str, Any]:
        return self.session.client_capabilities

    @property
    def log_level(self) -> str | None:
        """The level a modern backend is asked to log at for this call.

        A legacy client that never called setLevel leaves logging to the server's discretion; a
        modern backend logs nothing without a level, so the gateway asks for ``info`` on its behalf.
        """
        if self.session.log_level is None and self.session.codec.logs_by_default:
            return "info"
        return self.session.log_level

    def began(self, conn: BackendConnection, pending: Pending) -> None:
        """The call was given its upstream id (a streamed call's sink files it, gateway/mgp/streaming.py)."""

    def deliver(self, message: dict[str, Any]) -> None:
        if self.session.mgp is None:
            plain = mgp_strip.for_plain_client(message)  # a plain MCP client sees no MGP field
            if plain is None:
                return
            message = plain
        elif message.get("method") in mgp_streaming.NOTIFICATIONS:
            # MGP §12: chunks of a call that was not streamed for this client name the gateway's
            # upstream id; only a streamed call's sink (gateway/mgp/streaming.py) relays them.
            return
        if message.get("method") == "notifications/message":
            params = message.get("params")
            if isinstance(params, dict) and not self.session.wants_log(params.get("level")):
                return
        self.push(message)

    def push(self, message: dict[str, Any]) -> None:
        if not self.channel.push(message) and not self.channel.overflowed:
            # The call's stream is finished; anything late belongs on the session's own stream.
            self.session.standalone.push(message)
