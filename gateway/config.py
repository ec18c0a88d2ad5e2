"""The configuration model (pydantic) and its YAML loader.

Every field has a default and a description; ``switchboard check`` prints the errors this module
finds with file, line, key path and reason.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from gateway.config_auth import (
    Anonymous as Anonymous,
    Auth as Auth,
    FeatureSetRules as FeatureSetRules,
    Introspection as Introspection,
    Jwt as Jwt,
    PrincipalConfig as PrincipalConfig,
    PrincipalMcpl as PrincipalMcpl,
    ScopePatterns as ScopePatterns,
)
from gateway.config_backend import Backend as Backend, Restart as Restart
from gateway.config_base import StrictModel as _Model
from gateway.config_bus import BusConfig as BusConfig
from gateway.config_egress import Egress as Egress, Tls as Tls
from gateway.config_mcpc import Mcpc as Mcpc
from gateway.config_mgp import Mgp as Mgp
from gateway.config_ops import Logging, Telemetry, Ui
from gateway.config_virtual import VirtualServers, check_references as _virtual_references

# Backend names appear inside tool names (NAME__tool) and resource URI schemes (NAME+file://...),
# so they are restricted to what is safe in both: a lowercase DNS label.
BACKEND_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def _backend_name(name: str) -> str:
    # fullmatch: with match(), "$" also matches before a trailing newline, so "demo\n" passed.
    if not BACKEND_NAME.fullmatch(name):
        raise ValueError(
            f"backend name {name!r} must be a lowercase DNS label ([a-z0-9-], 1-63 chars): "
            "it becomes part of tool names and resource URIs"
        )
    return name


# Validated as a dict key, so that an error's location names the offending backend (and its line).
BackendName = Annotated[str, AfterValidator(_backend_name)]


class Listen(_Model):
    host: str = Field("127.0.0.1", description="Address to bind. Loopback unless you configure auth.")
    port: int = Field(8787, ge=0, le=65535, description="TCP port; 0 picks a free one.")


class Federation(_Model):
    prefix: Literal["always", "conditional", "never"] = Field(
        "conditional",
        description="always: NAME{sep}tool; conditional: bare with one backend, prefixed with several; never: bare.",
    )
    separator: str = Field("__", min_length=1, max_length=8, description="Between backend name and tool name.")
    page_size: int = Field(100, ge=1, le=10000, description="Items per page of the merged lists.")
    list_cache_s: float = Field(
        30.0, ge=0, description="How long a backend's lists are cached (list_changed refreshes at once)."
    )

    @field_validator("separator")
    @classmethod
    def _separator(cls, value: str) -> str:
        if re.search(r"[a-z0-9]", value):
            raise ValueError("separator must not contain lowercase letters or digits (backend names use them)")
        return value


class Security(_Model):
    allowed_hosts: list[str] | None = Field(
        None,
        description="Host header values accepted (DNS-rebinding guard). Default: loopback names when bound to "
        "loopback, anything otherwise. Entries may end in ':*' for any port.",
    )
    allowed_origins: list[str] | None = Field(
        None,
        description="Origin header values accepted when present. Default: http(s)://localhost|127.0.0.1|[::1] "
        "on any port. '*' allows every origin.",
    )


class Limits(_Model):
    max_body_bytes: int = Field(4 * 1024 * 1024, ge=1024, description="Largest HTTP request body (else 413).")
    max_message_bytes: int = Field(4 * 1024 * 1024, ge=1024, description="Largest WebSocket/stdio message.")
    session_queue: int = Field(
        1024,
        ge=8,
        description="Messages queued toward one client before it counts as too slow and is dropped.",
    )
    sse_replay_events: int = Field(256, ge=0, description="Events kept per SSE stream for Last-Event-ID replay.")
    client_request_timeout_s: float = Field(
        120.0, gt=0, description="How long a backend's request to a client (sampling, elicitation) may wait."
    )
    session_idle_s: float = Field(1800.0, gt=0, description="Sessions idle this long are ended.")
    startup_wait_s: float = Field(
        2.0,
        ge=0,
        le=60,
        description="How long initialize and lists wait for a backend still making its first connection; "
        "one that connects later is announced with list_changed.",
    )
    max_sessions: int = Field(10000, ge=1, description="Concurrent client sessions per replica.")
    max_inflight_per_session: int = Field(256, ge=1, description="Concurrent requests one session may have.")
    sse_keepalive_s: float = Field(15.0, gt=0, description="Interval of SSE keep-alive comments.")
    # The three client timeouts below take nginx's defaults (client_header_timeout, client_body_timeout
    # and send_timeout are 60 s each; Node's headersTimeout is 60 s too): long enough for a slow mobile
    # link, short enough that a client holding sockets open without sending (slowloris, slow POST) or
    # without reading frees them within a minute. Unlike nginx's body timeout, which restarts on every
    # read, this one counts from the end of the head: a body trickled a byte at a time cannot hold on.
    request_head_timeout_s: float = Field(
        60.0,
        gt=0,
        description="How long a client may take to send a whole request head once it began (else 408, then "
        "close). A connection that sends nothing is closed silently after keep_alive_timeout_s.",
    )
    # nginx reads heads of up to 4 x 8 KiB lines and Node of up to 16 KiB; 64 KiB leaves room for long
    # bearer tokens (auth.jwt.max_token_bytes) and many headers, and bounds what a head that never
    # ends may hold (httptools keeps a head whole until it ends). Exact however the head arrives: in
    # one read with others, or over many (transports/head_gauge.py).
    max_request_head_bytes: int = Field(
        65536,
        ge=1024,
        description="Largest request head, in bytes as sent: from the first byte of the request line through the "
        "blank line that ends the headers, every CRLF included (empty lines before the request line are not "
        "counted). A longer one gets a 431 and is not read further.",
    )
    # The same bound toward backends: httptools keeps a response's unfinished header line whole too, so
    # a backend that never ends its head (or sends header lines without end) would otherwise hold memory
    # until the call's timeout_s. Not max_message_bytes: a head is no message, and 4 MiB of headers is
    # no answer any backend means to give.
    max_response_head_bytes: int = Field(
        65536,
        ge=1024,
        description="Largest response head (status line and headers) an HTTP backend may send; a longer one fails "
        "the call (-32095) and its connection is closed.",
    )
    request_body_timeout_s: float = Field(
        60.0, gt=0, description="How long a client may take to send a request's whole body after its head (else 408)."
    )
    # Each connection costs a file descriptor and buffers: past this many the gateway answers 503 at
    # once rather than run into the process's open-file limit, where accepting fails for everyone.
    # By default derived from that limit, so that the cap always comes first and a raised limit (the
    # 10,000 idle streams of issue 15 need one) raises the cap with it.
    max_client_connections: int | None = Field(
        None,
        ge=1,
        description="Client connections (HTTP and WebSocket) open at once; one more gets a 503 and is closed. "
        "Default: the process's open-file limit (soft RLIMIT_NOFILE) less a tenth of it (at least 64), kept for "
        "backends, logs and files.",
    )
    response_send_timeout_s: float = Field(
        60.0,
        gt=0,
        description="How long a response may wait on a client that reads nothing (its socket buffer full) "
        "before the connection is dropped.",
    )
    # uvicorn's default, in whole seconds as uvicorn takes it. An idle connection costs a descriptor
    # and its buffers (an idle stream's ~15 KB in bench-idle); HTTP clients reuse a kept-alive
    # connection within a few seconds or not at all. Raise it behind a balancer that keeps its pooled
    # connections longer (its own idle timeout must be the shorter one, else it sends on a socket
    # being closed).
    keep_alive_timeout_s: int = Field(
        5,
        ge=1,
        description="How long a client connection may stay idle, between requests or new and silent, before "
        "it is closed without an answer.",
    )


class Bucket(_Model):
    per_s: float = Field(gt=0, description="Tokens added per second.")
    burst: float = Field(gt=0, description="Bucket size: the largest burst allowed.")


class RateLimits(_Model):
    per_principal: Bucket | None = Field(None, description="Every request of one principal.")
    principals: dict[str, Bucket] = Field(default_factory=dict, description="Overrides of per_principal by name.")
    per_tool: dict[str, Bucket] = Field(
        default_factory=dict,
        description="tools/call per (principal, tool); keys are tool-name patterns as clients see them ('*' for any).",
    )


class Pinning(_Model):
    mode: Literal["off", "warn", "enforce"] = Field(
        "warn", description="warn: flag changed tool definitions; enforce: also hide them until approved."
    )


class AuditConfig(_Model):
    file: str | None = Field(None, description="JSON lines file of every decision; none: metrics only.")
    max_bytes: int = Field(50 * 1024 * 1024, ge=4096, description="Rotate past this size.")
    backups: int = Field(5, ge=0, description="Rotated files kept.")


class McpxRate(_Model):
    messages_per_s: float = Field(200.0, gt=0, description="Envelopes one participant may send per second.")
    burst: float = Field(400.0, gt=0, description="Largest burst of envelopes above that rate.")


class McpxTopic(_Model):
    participants: list[str] = Field(
        default_factory=list, description="Backend names that join this topic as participants (id = backend name)."
    )
    capabilities: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Capabilities by participant id in this topic. For a listed backend they are its capabilities "
        "(default ['mcp/response:*']); for any other participant they narrow what its token grants.",
    )


class Mcpx(_Model):
    max_participants_per_topic: int = Field(1000, ge=1, description="Joins beyond this are refused (close 1013).")
    max_envelope_bytes: int = Field(1048576, ge=256, description="Larger envelopes get a system/error.")
    rate_per_participant: McpxRate = Field(
        default_factory=McpxRate, description="Envelope rate limit of each participant (token bucket)."
    )
    validate_kind: bool = Field(
        False, description="Also check the kind's METHOD/CONTEXT against the payload (MCPx §4.3, done by peers)."
    )
    dev_tokens: bool = Field(False, description="Serve POST /v0.1/auth/token (HS256 with auth.jwt.hs256_secret).")
    max_inflight_per_backend: int = Field(
        256,
        ge=1,
        description="Concurrent topic calls (mcp/request envelopes) one backend participant runs; "
        "more are answered at once with a 'busy' JSON-RPC error, never queued.",
    )
    topics: dict[str, McpxTopic] = Field(
        default_factory=dict, description="Topics that always exist; others are created on first join."
    )


class Mcpl(_Model):
    feature_sets: FeatureSetRules = Field(
        default_factory=FeatureSetRules, description="Feature sets hosts may enable, for principals without their own."
    )
    scopes: dict[str, ScopePatterns] = Field(
        default_factory=dict,
        description="Operator scope patterns by feature-set pattern, merged with each host's (operator blacklist wins)",
    )
    hook_order: list[str] = Field(
        default_factory=list,
        description="Backends whose context hooks run (and whose injections are ordered) first, in this order; "
        "the others follow in configuration order.",
    )
    before_inference_timeout_s: float = Field(5.0, gt=0, description="Per-backend wait for context/beforeInference.")
    after_inference_timeout_s: float = Field(10.0, gt=0, description="Per-backend wait for a blocking afterInference.")
    after_inference_failure: Literal["open", "closed"] = Field(
        "open",
        description="A blocking afterInference hook that fails or times out: open = go on without it, "
        "closed = answer the host with an error.",
    )
    host_request_timeout_s: float = Field(
        60.0, gt=0, description="Longest a backend's push/event, inference/request, scope/elevate... waits for a host."
    )
    push_dedup_ttl_s: float = Field(3600.0, gt=0, description="How long a push/event eventId is remembered.")
    max_serving_per_backend: int = Field(
        256,
        ge=1,
        description="MCPL requests (push/event, inference/request, scope/elevate...) of one backend the gateway "
        "answers at once; more are refused at once with -32094, never queued (each may wait on a host). "
        "Applies live on reload.",
    )
    routing: dict[str, dict[str, dict[str, Any]]] = Field(
        default_factory=dict,
        description="inference/request routing hints (MCPL §11.5) by backend, then feature-set pattern: keys added "
        "to the request's preferences, e.g. {mem: {'memory.*': {model: small}}}.",
    )


# ---- MGP (issue 12; spec: ../shared/specs/mgp-0.3.md and the 0.8 draft) ------------------------


class Config(_Model):
    listen: Listen = Field(default_factory=Listen, description="Where the gateway listens (host and port).")
    bus: BusConfig = Field(
        default_factory=BusConfig,
        description="How replicas share sessions, topics and counters: memory (one process) or redis.",
    )
    auth: Auth | None = Field(
        None, description="Identity. Without it, anonymous callers have every capability on loopback only."
    )
    principals: dict[str, PrincipalConfig] = Field(
        default_factory=dict, description="Known callers by name: their static tokens, capabilities and MCPL rules."
    )
    rate_limits: RateLimits = Field(
        default_factory=RateLimits, description="Token buckets per principal and per (principal, tool)."
    )
    pinning: Pinning = Field(
        default_factory=Pinning, description="Tool definition pinning: flag (or hide) tools whose definition changed."
    )
    audit: AuditConfig = Field(
        default_factory=AuditConfig, description="The audit stream: a JSON-lines file of every decision."
    )
    backends: dict[BackendName, Backend] = Field(
        default_factory=dict, description="The MCP servers behind the gateway, by name (a lowercase DNS label)."
    )
    federation: Federation = Field(
        default_factory=Federation,
        description="How several backends become one server: name prefixes, pages, list cache.",
    )
    security: Security = Field(default_factory=Security, description="Host and Origin checks (DNS-rebinding guard).")
    limits: Limits = Field(default_factory=Limits, description="Sizes, queues, timeouts and concurrency bounds.")
    mcpx: Mcpx = Field(default_factory=Mcpx, description="MCPx topics: participants, capabilities, envelope limits.")
    mcpl: Mcpl = Field(
        default_factory=Mcpl, description="MCPL: feature sets, scopes, hook order and timeouts, inference routing."
    )
    mgp: Mgp = Field(default_factory=Mgp, description="MGP: the gateway as kernel toward backends (issue 12).")
    mcpc: Mcpc = Field(default_factory=Mcpc, description="MCPC: asynchronous task callbacks (issue 13).")
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        "info", description="Least severe level logged (logging.level overrides it)."
    )
    logging: Logging = Field(default_factory=Logging, description="Log format and level (issue 16).")
    telemetry: Telemetry = Field(default_factory=Telemetry, description="OpenTelemetry traces (issue 16).")
    ui: Ui = Field(default_factory=Ui, description="The dashboard at /ui (issue 16).")
    # virtual servers (issue 17)
    virtual_servers: VirtualServers = Field(
        default_factory=dict,
        description="Curated servers at /servers/NAME/mcp made of tools, prompts and resources of any backends "
        "(gateway/config_virtual.py); names are DNS labels apart from the backends'.",
    )
    egress: Egress = Field(
        default_factory=Egress, description="Proxy and TLS defaults for reaching backends and services (issue 17)."
    )

    @model_validator(mode="after")
    def _separator_vs_names(self) -> Config:
        for name in self.backends:
            if self.federation.separator in name:
                # A custom error carries the name, so parse_config can point at that backend's line.
                raise PydanticCustomError(
                    "separator_in_name",
                    "backend name {name} contains the federation separator {separator}",
                    {"name": repr(name), "separator": repr(self.federation.separator), "backend": name},
                )
        for where, names in (("mcpl.hook_order", self.mcpl.hook_order), ("mcpl.routing", list(self.mcpl.routing))):
            unknown = [n for n in names if n not in self.backends]
            if unknown:
                raise ValueError(f"{where}: no backend named {', '.join(unknown)}")
        _virtual_references(self.virtual_servers, self.backends)
        for topic, spec in self.mcpx.topics.items():
            unknown = [n for n in spec.participants if n not in self.backends and n not in self.virtual_servers]
            if unknown:
                raise ValueError(
                    f"mcpx.topics.{topic}.participants: no backend or virtual server named {', '.join(unknown)}"
                )
            # issue 17: a per-principal backend acts only for a principal, and a topic participant for none.
            pooled = [
                n for n in spec.participants if n in self.backends and self.backends[n].sharing == "per-principal"
            ]
            if pooled:
                raise ValueError(
                    f"mcpx.topics.{topic}.participants: {', '.join(pooled)} runs one process per principal "
                    "(sharing: per-principal) and cannot sit in a topic"
                )
        self._mgp_references()
        return self

    def _mgp_references(self) -> None:
        # A tools/trust/access entry for a backend that does not exist is most likely a typo, and a typo in
        # a deny entry or a validator is a silent hole; two access entries for one key that disagree leave
        # the operator's intent unknown. Refuse both, pointing at the offending key ("located" errors).
        refs: list[tuple[tuple[str | int, ...], str]] = [(("mgp", "tools", n), n) for n in self.mgp.tools]
        refs += [(("mgp", "trust", n), n) for n in self.mgp.trust]
        refs += [(("mgp", "access", i, "server_id"), e.server_id) for i, e in enumerate(self.mgp.access)]
        seen: dict[tuple[str, str, str | None], int] = {}
        for i, entry in enumerate(self.mgp.access):
            key = (entry.agent_id, entry.server_id, entry.tool_name)
            first = seen.setdefault(key, i)
            if first != i and self.mgp.access[first].permission != entry.permission:
                raise PydanticCustomError(
                    "located",
                    "contradicts mgp.access.{first} (same agent_id, server_id and tool_name)",
                    {"first": first, "loc": ("mgp", "access", i)},
                )
        unknown = [(loc, name) for loc, name in refs if name not in self.backends]
        if unknown:
            names = ", ".join(dict.fromkeys(repr(name) for _, name in unknown))
            known = ", ".join(self.backends) or "none configured"
            raise PydanticCustomError(
                "located",
                "no backend named {names} (backends: {known})",
                {"names": names, "known": known, "loc": unknown[0][0]},
            )

    @property
    def loopback(self) -> bool:
        return is_loopback(self.listen.host)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def default_config() -> Config:
    """The embedded default: loopback, in-memory bus, one in-process demo backend."""
    return Config(backends={"demo": Backend(transport="builtin", server="demo", required=True)})


@dataclass(frozen=True)
class ConfigIssue:
    """One precise complaint about a config file."""

    file: str
    line: int | None
    path: str
    reason: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where}: {self.path or '<root>'}: {self.reason}"


class ConfigError(Exception):
    def __init__(self, issues: list[ConfigIssue]) -> None:
        super().__init__("\n".join(str(i) for i in issues))
        self.issues = issues


def expand_env(value: Any, environ: Mapping[str, str] | None = None, path: str = "") -> Any:
    """Replace ``${NAME}`` and ``${NAME:-default}`` (default when unset or empty) in every string.

    An unset name without a default is an error naming the key path.
    """
    env = os.environ if environ is None else environ
    if isinstance(value, str):

        def sub(match: re.Match[str]) -> str:
            name, default = match.group(1), match.group(2)
            # Shell and Compose semantics of ":-": the default also applies when the variable is empty.
            if name in env and (env[name] or default is None):
                return env[name]
            if default is not None:
                return default
            raise KeyError(f"{path}: environment variable {name} is not set")

        return _ENV_REF.sub(sub, value)
    if isinstance(value, dict):
        return {k: expand_env(v, env, f"{path}.{k}" if path else str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [expand_env(v, env, f"{path}[{i}]") for i, v in enumerate(value)]
    return value


def _line_of(root: yaml.Node | None, loc: tuple[Any, ...]) -> int | None:
    """Find the YAML line of a pydantic error location, walking the composed node tree."""
    node = root
    line = node.start_mark.line + 1 if node is not None else None
    for key in loc:
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                if k.value == str(key):
                    node, line = v, k.start_mark.line + 1
                    break
            else:
                return line
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
            node = node.value[key]
            line = node.start_mark.line + 1
        else:
            return line
    return line


def parse_config(text: str, file: str = "<config>", environ: dict[str, str] | None = None) -> Config:
    try:
        raw = yaml.safe_load(text)
        root = yaml.compose(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        # str(exc) spans several lines (with a source excerpt); an issue is one line.
        parts = [getattr(exc, "context", None), getattr(exc, "problem", None)]
        detail = ": ".join(str(p) for p in parts if p) or str(exc).splitlines()[0]
        raise ConfigError([ConfigIssue(file, line, "", f"not valid YAML: {detail}")]) from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError([ConfigIssue(file, 1, "", "the top level must be a mapping")])
    try:
        raw = expand_env(raw, environ)
    except KeyError as exc:
        path, _, reason = str(exc.args[0]).partition(": ")
        loc = tuple(int(p) if p.isascii() and p.isdigit() else p for p in re.split(r"[.\[\]]+", path) if p)
        raise ConfigError([ConfigIssue(file, _line_of(root, loc), path, reason)]) from None
    try:
        return Config.model_validate(raw)
    except ValidationError as exc:
        issues = []
        for err in exc.errors():
            # "[key]" marks an error in a dict key; the key itself is already the previous part.
            loc = tuple(
                p for p in err["loc"] if not (isinstance(p, str) and (p.startswith("function-") or p == "[key]"))
            )
            if err["type"] == "separator_in_name":
                loc = ("backends", err["ctx"]["backend"])
            elif err["type"] == "located":  # a model-level error that names the key it is about
                loc = tuple(err["ctx"]["loc"])
            path = ".".join(str(p) for p in loc)
            reason = err["msg"].removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                reason = "unknown key"
            issues.append(ConfigIssue(file, _line_of(root, loc), path, reason))
        raise ConfigError(issues) from None


def load_config(path: str | os.PathLike[str], environ: dict[str, str] | None = None) -> Config:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError([ConfigIssue(str(p), None, "", f"cannot read: {exc.strerror}")]) from None
    return parse_config(text, str(p), environ)
