"""One module per dialect: decode wire to Event, encode Event to wire, negotiation, version tolerance.

``detect_dialects`` looks at a client's ``initialize`` and says which extensions it speaks, and
``annotate`` lets each extension adapter add its facets to an MCP-decoded event.
"""

from __future__ import annotations

from typing import Any

from adapters import mcpc, mcpl, mgp
from gateway.events import Dialect, Event

_EXTENSIONS = (mcpl, mgp, mcpc)
# Bound once: ``annotate`` runs on every client message.
_ANNOTATORS = tuple(module.annotate for module in _EXTENSIONS)


def detect_dialects(initialize_params: dict[str, Any]) -> frozenset[Dialect]:
    found = {Dialect.MCP}
    for module in _EXTENSIONS:
        if module.speaks(initialize_params):
            found.add(module.DIALECT)
    return frozenset(found)


def annotate(event: Event) -> Event:
    for annotator in _ANNOTATORS:
        annotator(event)
    return event
