"""Channels of communication (MCPL §14) across federated backends.

Backends register channels on their connection; hosts see the merged registry under exposed ids
(``BACKEND.`` prefixed when the view federates). Host requests on a channel go to the backend that
owns it; inbound messages go to one host with the per-message results mapped back. Publishing and
observing are gated by the feature sets that use ``channels.publish`` / ``channels.observe`` and by
the scope patterns of host and operator (-32017), a decision of the policy chain
(``policies.channel_access``); unknown channels are -32023.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Literal, overload

from adapters import mcpl
from gateway import jsonrpc
from gateway.events import Event
from gateway.mcpl.directory import McplDirectory
from gateway.mcpl.plumbing import McplAudit, Peers, host_message
from gateway.mcpl.state import RelayState, exposed, resolve
from gateway.sessions import ClientSession
from policies.chain import Decision, PolicyChain, Target
from policies.channel_access import POLICY as CHANNELS_POLICY, ChannelFacts, ChannelGate

if TYPE_CHECKING:
    from gateway.upstreams.connection import BackendConnection

log = logging.getLogger(__name__)

# The feature-set check of a tagged server-initiated message (ServerRequests.check_tag).
CheckTag = Callable[["BackendConnection", str, dict[str, Any]], Awaitable[tuple[str, list[ClientSession]]]]


class ChannelRouter:
    def __init__(
        self,
        state: RelayState,
        directory: McplDirectory,
        peers: Peers,
        chain: PolicyChain,
        audit: McplAudit,
        check_tag: CheckTag,
    ) -> None:
        self._state = state
        self._dir = directory
        self._peers = peers
        self._chain = chain
        self._audit = audit
        self._check_tag = check_tag

    # ---- names -------------------------------------------------------------------------------

    def _out(self, session: ClientSession, backend: str, descriptor: dict[str, Any]) -> dict[str, Any]:
        return {**descriptor, "id": exposed(session.view, backend, descriptor["id"])}

    def resolve(self, session: ClientSession, channel_id: Any) -> tuple[str, str]:
        state = self._state
        found = (
            resolve(session.view, channel_id, {b: state.backend(b).channels for b in session.view.backends})
            if isinstance(channel_id, str)
            else []
        )
        if len(found) != 1:
            why = "Unknown channel" if not found else "Ambiguous channel (registered by several backends)"
            raise jsonrpc.RpcError(mcpl.UNKNOWN_CHANNEL, why, {"channelId": channel_id})
        return found[0]

    def params_for(self, session: ClientSession, backend: str, params: dict[str, Any]) -> dict[str, Any]:
        """Hook params with the §14.4 channel context in the backend's own channel ids."""
        context = params.get("channels")
        if not isinstance(context, dict):
            return params
        own = self._state.backend(backend).channels

        def local(channel_id: Any) -> Any:
            if isinstance(channel_id, str):
                for b, cid in resolve(session.view, channel_id, {backend: own}):
                    if b == backend:
                        return cid
            return channel_id

        rewritten = dict(context)
        for key in ("incoming", "defaultOutgoing"):
            if isinstance(context.get(key), dict):
                rewritten[key] = {**context[key], "channelId": local(context[key].get("channelId"))}
        if isinstance(context.get("candidates"), list):
            rewritten["candidates"] = [local(c) for c in context["candidates"]]
        return {**params, "channels": rewritten}

    async def permitted(
        self,
        event: Event,
        session: ClientSession,
        backend: str,
        own_id: str,
        uses: str,
        host_label: str | None = None,
        channel_id: object = None,
    ) -> Decision:
        """The chain's word (``policies.channel_access``) on ``event``: ``session`` publishing to, or
        letting ``backend`` observe, the backend's channel ``own_id``; ``host_label`` is the channel
        as host patterns see it (default: its exposed id)."""
        directory = self._dir
        gating = tuple(self._state.backend(backend).using(uses))
        enabled = directory.effective(session, backend) if gating else frozenset()
        principal = session.principal.name
        gates = tuple(
            ChannelGate(
                fs, directory.host_scopes(session, backend, fs), directory.operator_scopes(principal, backend, fs)
            )
            for fs in gating
            if fs in enabled
        )
        label = host_label if host_label is not None else exposed(session.view, backend, own_id)
        facts = ChannelFacts(uses, gating, gates, label, own_id, channel_id)
        return await self._chain.dispatch(event, session.principal, Target(backend, facts={CHANNELS_POLICY: facts}))

    # ---- backend side ------------------------------------------------------------------------

    def announce(
        self,
        backend: str,
        added: list[dict[str, Any]] | None = None,
        removed: list[str] | None = None,
        updated: list[dict[str, Any]] | None = None,
    ) -> None:
        """``channels/changed`` to every MCPL host of the backend, in its names."""
        for session in self._dir.sessions_of(backend):
            params: dict[str, Any] = {}
            if added:
                params["added"] = [self._out(session, backend, d) for d in added]
            if removed:
                params["removed"] = [exposed(session.view, backend, i) for i in removed]
            if updated:
                params["updated"] = [self._out(session, backend, d) for d in updated]
            if params:
                session.standalone.push(jsonrpc.notification("channels/changed", params))

    def server_changed(self, backend: str, params: dict[str, Any]) -> None:
        found = self._state.backend(backend)
        added = found.register(params.get("added"))
        updated = found.register(params.get("updated"))
        removed = found.unregister(params.get("removed"))
        self.announce(backend, added, removed, updated)

    async def server_request(
        self, conn: BackendConnection, method: str, params: dict[str, Any], owner: Any
    ) -> dict[str, Any]:
        found = self._state.backend(conn.name)
        eligible = None
        if "featureSet" in params:
            # The spec does not tag channel messages; one that is tagged is held to its tag like
            # any other server-initiated message (-32001 / -32003), and reaches only those sessions.
            _, eligible = await self._check_tag(conn, method, params)
        if method == "channels/register":
            taken = found.register(params.get("channels"))
            self.announce(conn.name, added=taken)
            self._audit("registered", None, conn.name, method, channels=[d["id"] for d in taken])
            return {"registered": [d["id"] for d in taken]}
        if method == "channels/list":
            # A server asking its host: the channels known on this connection (never left unanswered).
            return {"channels": list(found.channels.values())}
        return await self._incoming(conn, params, owner, eligible)

    async def _incoming(
        self, conn: BackendConnection, params: dict[str, Any], owner: Any, eligible: list[ClientSession] | None
    ) -> dict[str, Any]:
        messages = params.get("messages")
        if not isinstance(messages, list):
            raise jsonrpc.RpcError(jsonrpc.INVALID_PARAMS, "channels/incoming needs params.messages (an array)")
        candidates = self._dir.sessions_of(conn.name) if eligible is None else eligible
        hosts = [s for s in candidates if s.mcpl is not None and any(s.mcpl.channels.values())]
        session = self._peers.pick(hosts, owner)
        registered = self._state.backend(conn.name).channels
        results: dict[int, dict[str, Any]] = {}
        forward: list[tuple[int, dict[str, Any]]] = []
        for n, message in enumerate(messages):
            if not isinstance(message, dict):
                results[n] = {"messageId": None, "accepted": False, "reason": "not an object"}
            elif message.get("channelId") not in registered:
                results[n] = {"messageId": message.get("messageId"), "accepted": False, "reason": "Unknown channel"}
            elif session is None:
                results[n] = {"messageId": message.get("messageId"), "accepted": False, "reason": "no host session"}
            else:
                forward.append((n, {**message, "channelId": exposed(session.view, conn.name, message["channelId"])}))
        if forward and session is not None:
            answer = await self._peers.ask_host(
                session, "channels/incoming", {**params, "messages": [m for _, m in forward]}, conn=conn, owner=owner
            )
            by_id = {}
            for item in (answer or {}).get("results", []) if isinstance(answer, dict) else []:
                if isinstance(item, dict):
                    by_id[item.get("messageId")] = item
                    if isinstance(item.get("conversationId"), str):
                        self._state.pin_conversation(item["conversationId"], session.id)
            for n, message in forward:
                results[n] = by_id.get(message.get("messageId")) or {
                    "messageId": message.get("messageId"),
                    "accepted": False,
                    "reason": "the host gave no result for it",
                }
        self._audit("relayed", session, conn.name, "channels/incoming", messages=len(messages), forwarded=len(forward))
        return {"results": [results[n] for n in range(len(messages))]}

    # ---- host side ---------------------------------------------------------------------------

    async def host_request(self, session: ClientSession, method: str, params: dict[str, Any]) -> dict[str, Any]:
        state = self._state
        if method == "channels/list":
            return {
                "channels": [
                    self._out(session, b, d) for b in session.view.backends for d in state.backend(b).channels.values()
                ]
            }
        if method == "channels/publish":
            return await self.publish(session, params, True)
        if method == "channels/close":
            backend, own = self.resolve(session, params.get("channelId"))
            return self._unwrap(await self._peers.call_backend(backend, method, {**params, "channelId": own}))
        return await self._open(session, params)

    async def _open(self, session: ClientSession, params: dict[str, Any]) -> dict[str, Any]:
        """Open goes to the backend owning ``channelId`` when given, else the one backend that
        has channels of that ``type`` or, failing that, the one that manages channel lifecycles."""
        state = self._state
        if params.get("channelId") is not None:
            backend, own = self.resolve(session, params.get("channelId"))
            forward = {**params, "channelId": own}
        else:
            kind = params.get("type")
            mcpl_backends = self._dir.mcpl_backends(session.view)
            by_type = [
                b for b in mcpl_backends if any(d.get("type") == kind for d in state.backend(b).channels.values())
            ]
            lifecycle = [b for b in mcpl_backends if mcpl.channel_capabilities(state.backend(b).caps).get("lifecycle")]
            chosen = by_type if len(by_type) == 1 else lifecycle
            if len(chosen) != 1:
                raise jsonrpc.RpcError(
                    mcpl.CHANNEL_OPEN_FAILED,
                    f"Channel open failed: cannot tell which backend opens a {kind!r} channel "
                    f"({len(chosen)} candidates); name a channelId",
                )
            backend, forward = chosen[0], params
        result = self._unwrap(await self._peers.call_backend(backend, "channels/open", forward))
        channel = result.get("channel")
        if isinstance(channel, dict) and isinstance(channel.get("id"), str):
            state.backend(backend).register([channel])
            result = {**result, "channel": self._out(session, backend, channel)}
        self._audit("relayed", session, backend, "channels/open")
        return result

    @overload
    async def publish(
        self, session: ClientSession, params: dict[str, Any], request: Literal[True]
    ) -> dict[str, Any]: ...
    @overload
    async def publish(self, session: ClientSession, params: dict[str, Any], request: Literal[False]) -> None: ...

    async def publish(self, session: ClientSession, params: dict[str, Any], request: bool) -> dict[str, Any] | None:
        """A host's publish: a request (``request``) gets the backend's result or an RpcError; a
        notification is forwarded, or dropped with a log line, and gets nothing back."""
        try:
            backend, own = self.resolve(session, params.get("channelId"))
        except jsonrpc.RpcError:
            if request:
                raise
            log.info(
                "session %s: dropped channels/publish to unknown channel %r", session.id[:8], params.get("channelId")
            )
            return None
        event = host_message(session, "channels/publish", params, request)
        decision = await self.permitted(
            event, session, backend, own, mcpl.USES_PUBLISH, channel_id=params.get("channelId")
        )
        if not decision.allowed:
            self._audit("denied", session, backend, "channels/publish", channel=own, reason=decision.reason)
            if request:
                raise jsonrpc.RpcError(decision.code, "Channel not permitted", decision.data)
            return None
        self._audit("allowed", session, backend, "channels/publish", channel=own)
        forward = {**params, "channelId": own}
        if not request:
            conn = self._peers.connection(backend)
            conn.spawn(conn.notify("channels/publish", forward))
            return None
        return self._unwrap(await self._peers.call_backend(backend, "channels/publish", forward))

    async def observe(self, session: ClientSession, method: str, params: dict[str, Any]) -> None:
        """``channels/outgoing/*``: to every backend with an enabled observe feature set that may see it."""
        event = host_message(session, method, params, False)
        channel_id = params.get("channelId")
        owner: str | None
        own: object
        try:
            owner, own = self.resolve(session, channel_id)
        except jsonrpc.RpcError:
            owner, own = None, channel_id  # a host-side channel (e.g. "ui"): observers see its id as is
        for backend in session.view.backends:
            if not self._state.backend(backend).using(mcpl.USES_OBSERVE):
                continue
            conn = self._peers.connection(backend)
            if conn.state != "ready":
                continue
            local = own if backend == owner else channel_id
            label = channel_id if isinstance(channel_id, str) else ""
            decision = await self.permitted(
                event, session, backend, local if isinstance(local, str) else "", mcpl.USES_OBSERVE, host_label=label
            )
            if not decision.allowed:
                self._audit("withheld", session, backend, method, channel=local, reason=decision.reason)
                continue
            conn.spawn(conn.notify(method, {**params, "channelId": local}))

    @staticmethod
    def _unwrap(response: dict[str, Any]) -> dict[str, Any]:
        if "error" in response:
            error = response["error"] if isinstance(response["error"], dict) else {}
            raise jsonrpc.RpcError.from_error(error)
        result = response.get("result")
        return result if isinstance(result, dict) else {}
