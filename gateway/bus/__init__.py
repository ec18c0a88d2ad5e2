"""Bus implementations: ``memory`` (embedded default) and ``redis`` (many replicas)."""

from gateway.bus.base import Bus
from gateway.bus.memory import MemoryBus


def make_bus(kind: str, url: str, prefix: str) -> Bus:
    """A bus from its kind, URL and prefix only (the config's other options: ``bus_from_config``)."""
    if kind == "redis":
        from gateway.bus.redis import RedisBus

        return RedisBus(url, prefix)
    return MemoryBus()


__all__ = ["Bus", "MemoryBus", "make_bus"]
