"""policies/ratelimit.py: token buckets per principal and per (principal, tool), on both buses."""

from __future__ import annotations

import logging
import subprocess
import uuid
from collections.abc import Iterator

import pytest

from gateway.bus import Bus, MemoryBus
from gateway.bus.redis import RedisBus
from gateway.config import Bucket, RateLimits
from gateway.errors import http_status
from gateway.events import Event, Kind
from policies import CapabilitySet, PolicyChain, Principal
from policies.chain import Outcome
from policies.ratelimit import RATE_LIMITED, RateLimitPolicy
from tests.support import redis_server, stop_process

SLOW = {"per_s": 0.01, "burst": 1}  # one token, the next in 100 s: nothing refills during a test


def who(name: str = "alice") -> Principal:
    return Principal(name, CapabilitySet(["*"]))


def call(tool: str | None = "echo", method: str = "tools/call", kind: Kind = Kind.REQUEST) -> Event:
    return Event(kind=kind, method=method, payload={"params": {"name": tool}}, context=tool)


def limits(**kwargs: object) -> RateLimits:
    return RateLimits.model_validate(kwargs)


async def allowed(policy: RateLimitPolicy, ev: Event, principal: Principal, times: int) -> bool:
    for _ in range(times):
        decision = await policy.check(ev, principal, None)
        if decision is not None:
            return False
    return True


def test_public_names() -> None:
    assert RATE_LIMITED == -32029
    assert RateLimitPolicy.stage == "admission"
    assert RateLimitPolicy.name == "rate_limit"


async def test_without_buckets_nothing_is_limited(bus: Bus) -> None:
    policy = RateLimitPolicy(RateLimits(), bus)
    assert await allowed(policy, call(), who(), 50)
    if isinstance(bus, MemoryBus):
        assert bus._buckets == {}, "no bucket configured: the bus is not consulted"


async def test_per_principal_burst_then_a_precise_denial(bus: Bus) -> None:
    policy = RateLimitPolicy(limits(per_principal={"per_s": 1, "burst": 2}), bus)
    assert await allowed(policy, call(), who(), 2)
    decision = await policy.check(call("other"), who(), None)
    assert decision is not None
    assert decision.allowed is False
    assert decision.policy == "rate_limit"
    assert decision.code == RATE_LIMITED == -32029
    assert decision.outcome is Outcome.RATE_LIMITED
    assert http_status(decision.code, modern=True) == http_status(decision.code, modern=False) == 429
    assert decision.data is not None
    retry = decision.data["retryAfterMs"]
    assert isinstance(retry, int) and 900 < retry <= 1000
    assert decision.reason == f"rate limit exceeded for principal 'alice'; retry in {retry} ms"


async def test_every_request_method_counts_for_the_principal(bus: Bus) -> None:
    policy = RateLimitPolicy(limits(per_principal={"per_s": 0.01, "burst": 3}), bus)
    assert await allowed(policy, call(method="tools/list", tool=None), who(), 1)
    assert await allowed(policy, call(method="resources/read", tool="file:///x"), who(), 1)
    assert await allowed(policy, call(), who(), 1)
    assert not await allowed(policy, call(method="ping", tool=None), who(), 1)


@pytest.mark.parametrize("kind", [Kind.RESPONSE, Kind.ERROR, Kind.NOTIFICATION, Kind.CHAT, Kind.PROPOSAL])
async def test_only_requests_are_limited(bus: Bus, kind: Kind) -> None:
    policy = RateLimitPolicy(limits(per_principal=SLOW, per_tool={"*": SLOW}), bus)
    assert await allowed(policy, call(kind=kind), who(), 5)


async def test_principals_have_their_own_buckets_and_overrides(bus: Bus) -> None:
    policy = RateLimitPolicy(limits(per_principal=SLOW, principals={"bob": {"per_s": 0.01, "burst": 3}}), bus)
    assert await allowed(policy, call(), who("alice"), 1)
    assert not await allowed(policy, call(), who("alice"), 1)
    assert await allowed(policy, call(), who("bob"), 3), "bob's override, and alice's use is not his"
    assert not await allowed(policy, call(), who("bob"), 1)
    assert await allowed(policy, call(), who("carol"), 1)


async def test_override_alone_limits_only_that_principal(bus: Bus) -> None:
    policy = RateLimitPolicy(limits(principals={"bob": SLOW}), bus)
    assert await allowed(policy, call(), who("alice"), 10)
    assert await allowed(policy, call(), who("bob"), 1)
    assert not await allowed(policy, call(), who("bob"), 1)


async def test_per_tool_most_specific_pattern_wins(bus: Bus) -> None:
    policy = RateLimitPolicy(
        limits(
            per_tool={
                "*": {"per_s": 0.01, "burst": 4},
                "search*": {"per_s": 0.01, "burst": 2},
                "search_web": {"per_s": 0.01, "burst": 1},
            }
        ),
        bus,
    )
    assert policy.tool_bucket("search_web") == Bucket(per_s=0.01, burst=1)
    assert policy.tool_bucket("search_images") == Bucket(per_s=0.01, burst=2)
    assert policy.tool_bucket("echo") == Bucket(per_s=0.01, burst=4)
    for tool, burst in [("search_web", 1), ("search_images", 2), ("echo", 4)]:
        assert await allowed(policy, call(tool), who(), burst), tool
        decision = await policy.check(call(tool), who(), None)
        assert decision is not None, tool
        assert decision.reason.startswith(f"rate limit exceeded for tool {tool!r} (principal 'alice'); retry in ")


async def test_equally_specific_patterns_the_first_configured_wins(bus: Bus) -> None:
    policy = RateLimitPolicy(limits(per_tool={"ab*": {"per_s": 1, "burst": 1}, "*bc": {"per_s": 1, "burst": 2}}), bus)
    assert policy.tool_bucket("abc") == Bucket(per_s=1, burst=1)
    assert policy.tool_bucket("xbc") == Bucket(per_s=1, burst=2)
    assert policy.tool_bucket("xyz") is None


async def test_tool_buckets_are_per_principal_and_per_tool(bus: Bus) -> None:
    policy = RateLimitPolicy(limits(per_tool={"*": SLOW}), bus)
    assert await allowed(policy, call("echo"), who("alice"), 1)
    assert not await allowed(policy, call("echo"), who("alice"), 1)
    assert await allowed(policy, call("add"), who("alice"), 1)
    assert await allowed(policy, call("echo"), who("bob"), 1)
    assert await allowed(policy, call(method="tools/list", tool=None), who("alice"), 5), "only tools/call"


async def test_names_with_colons_do_not_share_buckets(bus: Bus) -> None:
    policy = RateLimitPolicy(limits(per_tool={"*": SLOW}), bus)
    assert await allowed(policy, call("c"), who("a:b"), 1)
    assert await allowed(policy, call("b:c"), who("a"), 1)
    assert await allowed(policy, call("c"), who("a%3Ab"), 1)


async def test_a_refused_tool_call_does_not_drain_the_principal_bucket(bus: Bus) -> None:
    policy = RateLimitPolicy(limits(per_principal={"per_s": 0.01, "burst": 3}, per_tool={"slow": SLOW}), bus)
    assert await allowed(policy, call("slow"), who(), 1)
    for _ in range(5):
        decision = await policy.check(call("slow"), who(), None)
        assert decision is not None and "tool 'slow'" in decision.reason
    assert await allowed(policy, call("fast"), who(), 2), "the 5 refusals took nothing from the principal"
    decision = await policy.check(call("fast"), who(), None)
    assert decision is not None and "principal 'alice'" in decision.reason


async def test_a_burst_below_one_request_always_refuses_without_a_retry_time(bus: Bus) -> None:
    policy = RateLimitPolicy(limits(per_principal={"per_s": 10, "burst": 0.5}), bus)
    decision = await policy.check(call(), who(), None)
    assert decision is not None and http_status(decision.code, modern=False) == 429
    assert decision.data == {}
    assert "burst is below one request" in decision.reason


async def test_in_a_chain_the_denial_is_returned_by_admit(bus: Bus) -> None:
    chain = PolicyChain([RateLimitPolicy(limits(per_principal=SLOW), bus)])
    assert (await chain.admit(call(), who())).allowed
    denial = await chain.admit(call(), who())
    assert denial.code == -32029 and denial.outcome is Outcome.RATE_LIMITED


async def test_retry_time_rounds_up_to_whole_milliseconds() -> None:
    class FixedWait(MemoryBus):
        async def take(self, key: str, per_s: float, burst: float, cost: float = 1.0) -> float:
            return 0.0123001

    decision = await RateLimitPolicy(limits(per_principal=SLOW), FixedWait()).check(call(), who(), None)
    assert decision is not None and decision.data == {"retryAfterMs": 13}
    assert decision.reason.endswith("retry in 13 ms")


# ---- fail-open -------------------------------------------------------------------------------


class BrokenBus(MemoryBus):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    async def take(self, key: str, per_s: float, burst: float, cost: float = 1.0) -> float:
        self.calls += 1
        raise ConnectionError("redis is down")


async def test_a_failing_bus_lets_requests_through_and_logs_once_a_minute(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = BrokenBus()
    policy = RateLimitPolicy(limits(per_principal=SLOW, per_tool={"*": SLOW}), broken)
    clock = [1000.0]
    monkeypatch.setattr("policies.ratelimit.time.monotonic", lambda: clock[0])
    with caplog.at_level(logging.WARNING, logger="policies.ratelimit"):
        assert await allowed(policy, call(), who(), 10)
        assert len(caplog.records) == 1
        assert "redis is down" in caplog.records[0].getMessage()
        clock[0] += 59
        assert await allowed(policy, call(), who(), 3)
        assert len(caplog.records) == 1
        clock[0] += 2
        assert await allowed(policy, call(), who(), 1)
        assert len(caplog.records) == 2
    assert broken.calls == 28, "tool and principal bucket both tried on every call"


@pytest.fixture
def own_redis(redis_url: str) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A redis-server of this test's own, to stop mid-test (the session's one is shared). Asking for
    redis_url skips the test, as everywhere, when redis-server is not installed."""
    with redis_server() as server:
        yield server


async def test_a_real_redis_going_away_falls_back_to_limits_per_replica(
    own_redis: tuple[str, subprocess.Popen[bytes]], caplog: pytest.LogCaptureFixture
) -> None:
    url, proc = own_redis
    bus = RedisBus(url, connect_timeout_s=0.5)
    await bus.start()
    try:
        policy = RateLimitPolicy(limits(per_principal=SLOW), bus)
        assert await allowed(policy, call(), who(), 1)
        assert not await allowed(policy, call(), who(), 1)
        stop_process(proc)
        with caplog.at_level(logging.WARNING, logger="gateway.bus"):
            assert await allowed(policy, call(), who(), 1), "a fresh local bucket: fail-open to per-replica limits"
            assert not await allowed(policy, call(), who(), 1), "the local bucket still limits"
        assert sum("lost Redis" in r.getMessage() for r in caplog.records) == 1
        assert bus.stats()["take_local"] == 2
    finally:
        await bus.close()


async def test_replicas_share_buckets_through_redis(redis_url: str) -> None:
    prefix = f"test-{uuid.uuid4().hex}:"
    one, two = RedisBus(redis_url, prefix=prefix), RedisBus(redis_url, prefix=prefix)
    await one.start()
    await two.start()
    try:
        config = limits(per_principal={"per_s": 0.01, "burst": 3})
        first, second = RateLimitPolicy(config, one), RateLimitPolicy(config, two)
        assert await allowed(first, call(), who(), 2)
        assert await allowed(second, call(), who(), 1)
        assert not await allowed(first, call(), who(), 1)
        assert not await allowed(second, call(), who(), 1)
    finally:
        await one.close()
        await two.close()


async def test_the_chain_skips_the_policy_when_no_bucket_is_configured(bus: Bus) -> None:
    assert RateLimitPolicy(RateLimits(), bus).idle()
    assert not RateLimitPolicy(limits(per_principal=SLOW), bus).idle()
    assert not RateLimitPolicy(limits(principals={"bob": SLOW}), bus).idle()
    assert not RateLimitPolicy(limits(per_tool={"*": SLOW}), bus).idle()
