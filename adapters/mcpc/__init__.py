"""MCPC (``mcpc`` library 0.2.x, asynchronous task callbacks): the dialect's wire.

Specs: ``../shared/specs/mcpc-readme.md`` (the library's README) and ``../shared/notes/WIRE.md``
"MCPC" (how the library really behaves; checked against the ``mcpc`` 0.2.6 source). This package
knows how MCPC is *read and written*; what a gateway does with tasks lives in ``gateway/``.

Invariants:

- MCPC is never negotiated at ``initialize``; it shows per call (``facets``: handshake tools, task
  metadata in arguments).
- Wire names and shapes live only here: handshake names and arguments by version (``handshake``),
  per-call metadata in both forms (``metadata``), the message (``message``), the unsolicited
  ``MCPC_CALLBACK`` response (``callback``), what ``tools/list`` must not show (``listing``), and
  which version uses what (``versions``). An unknown version gets the newest wire.
- Parsers never raise: junk reads as None or ``[]``. Builders never modify their inputs.
- Messages are written byte for byte as the library writes them (``jsontext``).

Submodules: ``versions``, ``jsontext``, ``handshake``, ``metadata``, ``message``, ``callback``,
``listing``, ``facets``.
"""

from __future__ import annotations

from adapters.mcpc import callback, facets, handshake, jsontext, listing, message, metadata, versions
from adapters.mcpc.callback import (
    MCPC_CALLBACK as MCPC_CALLBACK,
    callback_envelope as callback_envelope,
    callback_line as callback_line,
    callback_messages as callback_messages,
    is_callback as is_callback,
)
from adapters.mcpc.facets import DIALECT as DIALECT, annotate as annotate, speaks as speaks, task_info as task_info
from adapters.mcpc.handshake import (
    HANDSHAKE_ORDER as HANDSHAKE_ORDER,
    HANDSHAKE_TOOLS as HANDSHAKE_TOOLS,
    McpcInfo as McpcInfo,
    client_version as client_version,
    handshake_arguments as handshake_arguments,
    handshake_attempts as handshake_attempts,
    handshake_tool as handshake_tool,
    info_from_arguments as info_from_arguments,
    info_from_result as info_from_result,
    reply_result as reply_result,
    reply_text as reply_text,
)
from adapters.mcpc.listing import hide as hide, hide_in_result as hide_in_result
from adapters.mcpc.message import (
    McpcMessage as McpcMessage,
    messages_in_content as messages_in_content,
    messages_in_result as messages_in_result,
    parse_text as parse_text,
    result_of_messages as result_of_messages,
)
from adapters.mcpc.metadata import (
    MetadataForm as MetadataForm,
    TaskRef as TaskRef,
    metadata_form as metadata_form,
    read_metadata as read_metadata,
    with_metadata as with_metadata,
    without_metadata as without_metadata,
)
from adapters.mcpc.versions import (
    LIBRARY_VERSION as LIBRARY_VERSION,
    at_least as at_least,
    compare_versions as compare_versions,
    parse_version as parse_version,
)

__all__ = [
    "DIALECT",
    "HANDSHAKE_ORDER",
    "HANDSHAKE_TOOLS",
    "LIBRARY_VERSION",
    "MCPC_CALLBACK",
    "McpcInfo",
    "McpcMessage",
    "MetadataForm",
    "TaskRef",
    "annotate",
    "at_least",
    "callback",
    "callback_envelope",
    "callback_line",
    "callback_messages",
    "client_version",
    "compare_versions",
    "facets",
    "handshake",
    "handshake_arguments",
    "handshake_attempts",
    "handshake_tool",
    "hide",
    "hide_in_result",
    "info_from_arguments",
    "info_from_result",
    "is_callback",
    "jsontext",
    "listing",
    "message",
    "messages_in_content",
    "messages_in_result",
    "metadata",
    "metadata_form",
    "parse_text",
    "read_metadata",
    "reply_result",
    "reply_text",
    "result_of_messages",
    "speaks",
    "task_info",
    "versions",
    "with_metadata",
    "without_metadata",
]
