"""MCPC peers for issue 13: the real ``mcpc`` 0.2.6 library on both sides, and an older server of our own.

``venv`` builds the library's own virtual environment (``.cache/peers/mcpc``; the library needs
``mcp==1.6.0``, which cannot share the project's environment). ``server`` is an MCPC server built
with the library's ``MCPCHelper`` on SDK 1.6's low-level server over stdio; ``client`` is an MCPC
client built with ``MCPCHandler.wrap_streams`` (a JSON-lines CLI); ``old_server`` is a raw stdio
server of ours speaking the pre-0.2.5 handshake names and ``_metadata`` keys. ``server`` and
``client`` run only under that environment's python; this package must not import them.
"""
