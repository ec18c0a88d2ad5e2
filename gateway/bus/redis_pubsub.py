"""A Redis subscription that outlives Redis restarts: reconnect with backoff, subscribe again.

Invariants: the iterator ends only when its consumer closes it or the bus is closed; a failure of
the connection is followed by a new subscription after a backoff capped at ``BACKOFF_CAP_S``
(so the outbox's settle delay, longer than that, lets subscribers return before queued messages
are sent); a subscription that lived through an outage without an error (a partition, a stopped
server) is made again once the bus is healthy, since Redis may have dropped it. Messages published
while no subscription stands are lost, as with Redis pub/sub itself: the publishers' outbox is
what carries acknowledged publishes over an outage. Redis bounds a slow subscriber itself
(client-output-buffer-limit pubsub); the reader holds at most one message.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import AsyncIterator, Callable

from redis import asyncio as aioredis

from gateway.bus.fallback import Counters
from gateway.bus.redis_health import UNAVAILABLE, Health, describe

log = logging.getLogger("gateway.bus")

BACKOFF_BASE_S = 0.05
BACKOFF_CAP_S = 1.0
_IDLE_TICK_S = 1.0  # how often an idle subscription looks whether the bus lived through an outage


def backoff(attempt: int) -> float:
    """Exponential with jitter (half to full), capped: replicas do not reconnect in lockstep."""
    return float(min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2**attempt) * random.uniform(0.5, 1.0))


async def subscribe(
    client: aioredis.Redis,
    channel: str,
    health: Health,
    counters: Counters,
    timeout_s: float,
    closed: Callable[[], bool],
) -> AsyncIterator[bytes]:
    """Messages of ``channel`` until the consumer stops, or the bus is closed (``closed()``)."""
    attempt = 0
    subscribed_before = False
    while not closed():
        pubsub = client.pubsub(ignore_subscribe_messages=True)
        try:
            async with asyncio.timeout(2 * timeout_s):
                await pubsub.subscribe(channel)
            if subscribed_before:
                counters.add("resubscribed")
                log.debug("bus: subscribed again to %s", channel)
            subscribed_before, attempt, outages = True, 0, health.outages
            while True:
                message = await pubsub.get_message(timeout=_IDLE_TICK_S)
                if message is None:
                    if closed():
                        return
                    if health.outages != outages and health.healthy:
                        break  # lived through an outage without noticing: subscribe afresh
                    continue
                data = message.get("data")
                if isinstance(data, bytes):
                    yield data
        except UNAVAILABLE as exc:
            if closed():
                return
            # Not a verdict on Redis (it drops a subscriber that falls too far behind, for one): the
            # PING loop and the operations judge that, and warn once. Noted while the bus looks fine.
            if health.healthy and attempt == 0:
                log.info("bus: subscription to %s lost (%s); subscribing again", channel, describe(exc))
        finally:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(timeout_s):
                    await pubsub.unsubscribe(channel)
            with contextlib.suppress(Exception):
                await pubsub.aclose()  # type: ignore[no-untyped-call]  # redis-py leaves PubSub.aclose unannotated
        await asyncio.sleep(backoff(attempt))
        attempt += 1
