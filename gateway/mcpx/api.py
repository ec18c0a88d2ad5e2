"""REST around MCPx topics: capability promotion (§11.3), topic listings, and dev tokens.

- ``POST /admin/participants/{id}/capabilities {add, remove}``: admin token; applies to every live
  connection of that participant at once and sends each a fresh ``system/welcome``. The change lasts
  as long as the connection (durable grants belong to ``/admin/principals``).
- ``GET /v0.1/topics`` and ``GET /v0.1/topics/{topic}/participants``: any authenticated caller (or the
  admin token); a JWT bound to a topic sees only that topic.
- ``POST /v0.1/auth/token {participantId, topic, capabilities?}`` -> ``{token, capabilities}``: only with
  ``mcpx.dev_tokens: true`` and an HS256 secret, else 404. Compatible with the reference's clients.

The API is given what it uses (the topic hub, audit, how to authenticate, the auth section in force),
not the whole gateway.
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import orjson
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from gateway.admin import AdminApi, error_response
from gateway.transports.http_common import bearer_challenge
from policies.auth import AuthError, bearer_token
from policies.jwt import mint_hs256
from policies.patterns import CapabilitySet

if TYPE_CHECKING:
    from gateway.audit import AuditLog
    from gateway.config import Auth, Mcpx
    from gateway.mcpx.door import Authenticate
    from gateway.mcpx.hub import TopicHub

# What a dev token grants when the request names no capabilities: the spec's "start restricted".
DEV_DEFAULT_CAPABILITIES = ["mcp/proposal:*", "mcp/response:*", "chat"]
DEV_TOKEN_TTL_S = 3600


class McpxApi:
    def __init__(
        self,
        config: Mcpx,
        *,
        auth: Callable[[], Auth | None],
        topics: TopicHub,
        audit: AuditLog,
        authenticate: Authenticate,
        admin: AdminApi,
    ) -> None:
        """``auth``: the auth section in force now (a config reload replaces it)."""
        self._cfg = config
        self._auth = auth
        self._topics = topics
        self._audit = audit
        self._authenticate = authenticate
        self._admin = admin

    def routes(self) -> list[Route]:
        return [
            Route("/admin/participants/{id}/capabilities", self.change_capabilities, methods=["POST"]),
            Route("/v0.1/auth/token", self.dev_token, methods=["POST"]),
            Route("/v0.1/topics", self.list_topics, methods=["GET"]),
            Route("/v0.1/topics/{topic}/participants", self.list_participants, methods=["GET"]),
        ]

    async def change_capabilities(self, request: Request) -> Response:
        if (refused := self._admin._authorized(request)) is not None:
            return refused
        participant_id = request.path_params["id"]
        try:
            body = orjson.loads(await request.body())
        except orjson.JSONDecodeError:
            return error_response(400, "body is not JSON")
        add = body.get("add", []) if isinstance(body, dict) else None
        remove = body.get("remove", []) if isinstance(body, dict) else None
        if not (isinstance(add, list) and isinstance(remove, list) and all(isinstance(c, str) for c in add + remove)):
            return error_response(400, "body must be {add: [patterns], remove: [patterns]}")
        live = await self._topics.locate(participant_id)
        if not live:
            return error_response(404, f"participant {participant_id!r} is not connected")
        _, old_patterns, old_described = live[0]
        # The admin's word replaces any narrowing the token carried: promotion must be able to grant.
        patterns = [p for p in old_patterns if p not in remove] + [p for p in add if p not in old_patterns]
        new = CapabilitySet(patterns)
        topics = [topic for topic, _, _ in live]
        # Applied wherever the participant is connected, this replica or another (ADR 0015).
        await self._topics.change_capabilities(participant_id, new)
        self._audit.record(
            "participant_capabilities_changed", principal=participant_id, topics=topics, capabilities=patterns
        )
        return JSONResponse(
            {
                "participantId": participant_id,
                "oldCapabilities": old_described,
                "newCapabilities": new.describe(),
                "modifiedBy": "admin",
                "modifiedAt": datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
                "topics": topics,
            }
        )

    async def dev_token(self, request: Request) -> Response:
        auth = self._auth()
        jwt = auth.jwt if auth is not None else None
        secret = jwt.hs256_secret if jwt is not None else None
        if not self._cfg.dev_tokens or jwt is None or not secret:
            return error_response(404, "dev tokens are off (mcpx.dev_tokens with auth.jwt.hs256_secret)")
        try:
            body = orjson.loads(await request.body())
        except orjson.JSONDecodeError:
            return error_response(400, "body is not JSON")
        if not isinstance(body, dict):
            return error_response(400, "body must be an object")
        participant, topic, capabilities = body.get("participantId"), body.get("topic"), body.get("capabilities")
        if not isinstance(participant, str) or not participant or participant.startswith("system:"):
            return error_response(400, "participantId must be a non-empty string not starting with 'system:'")
        if not isinstance(topic, str) or not topic:
            return error_response(400, "topic must be a non-empty string")
        if capabilities is None:
            capabilities = list(DEV_DEFAULT_CAPABILITIES)
        if not isinstance(capabilities, list) or not all(isinstance(c, str) for c in capabilities):
            return error_response(400, "capabilities must be an array of patterns")
        claims: dict[str, Any] = {
            jwt.principal_claim: participant,
            "participantId": participant,
            "topic": topic,
            "capabilities": capabilities,
            "iat": int(time.time()),
            "exp": int(time.time()) + DEV_TOKEN_TTL_S,
        }
        # Verification checks these when configured; a dev token must pass its own gateway.
        if jwt.issuer:
            claims["iss"] = jwt.issuer
        if jwt.audience:
            claims["aud"] = jwt.audience
        return JSONResponse({"token": mint_hs256(claims, secret), "capabilities": capabilities})

    def _reader_topic(self, request: Request) -> tuple[Response | None, str | None]:
        """(refusal, topic the caller is bound to): admin, or any caller the gateway authenticates."""
        auth = self._auth()
        token = bearer_token(request.headers.get("authorization"))
        if auth is not None and auth.admin_token and token is not None:
            if hmac.compare_digest(token.encode(), auth.admin_token.encode()):
                return None, None
        try:
            credentials = self._authenticate(request.scope)
        except AuthError as exc:
            response = error_response(401, f"Unauthorized: {exc.reason}")
            response.headers["www-authenticate"] = bearer_challenge(request.scope, exc.reason, exc.error)
            return response, None
        return None, credentials.topic

    async def list_topics(self, request: Request) -> Response:
        refused, bound = self._reader_topic(request)
        if refused is not None:
            return refused
        topics = [t for t in await self._topics.listing() if bound is None or t["name"] == bound]
        return JSONResponse({"topics": topics})

    async def list_participants(self, request: Request) -> Response:
        refused, bound = self._reader_topic(request)
        if refused is not None:
            return refused
        name = request.path_params["topic"]
        participants = await self._topics.roster(name)
        if participants is None or (bound is not None and bound != name):
            return error_response(404, f"no topic {name!r}")
        return JSONResponse({"topic": name, "participants": participants})
