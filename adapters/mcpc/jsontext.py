"""JSON text as the ``mcpc`` library reads and writes it.

The library serialises with pydantic (``model_dump_json``), which differs from :func:`json.dumps`
only in number and non-finite spelling (pydantic-core formats floats like the ``ryu`` crate):
compact separators, non-ASCII characters kept as they are, exponents written ``1e16`` / ``1e-7``
(Python: ``1e+16`` / ``1e-07``), numbers of exponent -5 written in full (``0.00001``; Python:
``1e-05``), and NaN / ±Infinity written ``null``. :func:`dumps` reproduces that byte for byte
(tests/mcpc_peers/test_peers.py compares it with the library itself). :func:`loads` never raises:
unreadable text is :data:`INVALID`.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

INVALID: Final = object()
"""Returned by :func:`loads` for text that is not JSON (distinct from a JSON ``null``)."""

# A JSON string (kept as is), a float in Python's scientific spelling (``-1.5e+16``: sign, first
# digit, other digits, exponent), or a non-finite number.
_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|(-?)(\d)(?:\.(\d+))?e([+-]\d+)|-?Infinity|NaN')


def _respell(match: re.Match[str]) -> str:
    token = match.group(0)
    if token[0] == '"':
        return token
    if match.group(2) is None:
        return "null"
    sign, first, rest, exponent = match.group(1), match.group(2), match.group(3), int(match.group(4))
    if exponent == -5:  # ryu writes decimal exponents -5..15 in full; Python only -4..15
        return f"{sign}0.0000{first}{rest or ''}"
    return f"{sign}{first}{'.' + rest if rest else ''}e{exponent}"


def dumps(value: Any) -> str:
    """Compact JSON text of ``value`` (JSON-shaped data) spelt as pydantic spells it."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate (json.loads accepts "\ud800") cannot be written raw
        text = json.dumps(value, ensure_ascii=True, separators=(",", ":"))
    if "e" in text or "N" in text or "I" in text:
        text = _TOKENS.sub(_respell, text)
    return text


def loads(text: Any) -> Any:
    """The JSON value of ``text`` (str or bytes), or :data:`INVALID`; never raises."""
    if not isinstance(text, str | bytes | bytearray):
        return INVALID
    try:
        return json.loads(text)
    except (ValueError, RecursionError, TypeError):
        return INVALID
