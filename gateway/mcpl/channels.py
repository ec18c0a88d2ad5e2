"""Channels of communication (MCPL §14) across federated backends.

Backends register channels on their connection; hosts see the merged registry under exposed ids
(``BACKEND.`` prefixed when the view federates). Host requests on a channel go to the backend that
owns it; inbound messages go to one host with the per-message results mapped back. Publishing and
observing are gated by the feature sets that use ``channels.publish`` / ``channels.observe`` and by
the scope patterns of host and operator (-32017), unknown channels are -32023.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Literal, overload

from adapters import mcpl
from gateway import jsonrpc
from gateway.mcpl.state import exposed, resolve
from gateway.sessions import ClientSession
from policies.scopes import ScopeRules, permits

if TYPE_CHECKING:
    from gateway.mcpl.relay import McplRelay
    from gateway.upstreams.connection import BackendConnection

log = logging.getLogger(__name__)


class ChannelRouter:
    def __init__(self, relay: McplRelay) -> None:
        self._relay = relay

    # ---- names -------------------------------------------------------------------------------

    def _out(self, session: ClientSession, backend: str, descriptor: dict[str, Any]) -> dict[str, Any]:
        return {**descriptor, "id": exposed(session.view, backend, descriptor["id"])}

    def resolve(self, session: ClientSession, channel_id: Any) -> tuple[str, str]:
        relay = self._relay
        found = (
            resolve(session.view, channel_id, {b: relay.backend(b).channels for b in session.view.backends})
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
        own = self._relay.backend(backend).channels

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

    def permitted(
        self, session: ClientSession, backend: str, own_id: str, uses: str, host_label: str | None = None
    ) -> tuple[bool, str]:
        """Whether the session may publish to / let observe a channel of ``backend``.

        Ungated when the backend declares no feature set using ``uses``; otherwise one of those sets
        must be enabled and the channel must not be blacklisted in its scopes (host patterns see the
        exposed id, operator patterns the backend's own).
        """
        relay = self._relay
        sets = relay.backend(backend).using(uses)
        if not sets:
            return True, ""
        enabled = [fs for fs in sets if fs in relay.effective(session, backend)]
        if not enabled:
            return False, f"no feature set using {uses} is enabled ({', '.join(sets)})"
        label = host_label if host_label is not None else exposed(session.view, backend, own_id)
        reason = ""
        for fs in enabled:
            host = permits(label, relay.host_scopes(session, backend, fs), ScopeRules())
            operator = permits(own_id, ScopeRules(), relay.operator_scopes(session.principal.name, backend, fs))
            if host.outcome == "approve" and operator.outcome == "approve":
                return True, ""
            reason = operator.reason if operator.outcome == "deny" else host.reason
        return False, reason

    # ---- backend side ------------------------------------------------------------------------

    def announce(
        self,
        backend: str,
        added: list[dict[str, Any]] | None = None,
        removed: list[str] | None = None,
        updated: list[dict[str, Any]] | None = None,
    ) -> None:
        """``channels/changed`` to every MCPL host of the backend, in its names."""
        for session in self._relay.sessions_of(backend):
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
        found = self._relay.backend(backend)
        added = found.register(params.get("added"))
        updated = found.register(params.get("updated"))
        removed = found.unregister(params.get("removed"))
        self.announce(backend, added, removed, updated)

    async def server_request(
        self, conn: BackendConnection, method: str, params: dict[str, Any], owner: Any
    ) -> dict[str, Any]:
        relay = self._relay
        found = relay.backend(conn.name)
        eligible = None
        if "featureSet" in params:
            # The spec does not tag channel messages; one that is tagged is held to its tag like
            # any other server-initiated message (-32001 / -32003), and reaches only those sessions.
            _, eligible = await relay.requests.check_tag(conn, method, params)
        if method == "channels/register":
            taken = found.register(params.get("channels"))
            self.announce(conn.name, added=taken)
            relay.audit("registered", None, conn.name, method, channels=[d["id"] for d in taken])
            return {"registered": [d["id"] for d in taken]}
        if method == "channels/list":
            # A server asking its host: the channels known on this connection (never left unanswered).
            return {"channels": list(found.channels.values())}
        return await self._incoming(conn, params, owner, eligible)

    async def _incoming(
        self, conn: BackendConnection, params: dict[str, Any], owner: Any, eligible: list[ClientSession] | None
    ) -> dict[str, Any]:
        relay = self._relay
        messages = params.get("messages")
        if not isinstance(messages, list):
            raise jsonrpc.RpcError(jsonrpc.INVALID_PARAMS, "channels/incoming needs params.messages (an array)")
        candidates = relay.sessions_of(conn.name) if eligible is None else eligible
        hosts = [s for s in candidates if s.mcpl is not None and any(s.mcpl.channels.values())]
        session = relay.pick(hosts, owner)
        registered = relay.backend(conn.name).channels
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
            answer = await relay.ask_host(
                session, "channels/incoming", {**params, "messages": [m for _, m in forward]}, conn=conn, owner=owner
            )
            by_id = {}
            for item in (answer or {}).get("results", []) if isinstance(answer, dict) else []:
                if isinstance(item, dict):
                    by_id[item.get("messageId")] = item
                    if isinstance(item.get("conversationId"), str):
                        relay.pin_conversation(item["conversationId"], session)
            for n, message in forward:
                results[n] = by_id.get(message.get("messageId")) or {
                    "messageId": message.get("messageId"),
                    "accepted": False,
                    "reason": "the host gave no result for it",
                }
        relay.audit("relayed", session, conn.name, "channels/incoming", messages=len(messages), forwarded=len(forward))
        return {"results": [results[n] for n in range(len(messages))]}

    # ---- host side ---------------------------------------------------------------------------

    async def host_request(self, session: ClientSession, method: str, params: dict[str, Any]) -> dict[str, Any]:
        relay = self._relay
        if method == "channels/list":
            return {
                "channels": [
                    self._out(session, b, d) for b in session.view.backends for d in relay.backend(b).channels.values()
                ]
            }
        if method == "channels/publish":
            return await self.publish(session, params, True)
        if method == "channels/close":
            backend, own = self.resolve(session, params.get("channelId"))
            return self._unwrap(await relay.call_backend(backend, method, {**params, "channelId": own}))
        return await self._open(session, params)

    async def _open(self, session: ClientSession, params: dict[str, Any]) -> dict[str, Any]:
        """Open goes to the backend owning ``channelId`` when given, else the one backend that
        has channels of that ``type`` or, failing that, the one that manages channel lifecycles."""
        relay = self._relay
        if params.get("channelId") is not None:
            backend, own = self.resolve(session, params.get("channelId"))
            forward = {**params, "channelId": own}
        else:
            kind = params.get("type")
            mcpl_backends = [b for b in session.view.backends if relay.is_mcpl(b)]
            by_type = [
                b for b in mcpl_backends if any(d.get("type") == kind for d in relay.backend(b).channels.values())
            ]
            lifecycle = [b for b in mcpl_backends if mcpl.channel_capabilities(relay.backend(b).caps).get("lifecycle")]
            chosen = by_type if len(by_type) == 1 else lifecycle
            if len(chosen) != 1:
                raise jsonrpc.RpcError(
                    mcpl.CHANNEL_OPEN_FAILED,
                    f"Channel open failed: cannot tell which backend opens a {kind!r} channel "
                    f"({len(chosen)} candidates); name a channelId",
                )
            backend, forward = chosen[0], params
        result = self._unwrap(await relay.call_backend(backend, "channels/open", forward))
        channel = result.get("channel")
        if isinstance(channel, dict) and isinstance(channel.get("id"), str):
            relay.backend(backend).register([channel])
            result = {**result, "channel": self._out(session, backend, channel)}
        relay.audit("relayed", session, backend, "channels/open")
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
        relay = self._relay
        try:
            backend, own = self.resolve(session, params.get("channelId"))
        except jsonrpc.RpcError:
            if request:
                raise
            log.info(
                "session %s: dropped channels/publish to unknown channel %r", session.id[:8], params.get("channelId")
            )
            return None
        ok, reason = self.permitted(session, backend, own, mcpl.USES_PUBLISH)
        if not ok:
            relay.audit("denied", session, backend, "channels/publish", channel=own, reason=reason)
            if request:
                raise jsonrpc.RpcError(
                    mcpl.CHANNEL_NOT_PERMITTED,
                    "Channel not permitted",
                    {"channelId": params.get("channelId"), "reason": reason},
                )
            return None
        relay.audit("allowed", session, backend, "channels/publish", channel=own)
        forward = {**params, "channelId": own}
        if not request:
            conn = relay.gateway.connections[backend]
            conn.spawn(conn.notify("channels/publish", forward))
            return None
        return self._unwrap(await relay.call_backend(backend, "channels/publish", forward))

    def observe(self, session: ClientSession, method: str, params: dict[str, Any]) -> None:
        """``channels/outgoing/*``: to every backend with an enabled observe feature set that may see it."""
        relay = self._relay
        channel_id = params.get("channelId")
        owner: str | None
        own: object
        try:
            owner, own = self.resolve(session, channel_id)
        except jsonrpc.RpcError:
            owner, own = None, channel_id  # a host-side channel (e.g. "ui"): observers see its id as is
        for backend in session.view.backends:
            if not relay.backend(backend).using(mcpl.USES_OBSERVE):
                continue
            conn = relay.gateway.connections[backend]
            if conn.state != "ready":
                continue
            local = own if backend == owner else channel_id
            label = channel_id if isinstance(channel_id, str) else ""
            ok, reason = self.permitted(
                session, backend, local if isinstance(local, str) else "", mcpl.USES_OBSERVE, host_label=label
            )
            if not ok:
                relay.audit("withheld", session, backend, method, channel=local, reason=reason)
                continue
            conn.spawn(conn.notify(method, {**params, "channelId": local}))

    @staticmethod
    def _unwrap(response: dict[str, Any]) -> dict[str, Any]:
        if "error" in response:
            error = response["error"] if isinstance(response["error"], dict) else {}
            raise jsonrpc.RpcError.from_error(error)
        result = response.get("result")
        return result if isinstance(result, dict) else {}
