"""The MCPL test server's catalog: per role, its tools, its MCPL capabilities and its feature sets."""

from __future__ import annotations

from typing import Any

JsonObj = dict[str, Any]

ROLES = ("memory", "compliance", "notes", "files", "channels")


def tool(name: str, description: str, properties: JsonObj | None = None, required: list[str] | None = None) -> JsonObj:
    schema: JsonObj = {"type": "object", "properties": properties or {}}
    if required:
        schema["required"] = required
    return {"name": name, "description": description, "inputSchema": schema}


STRING = {"type": "string"}
OBJECT = {"type": "object"}

COMMON_TOOLS = [
    tool("stats", "Everything this server has received so far, as JSON"),
    tool(
        "ask",
        "Send any request to the host and return its whole answer",
        {"method": STRING, "params": OBJECT},
        ["method"],
    ),
    tool(
        "push",
        "Send push/event to the host and return its answer",
        {"eventId": STRING, "text": STRING, "featureSet": STRING},
        ["eventId", "text"],
    ),
    tool(
        "infer",
        "Send inference/request to the host; return its answer and the streamed chunks",
        {"featureSet": STRING, "stream": {"type": "boolean"}, "conversationId": STRING},
    ),
    tool("notify", "Send any notification to the host", {"method": STRING, "params": OBJECT}, ["method"]),
    tool("exit", "Exit the process at once (a crash, for restart tests)"),
]

ROLE_TOOLS: dict[str, list[JsonObj]] = {
    "memory": [tool("remember", "Store a memory", {"text": STRING}, ["text"])],
    "compliance": [],
    "notes": [tool("add_note", "Add a note (creates a checkpoint)", {"text": STRING}, ["text"])],
    "files": [tool("edit_file", "Edit a file (scoped)", {"path": STRING}, ["path"])],
    "channels": [
        tool(
            "incoming",
            "Deliver inbound channel messages to the host",
            {"channelId": STRING, "texts": {"type": "array", "items": STRING}},
            ["channelId", "texts"],
        )
    ],
}

CHANNEL_CAPS = {"register": True, "publish": True, "observe": True, "lifecycle": True, "streaming": True}

ROLE_CAPABILITIES: dict[str, JsonObj] = {
    # §15.1 plus modelInfo (§5.1).
    "memory": {
        "version": "0.4",
        "contextHooks": {"beforeInference": True, "afterInference": {"blocking": False}},
        "inferenceRequest": {"streaming": True},
        "pushEvents": True,
        "featureSets": {
            "memory.retrieval": {
                "description": "Retrieve relevant memories",
                "uses": ["contextHooks.beforeInference"],
            },
            "memory.extraction": {"description": "Learn from conversations", "uses": ["contextHooks.afterInference"]},
            "memory.consolidation": {"description": "Summarize memories using AI", "uses": ["inferenceRequest"]},
            "memory.proactive": {"description": "Surface reminders proactively", "uses": ["pushEvents"]},
        },
        "modelInfo": True,
    },
    # §15.2 exactly.
    "compliance": {
        "version": "0.4",
        "contextHooks": {"afterInference": {"blocking": True}},
        "featureSets": {
            "compliance.redaction": {
                "description": "Redact secrets and PII from responses",
                "uses": ["contextHooks.afterInference"],
            }
        },
    },
    # §8.1.
    "notes": {
        "version": "0.4",
        "featureSets": {"notes.edit": {"description": "Manage notes", "uses": ["tools"], "rollback": True}},
    },
    # The array / boolean shapes real peers send (the reference servers of MCPL 0.4 and 0.5 differ from the spec).
    "files": {
        "version": "0.4",
        "pushEvents": True,
        "channels": True,
        "featureSets": [
            {"name": "files.edit", "description": "Edit files", "uses": ["tools"], "scoped": True},
            {"name": "files.watch", "description": "Watch files", "uses": ["pushEvents"]},
        ],
    },
    # §14.1.
    "channels": {
        "version": "0.4",
        "channels": dict(CHANNEL_CAPS),
        "featureSets": {
            "channels.publish": {
                "description": "Publish to registered channels",
                "uses": ["channels.publish"],
                "scoped": True,
            },
            "channels.observe": {
                "description": "Observe outgoing/incoming messages",
                "uses": ["channels.observe"],
                "scoped": True,
            },
        },
    },
}

DEFAULT_FEATURE_SET = {
    "memory": "memory.proactive",
    "compliance": "compliance.redaction",
    "notes": "notes.edit",
    "files": "files.watch",
    "channels": "channels.publish",
}

HOOK_FEATURE_SET = {
    "memory": ("memory.retrieval", "memory.extraction"),
    "compliance": ("compliance.redaction", "compliance.redaction"),
    "notes": ("notes.edit", "notes.edit"),
    "files": ("files.edit", "files.edit"),
    "channels": ("channels.observe", "channels.observe"),
}


def channel_descriptor(channel: str) -> JsonObj:
    return {
        "id": f"discord:{channel}",
        "type": "discord",
        "label": f"{channel} (Acme Discord)",
        "direction": "bidirectional",
        "address": {"guild": "acme", "channel": channel},
    }
