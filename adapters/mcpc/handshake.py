"""The MCPC handshake: a tool call by which a client asks a server whether it speaks MCPC.

Wire (shared/notes/WIRE.md "MCPC"; checked against ``mcpc`` 0.2.6, ``MCPCHandler.init_mcpc`` and
``MCPCHelper.handle_protocol_info_request``):

- the client calls ``_mcpc_init`` (0.2.5+) or ``_is_mcpc_enabled`` (0.2.3-0.2.4) with
  ``{"mcpc_info": {"mcpc_enabled": true, "mcpc_version": V, "mcpc_provider": P}}``, or
  ``is_mcpc_enabled`` (<= 0.2.2) with ``{}``;
- the server answers with one text block ``{"mcpc_enabled":true,"mcpc_version":"0.2.6",
  "mcpc_provider":"<name>"}`` (compact JSON, that key order). The 0.2.6 client reads only the first
  content block; :func:`info_from_result` reads the first text block that is such an object.

Invariants: readers never raise and return None for anything that is not a handshake; builders
return fresh objects. A server that lacks the tool answers with an error or an ``isError`` result,
which :func:`info_from_result` reads as None (no MCPC).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from adapters.mcpc import jsontext
from adapters.mcpc.versions import LIBRARY_VERSION, PARAMS_SINCE, UNDERSCORE_HANDSHAKE_SINCE, at_least, parse_version

INIT_TOOL: Final = "_mcpc_init"
ENABLED_TOOL: Final = "_is_mcpc_enabled"
LEGACY_ENABLED_TOOL: Final = "is_mcpc_enabled"
HANDSHAKE_TOOLS: Final = frozenset({INIT_TOOL, ENABLED_TOOL, LEGACY_ENABLED_TOOL})
HANDSHAKE_ORDER: Final = (INIT_TOOL, ENABLED_TOOL, LEGACY_ENABLED_TOOL)
"""Newest first: the order in which a client that does not know the server's version tries them."""
TOOL_VERSIONS: Final = {INIT_TOOL: LIBRARY_VERSION, ENABLED_TOOL: "0.2.4", LEGACY_ENABLED_TOOL: "0.2.2"}
"""The newest library version that uses each handshake name (what a caller of that name speaks)."""
INFO_ARGUMENT: Final = "mcpc_info"


@dataclass(frozen=True, slots=True)
class McpcInfo:
    """``mcpc_info`` / the handshake reply: whether MCPC is on, the library version, the provider."""

    enabled: bool
    version: str | None
    provider: str | None

    def to_dict(self) -> dict[str, Any]:
        return {"mcpc_enabled": self.enabled, "mcpc_version": self.version, "mcpc_provider": self.provider}

    def to_text(self) -> str:
        """Compact JSON, as ``MCPCInformation.model_dump_json()`` writes it."""
        return jsontext.dumps(self.to_dict())


def handshake_tool(version: Any) -> str:
    """The handshake tool a peer of ``version`` calls (unknown version: the newest name)."""
    if at_least(version, PARAMS_SINCE):
        return INIT_TOOL
    if at_least(version, UNDERSCORE_HANDSHAKE_SINCE):
        return ENABLED_TOOL
    return LEGACY_ENABLED_TOOL


def handshake_arguments(tool: str, provider: str, version: str | None = None) -> dict[str, Any]:
    """Arguments of a call to handshake ``tool``; ``version`` defaults to the one that uses that name."""
    if tool == LEGACY_ENABLED_TOOL:
        return {}
    claimed = version if version is not None else TOOL_VERSIONS.get(tool, LIBRARY_VERSION)
    return {INFO_ARGUMENT: McpcInfo(True, claimed, provider).to_dict()}


def handshake_attempts(provider: str) -> list[tuple[str, dict[str, Any]]]:
    """(tool, arguments) for every handshake name, newest first, each claiming its name's version."""
    return [(tool, handshake_arguments(tool, provider)) for tool in HANDSHAKE_ORDER]


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _info(obj: Any) -> McpcInfo | None:
    if not isinstance(obj, dict) or "mcpc_enabled" not in obj:
        return None
    return McpcInfo(
        obj.get("mcpc_enabled") is True, _str_or_none(obj.get("mcpc_version")), _str_or_none(obj.get("mcpc_provider"))
    )


def info_from_arguments(arguments: Any) -> McpcInfo | None:
    """The client's ``mcpc_info`` from a handshake call's arguments (None for ``{}`` or junk).

    A missing ``mcpc_enabled`` counts as true, as the library's ``MCPCInformation`` default does.
    """
    if not isinstance(arguments, dict):
        return None
    info = arguments.get(INFO_ARGUMENT)
    if not isinstance(info, dict):
        return None
    return _info({"mcpc_enabled": True, **info})


def client_version(tool: Any, arguments: Any) -> str:
    """The version a client calling handshake ``tool`` speaks: its ``mcpc_version`` when readable,
    else the newest version that uses that name."""
    info = info_from_arguments(arguments)
    if info is not None and info.version is not None and parse_version(info.version) is not None:
        return info.version
    return TOOL_VERSIONS.get(tool, LIBRARY_VERSION) if isinstance(tool, str) else LIBRARY_VERSION


def info_from_text(text: Any) -> McpcInfo | None:
    """A handshake reply text (``{"mcpc_enabled": ...}``) read, or None."""
    return _info(jsontext.loads(text))


def info_from_result(result: Any) -> McpcInfo | None:
    """The server's handshake reply from a ``tools/call`` result, or None (not MCPC, an error, junk)."""
    if not isinstance(result, dict) or result.get("isError") is True:
        return None
    content = result.get("content")
    if not isinstance(content, list):
        return None
    for block in content:
        if isinstance(block, dict) and block.get("type", "text") == "text":
            info = info_from_text(block.get("text"))
            if info is not None:
                return info
    return None


def reply_text(provider: str, version: str = LIBRARY_VERSION) -> str:
    """The text a server answers a handshake with."""
    return McpcInfo(True, version, provider).to_text()


def reply_result(provider: str, version: str = LIBRARY_VERSION) -> dict[str, Any]:
    """A whole ``tools/call`` result answering a handshake (as SDK servers write it: no nulls)."""
    return {"content": [{"type": "text", "text": reply_text(provider, version)}], "isError": False}
