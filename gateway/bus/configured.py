"""The bus a ``bus:`` config section asks for (``gateway.bus.make_bus`` takes only kind, url and prefix)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway.bus.base import Bus
from gateway.bus.memory import MemoryBus

if TYPE_CHECKING:
    from gateway.config import BusConfig


def bus_from_config(config: BusConfig) -> Bus:
    """A :class:`MemoryBus`, or a :class:`RedisBus` with every option of the section. A malformed URL
    raises ValueError here; Redis being away does not (the bus starts unhealthy)."""
    if config.kind != "redis":
        return MemoryBus()
    from gateway.bus.redis import RedisBus
    from gateway.bus.redis_urls import RedisOptions

    options = RedisOptions(
        timeout_s=config.timeout_s,
        password_file=config.password_file,
        tls_ca_file=config.tls_ca_file,
        tls_cert_file=config.tls_cert_file,
        tls_key_file=config.tls_key_file,
        tls_verify=config.tls_verify,
    )
    return RedisBus(
        config.url,
        config.prefix,
        options=options,
        health_interval_s=config.health_interval_s,
        publish_queue=config.publish_queue,
    )
