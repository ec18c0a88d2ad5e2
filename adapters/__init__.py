"""One module per dialect: decode wire to Event, encode Event to wire, negotiation, version tolerance.

``detect_dialects`` looks at a client's ``initialize`` and says which extensions it speaks, and
``annotate`` lets each extension adapter add its facets to an MCP-decoded event.

Invariant of ``annotate``'s fast path: a plain ``tools/call`` (no key any extension reads in its
params or arguments, no trace id on the message) gets no facet and no trace id from any annotator,
so it is answered by one test of keys present; anything else goes through every annotator.
``decode`` is ``annotate(mcp.decode(...))`` with a plain call's event made in place (the router's entry).
"""

from __future__ import annotations

from typing import Any

from adapters import mcp, mcpc, mcpl, mgp
from adapters.mcpc.handshake import HANDSHAKE_TOOLS
from adapters.mcpc.metadata import LEGACY_KEY as _MCPC_LEGACY_KEY, PARAMS_KEY as _MCPC_PARAMS_KEY
from gateway import jsonrpc
from gateway.events import Dialect, Event

_EXTENSIONS = (mcpl, mgp, mcpc)
# Bound once: ``annotate`` runs on every client message.
_ANNOTATORS = tuple(module.annotate for module in _EXTENSIONS)
# The params keys that can make an extension annotate a tools/call: MCPL's featureSet and scope,
# MGP's _mgp and trace_id (§6.5; ``_meta`` only through its traceparent, tested apart).
_MARKED_PARAMS = frozenset({"featureSet", "scope", "_mgp", "trace_id"})
_SHAPE_KIND = mcp.SHAPE_KIND
_MCP = Dialect.MCP  # read once: a ``Dialect.X`` read costs about 0.1 µs on Python 3.11


def detect_dialects(initialize_params: dict[str, Any]) -> frozenset[Dialect]:
    found = {Dialect.MCP}
    for module in _EXTENSIONS:
        if module.speaks(initialize_params):
            found.add(module.DIALECT)
    return frozenset(found)


def annotate(event: Event) -> Event:
    if event.method == "tools/call" and _plain_call(event.payload):
        return event  # no annotator would add anything (module docstring)
    for annotator in _ANNOTATORS:
        annotator(event)
    return event


def decode(message: dict[str, Any], shape: jsonrpc.Shape, session: str | None, principal: str | None) -> Event:
    """``annotate(mcp.decode(message, shape, session=session, principal=principal))``: the same event,
    with a plain ``tools/call``'s event made here (two Python calls fewer per call) and checked by
    the same ``_plain_call`` as :func:`annotate`'s."""
    params = message.get("params")
    if message.get("method") != "tools/call" or type(params) is not dict:
        event = mcp.decode(message, shape, session=session, principal=principal)
        for annotator in _ANNOTATORS:
            annotator(event)
        return event
    name = params.get("name")
    # mcp.decode's tools/call branch (positional, in Event's field order).
    event = Event(
        _SHAPE_KIND[shape],
        "tools/call",
        message,
        _MCP,
        name if isinstance(name, str) else None,
        message.get("id"),
        None,
        principal,
        session,
    )
    if _plain_call(message):  # a plain call gets nothing from any annotator (module docstring)
        return event
    for annotator in _ANNOTATORS:
        annotator(event)
    return event


def _plain_call(payload: dict[str, Any]) -> bool:
    """Whether a ``tools/call`` carries nothing any extension reads: sufficient, not necessary (a
    message it is unsure of goes through the annotators, which decide exactly)."""
    params = payload.get("params")
    if type(params) is not dict or "trace_id" in payload or not _MARKED_PARAMS.isdisjoint(params):
        return False
    if "_meta" in params:
        meta = params["_meta"]
        if type(meta) is not dict or "traceparent" in meta:
            return False
    name = params.get("name")
    if type(name) is not str or name in HANDSHAKE_TOOLS:
        return False
    arguments = params.get("arguments")
    if arguments is None:
        return True
    return type(arguments) is dict and _MCPC_PARAMS_KEY not in arguments and _MCPC_LEGACY_KEY not in arguments
