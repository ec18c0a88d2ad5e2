"""MCPx v0.1 topics (ADR 0008), in the same shape as MCPL's relay: one package, one job a module.

- ``hub.py``: topics and their participants, welcome before presence, routing by ``to`` and mode
- ``door.py``: the WebSocket door ``/ws?topic=``: authentication, envelope checks, the outbox
- ``bridge.py``: MCP backends as topic participants (a request addressed to one becomes a call)
- ``api.py``: ``/v0.1/topics``, dev tokens, capability promotion
- ``span.py``: one topic across replicas through the bus (ADR 0015)
- ``registry.py``: the shared registry of participants behind it, with replica liveness
- ``mirror.py``: this replica's view of the other replicas' participants, and presence from it
"""
