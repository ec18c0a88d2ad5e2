"""MCPx v0.1 topics (ADR 0008), in the same shape as MCPL's relay: one package, one job a module.

- ``hub.py``: topics and their participants, welcome before presence, routing by ``to`` and mode
- ``door.py``: the WebSocket door ``/ws?topic=``: authentication, envelope checks, the outbox
- ``bridge.py``: MCP backends as topic participants (a request addressed to one becomes a call)
- ``api.py``: ``/v0.1/topics``, dev tokens, capability promotion
"""
