"""Backends in the configuration: how each is reached and how long its calls may take.

Split from gateway/config.py so that the config model stays small per file; gateway/config.py
re-exports every name, so ``from gateway.config import Backend`` keeps working.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from gateway.config_base import StrictModel as _Model
from gateway.config_egress import PROXY_DESCRIPTION, Tls, proxy_setting
from gateway.config_upstream_auth import UpstreamAuth, check_backend_auth

_URL_SCHEMES = {"http": ("http://", "https://"), "sse": ("http://", "https://"), "ws": ("ws://", "wss://")}


class Restart(_Model):
    """How a lost backend is reconnected or respawned (MGP §11.6 restart policy: ``backoff_base_ms`` and
    ``backoff_max_ms`` are the two backoffs, ``max_restarts`` and ``restart_window_secs`` the limit)."""

    initial_backoff_s: float = Field(0.5, gt=0, description="First delay before reconnecting/restarting.")
    max_backoff_s: float = Field(30.0, gt=0, description="Ceiling of the exponential backoff.")
    max_restarts: int | None = Field(
        None,
        ge=0,
        description="Give up after this many restarts (reconnects after a loss or a failed connect) within "
        "window_s: the backend then stays down (MGP lifecycle state `error`, reason restart_limit_exceeded) until "
        "the gateway restarts. 0 never restarts; null (the default) never gives up, so a backend that comes "
        "back later is picked up.",
    )
    window_s: float = Field(300.0, gt=0, description="The window max_restarts counts restarts in (seconds).")


class Backend(_Model):
    transport: Literal["stdio", "http", "sse", "ws", "builtin"] = Field(description="How to reach it.")
    command: str | None = Field(None, description="stdio: the program to spawn.")
    args: list[str] = Field(default_factory=list, description="stdio: its arguments.")
    env: dict[str, str] = Field(default_factory=dict, description="stdio: extra environment variables.")
    cwd: str | None = Field(None, description="stdio: working directory.")
    url: str | None = Field(None, description="http/sse/ws: the endpoint URL.")
    headers: dict[str, str] = Field(
        default_factory=dict,
        description="Headers sent to this backend only (its own credentials; a client's are never forwarded).",
    )
    server: Literal["demo"] = Field("demo", description="builtin: which in-process server.")
    validate_arguments: bool = Field(
        False, description="Check tools/call arguments against the tool's inputSchema before forwarding."
    )
    era: Literal["auto", "modern", "legacy"] = Field(
        "auto",
        description="MCP era of the backend: auto detects it and remembers it across reconnects (over stdio "
        "initialize goes first, which every released server survives, and server/discover only if it is "
        "refused; elsewhere server/discover goes first and any refusal ends the probe at once); modern or "
        "legacy pins it.",
    )
    era_affinity: bool = Field(
        True,
        description="A Streamable HTTP backend found modern by era: auto may serve the legacy handshake too: "
        "legacy clients are then sent through a second, legacy-era connection to it (opened on first need), so "
        "that they get what the backend offers only on its legacy path (sampling, elicitation as real "
        "requests). A backend that refuses the handshake is translated instead. false: always translate.",
    )
    required: bool = Field(
        False,
        description="/readyz waits for this backend to be connected; `switchboard check --probe` fails if it is "
        "unreachable.",
    )
    timeout_s: float = Field(300.0, gt=0, description="Longest a single request to this backend may take.")
    connect_timeout_s: float = Field(15.0, gt=0, description="Longest the connect + initialize may take.")
    restart: Restart = Field(default_factory=Restart)
    mcpc: Literal["auto", "off"] = Field(
        "auto",
        description="auto: after every connect, ask the backend the MCPC handshake under each version's name; "
        "off: never (its tools are ordinary, MCPC messages in its results still are read).",
    )
    # egress: proxy and TLS (issue 17)
    proxy: str | None = Field(None, description=PROXY_DESCRIPTION)
    tls: Tls | None = Field(
        None, description="http/sse/ws: TLS toward an https/wss url (CA bundle, client certificate, verify)."
    )

    @field_validator("proxy", mode="before")
    @classmethod
    def _proxy(cls, value: object) -> str | None:
        return proxy_setting(value)

    # upstream auth (issue 17)
    auth: UpstreamAuth | None = Field(
        None,
        description="How the gateway authenticates to this backend (gateway/config_upstream_auth.py): static | "
        "client_credentials | token_exchange | principal_headers. `headers` still go with every request; with "
        "`auth` they may not name a header auth sets (Authorization for the OAuth kinds).",
    )

    @model_validator(mode="after")
    def _upstream_auth(self) -> Backend:
        if self.auth is not None:
            check_backend_auth(self.auth, self.transport, self.headers)
        return self

    # protected-resource metadata (issue 17)
    resource: str | None = Field(
        None,
        description="This backend's OAuth resource id (RFC 9728, RFC 8707), named in the metadata at "
        "/.well-known/oauth-protected-resource/servers/NAME/mcp and accepted as a token audience on "
        "/servers/NAME/... (default: the gateway's base + /servers/NAME/mcp).",
    )

    # per-principal stdio children (issue 17)
    sharing: Literal["shared", "per-principal"] = Field(
        "shared",
        description="stdio: shared (one child for every client, the default) or per-principal (one child per "
        "authenticated principal, spawned only after the policy chain admitted that principal's call or list, "
        "with its own environment from principal_env; anonymous callers never get one). See docs/adr "
        "(per-principal stdio pool).",
    )
    idle_s: float = Field(
        300.0,
        gt=0,
        description="per-principal: a child with no call in flight for this many seconds is stopped (stdin closed, "
        "then SIGTERM, then SIGKILL of its process group); the next call spawns it again.",
    )
    max_children: int = Field(
        16,
        ge=1,
        description="per-principal: most children alive at once. Beyond it the least recently used child with no "
        "call in flight is stopped; when every child is busy the caller is refused (-32094), never queued.",
    )
    principal_env: dict[str, dict[str, str]] = Field(
        default_factory=dict,
        description="per-principal: extra environment of each principal's child, by principal name, on top of "
        "env (e.g. {alice: {API_KEY: '${ALICE_KEY}'}}). A principal without an entry gets default_env, or no "
        "child at all when default_env is null: never another principal's values. Redacted in /admin/config.",
    )
    default_env: dict[str, str] | None = Field(
        None,
        description="per-principal: the environment of the child of a principal that principal_env does not "
        "name; null (the default) refuses such principals (-32093).",
    )
    principal_env_var: str | None = Field(
        "SWITCHBOARD_PRINCIPAL",
        description="per-principal: the variable that tells a child whose it is (the principal's name); null: not set.",
    )

    @field_validator("url")
    @classmethod
    def _url_scheme(cls, value: str | None, info: ValidationInfo) -> str | None:
        # A field validator (not the model one below) so that the error points at the url's own line.
        schemes = _URL_SCHEMES.get(info.data.get("transport", ""))
        if value and schemes and not value.startswith(schemes):
            raise ValueError(f"url for transport '{info.data['transport']}' must start with {' or '.join(schemes)}")
        return value

    @field_validator("sharing")
    @classmethod
    def _sharing_transport(cls, value: str, info: ValidationInfo) -> str:
        # A field validator, so that `switchboard check` points at the sharing line (issue 17).
        transport = info.data.get("transport")
        if value == "per-principal" and transport is not None and transport != "stdio":
            raise ValueError(f"sharing 'per-principal' needs transport 'stdio' (not '{transport}')")
        return value

    @model_validator(mode="after")
    def _transport_fields(self) -> Backend:
        if self.transport == "stdio" and not self.command:
            raise ValueError("transport 'stdio' needs 'command'")
        if self.transport in _URL_SCHEMES and not self.url:
            raise ValueError(f"transport '{self.transport}' needs 'url'")
        self._sharing_fields()
        return self

    def _sharing_fields(self) -> None:
        """per-principal (issue 17): only over stdio, and its fields only with it."""
        if self.sharing == "per-principal":
            names = [*self.env, *(self.default_env or {}), *(k for e in self.principal_env.values() for k in e)]
            if self.principal_env_var:
                names.append(self.principal_env_var)
            bad = sorted({n for n in names if not n or "=" in n or "\0" in n})
            if bad:
                raise ValueError(f"environment variable names must be non-empty, without '=' or NUL: {bad}")
            values = [*self.env.values(), *(self.default_env or {}).values()]
            values += [v for e in self.principal_env.values() for v in e.values()]
            if any("\0" in v for v in values):
                raise ValueError("environment values must not contain NUL")  # the value itself is not shown
            return
        given = sorted(self.model_fields_set & {"idle_s", "max_children", "principal_env", "default_env"})
        if given:
            raise ValueError(f"{', '.join(given)} only apply with sharing 'per-principal' (this backend is shared)")
