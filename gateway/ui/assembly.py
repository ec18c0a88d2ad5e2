"""Wiring only: the dashboard's parts made from a running :class:`~gateway.core.Gateway`.

Each part gets the collaborators it reads (see their constructors); this is the one place that
knows where they live on the gateway.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway.ui.access import UiAccess
from gateway.ui.routes import Dashboard
from gateway.ui.snapshot import BackendsView, SessionsView
from gateway.ui.tail import EventTail

if TYPE_CHECKING:
    from gateway.core import Gateway


def dashboard_for(gw: Gateway) -> Dashboard:
    access = UiAccess(
        auth=lambda: gw.config.auth,
        readers=lambda: gw.config.ui.readers,
        authenticate=gw.authenticate,
    )
    backends = BackendsView(
        connections=gw.connections,
        catalog=gw.catalog,
        metrics=gw.metrics,
        mcpl=gw.mcpl,
        mgp=gw.mgp.kernel,
        mcpc=gw.mcpc.backends,
        tool_facts=gw.mgp.tools,
        trust_level=gw.mgp.registry.trust_level,
        pins=gw.pins,
    )
    tail = EventTail(gw.audit, gw.bus, gw.replicas.replica, shared=gw.config.bus.kind != "memory", topics=gw.topics)
    return Dashboard(
        access=access,
        backends=backends,
        sessions=SessionsView(gw.sessions, gw.mcpl),
        topics=gw.topics,
        permissions=gw.mgp.kernel.pending_everywhere,
        ready=gw.readiness,
        tail=tail,
        admin_api=lambda: gw.config.auth is not None and bool(gw.config.auth.admin_token),
        reload=gw.reload_status.to_json,
    )
