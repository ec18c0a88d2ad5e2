"""Bus implementations: ``memory`` (embedded default) and ``redis`` (many replicas)."""

from gateway.bus.base import Bus
from gateway.bus.memory import MemoryBus

__all__ = ["Bus", "MemoryBus"]
