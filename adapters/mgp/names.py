"""Method, notification and kernel-tool names of both MGP wires, and the reserved ``mgp.*`` prefix.

The seed (0.3) carries every kernel operation as an ``mgp/...`` method. The draft (0.5+, MGP_SPEC.md
§1.6) keeps four protocol methods (``mgp/permission/await|grant``, ``mgp/callback/respond``,
``mgp/stream/cancel``) and eight notifications, and turns the rest into **kernel tools** called with
``tools/call`` (Layer 4), listed only to MGP clients of that version, marked
``_mgp: {source: "kernel", admin_only}`` (§1.6.3). Their input schemas below are the draft's
(MGP_SECURITY.md §5.4, §6.3; MGP_COMMUNICATION.md §11.3-11.4, §13.2, §13.6; MGP_DISCOVERY.md
§15.4, §16.5-16.6). The ``mgp.`` tool-name prefix is reserved: a backend tool so named is withheld
(§1.6.3; reported with ``TOOL_NAME_CONFLICT``, code 4003, §14.3).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from adapters.mgp import versions

# ---- the seed's wire (0.3) -------------------------------------------------------------------------
SEED_PERMISSION_REQUEST = "mgp/permission/request"  # 0.3 §3.5 (renamed in 0.4)
SEED_PERMISSION_RESPONSE = "mgp/permission/response"  # 0.3 §3.6
SEED_METHODS = frozenset(
    {
        SEED_PERMISSION_REQUEST,
        SEED_PERMISSION_RESPONSE,
        "mgp/access/query",
        "mgp/access/grant",
        "mgp/access/revoke",
        "mgp/health/ping",
        "mgp/health/status",
        "mgp/lifecycle/shutdown",
        "mgp/stream/cancel",
        "mgp/events/subscribe",
        "mgp/events/unsubscribe",
        "mgp/callback/respond",
        "mgp/discovery/list",
        "mgp/discovery/register",
        "mgp/discovery/deregister",
        "mgp/tools/discover",
        "mgp/tools/request",
        "mgp/tools/session",
        "mgp/tools/session/evict",
    }
)
AUDIT = "notifications/mgp.audit"
LIFECYCLE = "notifications/mgp.lifecycle"
STREAM_CHUNK = "notifications/mgp.stream.chunk"
STREAM_PROGRESS = "notifications/mgp.stream.progress"
EVENT = "notifications/mgp.event"
CALLBACK_REQUEST = "notifications/mgp.callback.request"
STREAM_PACE = "notifications/mgp.stream.pace"  # draft §12.8
STREAM_GAP = "notifications/mgp.stream.gap"  # draft §12.9
SEED_NOTIFICATIONS = frozenset({AUDIT, LIFECYCLE, STREAM_CHUNK, STREAM_PROGRESS, EVENT, CALLBACK_REQUEST})

# ---- the draft's wire (0.5 ... 0.8) ----------------------------------------------------------------
PERMISSION_AWAIT = "mgp/permission/await"
PERMISSION_GRANT = "mgp/permission/grant"
CALLBACK_RESPOND = "mgp/callback/respond"
STREAM_CANCEL = "mgp/stream/cancel"
DRAFT_METHODS = frozenset({PERMISSION_AWAIT, PERMISSION_GRANT, CALLBACK_RESPOND, STREAM_CANCEL})
DRAFT_NOTIFICATIONS = SEED_NOTIFICATIONS | {STREAM_PACE, STREAM_GAP}

# §6.4 audit event types (seed, plus the draft's additions: §1.6.3, §4.6, §6.4, §13.4, §14.7.5).
AUDIT_EVENT_TYPES = frozenset(
    {
        "TOOL_EXECUTED",
        "TOOL_BLOCKED",
        "PERMISSION_GRANTED",
        "PERMISSION_DENIED",
        "PERMISSION_REVOKED",
        "ACCESS_GRANTED",
        "ACCESS_REVOKED",
        "SERVER_CONNECTED",
        "SERVER_DISCONNECTED",
        "VALIDATION_FAILED",
        "CODE_REJECTED",
        "TOOL_CREATED_DYNAMIC",
        "TRUST_LEVEL_DOWNGRADED_NO_SEAL",
        "TOOL_NAME_CONFLICT",
        "RISK_LEVEL_OVERRIDE",
        "CALLBACK_TIMEOUT",
        "TOOL_REJECTED",
    }
)

RESERVED_TOOL_PREFIX = "mgp."
METHOD_PREFIX = "mgp/"
NOTIFICATION_PREFIX = "notifications/mgp."

_STR = {"type": "string"}
_STRS = {"type": "array", "items": {"type": "string"}}
_RISK = {"type": "string", "enum": ["safe", "moderate", "dangerous"]}
_ENTRY = {"type": "string", "enum": ["server_grant", "tool_grant"]}
_SERVER = {"type": "string", "description": "Target server"}


def _obj(properties: dict[str, Any], required: Iterable[str] = ()) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = list(required)
    return schema


# name -> input schema, as the draft defines them.
KERNEL_TOOL_SCHEMAS: dict[str, dict[str, Any]] = {
    "mgp.access.query": _obj(
        {"agent_id": _STR, "server_id": _STR, "tool_name": {"type": "string", "description": "Target tool (optional)"}},
        ["agent_id", "server_id"],
    ),
    "mgp.access.grant": _obj(
        {
            "entry_type": _ENTRY,
            "agent_id": _STR,
            "server_id": _STR,
            "tool_name": {"type": "string", "description": "Required for tool_grant"},
            "permission": {"type": "string", "enum": ["allow", "deny"]},
            "justification": _STR,
            "expires_at": {"type": "string", "format": "date-time"},
        },
        ["entry_type", "agent_id", "server_id", "permission"],
    ),
    "mgp.access.revoke": _obj(
        {"agent_id": _STR, "server_id": _STR, "entry_type": _ENTRY, "tool_name": _STR},
        ["agent_id", "server_id", "entry_type"],
    ),
    "mgp.audit.replay": _obj(
        {
            "since_seq": {"type": "integer", "description": "Resume from this sequence number (exclusive)"},
            "since_timestamp": {"type": "string", "format": "date-time"},
            "limit": {"type": "integer", "default": 100},
        }
    ),
    "mgp.events.replay": _obj(
        {
            "subscription_id": _STR,
            "after_seq": {"type": "integer", "description": "Replay events with _mgp.seq strictly greater"},
            "limit": {"type": "integer", "description": "Maximum number of events (default 100, max 1000)"},
        },
        ["subscription_id", "after_seq"],
    ),
    "mgp.events.subscribe": _obj(
        {
            "channels": _STRS,
            "filter": _obj({"min_severity": {"type": "string", "enum": ["info", "warning", "error"]}}),
        },
        ["channels"],
    ),
    "mgp.events.unsubscribe": _obj({"subscription_id": _STR}, ["subscription_id"]),
    "mgp.health.ping": _obj({"server_id": _SERVER}, ["server_id"]),
    "mgp.health.status": _obj({"server_id": _SERVER}, ["server_id"]),
    "mgp.lifecycle.shutdown": _obj(
        {
            "server_id": _SERVER,
            "reason": {
                "type": "string",
                "enum": [
                    "operator_request",
                    "configuration_change",
                    "resource_limit",
                    "idle_timeout",
                    "kernel_shutdown",
                ],
            },
            "timeout_ms": {"type": "number"},
        },
        ["server_id", "reason"],
    ),
    "mgp.discovery.list": _obj(
        {
            "filter": _obj(
                {
                    "extensions": _STRS,
                    "permissions": _STRS,
                    "status": {"type": "string", "enum": ["connected", "disconnected", "all"]},
                }
            )
        }
    ),
    "mgp.discovery.register": _obj(
        {
            "id": {"type": "string", "description": "Server identifier"},
            "command": _STR,
            "args": _STRS,
            "transport": {"type": "string", "enum": ["stdio", "http"]},
            "mgp": _obj(
                {
                    "extensions": _STRS,
                    "permissions_required": _STRS,
                    "trust_level": {"type": "string", "enum": ["core", "standard", "experimental", "untrusted"]},
                }
            ),
            "created_by": _STR,
            "justification": _STR,
        },
        ["id", "command", "transport"],
    ),
    "mgp.discovery.deregister": _obj({"id": _STR, "reason": _STR}, ["id"]),
    "mgp.tools.discover": _obj(
        {
            "query": {"type": "string", "description": "Natural language description of needed capability"},
            "strategy": {"type": "string", "enum": ["keyword", "semantic", "category"], "default": "keyword"},
            "max_results": {"type": "number", "default": 5},
            "filter": _obj(
                {
                    "categories": _STRS,
                    "risk_level_max": _RISK,
                    "status": {"type": "string", "enum": ["connected", "all"]},
                }
            ),
        },
        ["query"],
    ),
    "mgp.tools.request": _obj(
        {
            "reason": {"type": "string", "enum": ["capability_gap", "performance", "preference"]},
            "context": _STR,
            "requirements": _obj(
                {
                    "capabilities": _STRS,
                    "input_types": _STRS,
                    "output_types": _STRS,
                    "preferred_risk_level": _RISK,
                }
            ),
            "task_trace_id": _STR,
        },
        ["reason", "context", "requirements"],
    ),
    "mgp.tools.session": _obj({}),
    "mgp.tools.session.evict": _obj({"tools": _STRS, "reason": _STR}, ["tools"]),
    "mgp.stream.cancel": _obj(
        {"request_id": {"type": ["string", "integer"], "description": "The streamed call's id"}, "reason": _STR},
        ["request_id"],
    ),
    "mgp.events.pending_callbacks": _obj({}),
    "mgp.callback.respond": _obj(
        {"callback_id": _STR, "response": {"description": "The answer: a string or an object"}},
        ["callback_id", "response"],
    ),
}
# One line each, for the kernel tools' ``description`` in tools/list.
KERNEL_TOOL_DESCRIPTIONS: dict[str, str] = {
    "mgp.access.query": "Query the access-control entries of an agent for a server (and tool).",
    "mgp.access.grant": "Grant or deny an agent access to a server or one of its tools (operator only).",
    "mgp.access.revoke": "Revoke an access-control entry (operator only).",
    "mgp.audit.replay": "Replay audit events since a sequence number or timestamp.",
    "mgp.events.replay": "Replay events of a subscribed channel since a sequence number.",
    "mgp.events.subscribe": "Subscribe to event channels (audit, lifecycle, or a server's channels).",
    "mgp.events.unsubscribe": "Cancel an event subscription.",
    "mgp.events.pending_callbacks": "List callback requests still waiting for an answer.",
    "mgp.callback.respond": "Answer a server's callback request.",
    "mgp.health.ping": "Check that a server (or the gateway) is alive.",
    "mgp.health.status": "Health, lifecycle state and resource usage of a server (or the gateway).",
    "mgp.lifecycle.shutdown": "Drain and stop a server: finish calls in flight, refuse new ones (operator only).",
    "mgp.discovery.list": "List the servers this gateway federates.",
    "mgp.discovery.register": "Register a new server at runtime (operator only).",
    "mgp.discovery.deregister": "Remove a server registered at runtime (operator only).",
    "mgp.tools.discover": "Find tools by describing the capability you need; returns ranked matches.",
    "mgp.tools.request": "Ask the kernel for a tool that fills a capability gap; loads it into this session.",
    "mgp.tools.session": "The tools loaded into this session's context and its token budget.",
    "mgp.tools.session.evict": "Remove tools from this session's context to free tokens.",
    "mgp.stream.cancel": "Cancel a streamed tool call; returns what arrived so far.",
}
# Kernel tools that change state: operator-level callers only (§1.6.3 admin-only enforcement).
ADMIN_ONLY = frozenset(
    {
        "mgp.access.grant",
        "mgp.access.revoke",
        "mgp.lifecycle.shutdown",
        "mgp.discovery.register",
        "mgp.discovery.deregister",
    }
)
# Kernel tools an LLM's context MUST include (§1.6.3 visibility table); the rest are operator-only
# except ``mgp.tools.session*``, which MAY be included.
LLM_CONTEXT = frozenset({"mgp.tools.discover", "mgp.tools.request"})

# The seed's method for each kernel tool that has one (0.3 ``mgp/a/b`` <-> draft ``mgp.a.b``).
_METHOD_OF_TOOL = {
    "mgp.tools.session.evict": "mgp/tools/session/evict",
    **{name: "mgp/" + name[len(RESERVED_TOOL_PREFIX) :].replace(".", "/") for name in KERNEL_TOOL_SCHEMAS},
}
_TOOL_OF_METHOD = {method: tool for tool, method in _METHOD_OF_TOOL.items() if method in SEED_METHODS}


def is_reserved_tool_name(name: object) -> bool:
    """Whether a tool name falls in the kernel's reserved ``mgp.`` namespace (§1.6.3)."""
    return isinstance(name, str) and name.startswith(RESERVED_TOOL_PREFIX)


def withhold_reserved(tools: Iterable[Any]) -> tuple[list[Any], list[str]]:
    """A backend's ``tools/list`` entries split into those kept and the names withheld because they
    use the reserved prefix (to be reported: audit ``TOOL_NAME_CONFLICT``, code 4003)."""
    kept: list[Any] = []
    withheld: list[str] = []
    for tool in tools:
        name = tool.get("name") if isinstance(tool, dict) else None
        if is_reserved_tool_name(name):
            withheld.append(str(name))
        else:
            kept.append(tool)
    return kept, withheld


def is_mgp_method(method: object) -> bool:
    return isinstance(method, str) and method.startswith(METHOD_PREFIX)


def is_mgp_notification(method: object) -> bool:
    return isinstance(method, str) and method.startswith(NOTIFICATION_PREFIX)


def kernel_tool_for_method(method: str) -> str | None:
    """The draft's kernel tool for a seed method (``mgp/access/query`` -> ``mgp.access.query``)."""
    return _TOOL_OF_METHOD.get(method)


def method_for_kernel_tool(tool: str) -> str | None:
    """The seed's method for a draft kernel tool, when the seed had one."""
    method = _METHOD_OF_TOOL.get(tool)
    return method if method in SEED_METHODS else None


def kernel_tool(name: str, description: str = "", *, title: str | None = None) -> dict[str, Any]:
    """A kernel tool's ``tools/list`` entry (for MGP clients of the draft line only)."""
    tool: dict[str, Any] = {"name": name}
    if title is not None:
        tool["title"] = title
    if description:
        tool["description"] = description
    tool["inputSchema"] = _copy(KERNEL_TOOL_SCHEMAS[name])
    tool["_mgp"] = {"source": "kernel", "admin_only": name in ADMIN_ONLY}
    return tool


def is_kernel_tool_entry(tool: Mapping[str, Any]) -> bool:
    marker = tool.get("_mgp")
    return isinstance(marker, dict) and marker.get("source") == "kernel"


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_copy(item) for item in value]
    return value


def permission_methods(version: str) -> tuple[str, str]:
    """The kernel's two permission methods in ``version``: ``mgp/permission/await`` and
    ``mgp/permission/grant`` from 0.4 on, the seed's ``request``/``response`` before."""
    if versions.at_least(version, versions.PERMISSION_AWAIT_SINCE):
        return PERMISSION_AWAIT, PERMISSION_GRANT
    return SEED_PERMISSION_REQUEST, SEED_PERMISSION_RESPONSE


def kernel_tools_for(version: str) -> tuple[str, ...]:
    """The kernel tools listed to an MGP client of ``version`` (none before the draft's 0.5)."""
    return tuple(sorted(KERNEL_TOOL_SCHEMAS)) if versions.is_draft(version) else ()
