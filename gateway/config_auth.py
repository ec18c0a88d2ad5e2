"""Identity in the configuration: who may call (auth), and what each principal may do (principals).

Split from gateway/config.py; gateway/config.py re-exports every name.
"""

from __future__ import annotations

from pydantic import Field

from gateway.config_base import StrictModel as _Model


class Anonymous(_Model):
    capabilities: list[str] = Field(default_factory=list, description="What an unauthenticated caller may do.")


class Jwt(_Model):
    hs256_secret: str | None = Field(None, description="Shared secret for HS256 tokens.")
    jwks_file: str | None = Field(None, description="A JWKS document on disk (RS256/ES256 keys).")
    jwks_url: str | None = Field(None, description="A JWKS document fetched over HTTP(S) and cached.")
    issuer: str | None = Field(None, description="Required 'iss' claim, when set.")
    audience: str | None = Field(None, description="Required in the 'aud' claim, when set.")
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


class Auth(_Model):
    anonymous: Anonymous | None = Field(
        None, description="None: every caller must authenticate. {capabilities: [...]}: anonymous callers get these."
    )
    jwt: Jwt | None = Field(None, description="Accept JWTs (HS256 and/or keys from a JWKS).")
    authorization_servers: list[str] = Field(
        default_factory=list, description="Named in /.well-known/oauth-protected-resource (RFC 9728)."
    )
    resource: str | None = Field(None, description="This gateway's resource identifier (default: its base URL).")
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
