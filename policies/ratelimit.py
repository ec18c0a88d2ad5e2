"""Token-bucket rate limits per principal and per (principal, tool), shared by replicas on the bus.

Every request of a principal takes a token from ``rl:p:{principal}`` (its entry under
``rate_limits.principals``, else ``rate_limits.per_principal``; no bucket, no limit). A ``tools/call``
also takes one from ``rl:t:{principal}:{tool}``, where ``tool`` is the name as the client sees it
and the bucket is the ``per_tool`` entry whose pattern matches it most specifically (the longest
pattern not counting ``*``; ``"*"`` matches every tool; on a tie the first in the config wins). These
patterns match bare names, so ``*`` matches any run, ``:`` included (unlike capability patterns).

The tool bucket is taken first: a client hammering one tool past its limit is refused there and
does not drain the principal bucket its other calls need.

Redis away: the bus takes from a local bucket of this replica instead (gateway/bus/fallback.py), so
limits hold per replica during an outage; should the bus still fail, the request is allowed and a
warning is logged at most once a minute. Rate limits protect capacity; refusing every request because
the counter store is away would turn a Redis outage into a gateway outage.
"""

from __future__ import annotations

import logging
import math
import time
from typing import TYPE_CHECKING

from gateway.errors import RATE_LIMITED
from gateway.events import Event, Kind
from policies.chain import Decision, Outcome, Stage, Target
from policies.patterns import star_glob
from policies.principal import Principal

if TYPE_CHECKING:  # policies import only gateway.events at run time (the rooms rule: policies depend on no other room)
    from gateway.bus.base import Bus
    from gateway.config import Bucket, RateLimits

log = logging.getLogger(__name__)


_ERROR_LOG_INTERVAL_S = 60.0
_TOOL_CACHE_SIZE = 4096
_REQUEST = Kind.REQUEST  # read once: a ``Kind.X`` read costs about 0.1 µs on Python 3.11


def _key_part(value: str) -> str:
    # Escape ':' so that principal "a:b" with tool "c" and principal "a" with tool "b:c" never share a
    # bucket; ordinary names are unchanged.
    return value.replace("%", "%25").replace(":", "%3A")


def _specificity(pattern: str) -> int:
    return len(pattern) - pattern.count("*")


class RateLimitPolicy:
    name = "rate_limit"
    stage: Stage = "admission"

    def __init__(self, config: RateLimits, bus: Bus) -> None:
        self.config = config
        self.bus = bus
        # Most specific first; sorted() is stable, so config order breaks ties.
        self._tool_patterns = [
            (star_glob(pattern), bucket)
            for pattern, bucket in sorted(config.per_tool.items(), key=lambda item: -_specificity(item[0]))
        ]
        # Tool names come from clients: the cache is cleared rather than allowed to grow.
        self._tool_buckets: dict[str, Bucket | None] = {}
        self._last_error_log = -math.inf
        # No bucket at all: no request could be refused or counted, so the chain need not ask
        # (rate_limits is fixed for the process: changing it takes a restart).
        self._unlimited = not (config.per_principal or config.principals or self._tool_patterns)
        self.idle_for_good = self._unlimited  # the chain leaves the member out (policies/chain.py)

    def idle(self) -> bool:
        """Nothing to decide: no bucket is configured (the chain then skips this member)."""
        return self._unlimited

    def tool_bucket(self, tool: str) -> Bucket | None:
        """The per_tool bucket governing ``tool``, or None."""
        try:
            return self._tool_buckets[tool]
        except KeyError:
            pass
        bucket = next((b for glob, b in self._tool_patterns if glob(tool)), None)
        if len(self._tool_buckets) >= _TOOL_CACHE_SIZE:
            self._tool_buckets.clear()
        self._tool_buckets[tool] = bucket
        return bucket

    async def check(self, event: Event, principal: Principal, target: Target | None = None) -> Decision | None:
        if event.kind is not _REQUEST:
            return None
        tool = event.context
        if event.method == "tools/call" and tool and self._tool_patterns:
            bucket = self.tool_bucket(tool)
            if bucket is not None:
                who = _key_part(principal.name)
                denial = await self._take(f"rl:t:{who}:{tool}", bucket, f"tool {tool!r} (principal {principal.name!r})")
                if denial is not None:
                    return denial
        bucket = self.config.principals.get(principal.name) or self.config.per_principal
        if bucket is not None:
            return await self._take(f"rl:p:{_key_part(principal.name)}", bucket, f"principal {principal.name!r}")
        return None

    async def _take(self, key: str, bucket: Bucket, what: str) -> Decision | None:
        try:
            wait_s = await self.bus.take(key, bucket.per_s, bucket.burst)
        except Exception as exc:  # fail-open, see the module docstring
            now = time.monotonic()
            if now - self._last_error_log >= _ERROR_LOG_INTERVAL_S:
                self._last_error_log = now
                log.warning("rate limits not enforced: the bus did not answer (%s: %s)", type(exc).__name__, exc)
            return None
        if wait_s <= 0:
            return None
        if math.isinf(wait_s):
            # burst < 1: a bucket that can never hold one request's token (a config mistake).
            return Decision(
                False,
                self.name,
                RATE_LIMITED,
                f"rate limit exceeded for {what}; its burst is below one request",
                {},
                outcome=Outcome.RATE_LIMITED,
            )
        retry_ms = math.ceil(wait_s * 1000)
        return Decision(
            False,
            self.name,
            RATE_LIMITED,
            f"rate limit exceeded for {what}; retry in {retry_ms} ms",
            {"retryAfterMs": retry_ms},
            outcome=Outcome.RATE_LIMITED,
        )
