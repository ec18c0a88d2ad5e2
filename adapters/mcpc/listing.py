"""Hiding MCPC's plumbing from ``tools/list``: handshake tools and the metadata argument.

MCPC servers list their handshake tool and may declare ``mcpc_params`` (or ``_metadata``) in input
schemas; the 0.2.6 ``MCPCHelper`` hides them only on FastMCP, and only the ``properties`` entry. A
gateway hides them from every list it serves (issue 13): tools named ``_mcpc_init``,
``_is_mcpc_enabled`` or ``is_mcpc_enabled`` are dropped, and ``mcpc_params`` / ``_metadata`` are
removed from ``inputSchema.properties`` and ``inputSchema.required``.

Invariant: the input is never modified; changed tools are shallow copies with new ``inputSchema``,
``properties`` and ``required``; untouched tools are the same objects. Entries that are not tool
objects are kept as they are. Never raises.
"""

from __future__ import annotations

from typing import Any

from adapters.mcpc.handshake import HANDSHAKE_TOOLS
from adapters.mcpc.metadata import METADATA_KEYS


def _is_handshake(tool: Any) -> bool:
    return isinstance(tool, dict) and isinstance(tool.get("name"), str) and tool["name"] in HANDSHAKE_TOOLS


def _hide_schema(schema: Any) -> Any:
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    changed = False
    properties = schema.get("properties")
    if isinstance(properties, dict) and any(key in properties for key in METADATA_KEYS):
        out["properties"] = {key: value for key, value in properties.items() if key not in METADATA_KEYS}
        changed = True
    required = schema.get("required")
    if isinstance(required, list) and any(_is_metadata_name(item) for item in required):
        out["required"] = [item for item in required if not _is_metadata_name(item)]
        changed = True
    return out if changed else schema


def _is_metadata_name(item: Any) -> bool:
    return isinstance(item, str) and item in METADATA_KEYS


def _hide_tool(tool: Any) -> Any:
    if not isinstance(tool, dict) or "inputSchema" not in tool:
        return tool
    schema = _hide_schema(tool["inputSchema"])
    return tool if schema is tool["inputSchema"] else {**tool, "inputSchema": schema}


def hide(tools: Any) -> list[Any]:
    """A ``tools/list`` result's ``tools`` without handshake tools and without the metadata argument."""
    if not isinstance(tools, list):
        return []
    return [_hide_tool(tool) for tool in tools if not _is_handshake(tool)]


def hide_in_result(result: Any) -> Any:
    """A ``tools/list`` result with :func:`hide` applied to its ``tools`` (other keys kept)."""
    if not isinstance(result, dict) or not isinstance(result.get("tools"), list):
        return result
    return {**result, "tools": hide(result["tools"])}
