"""Principals changed through the admin API, on every replica at once (issue 14).

``PUT/DELETE /admin/principals/NAME`` and capability changes land on one replica. With the Redis
bus they are also stored (the map ``admin:principals-by-name``: the runtime changes, one field per
principal, so replicas changing different principals at once never lose each other's; ``null`` for a
removal) and announced on the ``admin`` channel: every live replica applies them at once, and a
replica that starts later applies the stored changes over its config. A config reload (SIGHUP) replaces the
principals of the replica that reloads, as before.

A replica starting reads the stored changes only once it hears the channel, and applies what it
hears after what it read (``gateway/replicas/hello.py``): a change made while its subscription was
not standing yet is found one way or the other, since it is stored before it is announced.

Invariants: a change is applied once per replica (its own announcement is ignored); a malformed
stored or announced change is skipped and logged, never applied half; a bus failure leaves the
change applied on the replica that made it (logged).

The stored changes hold static tokens as the admin API received them: protect Redis (password,
TLS) like the config file.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import orjson
from pydantic import ValidationError

from gateway.bus import Bus
from gateway.bus.maps import maps_for
from gateway.config import PrincipalConfig
from gateway.replicas.hello import Hello
from policies.auth import PrincipalRegistry

log = logging.getLogger(__name__)

# One field per principal: replicas changing different principals at once never lose each other's.
KEY = "admin:principals-by-name"
# Where the first multi-replica release kept them, as one JSON object {name: config or null}; moved
# into KEY by the first replica that starts on this release.
LEGACY_KEY = "admin:principals"
CHANNEL = "admin"
_MALFORMED = "malformed"  # never a valid PrincipalConfig: skipped and logged by _apply


class SharedPrincipals:
    def __init__(self, bus: Bus, registry: PrincipalRegistry, changed: Callable[[], None], replica: str) -> None:
        self._bus = bus
        self._registry = registry
        self._changed = changed
        self._replica = replica
        self._listener: asyncio.Task[None] | None = None
        self._hello = Hello(bus, CHANNEL, replica)
        self._maps = maps_for(bus)

    async def start(self) -> None:
        self._listener = asyncio.create_task(self._listen(), name="admin-principals")
        async with self._hello.reading():
            try:
                stored = await self._maps.items(KEY)
                stored = await self._migrate(stored)
            except Exception as exc:
                log.warning("principals changed at runtime on other replicas are not known yet: %s", exc)
                return
            if stored:
                for name, raw in stored.items():
                    self._apply(name, _loads_config(raw))
                self._changed()

    async def _migrate(self, stored: dict[str, bytes]) -> dict[str, bytes]:
        """Move the changes a replica of the first multi-replica release stored as one JSON object
        (``LEGACY_KEY``) into the map, one field each; a field the map already holds is newer and kept.
        Idempotent, so replicas starting together may all do it."""
        raw = await self._bus.get(LEGACY_KEY)
        if raw is None:
            return stored
        try:
            legacy = orjson.loads(raw)
        except orjson.JSONDecodeError:
            legacy = None
        if not isinstance(legacy, dict):
            log.warning("the stored principals of %s are malformed and were dropped", LEGACY_KEY)
            await self._bus.delete(LEGACY_KEY)
            return stored
        merged = dict(stored)
        for name, config in legacy.items():
            if isinstance(name, str) and name not in merged:
                merged[name] = orjson.dumps(config)
                await self._maps.put(KEY, name, merged[name])
        await self._bus.delete(LEGACY_KEY)
        log.info("moved %d runtime principal change(s) from %s to %s", len(legacy), LEGACY_KEY, KEY)
        return merged

    async def stop(self) -> None:
        if self._listener is not None:
            self._listener.cancel()
            await asyncio.gather(self._listener, return_exceptions=True)
            self._listener = None

    async def share(self, name: str, config: PrincipalConfig | None) -> None:
        """This replica's admin API changed ``name`` (None: removed): store it, tell the others."""
        dumped = config.model_dump() if config is not None else None
        try:
            await self._maps.put(KEY, name, orjson.dumps(dumped))
            await self._bus.publish(CHANNEL, orjson.dumps({"by": self._replica, "name": name, "config": dumped}))
        except Exception as exc:
            log.warning("principal %s changed here only (the bus is unavailable: %s)", name, exc)

    async def _listen(self) -> None:
        # A bus subscription outlives a Redis outage (it reconnects by itself: gateway/bus/redis_pubsub.py).
        async for news in self._hello.others(self._bus.subscribe(CHANNEL)):
            if self._apply(news["name"], news.get("config")):
                self._changed()

    def _apply(self, name: str, config: Any) -> bool:
        if config is None:
            return self._registry.remove(name)
        try:
            self._registry.upsert(name, PrincipalConfig.model_validate(config))
        except ValidationError as exc:
            log.warning("a shared change of principal %s is malformed, skipped: %s", name, exc)
            return False
        return True


def _loads_config(raw: bytes) -> Any:
    """A stored principal's config (a dict, or None for a removal); malformed: a value _apply refuses."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return _MALFORMED
