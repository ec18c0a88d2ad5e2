"""The dashboard at ``/ui`` (issue 16): plain HTML, CSS and JS served by the gateway itself.

- ``access``: who may look (admin token, ``ui.readers``, or open without an ``auth`` section).
- ``snapshot``: what the read-only pages show, read from the gateway's objects when a page asks.
- ``latency``: p50/p99 per backend from the router's histogram (off the request path).
- ``tail``: the live events (the audit stream), bounded per viewer, across replicas on a shared bus.
- ``routes``: the HTTP surface; ``assembly``: the wiring from a Gateway.
- ``static/``: the page (no build step, nothing fetched from elsewhere).

With ``ui.enabled: false`` none of it is mounted (every /ui path is 404) and nothing runs.
"""

from gateway.ui.assembly import dashboard_for as dashboard_for
from gateway.ui.routes import Dashboard as Dashboard

__all__ = ["Dashboard", "dashboard_for"]
