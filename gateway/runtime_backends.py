"""Backends that join and leave the running gateway (MGP §15 ``mgp/discovery/register|deregister``).

A backend from the config file lives as long as the process; one registered at runtime gets the
same treatment (its catalog, its own ``/servers/NAME/`` view, a place in the federated view, the
same kind of connection) and can be removed again.

Invariants: every step up to the connection's start is one synchronous step, so no request sees a
half-added backend; a leaving backend is announced to clients (as a lost backend) while the views
still hold it, then leaves every view before its calls in flight are given ``drain_s`` to finish;
sessions of a view whose backends changed are told to list again. A virtual server
(gateway/virtual_servers.py) draws on the backends its entries name that exist: a removed one leaves
it, and one registered again under such a name rejoins it; a virtual server's name is never given to
a backend. Once its connection is closed,
the ``on_removed`` listeners (what else keeps per-backend state: MGP's kernel, lifecycle and news,
gateway/mgp/assembly.py; a dual-era backend's legacy twin, gateway/upstreams/affinity.py) are
called in the same synchronous step that forgets the connection, while it is still under its name.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, MutableMapping
from typing import TYPE_CHECKING

from gateway import jsonrpc
from gateway.config import BACKEND_NAME, Backend as BackendConfig, Federation
from gateway.federation import BackendCatalog, Namer, View
from gateway.upstreams.listen import ListenOwner

if TYPE_CHECKING:
    from collections.abc import Mapping

    from gateway.metrics import Metrics
    from gateway.sessions import SessionStore
    from gateway.upstreams.connection import BackendConnection
    from gateway.virtual_servers import VirtualView

log = logging.getLogger(__name__)

_POLL_S = 0.02


class RuntimeBackends:
    def __init__(
        self,
        *,
        federation: Federation,
        connections: MutableMapping[str, BackendConnection],
        catalogs: MutableMapping[str, BackendCatalog],
        federated: View,
        single: MutableMapping[str, View],
        sessions: SessionStore,
        virtual: Mapping[str, VirtualView] | None = None,
        metrics: Metrics,
        connect: Callable[[str, BackendConfig], BackendConnection],
        lost: Callable[[BackendConnection, str], None],
    ) -> None:
        self._federation = federation
        self._connections = connections
        self._catalogs = catalogs
        self._federated = federated
        self._single = single
        self._virtual = virtual if virtual is not None else {}
        self._sessions = sessions
        self._metrics = metrics
        self._connect = connect  # a connection built like the config's backends'
        self._lost = lost  # what a lost backend means for clients (gateway/routing/backend_events.py)
        self._removed: list[Callable[[BackendConnection], None]] = []

    def on_removed(self, listener: Callable[[BackendConnection], None]) -> None:
        """``listener(conn)`` after a removed backend's connection closed (see the invariants)."""
        self._removed.append(listener)

    async def add(self, name: str, cfg: BackendConfig) -> BackendConnection:
        """``name`` joins and starts connecting. ValueError: the name is taken or not a backend name."""
        if not BACKEND_NAME.fullmatch(name):
            raise ValueError(f"{name!r} is not a backend name")
        if name in self._connections:
            raise ValueError(f"a backend named {name!r} already exists")
        if name in self._virtual:
            raise ValueError(f"{name!r} is the name of a virtual server")
        fed = self._federation
        self._catalogs[name] = BackendCatalog(name, fed.list_cache_s)
        conn = self._connections[name] = self._connect(name, cfg)
        self._metrics.backend_up.labels(name).set(0)
        self._single[name] = View(name, (name,), Namer("never", fed.separator, (name,)))
        self.reshape(self._federated, (*self._federated.backends, name))
        for view in self._virtual.values():
            if name in view.wanted:
                self.reshape(view, tuple(b for b in view.wanted if b in self._connections))
        await conn.start()
        return conn

    async def remove(self, name: str, drain_s: float) -> None:
        """``name`` leaves (see the module's invariants); then it is closed and forgotten.
        KeyError: no such backend."""
        conn = self._connections[name]
        if conn.state == "ready":
            self._lost(conn, "deregistered")
        self.reshape(self._federated, tuple(b for b in self._federated.backends if b != name))
        for view in self._virtual.values():
            if name in view.backends:
                self.reshape(view, tuple(b for b in view.backends if b != name))
        single = self._single.pop(name, None)
        if single is not None:
            self.reshape(single, ())  # its sessions now see nothing
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(drain_s):
                # Polled: a connection signals no "last call done" (the listen stream never ends).
                while any(not isinstance(o, ListenOwner) for o in conn.owners_inflight()):  # noqa: ASYNC110
                    await asyncio.sleep(_POLL_S)
        await conn.close()
        for listener in self._removed:
            try:
                listener(conn)
            except Exception:
                log.exception("backend %s: a removal listener failed", name)
        del self._connections[name]
        self._catalogs.pop(name, None)
        with contextlib.suppress(KeyError):
            self._metrics.backend_up.remove(name)

    def reshape(self, view: View, backends: tuple[str, ...]) -> None:
        """``view`` now spans ``backends``: its sessions list again (prompts and resources too when
        the names of the other backends changed with it, prefixing switched by ``conditional``)."""
        prefixed = view.namer.prefixed
        view.set_backends(backends)
        methods = ["notifications/tools/list_changed"]
        if prefixed != view.namer.prefixed:
            methods += ["notifications/prompts/list_changed", "notifications/resources/list_changed"]
        for session in self._sessions:
            if session.view is view and session.initialized and not session.closed:
                for method in methods:
                    session.standalone.push(jsonrpc.notification(method))
