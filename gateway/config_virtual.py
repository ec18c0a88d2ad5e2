"""Virtual servers (issue 17): curated MCP servers made of tools, prompts and resources of any backends.

``virtual_servers.NAME`` is served at ``/servers/NAME/mcp`` (also ``/sse`` and ``/mcp/ws``) like a
backend's own door. What it shows is chosen by entries ``BACKEND:PATTERN`` (``*`` matches any run of
characters, everything else is literal); tools and prompts keep their own names unless renamed
(``rename: {exposed: "BACKEND:original"}``), resources and resource templates keep their URIs.

Invariants the validators keep (``switchboard check`` reports each at the key it is about):

- a virtual server's name is a backend-shaped DNS label and is no backend's name (the two share the
  ``/servers/NAME/`` namespace, MCPx participant ids and MGP server ids);
- every entry names a configured backend; a rename target is a literal name one of the server's own
  tools or prompts entries selects (a rename never reaches past the selection);
- an exposed name two selected items would share is an error when the config says so outright
  (literal entries and rename keys); a clash only a backend's list can reveal (a ``*`` pattern) is
  withheld at run time, logged and counted, never resolved silently (gateway/virtual_servers.py);
- ``descriptions`` keys are exposed names the server can show (a rename key, or a name one of its
  tools or prompts patterns matches).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Annotated

from pydantic import AfterValidator, Field, field_validator
from pydantic_core import PydanticCustomError

from gateway.config_base import StrictModel as _Model
from policies.patterns import star_glob

_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")  # = gateway.config.BACKEND_NAME
_MAX_ENTRIES = 1000  # per list: selection is matched per item of every backend list
_MAX_TEXT = 65536


def split_entry(entry: str) -> tuple[str, str]:
    """``BACKEND:PATTERN`` → (backend, pattern); the backend is everything before the first ``:``
    (backend names hold no ``:``), the pattern everything after it (URIs hold ``:`` themselves)."""
    backend, sep, pattern = entry.partition(":")
    if not sep or not _NAME.fullmatch(backend) or not pattern:
        raise ValueError(f"{entry!r} must be 'BACKEND:PATTERN' (a backend name, ':', then a name, URI or '*' pattern)")
    return backend, pattern


def _entry(entry: str) -> str:
    split_entry(entry)
    return entry


def _virtual_name(name: str) -> str:
    if not _NAME.fullmatch(name):
        raise ValueError(
            f"virtual server name {name!r} must be a lowercase DNS label ([a-z0-9-], 1-63 chars), like a backend name"
        )
    return name


Entry = Annotated[str, AfterValidator(_entry)]
VirtualName = Annotated[str, AfterValidator(_virtual_name)]


class ServerInfo(_Model):
    name: str = Field(min_length=1, max_length=256, description="serverInfo.name shown to the server's clients.")
    version: str = Field("1.0.0", min_length=1, max_length=64, description="serverInfo.version.")
    title: str | None = Field(None, max_length=256, description="serverInfo.title (a display name), if any.")


class VirtualServer(_Model):
    tools: list[Entry] = Field(
        default_factory=list,
        max_length=_MAX_ENTRIES,
        description="Tools shown, as 'BACKEND:NAME' entries; '*' matches any run of characters "
        "('weather:get_*', 'files:*'). Exposed under their own names unless renamed.",
    )
    prompts: list[Entry] = Field(
        default_factory=list, max_length=_MAX_ENTRIES, description="Prompts shown, as 'BACKEND:NAME' entries."
    )
    resources: list[Entry] = Field(
        default_factory=list,
        max_length=_MAX_ENTRIES,
        description="Resources and resource templates shown, as 'BACKEND:URI' entries matched against a "
        "resource's uri or a template's uriTemplate ('docs:file:///srv/docs/*'). URIs are never rewritten; a "
        "selected template admits the URIs it generates (by its literal head).",
    )
    rename: dict[str, str] = Field(
        default_factory=dict,
        description="Exposed name -> 'BACKEND:original' for a tool or prompt the entries above select; it is "
        "then shown under the exposed name only. Capabilities are checked on both names (ADR 'virtual servers').",
    )
    descriptions: dict[str, str] = Field(
        default_factory=dict, description="Exposed tool or prompt name -> the description its clients see instead."
    )
    principals: list[str] = Field(
        default_factory=list,
        description="Only these principals may use this virtual server (others are refused every request); "
        "empty: every principal the policy chain admits. Capabilities still decide per call.",
    )
    server_info: ServerInfo | None = Field(
        None, description="serverInfo in initialize and server/discover; default: {name: NAME, version: 1.0.0}."
    )
    instructions: str | None = Field(
        None, max_length=_MAX_TEXT, description="Instructions in initialize and server/discover (none by default)."
    )
    resource: str | None = Field(
        None,
        description="Its OAuth resource id (RFC 9728, RFC 8707), named in the metadata at "
        "/.well-known/oauth-protected-resource/servers/NAME/mcp and accepted as a token audience on "
        "/servers/NAME/... (default: the gateway's base + /servers/NAME/mcp), as for a backend.",
    )

    @field_validator("rename")
    @classmethod
    def _rename_shape(cls, value: dict[str, str]) -> dict[str, str]:
        targets: dict[str, str] = {}
        for exposed, target in value.items():
            if not exposed or len(exposed) > 256:
                raise ValueError(f"rename key {exposed!r} must be a name of 1-256 characters")
            backend, original = split_entry(target)
            if "*" in original:
                raise ValueError(f"rename.{exposed}: {target!r} must name one tool or prompt (no '*')")
            first = targets.setdefault(target, exposed)
            if first != exposed:
                raise ValueError(f"rename.{exposed} and rename.{first} both rename {backend}:{original}")
        return value

    @field_validator("descriptions")
    @classmethod
    def _description_size(cls, value: dict[str, str]) -> dict[str, str]:
        for key, text in value.items():
            if len(text) > _MAX_TEXT:
                raise ValueError(f"descriptions.{key} is longer than {_MAX_TEXT} characters")
        return value


def _clash(entries: Iterable[str], rename: Mapping[str, str]) -> tuple[str, list[str]] | None:
    """The first exposed name two items would share, from what the config says outright: literal
    entries (exposed under their own name unless renamed) and rename keys."""
    renamed = {split_entry(target): exposed for exposed, target in rename.items()}
    owners: dict[str, set[str]] = {}
    for entry in entries:
        backend, name = split_entry(entry)
        if "*" in name:
            continue
        owners.setdefault(renamed.get((backend, name), name), set()).add(f"{backend}:{name}")
    for exposed, target in rename.items():
        backend, original = split_entry(target)
        if any(star_glob(p)(original) for b, p in map(split_entry, entries) if b == backend):
            owners.setdefault(exposed, set()).add(target)
    for exposed, items in owners.items():
        if len(items) > 1:
            return exposed, sorted(items)
    return None


def check_references(virtual: Mapping[str, VirtualServer], backends: Iterable[str]) -> None:
    """The checks that need the rest of the config or the whole server (called by ``Config``; the
    module's invariants). Raises a PydanticCustomError located at the offending key."""
    known = set(backends)
    for name, server in virtual.items():
        at: tuple[str | int, ...] = ("virtual_servers", name)
        if name in known:
            _located(
                "virtual server {quoted} has a backend's name (both would be /servers/{name}/mcp)",
                at,
                quoted=repr(name),
                name=name,
            )
        for kind in ("tools", "prompts", "resources"):
            for index, entry in enumerate(getattr(server, kind)):
                backend, _ = split_entry(entry)
                if backend not in known:
                    _located(
                        "no backend named {backend} (backends: {known})",
                        (*at, kind, index),
                        backend=repr(backend),
                        known=", ".join(sorted(known)) or "none configured",
                    )
        _check_selection(server, at)


def _check_selection(server: VirtualServer, at: tuple[str | int, ...]) -> None:
    selectors = [split_entry(e) for e in (*server.tools, *server.prompts)]
    renamed = {split_entry(t) for t in server.rename.values()}
    for exposed, target in server.rename.items():
        backend, original = split_entry(target)
        if not any(b == backend and star_glob(p)(original) for b, p in selectors):
            _located(
                "{target} is not selected by this server's tools or prompts entries (add it there to rename it)",
                (*at, "rename", exposed),
                target=repr(target),
            )
    for key in server.descriptions:
        if key not in server.rename and not any(star_glob(p)(key) and (b, key) not in renamed for b, p in selectors):
            _located(
                "{key} is not a name this server exposes (a rename key, or a name its tools or prompts select)",
                (*at, "descriptions", key),
                key=repr(key),
            )
    for kind, entries in (("tools", server.tools), ("prompts", server.prompts)):
        clash = _clash(entries, server.rename)
        if clash is not None:
            _located(
                "{kind} name {exposed} would be exposed for several items ({owners}); rename one of them",
                (*at, kind),
                kind=kind,
                exposed=repr(clash[0]),
                owners=", ".join(clash[1]),
            )


def _located(message: str, loc: tuple[str | int, ...], **context: str) -> None:
    raise PydanticCustomError("located", message, {**context, "loc": loc})


VirtualServers = dict[VirtualName, VirtualServer]
