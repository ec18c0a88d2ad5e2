"""A small, real OAuth 2.1 authorization server for the tests (issue 17): JWKS, token, exchange, introspection.

It is an HTTP server (Starlette on uvicorn) bound to 127.0.0.1 on a free port, run in a background thread with its
own event loop, so sync tests and async tests both use it: `with OAuthServer() as auth:` or `async with ...`.

Endpoints (all under `auth.url`, which is also the issuer):
- `GET /jwks` — RFC 7517 JWK Set of the current public keys (RSA RS256, EC P-256 ES256, Ed25519 EdDSA); `rotate()`
  adds a key (and may drop the old ones), `jwks_hits` counts fetches.
- `POST /token` — RFC 6749 §4.4 client_credentials and RFC 8693 §2.1 token exchange; client authentication by
  client_secret_basic (§2.3.1), client_secret_post, or private_key_jwt (RFC 7523 §2.2 / OIDC Core §9); errors per
  RFC 6749 §5.2 (400, or 401 with WWW-Authenticate for a failed client authentication).
- `POST /introspect` — RFC 7662: `active` with the claims of tokens it issued, minted, or registered as opaque
  (`issue_opaque`); the caller authenticates as a registered client.
- `GET /.well-known/oauth-authorization-server` (and `/.well-known/openid-configuration`) — RFC 8414 metadata.

Invariants: every token it hands out is a JWT signed with its current default key, or an opaque string it
remembers; a subject token is accepted only if it verifies against its own keys (issuer, signature, expiry) or is an
opaque token it issued and did not revoke. Every request is recorded (`requests`, `hits`) for assertions; `fail()`
makes chosen paths answer an error, a 5xx, garbage, or slowly. State is guarded by one lock: the test thread and the
server thread both touch it.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import secrets
import socket
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import unquote_plus

import jwt
import uvicorn
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

GRANT_CLIENT_CREDENTIALS = "client_credentials"
GRANT_TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
TOKEN_TYPE_ACCESS = "urn:ietf:params:oauth:token-type:access_token"
TOKEN_TYPE_JWT = "urn:ietf:params:oauth:token-type:jwt"
ASSERTION_TYPE_JWT = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
ALGORITHMS = ("RS256", "ES256", "EdDSA")
FailMode = Literal["error", "status", "garbage", "no_token", "slow"]


@dataclass(slots=True)
class SigningKey:
    """One key pair: `kid`, `alg`, the private key (for `mint`) and its public JWK (for `/jwks`)."""

    kid: str
    alg: str
    private: Any
    jwk: dict[str, Any]


def new_key(alg: str = "RS256", kid: str | None = None) -> SigningKey:
    """A fresh key pair for `alg` (RS256, ES256 on P-256, or EdDSA on Ed25519)."""
    kid = kid or f"{alg.lower()}-{uuid.uuid4().hex[:8]}"
    if alg == "RS256":
        private: Any = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        jwk = RSAAlgorithm.to_jwk(private.public_key(), as_dict=True)
    elif alg == "ES256":
        private = ec.generate_private_key(ec.SECP256R1())
        jwk = ECAlgorithm.to_jwk(private.public_key(), as_dict=True)
    elif alg == "EdDSA":
        private = ed25519.Ed25519PrivateKey.generate()
        jwk = OKPAlgorithm.to_jwk(private.public_key(), as_dict=True)
    else:
        raise ValueError(f"unsupported alg {alg!r}; use one of {ALGORITHMS}")
    return SigningKey(kid, alg, private, {**jwk, "kid": kid, "alg": alg, "use": "sig"})


@dataclass(slots=True)
class Client:
    """A registered client: a secret (client_secret_basic/post) and/or a public key (private_key_jwt)."""

    client_id: str
    secret: str | None = None
    key: SigningKey | None = None

    def assertion(self, audience: str, *, expires_in: int = 60, **extra: Any) -> str:
        """A private_key_jwt client assertion (RFC 7523 §3) for `audience` (the token endpoint URL)."""
        assert self.key is not None, "client has no key; use OAuthServer.add_client(..., with_key=True)"
        now = int(time.time())
        claims = {"iss": self.client_id, "sub": self.client_id, "aud": audience, "iat": now, "exp": now + expires_in}
        claims["jti"] = uuid.uuid4().hex
        return jwt.encode({**claims, **extra}, self.key.private, algorithm=self.key.alg, headers={"kid": self.key.kid})


@dataclass(slots=True)
class Recorded:
    """One request the server received: path, form fields, headers (lower-case), the authenticated client, status."""

    path: str
    form: dict[str, str]
    headers: dict[str, str]
    client_id: str | None = None
    auth_method: str | None = None
    status: int = 0


@dataclass(slots=True)
class Failure:
    """What `fail()` set: the mode, the paths it applies to, and its parameters."""

    mode: FailMode
    paths: tuple[str, ...]
    error: str = "invalid_grant"
    status: int = 503
    delay_s: float = 5.0


class OAuthError(Exception):
    """An RFC 6749 §5.2 error answer."""

    def __init__(self, error: str, description: str, status: int = 400, basic: bool = False) -> None:
        super().__init__(description)
        self.error, self.description, self.status, self.basic = error, description, status, basic

    def response(self) -> JSONResponse:
        headers = {"cache-control": "no-store"}
        if self.status == 401:
            headers["www-authenticate"] = 'Basic realm="test-as"' if self.basic else 'Bearer realm="test-as"'
        body = {"error": self.error, "error_description": self.description}
        return JSONResponse(body, status_code=self.status, headers=headers)


@dataclass(slots=True)
class _State:
    keys: list[SigningKey] = field(default_factory=list)  # published in /jwks; the last one signs by default
    retired: dict[str, SigningKey] = field(default_factory=dict)  # dropped from /jwks, still usable by mint(kid=)
    clients: dict[str, Client] = field(default_factory=dict)
    opaque: dict[str, dict[str, Any]] = field(default_factory=dict)
    revoked: set[str] = field(default_factory=set)
    requests: list[Recorded] = field(default_factory=list)
    hits: collections.Counter[str] = field(default_factory=collections.Counter)
    failure: Failure | None = None


class OAuthServer:
    """The test authorization server. Configure before or while it runs; all methods are thread-safe.

    Attributes tests may set: `token_lifetime_s` (expires_in of tokens from /token), `refuse_subjects` (a `sub`
    whose exchange answers invalid_grant), `allowed_audiences` (None: any; else others answer invalid_target).
    """

    def __init__(self, algorithms: tuple[str, ...] = ALGORITHMS, token_lifetime_s: int = 300) -> None:
        self._lock = threading.Lock()
        self._state = _State(keys=[new_key(alg) for alg in algorithms])
        self.token_lifetime_s = token_lifetime_s
        self.refuse_subjects: set[str] = set()
        self.allowed_audiences: set[str] | None = None
        self.port = 0
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    # -- addresses ---------------------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    issuer = url

    @property
    def jwks_url(self) -> str:
        return f"{self.url}/jwks"

    @property
    def token_url(self) -> str:
        return f"{self.url}/token"

    @property
    def introspect_url(self) -> str:
        return f"{self.url}/introspect"

    @property
    def metadata_url(self) -> str:
        return f"{self.url}/.well-known/oauth-authorization-server"

    # -- keys and tokens ---------------------------------------------------------------------------------------
    @property
    def kids(self) -> list[str]:
        with self._lock:
            return [key.kid for key in self._state.keys]

    def jwks(self) -> dict[str, Any]:
        with self._lock:
            return {"keys": [dict(key.jwk) for key in self._state.keys]}

    def rotate(self, alg: str = "RS256", *, drop_old: bool = False, kid: str | None = None) -> str:
        """Add a new key (it becomes the default signer); with `drop_old`, unpublish the others. Returns its kid."""
        key = new_key(alg, kid)
        with self._lock:
            if drop_old:
                self._state.retired.update({old.kid: old for old in self._state.keys})
                self._state.keys = []
            self._state.keys.append(key)
        return key.kid

    def drop(self, kid: str) -> None:
        """Unpublish one key; `mint(kid=...)` can still sign with it (a token the verifier cannot check)."""
        with self._lock:
            for key in self._state.keys:
                if key.kid == kid:
                    self._state.keys.remove(key)
                    self._state.retired[kid] = key
                    return
        raise KeyError(kid)

    def _key(self, kid: str | None, alg: str | None) -> SigningKey:
        with self._lock:
            keys = [*self._state.keys, *self._state.retired.values()]
            published = list(self._state.keys)
        if kid is not None:
            for key in keys:
                if key.kid == kid:
                    return key
            raise KeyError(kid)
        candidates = [key for key in published if alg is None or key.alg == alg]
        if not candidates:
            raise KeyError(f"no published key for alg {alg!r}")
        return candidates[-1]

    def mint(
        self,
        claims: Mapping[str, Any],
        *,
        kid: str | None = None,
        alg: str | None = None,
        expires_in: int | None = 300,
        headers: Mapping[str, Any] | None = None,
    ) -> str:
        """A JWT signed with one of its keys (by `kid`, else the newest published key of `alg`, else the newest).

        `iss`, `iat`, `exp` (now + `expires_in`; None omits it) and `jti` are added unless `claims` has them.
        """
        key = self._key(kid, alg)
        now = int(time.time())
        body: dict[str, Any] = {"iss": self.issuer, "iat": now, "jti": uuid.uuid4().hex}
        if expires_in is not None:
            body["exp"] = now + expires_in
        body.update(claims)
        return jwt.encode(body, key.private, algorithm=key.alg, headers={"kid": key.kid, **(headers or {})})

    def issue_opaque(self, claims: Mapping[str, Any], *, expires_in: int | None = 300) -> str:
        """Register an opaque access token with these claims; /introspect answers them while it is active."""
        token = secrets.token_urlsafe(24)
        now = int(time.time())
        body: dict[str, Any] = {"iss": self.issuer, "iat": now, **claims}
        if expires_in is not None:
            body.setdefault("exp", now + expires_in)
        with self._lock:
            self._state.opaque[token] = body
        return token

    def revoke(self, token: str) -> None:
        with self._lock:
            self._state.revoked.add(token)

    def claims_of(self, token: str) -> dict[str, Any] | None:
        """The claims of an active token it minted/issued (signature, issuer, expiry checked), else None."""
        with self._lock:
            if token in self._state.revoked:
                return None
            opaque = self._state.opaque.get(token)
            published = {key.kid: key for key in self._state.keys}
        if opaque is not None:
            exp = opaque.get("exp")
            return dict(opaque) if exp is None or exp > time.time() else None
        try:
            key = published[str(jwt.get_unverified_header(token).get("kid"))]
            public = key.private.public_key()
            return dict(
                jwt.decode(token, public, algorithms=[key.alg], issuer=self.issuer, options={"verify_aud": False})
            )
        except (jwt.PyJWTError, KeyError, TypeError):
            return None

    # -- clients -----------------------------------------------------------------------------------------------
    def add_client(
        self, client_id: str, secret: str | None = None, *, with_key: bool = False, alg: str = "ES256"
    ) -> Client:
        """Register a client with a secret and/or a key pair for private_key_jwt (the returned Client signs)."""
        client = Client(client_id, secret, new_key(alg) if with_key else None)
        with self._lock:
            self._state.clients[client_id] = client
        return client

    # -- observation and failure injection ---------------------------------------------------------------------
    @property
    def requests(self) -> list[Recorded]:
        with self._lock:
            return list(self._state.requests)

    def token_requests(self, grant_type: str | None = None) -> list[Recorded]:
        """The /token requests received (of `grant_type` if given), oldest first."""
        return [r for r in self.requests if r.path == "/token" and grant_type in (None, r.form.get("grant_type"))]

    def hits(self, path: str) -> int:
        with self._lock:
            return self._state.hits[path]

    @property
    def jwks_hits(self) -> int:
        return self.hits("/jwks")

    def fail(
        self,
        mode: FailMode | None,
        *,
        paths: tuple[str, ...] = ("/token",),
        error: str = "invalid_grant",
        status: int = 503,
        delay_s: float = 5.0,
    ) -> None:
        """Make `paths` misbehave until `fail(None)`: "error" (RFC 6749 §5.2 `error`, 400), "status" (`status`, no
        body), "garbage" (200 with a non-JSON body), "no_token" (200 JSON without access_token), "slow" (answer
        normally after `delay_s`)."""
        with self._lock:
            self._state.failure = None if mode is None else Failure(mode, paths, error, status, delay_s)

    # -- lifecycle ---------------------------------------------------------------------------------------------
    def start(self, timeout_s: float = 10.0) -> None:
        sock = socket.create_server(("127.0.0.1", self.port))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(self._app(), log_level="warning", lifespan="off", timeout_graceful_shutdown=1)
        server = uvicorn.Server(config)
        self._server = server
        self._thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])), daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("test OAuth server did not start")
            time.sleep(0.01)

    def stop(self, timeout_s: float = 10.0) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout_s)
        self._server = self._thread = None

    def __enter__(self) -> OAuthServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def __aenter__(self) -> OAuthServer:
        await asyncio.to_thread(self.start)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.stop)

    # -- the HTTP side -----------------------------------------------------------------------------------------
    def _app(self) -> Starlette:
        routes = [
            Route("/jwks", self._jwks, methods=["GET"]),
            Route("/token", self._token, methods=["POST"]),
            Route("/introspect", self._introspect, methods=["POST"]),
            Route("/.well-known/oauth-authorization-server", self._metadata, methods=["GET"]),
            Route("/.well-known/openid-configuration", self._metadata, methods=["GET"]),
        ]
        return Starlette(routes=routes)

    async def _record(self, request: Request) -> tuple[Recorded, Failure | None]:
        body = (await request.body()).decode("utf-8", "replace")
        form: dict[str, str] = {}
        for pair in body.split("&") if body else []:
            name, _, value = pair.partition("=")
            form[unquote_plus(name)] = unquote_plus(value)
        record = Recorded(request.url.path, form, {k.lower(): v for k, v in request.headers.items()})
        with self._lock:
            self._state.requests.append(record)
            self._state.hits[record.path] += 1
            failure = self._state.failure
        if failure is not None and record.path not in failure.paths:
            failure = None
        return record, failure

    async def _injected(self, failure: Failure | None) -> Response | None:
        if failure is None:
            return None
        if failure.mode == "slow":
            await asyncio.sleep(failure.delay_s)
            return None
        if failure.mode == "error":
            return OAuthError(failure.error, "injected failure").response()
        if failure.mode == "status":
            return Response(b"", status_code=failure.status)
        if failure.mode == "garbage":
            return Response(b"<html>not json", status_code=200, media_type="application/json")
        return JSONResponse({"token_type": "Bearer", "expires_in": 60})  # no_token

    async def _jwks(self, request: Request) -> Response:
        _, failure = await self._record(request)
        return await self._injected(failure) or JSONResponse(self.jwks(), headers={"cache-control": "max-age=300"})

    async def _metadata(self, request: Request) -> Response:
        _, failure = await self._record(request)
        return await self._injected(failure) or JSONResponse(
            {
                "issuer": self.issuer,
                "token_endpoint": self.token_url,
                "jwks_uri": self.jwks_url,
                "introspection_endpoint": self.introspect_url,
                "response_types_supported": [],  # no authorization endpoint: this server only issues via /token
                "grant_types_supported": [GRANT_CLIENT_CREDENTIALS, GRANT_TOKEN_EXCHANGE],
                "token_endpoint_auth_methods_supported": [
                    "client_secret_basic",
                    "client_secret_post",
                    "private_key_jwt",
                ],
                "token_endpoint_auth_signing_alg_values_supported": list(ALGORITHMS),
                "introspection_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
            }
        )

    def _authenticate(self, record: Recorded) -> Client:
        """RFC 6749 §2.3: exactly one client authentication method; raises invalid_client (401) when it fails."""
        form, header = record.form, record.headers.get("authorization", "")
        methods = [
            name
            for name, used in (
                ("client_secret_basic", header.lower().startswith("basic ")),
                ("client_secret_post", "client_secret" in form),
                ("private_key_jwt", "client_assertion" in form),
            )
            if used
        ]
        if len(methods) != 1:
            raise OAuthError(
                "invalid_request" if methods else "invalid_client",
                "use exactly one client authentication",
                400 if methods else 401,
            )
        method = methods[0]
        basic = method == "client_secret_basic"
        with self._lock:
            clients = dict(self._state.clients)
        if basic:
            try:
                client_id, _, secret = base64.b64decode(header[6:].strip(), validate=True).decode().partition(":")
                client_id, secret = unquote_plus(client_id), unquote_plus(secret)
            except ValueError:
                raise OAuthError("invalid_client", "malformed Basic credentials", 401, basic=True) from None
        elif method == "client_secret_post":
            client_id, secret = form.get("client_id", ""), form["client_secret"]
        else:
            client_id, secret = self._check_assertion(form, clients), ""
        client = clients.get(client_id)
        if client is None or (
            method != "private_key_jwt" and (client.secret is None or not secrets.compare_digest(client.secret, secret))
        ):
            raise OAuthError("invalid_client", "client authentication failed", 401, basic=basic)
        record.client_id, record.auth_method = client_id, method
        return client

    def _check_assertion(self, form: Mapping[str, str], clients: Mapping[str, Client]) -> str:
        if form.get("client_assertion_type") != ASSERTION_TYPE_JWT:
            raise OAuthError("invalid_client", "client_assertion_type must be jwt-bearer (RFC 7523)", 401)
        assertion = form["client_assertion"]
        try:
            client_id = jwt.decode(assertion, options={"verify_signature": False}).get("iss", "")
            client = clients[client_id]
            assert client.key is not None
            claims = jwt.decode(
                assertion,
                client.key.private.public_key(),
                algorithms=[client.key.alg],
                audience=[self.token_url, self.issuer, self.introspect_url],
                options={"require": ["iss", "sub", "aud", "exp"]},
            )
        except (jwt.PyJWTError, KeyError, AssertionError, AttributeError):
            raise OAuthError("invalid_client", "client assertion rejected", 401) from None
        if claims["sub"] != client_id:
            raise OAuthError("invalid_client", "client assertion sub must equal iss", 401)
        return str(client_id)

    async def _token(self, request: Request) -> Response:
        record, failure = await self._record(request)
        injected = await self._injected(failure)
        if injected is not None:
            record.status = injected.status_code
            return injected
        try:
            client = self._authenticate(record)
            grant = record.form.get("grant_type")
            if grant == GRANT_CLIENT_CREDENTIALS:
                claims: dict[str, Any] = {"sub": client.client_id, "client_id": client.client_id}
            elif grant == GRANT_TOKEN_EXCHANGE:
                claims = self._exchange(record.form, client)
            else:
                raise OAuthError("unsupported_grant_type", f"grant_type {grant!r} is not supported")
            audiences = [v for v in (record.form.get("audience"), record.form.get("resource")) if v]
            if self.allowed_audiences is not None and any(a not in self.allowed_audiences for a in audiences):
                raise OAuthError("invalid_target", "audience or resource not acceptable (RFC 8693 §2.2.2)")
            if audiences:
                claims["aud"] = audiences[0] if len(audiences) == 1 else audiences
            if record.form.get("scope"):
                claims["scope"] = record.form["scope"]
        except OAuthError as exc:
            record.status = exc.status
            return exc.response()
        token = self.mint({**claims, "client_id": client.client_id}, expires_in=self.token_lifetime_s)
        body: dict[str, Any] = {"access_token": token, "token_type": "Bearer", "expires_in": self.token_lifetime_s}
        if grant == GRANT_TOKEN_EXCHANGE:
            body["issued_token_type"] = TOKEN_TYPE_ACCESS
        if "scope" in claims:
            body["scope"] = claims["scope"]
        record.status = 200
        return JSONResponse(body, headers={"cache-control": "no-store"})

    def _exchange(self, form: Mapping[str, str], client: Client) -> dict[str, Any]:
        """RFC 8693 §2.1: verify the subject token with our own keys; the new token names the client as actor (§4.1)."""
        subject_token, subject_type = form.get("subject_token"), form.get("subject_token_type")
        if not subject_token or not subject_type:
            raise OAuthError("invalid_request", "subject_token and subject_token_type are required")
        if subject_type not in (TOKEN_TYPE_ACCESS, TOKEN_TYPE_JWT):
            raise OAuthError("invalid_request", f"unsupported subject_token_type {subject_type!r}")
        if form.get("requested_token_type") not in (None, TOKEN_TYPE_ACCESS, TOKEN_TYPE_JWT):
            raise OAuthError("invalid_request", "unsupported requested_token_type")
        subject = self.claims_of(subject_token)
        if subject is None:
            raise OAuthError("invalid_grant", "subject_token is invalid, expired or revoked")
        if subject.get("sub") in self.refuse_subjects:
            raise OAuthError("invalid_grant", "exchange refused for this subject")
        claims = {"sub": subject.get("sub"), "act": {"sub": client.client_id}}
        if "scope" in subject:
            claims["scope"] = subject["scope"]
        return claims

    async def _introspect(self, request: Request) -> Response:
        record, failure = await self._record(request)
        injected = await self._injected(failure)
        if injected is not None:
            record.status = injected.status_code
            return injected
        try:
            self._authenticate(record)
        except OAuthError as exc:
            record.status = exc.status
            return exc.response()
        token = record.form.get("token")
        if not token:
            record.status = 400
            return OAuthError("invalid_request", "token is required").response()
        claims = self.claims_of(token)
        record.status = 200
        if claims is None:
            return JSONResponse({"active": False})
        return JSONResponse({"active": True, "token_type": "Bearer", **claims})
