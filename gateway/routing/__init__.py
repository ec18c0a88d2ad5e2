"""Routing: the pipeline a client message takes, and what backends send back on their own.

- ``router.py``: the pipeline (decode → admit → handle → audit) and the handlers, on one ``Call``
- ``catalog.py``: merged lists, pages and cursors, name and URI resolution
- ``subscriptions.py``: one table of resource subscriptions (``resources/subscribe`` and listen streams)
- ``listen.py``: what a ``subscriptions/listen`` stream may hear, decided by the policy chain
- ``forwarding.py``: a call to its backend and the answer back under the client's ids and names
- ``backend_events.py``: the ``ConnectionHandler`` of every backend (requests to clients, notifications)
- ``client_messages.py``: client notifications, answers to relayed requests, a session's end
- ``levels.py``: log levels toward shared backends
The bridge between the MCP eras is ``gateway/eras.py``.
"""

from gateway.routing.call import Call, CallSink, PolicyDenied, Routed
from gateway.routing.router import Router

__all__ = ["Call", "CallSink", "PolicyDenied", "Routed", "Router"]
