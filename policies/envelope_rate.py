"""The per-participant envelope rate of an MCPx topic (``mcpx.rate_per_participant``).

Separate from the MCP rate limits: it counts envelopes of every kind (chat included) per
participant, and an envelope over the rate is answered with ``system/error``, never dropped
silently (the reference gateway drops them without a word, which leaves the sender guessing).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from gateway.errors import RATE_LIMITED
from gateway.events import Dialect, Event
from policies.chain import Decision, Outcome, Stage, Target
from policies.principal import Principal

if TYPE_CHECKING:
    from gateway.bus.base import Bus

ENVELOPE_RATE_LIMITED = RATE_LIMITED


class EnvelopeRatePolicy:
    name = "envelope_rate"
    stage: Stage = "admission"
    dialects = frozenset({Dialect.MCPX})  # the chain asks it about MCPx envelopes only

    def __init__(self, messages_per_s: float, burst: float, bus: Bus) -> None:
        self._per_s = messages_per_s
        self._burst = burst
        self._bus = bus

    async def check(self, event: Event, principal: Principal, target: Target | None = None) -> Decision | None:
        if event.dialect is not Dialect.MCPX:
            return None
        wait = await self._bus.take(f"mcpx:rate:{principal.name}", self._per_s, self._burst)
        if wait <= 0:
            return None
        retry_ms = math.ceil(wait * 1000) if math.isfinite(wait) else None
        return Decision(
            False,
            self.name,
            ENVELOPE_RATE_LIMITED,
            f"more than {self._per_s:g} envelopes/s; envelope not delivered",
            {"retry_after_ms": retry_ms} if retry_ms is not None else None,
            outcome=Outcome.RATE_LIMITED,
        )
