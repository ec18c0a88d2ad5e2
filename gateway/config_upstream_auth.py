"""How the gateway authenticates to one backend (``backends.NAME.auth``), issue 17.

Four kinds, chosen by ``type``:

- ``static``: fixed headers (what ``backends.NAME.headers`` always was);
- ``client_credentials``: the gateway's own OAuth identity for that backend (RFC 6749 §4.4);
- ``token_exchange``: the caller's verified token exchanged for one scoped to that backend (RFC 8693 §2.1);
- ``principal_headers``: headers per principal from config/env (backends with an API key per user).

Invariants the validators keep (``switchboard check`` explains each): a client authenticates to the token
endpoint in exactly one way (client_secret or client_assertion); the per-user kinds (token_exchange,
principal_headers) need ``transport: http``, because only there each request carries its own headers (one
WebSocket, legacy SSE stream or stdio child serves every user, so it could only carry a shared credential);
client_credentials needs http too (its token is refreshed per request; ws/sse send headers once, at connect).
"""

from __future__ import annotations

from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from gateway.config_base import StrictModel as _Model

TOKEN_TYPE_ACCESS = "urn:ietf:params:oauth:token-type:access_token"
TOKEN_TYPE_JWT = "urn:ietf:params:oauth:token-type:jwt"
_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})


def _header_names(headers: dict[str, str], where: str) -> dict[str, str]:
    for name, value in headers.items():
        if not name or any(c in name for c in " \t\r\n:") or any(c in value for c in "\r\n"):
            raise ValueError(f"{where}: header {name!r} is not a valid header name/value (no spaces, colons, CR/LF)")
    return headers


class StaticAuth(_Model):
    type: Literal["static"] = Field(description="Fixed headers on every request (the backend's own credential).")
    headers: dict[str, str] = Field(
        default_factory=dict, description="Header name -> value, e.g. {Authorization: 'Bearer ${TOKEN}'}."
    )

    @field_validator("headers")
    @classmethod
    def _valid(cls, value: dict[str, str]) -> dict[str, str]:
        return _header_names(value, "auth.headers")


class ClientAssertion(_Model):
    """private_key_jwt (RFC 7523 §2.2): the gateway signs a short JWT with its own key instead of a secret."""

    private_key_file: str = Field(description="PEM file of the gateway's private key (read at startup).")
    alg: Literal["RS256", "PS256", "ES256", "EdDSA"] = Field("RS256", description="Signing algorithm of the key.")
    kid: str | None = Field(None, description="The key id the authorization server knows the public key by.")
    audience: str | None = Field(None, description="The assertion's 'aud' (default: the token_endpoint URL).")
    lifetime_s: int = Field(
        60, ge=10, le=600, description="How long each assertion is valid (a fresh one per request)."
    )


class _OAuthClient(_Model):
    """What a request to the token endpoint needs: where, as which client, for which target."""

    token_endpoint: str = Field(
        description="The authorization server's token endpoint (https://, or http:// for tests)."
    )
    client_id: str = Field(description="The gateway's client_id at the authorization server.")
    client_secret: str | None = Field(None, description="Its client secret (use ${ENV}); or client_assertion.")
    client_auth: Literal["client_secret_basic", "client_secret_post"] = Field(
        "client_secret_basic", description="How client_secret is sent (RFC 6749 §2.3.1); basic is the default."
    )
    client_assertion: ClientAssertion | None = Field(None, description="private_key_jwt instead of a secret.")
    audience: str | None = Field(None, description="'audience' asked for: the backend's name at the AS (RFC 8693).")
    resource: str | None = Field(None, description="'resource' asked for: the backend's URI (RFC 8707).")
    scope: str | None = Field(None, description="Space-separated scopes asked for.")
    timeout_s: float = Field(10.0, gt=0, le=60, description="Longest one token request may take.")
    refresh_margin_s: float = Field(
        30.0, ge=0, description="A token is renewed this long before its expires_in runs out (clock skew, latency)."
    )
    default_expires_in_s: int = Field(
        60, ge=0, description="Lifetime assumed when the answer has no expires_in (0: use each token once)."
    )

    @field_validator("token_endpoint")
    @classmethod
    def _url(cls, value: str) -> str:
        # Client secrets and the callers' tokens go there: plain http only to this machine (tests, a sidecar).
        parsed = urlsplit(value)
        if parsed.scheme == "https" and parsed.hostname:
            return value
        if parsed.scheme == "http" and parsed.hostname in _LOOPBACK:
            return value
        raise ValueError("token_endpoint must be an https:// URL (http:// only to a loopback address)")

    @model_validator(mode="after")
    def _one_client_auth(self) -> _OAuthClient:
        if (self.client_secret is None) == (self.client_assertion is None):
            raise ValueError("give exactly one of client_secret or client_assertion (how the gateway authenticates)")
        return self


class ClientCredentialsAuth(_OAuthClient):
    type: Literal["client_credentials"] = Field(
        description="The gateway's own token for this backend (RFC 6749 §4.4), renewed before it expires."
    )


class TokenExchangeAuth(_OAuthClient):
    type: Literal["token_exchange"] = Field(
        description="The caller's token exchanged (RFC 8693) for one scoped to this backend; cached per principal."
    )
    subject_token: Literal["client"] = Field(
        "client", description="What is exchanged: the bearer token the client presented on this request."
    )
    requested_token_type: (
        Literal["urn:ietf:params:oauth:token-type:access_token", "urn:ietf:params:oauth:token-type:jwt"] | None
    ) = Field(None, description="requested_token_type sent to the AS (none: the AS's default).")
    connection: Literal["client_credentials", "none"] = Field(
        "client_credentials",
        description="Identity of the gateway's own requests to this backend (handshake, catalog lists, the GET "
        "stream): client_credentials with the same client and target, or none (no credential).",
    )
    cache_size: int = Field(10000, ge=1, description="Most exchanged tokens kept (per backend; least recent dropped).")


class PrincipalHeadersAuth(_Model):
    type: Literal["principal_headers"] = Field(description="Headers chosen by the caller's principal name.")
    principals: dict[str, dict[str, str]] = Field(
        default_factory=dict,
        description="Principal name -> headers, e.g. {alice: {Authorization: 'Bearer ${ALICE_KEY}'}}.",
    )
    default: Literal["deny"] | dict[str, str] = Field(
        "deny", description="A principal without an entry: deny (a clear error) or these headers."
    )
    connection: dict[str, str] = Field(
        default_factory=dict, description="Headers of the gateway's own requests (handshake, lists, GET stream)."
    )

    @model_validator(mode="after")
    def _valid(self) -> PrincipalHeadersAuth:
        for name, headers in self.principals.items():
            _header_names(headers, f"auth.principals.{name}")
        if isinstance(self.default, dict):
            _header_names(self.default, "auth.default")
        _header_names(self.connection, "auth.connection")
        return self


AnyAuth = StaticAuth | ClientCredentialsAuth | TokenExchangeAuth | PrincipalHeadersAuth
UpstreamAuth = Annotated[AnyAuth, Field(discriminator="type")]
PER_USER = ("token_exchange", "principal_headers")


def check_backend_auth(auth: AnyAuth, transport: str, headers: dict[str, str]) -> None:
    """Raise a ValueError that says why ``auth`` cannot work on this backend (its transport, its ``headers``)."""
    check_transport(auth, transport)
    own = {"authorization"} if auth.type in ("client_credentials", "token_exchange") else set()
    for sent in _header_maps(auth):
        own |= {name.lower() for name in sent}
    clash = sorted(name for name in headers if name.lower() in own)
    if clash:
        raise ValueError(f"headers {clash} are set by auth ({auth.type}); remove them from 'headers'")


def _header_maps(auth: AnyAuth) -> list[dict[str, str]]:
    """The header maps an auth section sends."""
    if isinstance(auth, StaticAuth):
        return [auth.headers]
    if isinstance(auth, PrincipalHeadersAuth):
        default = [auth.default] if isinstance(auth.default, dict) else []
        return [*auth.principals.values(), *default, auth.connection]
    return []


def check_transport(auth: AnyAuth, transport: str) -> None:
    """Raise a ValueError that says why ``auth`` cannot work over ``transport``."""
    if auth.type == "static":
        if transport in ("stdio", "builtin"):
            raise ValueError(f"auth type 'static' sends HTTP headers; transport '{transport}' has none")
        return
    if transport != "http":
        why = (
            "one connection serves every user there, so it could only carry a shared credential"
            if auth.type in PER_USER
            else "headers are sent once, at connect, so a renewed token could not be used"
        )
        raise ValueError(f"auth type '{auth.type}' needs transport 'http' (on '{transport}', {why})")
