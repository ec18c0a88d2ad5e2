"""Identity in the configuration: who may call (auth), and what each principal may do (principals).

Split from gateway/config.py; gateway/config.py re-exports every name.
"""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import Field, field_validator

from gateway.config_base import StrictModel as _Model

# The algorithms a JWT may be signed with (RFC 7518 §3.1, RFC 8037); "none" is never one of them.
JwtAlgorithm = Literal[
    "HS256",
    "HS384",
    "HS512",
    "RS256",
    "RS384",
    "RS512",
    "PS256",
    "PS384",
    "PS512",
    "ES256",
    "ES384",
    "ES512",
    "ES256K",
    "EdDSA",
]


class Anonymous(_Model):
    capabilities: list[str] = Field(default_factory=list, description="What an unauthenticated caller may do.")


class Jwt(_Model):
    hs256_secret: str | None = Field(
        None,
        description="Shared secret for HMAC tokens (HS256, and HS384/HS512 when listed in algorithms). At least "
        "32 random bytes (RFC 7518 §3.2); a shorter one works but is warned about at startup.",
    )
    jwks_file: str | None = Field(None, description="A JWKS document on disk (RSA, EC and OKP signing keys).")
    jwks_url: str | None = Field(
        None,
        description="A JWKS document fetched over HTTP(S) and cached: refetched after jwks_cache_s, and at once "
        "(at most every jwks_min_refresh_s) when a token names an unknown kid. A failed fetch keeps the old keys.",
    )
    issuer: str | None = Field(None, description="Required 'iss' claim, when set.")
    audience: str | None = Field(
        None,
        description="Required in the 'aud' claim, when set: this gateway's audience. On /servers/NAME/... a token "
        "whose 'aud' names that backend's resource id instead is accepted too (RFC 8707 audience binding).",
    )
    principal_claim: str = Field("sub", description="Claim naming the principal ('participantId' is also read).")
    max_capabilities: list[str] = Field(
        default_factory=lambda: ["*"],
        description="Cap on the capabilities of a JWT whose principal is not listed under principals.",
    )
    leeway_s: float = Field(30.0, ge=0, description="Clock skew tolerated on exp/nbf/iat.")
    max_token_bytes: int = Field(
        8192, ge=256, le=65536, description="Longer tokens are refused before any decoding (bounds the cost)."
    )
    require_exp: bool = Field(False, description="Refuse tokens without an 'exp' claim (hardening).")
    algorithms: list[JwtAlgorithm] = Field(
        default_factory=lambda: list(get_args(JwtAlgorithm)),
        min_length=1,
        description="The signature algorithms accepted (default: every safe one; 'none' never). HS* need "
        "hs256_secret; the others need a JWKS key of their family, whose own 'alg' (if any) must agree.",
    )
    jwks_cache_s: float = Field(
        3600.0, ge=10, description="How long fetched JWKS keys are used before they are refetched (in the background)."
    )
    jwks_min_refresh_s: float = Field(
        60.0,
        ge=1,
        description="Least time between two JWKS fetches caused by unknown kids: a flood of made-up kids costs the "
        "issuer one fetch per interval.",
    )
    jwks_timeout_s: float = Field(10.0, gt=0, le=60, description="Longest one JWKS fetch may take.")
    require_typ: str | None = Field(
        None,
        description="Required 'typ' header, when set (explicit typing, RFC 8725 §3.11), e.g. 'at+jwt' for "
        "RFC 9068 access tokens, so an ID token or another JWT of the same issuer is not taken for one. Compared "
        "case-insensitively, with or without the 'application/' prefix.",
    )


class Introspection(_Model):
    """RFC 7662 token introspection, for opaque (non-JWT) bearer tokens."""

    endpoint: str = Field(description="The authorization server's introspection endpoint (https:// in production).")
    client_id: str = Field(description="This gateway's client id at the authorization server (client_secret_basic).")
    client_secret: str = Field(description="This gateway's client secret at the authorization server.")
    cache_s: float = Field(
        60.0,
        ge=1,
        le=3600,
        description="How long an active answer is reused (never past the token's 'exp'); a token revoked at the "
        "server stays usable here this long. At least 1 s: the door reads the answer the entrance fetched.",
    )
    negative_cache_s: float = Field(
        10.0,
        ge=1,
        le=600,
        description="How long an inactive answer is reused, so a flood of bad tokens does not flood the server.",
    )
    timeout_s: float = Field(5.0, gt=0, le=60, description="Longest one introspection request may take.")
    principal_claim: str = Field(
        "sub", description="Member of the answer naming the principal ('username' is read when it is absent)."
    )
    issuer: str | None = Field(None, description="Required 'iss' member of the answer, when set.")
    audience: str | None = Field(
        None,
        description="Required in the answer's 'aud', when set (as auth.jwt.audience: a backend's resource id is "
        "accepted on its own /servers/NAME/ paths).",
    )
    max_capabilities: list[str] = Field(
        default_factory=lambda: ["*"],
        description="Cap on the 'capabilities' of an introspected token whose principal is not under principals.",
    )
    max_entries: int = Field(10000, ge=1, le=1_000_000, description="Most answers cached at once (oldest evicted).")

    @field_validator("endpoint")
    @classmethod
    def _http_endpoint(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("introspection endpoint must start with http:// or https://")
        return value


class Auth(_Model):
    anonymous: Anonymous | None = Field(
        None, description="None: every caller must authenticate. {capabilities: [...]}: anonymous callers get these."
    )
    jwt: Jwt | None = Field(None, description="Accept JWTs (HMAC with a shared secret and/or keys from a JWKS).")
    introspection: Introspection | None = Field(
        None,
        description="Check opaque bearer tokens (not JWTs, not static tokens) at the authorization server "
        "(RFC 7662). An unreachable server answers 503, not 401.",
    )
    authorization_servers: list[str] = Field(
        default_factory=list, description="Named in /.well-known/oauth-protected-resource (RFC 9728)."
    )
    resource: str | None = Field(
        None,
        description="This gateway's resource identifier, named in its metadata (default: BASE/mcp, BASE as the "
        "client addressed it). When it ends in /mcp, backends' resource ids default to the same base + "
        "/servers/NAME/mcp.",
    )
    admin_token: str | None = Field(None, description="Bearer token of the admin API (/admin/...); none: no admin API.")


class FeatureSetRules(_Model):
    allow: list[str] = Field(
        default_factory=lambda: ["*"],
        description="Feature-set patterns this principal's hosts may enable ('*' wildcards). A pattern matches "
        "the qualified name BACKEND.FEATURESET or the backend's own name, so 'memory.*' covers every backend.",
    )
    deny: list[str] = Field(default_factory=list, description="Feature-set patterns never enabled; deny wins.")


class ScopePatterns(_Model):
    whitelist: list[str] = Field(default_factory=list, description="Scope labels approved without asking (globs).")
    blacklist: list[str] = Field(
        default_factory=list, description="Scope labels always refused (globs); beats every whitelist, the host's too."
    )


class PrincipalMcpl(_Model):
    feature_sets: FeatureSetRules | None = Field(None, description="Overrides mcpl.feature_sets for this principal.")
    scopes: dict[str, ScopePatterns] | None = Field(
        None, description="Overrides mcpl.scopes for this principal; keys are feature-set patterns."
    )


class PrincipalConfig(_Model):
    tokens: list[str] = Field(default_factory=list, description="Static bearer tokens (compared in constant time).")
    capabilities: list[str] = Field(default_factory=list, description="MCPx-style capability patterns.")
    mcpl: PrincipalMcpl = Field(default_factory=PrincipalMcpl, description="MCPL feature sets and scopes allowed.")


def _plain_http(url: str) -> bool:
    """An http:// URL to a host other than loopback (tokens, secrets or keys would cross the network in clear)."""
    if not url.startswith("http://"):
        return False
    host = url[len("http://") :].split("/", 1)[0].rpartition("@")[2]
    host = host.rsplit(":", 1)[0] if not host.endswith("]") else host
    return host.strip("[]") not in ("127.0.0.1", "::1", "localhost")


def auth_warnings(auth: Auth | None) -> list[str]:
    """What `switchboard check` warns about in the auth section: valid, but weaker than it looks."""
    if auth is None:
        return []
    warnings = []
    jwt, introspection = auth.jwt, auth.introspection
    if jwt is not None:
        if jwt.hs256_secret and len(jwt.hs256_secret.encode()) < 32:
            warnings.append("auth.jwt.hs256_secret is shorter than 32 bytes (RFC 7518 §3.2); HS384/HS512 are off")
        if jwt.audience is None:
            warnings.append("auth.jwt.audience is not set: JWTs issued for any other service are accepted")
        if jwt.jwks_url and _plain_http(jwt.jwks_url):
            warnings.append("auth.jwt.jwks_url is plain http: whoever is on the path can substitute the keys")
    if introspection is not None:
        if introspection.audience is None:
            warnings.append("auth.introspection.audience is not set: tokens issued for any other service are accepted")
        if _plain_http(introspection.endpoint):
            warnings.append("auth.introspection.endpoint is plain http: tokens and the client secret cross in clear")
    return warnings
