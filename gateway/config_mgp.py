"""The ``mgp`` section of the config: the gateway as MGP kernel (issue 12, ADR 0013).

Every field has a default and a description; cross-references to ``backends`` are checked by
``Config`` (gateway/config.py), which knows the backends.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field

from gateway.config_base import StrictModel as _Model

MgpRisk = Literal["safe", "moderate", "dangerous"]
MgpValidator = Literal["sandbox", "readonly", "network_restricted", "code_safety", "none"]
MgpSideEffect = Literal["filesystem", "network", "process", "database", "notification"]


def _permission_pattern(value: str) -> str:
    if not value or value != value.strip():
        raise ValueError(f"permission pattern {value!r} must be a non-empty name without surrounding spaces")
    return value


PermissionPattern = Annotated[str, AfterValidator(_permission_pattern)]


class MgpCodeSafety(_Model):
    """§7.3: what the ``code_safety`` validator enforces on a tool's code arguments."""

    level: Literal["unrestricted", "standard", "strict", "readonly"] = Field(
        "standard", description="§7.2 safety level: standard blocks known patterns, strict is allowlist-only."
    )
    language: str = Field("python", min_length=1, description="Language of the code arguments.")
    max_code_size_bytes: int | None = Field(None, ge=1, description="Largest code argument; none: no limit.")
    blocked_imports: list[str] = Field(default_factory=list, description="Imports refused (standard and above).")
    blocked_patterns: list[str] = Field(default_factory=list, description="Substrings refused, e.g. 'eval('.")
    allowed_imports: list[str] = Field(default_factory=list, description="strict/readonly: the only imports accepted.")


class MgpToolSecurity(_Model):
    """§4.3 security metadata an operator attaches to a backend's tool (used when the backend sends none;
    ``validator`` always comes from here when set: it is the kernel's field)."""

    risk_level: MgpRisk | None = Field(
        None, description="Declared risk; none: the effective risk level derived by the §4.6 rule is used."
    )
    validator: MgpValidator | None = Field(
        None, description="Kernel-side validator applied before forwarding; none: the backend's, else no validator."
    )
    permissions_required: list[PermissionPattern] = Field(
        default_factory=list,
        description="Permissions (§3.2 names or reverse-domain custom ones) that must be granted before a call.",
    )
    side_effects: list[MgpSideEffect] = Field(default_factory=list, description="Informational side-effect categories.")
    reversible: bool | None = Field(None, description="Whether the tool's effects can be undone (informational).")
    confirmation_required: bool | None = Field(
        None, description="Whether a client should confirm before calling; none: decided from the risk level."
    )
    code_safety: MgpCodeSafety | None = Field(
        None, description="§7.3 code safety declaration, read by the code_safety validator."
    )


class MgpAccessEntry(_Model):
    """A static §5 access entry: a tool_grant when ``tool_name`` is set, else a server_grant."""

    agent_id: str = Field(min_length=1, description="The agent: a principal name.")
    server_id: str = Field(min_length=1, description="The server: a backend name.")
    tool_name: str | None = Field(
        None, min_length=1, description="The backend's own tool name; none: the entry covers the whole server."
    )
    permission: Literal["allow", "deny"] = Field(description="allow or deny.")


def _tool_name(value: str) -> str:
    if not value or value != value.strip():
        raise ValueError(f"tool name {value!r} must be non-empty without surrounding spaces")
    return value


ToolName = Annotated[str, AfterValidator(_tool_name)]


class MgpToolContext(_Model):
    """§16.8 ``tool_context_budget``: the token budget of an MGP client's tool definitions (its
    §16.7 session cache and what ``mgp/tools/discover`` returns). Tokens are estimated from each
    definition's JSON size. The defaults are the spec's example."""

    max_tokens: int = Field(8000, ge=1, description="Total tokens of tool definitions a session may hold.")
    pinned_reserve: int = Field(2000, ge=0, description="Tokens set aside for pinned tools (never evicted).")
    discovery_reserve: int = Field(
        3000, ge=0, description="Tokens one discovery answer may fill; more results are truncated (§16.8)."
    )
    cache_limit: int = Field(
        3000, ge=0, description="Tokens of requested (cached) tools; beyond it the least recently used are evicted."
    )


class Mgp(_Model):
    permission_policy: Literal["interactive", "auto_approve", "deny_all", "config_only"] = Field(
        "config_only",
        description="How the gateway, as the kernel, answers a backend's permissions_required (§3.3): "
        "config_only grants what approved_permissions lists and denies the rest; auto_approve grants all; "
        "deny_all denies all (approved_permissions is ignored); interactive grants what approved_permissions "
        "lists and asks an operator (GET/POST /admin/mgp/permissions) for the rest.",
    )
    approved_permissions: list[PermissionPattern] = Field(
        default_factory=list,
        description="Permission names or globs matched per dot-separated segment ('filesystem.*', '**' for all).",
    )
    grant_ttl_s: float = Field(86400.0, gt=0, description="Lifetime of a permission grant (its expires_at).")
    default_access: Literal["opt-in", "opt-out"] = Field(
        "opt-out",
        description="§5.5: opt-in denies an agent every tool no entry allows; opt-out allows every tool no entry "
        "denies.",
    )
    access: list[MgpAccessEntry] = Field(
        default_factory=list,
        description="Static access entries (§5.3); a tool entry beats a server entry, which beats default_access.",
    )
    tools: dict[str, dict[str, MgpToolSecurity]] = Field(
        default_factory=dict,
        description="Security metadata by backend, then the backend's own tool name (§4), for tools whose "
        "backend sends none.",
    )
    trust: dict[str, Literal["core", "standard", "experimental", "untrusted"]] = Field(
        default_factory=dict,
        description="Trust level by backend (draft §2.3, §4.6); a backend's own declaration never raises it. "
        "Unlisted backends are standard.",
    )
    tool_context: MgpToolContext = Field(
        default_factory=MgpToolContext,
        description="§16.8 context budget of the §16 tool cache (mgp/tools/discover|request|session|evict).",
    )
    pinned_tools: dict[str, list[ToolName]] = Field(
        default_factory=dict,
        description="§16.7 tools pinned in every tool session, by agent (a principal name, or '*' for every "
        "agent): tool names as the agent sees them. Pins are never evicted; a name the agent cannot see, or "
        "that is not indexed, is not pinned.",
    )
    register_commands: bool = Field(
        False,
        description="§15: whether mgp/discovery/register (admin only) may add stdio backends, i.e. make the "
        "gateway spawn a program an MGP request names, as the gateway's user. Off by default: runtime "
        "registration is then limited to network backends (http, sse, ws).",
    )
