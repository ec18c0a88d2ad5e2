"""One key for every replica's signed ``requestState`` (issue 14, ADR 0016).

A modern client's ``requestState`` is signed by the gateway (gateway/mrtr.py). With many replicas a
state one replica issued must verify on every other, so they share one key: the first replica to
start stores a random 32-byte key in the bus (``state-key``, set only if absent) and every replica
uses what is stored. A bus that cannot be reached at start leaves the replica on a key of its own
(logged): its states then verify only on itself until it restarts with the bus.
"""

from __future__ import annotations

import logging
import os

from gateway.bus import Bus

log = logging.getLogger(__name__)

KEY = "state-key"


async def shared_state_key(bus: Bus) -> bytes | None:
    try:
        await bus.set(KEY, os.urandom(32).hex().encode(), only_if_absent=True)
        stored = await bus.get(KEY)
    except Exception as exc:
        log.warning("no shared requestState key (the bus is unavailable: %s); this replica signs its own", exc)
        return None
    try:
        return bytes.fromhex(stored.decode()) if stored else None
    except ValueError:
        log.warning("the shared requestState key in the bus is not hex; this replica signs its own")
        return None
