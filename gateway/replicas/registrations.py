"""Backends registered at runtime (MGP §15), on every replica at once (issue 14).

``mgp/discovery/register`` and ``POST /admin/mgp/servers`` land on one replica. With the Redis bus
the name is first claimed in the map ``mgp:registrations`` (field: the name; value: the §15.4 params
as received, who registered it, and the replica that did), so that two replicas never both take
one name (the second is refused ``SERVER_ALREADY_REGISTERED``, as for a local duplicate). Once the
backend joined there, the registration is announced on the ``mgp:registrations`` channel: every
live replica adds the same backend through its own registry (its own connection; for stdio, its
own child), and a replica that starts later adds every stored one. A deregistration, on any
replica, removes the field and is announced the same way.

Invariants: a replica never applies its own announcement, and applies another's without claiming,
announcing or auditing it again (audited once, where it happened); applying is idempotent (a
backend already registered here is left alone, a deregistration of one unknown here is ignored);
a registration this replica cannot apply (its config refuses stdio registration, a config backend
holds the name) is logged and skipped, and the listener goes on. Announcements are applied one at
a time, in order: a deregistration waits for its backend's calls in flight (bounded by the
registry's drain), and what follows it waits with it. A bus failure leaves the change on the
replica that made it (logged).

A replica starting reads the map only once it hears the channel, and applies what it hears after
what it read (``gateway/replicas/hello.py``), so a registration made meanwhile is found one way or
the other: its claim precedes its announcement.

The map holds the registrations' params as received (a URL, a command and its arguments): protect
Redis like the config file.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import orjson

from gateway import jsonrpc
from gateway.bus.base import json_object
from gateway.bus.maps import maps_for
from gateway.replicas.hello import Hello

if TYPE_CHECKING:
    from gateway.bus import Bus
    from gateway.mgp.registry import Registry

log = logging.getLogger(__name__)

KEY = "mgp:registrations"
CHANNEL = "mgp:registrations"


class SharedRegistrations:
    """The ``shared`` collaborator of ``gateway.mgp.registry.Registry`` (``SharedRegistry``)."""

    def __init__(self, bus: Bus, replica: str) -> None:
        self._bus = bus
        self._maps = maps_for(bus)
        self._replica = replica
        self._registry: Registry | None = None
        self._listener: asyncio.Task[None] | None = None
        self._hello = Hello(bus, CHANNEL, replica)

    def serve(self, registry: Registry) -> None:
        """The registry other replicas' registrations are applied to (built after this object)."""
        self._registry = registry

    async def start(self) -> None:
        self._listener = asyncio.create_task(self._listen(), name="mgp-registrations")
        async with self._hello.reading():
            try:
                stored = await self._maps.items(KEY)
            except Exception as exc:
                log.warning("backends registered at runtime on other replicas are not known yet: %s", exc)
                return
            for name, raw in stored.items():
                entry = json_object(raw)
                if entry is not None and entry.get("by") != self._replica:
                    await self._add(name, entry)

    async def stop(self) -> None:
        if self._listener is not None:
            self._listener.cancel()
            await asyncio.gather(self._listener, return_exceptions=True)
            self._listener = None

    # ---- SharedRegistry: what the registry of this replica asks --------------------------------

    async def claim(self, name: str, params: Mapping[str, Any], registered_by: str) -> bool:
        try:
            return await self._maps.claim(KEY, name, self._entry(params, registered_by)) == "ok"
        except Exception as exc:
            log.warning("backend %s is registered on this replica only (the bus is unavailable: %s)", name, exc)
            return True

    async def announce(self, name: str, params: Mapping[str, Any], registered_by: str) -> None:
        news = {"op": "registered", "name": name, **orjson.loads(self._entry(params, registered_by))}
        await self._publish(name, news)

    async def withdraw(self, name: str) -> None:
        try:
            await self._maps.remove(KEY, name)
        except Exception as exc:
            log.warning("backend %s: its registration stays stored (the bus is unavailable: %s)", name, exc)
        await self._publish(name, {"op": "deregistered", "name": name, "by": self._replica})

    # ---- applying what other replicas did -----------------------------------------------------

    def _entry(self, params: Mapping[str, Any], registered_by: str) -> bytes:
        return orjson.dumps({"params": dict(params), "registered_by": registered_by, "by": self._replica})

    async def _publish(self, name: str, news: dict[str, Any]) -> None:
        try:
            await self._bus.publish(CHANNEL, orjson.dumps(news))
        except Exception as exc:
            log.warning("backend %s: the other replicas were not told (the bus is unavailable: %s)", name, exc)

    async def _listen(self) -> None:
        # A bus subscription outlives a Redis outage (it reconnects by itself: gateway/bus/redis_pubsub.py).
        async for news in self._hello.others(self._bus.subscribe(CHANNEL)):
            if news.get("op") == "registered":
                await self._add(news["name"], news)
            elif news.get("op") == "deregistered":
                await self._remove(news["name"], str(news.get("by")))

    async def _add(self, name: str, entry: Mapping[str, Any]) -> None:
        registry, params, by = self._registry, entry.get("params"), str(entry.get("by"))
        if registry is None or not isinstance(params, dict) or params.get("id") != name:
            log.warning("a shared registration of backend %s is malformed, skipped", name)
            return
        if registry.is_runtime(name):
            return  # already here (found in the map and announced, or announced twice)
        registered_by = entry.get("registered_by")
        try:
            await registry.add_server(params, str(registered_by or "unknown"), from_replica=by)
        except jsonrpc.RpcError as exc:
            log.warning("backend %s, registered on replica %s, is not added here: %s", name, by, exc.message)
        except Exception:
            log.exception("backend %s, registered on replica %s, could not be added here", name, by)
        else:
            log.info("backend %s, registered on replica %s, added here", name, by)

    async def _remove(self, name: str, by: str) -> None:
        registry = self._registry
        if registry is None or not registry.is_runtime(name):
            return
        try:
            await registry.remove_server({"id": name}, by, from_replica=by)
        except jsonrpc.RpcError:
            return  # removed here meanwhile
        except Exception:
            log.exception("backend %s, deregistered on replica %s, could not be removed here", name, by)
        else:
            log.info("backend %s, deregistered on replica %s, removed here", name, by)
