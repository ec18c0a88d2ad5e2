"""MCPC messages reach MCPL hosts as ``push/event`` under the gateway's ``mcpc`` feature set (issue 13).

The relay is the real one, with the real feature-set policy in its chain; host sessions are real
``ClientSession`` objects whose standalone stream a small host task reads and answers through the
gateway's own answer path (``ClientMessages.response``). The one MCPL backend is a real
``BackendConnection`` on the scripted carrier of tests/gateway/upstreams/fakes.py, so what it is told
(``featureSets/update``) is what went over its carrier.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator, Callable
from typing import Any

from gateway.audit import AuditLog
from gateway.bus.memory import MemoryBus
from gateway.config import AuditConfig, FeatureSetRules, Limits, Mcpl, PrincipalConfig, PrincipalMcpl
from gateway.federation import Namer, View
from gateway.mcpl import McplRelay
from gateway.mcpl.mcpc_push import MCPC_DECLARATION
from gateway.metrics import Metrics
from gateway.routing.client_messages import ClientMessages
from gateway.sessions import ClientSession
from gateway.upstreams.connection import BackendConnection
from policies.auth import PrincipalRegistry
from policies.chain import PolicyChain
from policies.feature_sets import FeatureSetPolicy
from policies.load import LoadPolicy
from policies.patterns import CapabilitySet
from policies.principal import Principal
from tests.gateway.upstreams.fakes import LEGACY_RESULT, RIGS, WAIT_S, FakeBackend, config, rig

BACKENDS = ("fake", "plain")  # "fake": MCPL (and, in one test, MCPC); "plain": MCPC only
FEDERATED = View("*", BACKENDS, Namer("conditional", "__", BACKENDS))  # prefixed: "plain.mcpc"
ONLY_PLAIN = View("plain", ("plain",), Namer("never", "__", ("plain",)))  # unprefixed: "mcpc"
HOST_CAPS = {"version": "0.4", "pushEvents": True}
PAYLOAD = {"content": [{"type": "text", "text": "task t1 of tool slow: complete"}]}
_ids = itertools.count(1)


class Host:
    """One MCPL host session and a task that answers the gateway's requests to it: ``push/event``
    with ``answer`` (None: never answers), everything it is sent written down."""

    def __init__(self, session: ClientSession, answer: dict[str, Any] | None) -> None:
        self.session = session
        self.answer = answer
        self.requests: list[dict[str, Any]] = []
        self.notifications: list[dict[str, Any]] = []
        self._changed = asyncio.Event()
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        after = 0
        while batch := await self.session.standalone.read(after):
            for seq, message in batch:
                after = seq
                if "id" in message and "method" in message:
                    self.requests.append(message)
                    if self.answer is not None:
                        ClientMessages.answer(
                            self.session, {"jsonrpc": "2.0", "id": message["id"], "result": self.answer}
                        )
                elif "method" in message:
                    self.notifications.append(message)
            self._changed.set()

    def pushes(self) -> list[dict[str, Any]]:
        return [m["params"] for m in self.requests if m["method"] == "push/event"]

    def changes(self) -> list[dict[str, Any]]:
        return [m["params"] for m in self.notifications if m["method"] == "featureSets/changed"]

    async def until(self, condition: Callable[[], bool]) -> None:
        async with asyncio.timeout(WAIT_S):
            while not condition():
                self._changed.clear()
                await self._changed.wait()

    async def settled(self) -> None:
        """Until the host task has read everything queued so far."""
        await self.until(self._read_all)

    def _read_all(self) -> bool:
        seen = len(self.requests) + len(self.notifications)
        return seen >= self.session.standalone.last_seq

    async def stop(self) -> None:
        self.session.close()
        async with asyncio.timeout(WAIT_S):
            await self._task


class Gateway:
    """The relay with what it is built from in core.py (the parts a relay test needs)."""

    def __init__(self, mcpl: Mcpl, principals: dict[str, PrincipalConfig] | None = None) -> None:
        metrics = Metrics()
        audit = AuditLog(AuditConfig(), metrics)
        self.records: list[dict[str, Any]] = []
        audit.add_listener(lambda rec: self.records.append(dict(rec)))
        self.sessions: list[ClientSession] = []
        self.connections: dict[str, BackendConnection] = {}
        self.hosts: list[Host] = []
        self.relay = McplRelay(
            config=mcpl,
            sessions=self.sessions,
            connections=self.connections,
            principals=PrincipalRegistry(principals or {}),
            chain=PolicyChain([FeatureSetPolicy()]),
            audit=audit,
            metrics=metrics,
            bus=MemoryBus(),
            load=LoadPolicy(max_sessions=10, max_inflight_per_session=10),
        )

    def session(self, principal: str = "alice", view: View = FEDERATED) -> ClientSession:
        session = ClientSession(
            f"session-{next(_ids):04d}-xxxx", "http", view, Principal(principal, CapabilitySet(["*"])), Limits()
        )
        self.sessions.append(session)
        return session

    def host(
        self,
        *,
        principal: str = "alice",
        view: View = FEDERATED,
        caps: dict[str, Any] | None = None,
        answer: dict[str, Any] | None = None,
        enable: list[str] | None = None,
    ) -> tuple[Host, dict[str, Any]]:
        """An MCPL host session that initialized (its initialize result returned) and, when
        ``enable`` is given, sent that ``featureSets/update``."""
        session = self.session(principal, view)
        result: dict[str, Any] = {}
        params = {"capabilities": {"experimental": {"mcpl": HOST_CAPS if caps is None else caps}}}
        self.relay.on_initialize(session, params, result)
        if enable is not None:
            self.relay.apply_update(session, {"enabled": enable})
        host = Host(session, {"accepted": True} if answer is None else answer)
        self.hosts.append(host)
        return host, result["capabilities"]["experimental"]["mcpl"]

    def outcomes(self, outcome: str) -> list[dict[str, Any]]:
        return [r for r in self.records if r["outcome"] == outcome and r.get("via") == "mcpc"]

    async def close(self) -> None:
        for host in self.hosts:
            await host.stop()
        for conn in self.connections.values():
            async with asyncio.timeout(WAIT_S):
                await conn.close()
            if conn in RIGS:
                RIGS.remove(conn)  # closed here: the upstreams package's fixture need not


@contextlib.asynccontextmanager
async def gateway(
    mcpl: Mcpl | None = None, principals: dict[str, PrincipalConfig] | None = None
) -> AsyncIterator[Gateway]:
    gw = Gateway(mcpl or Mcpl(), principals)
    try:
        yield gw
    finally:
        await gw.close()


async def test_the_mcpc_set_appears_in_host_listings_while_the_backend_speaks_mcpc() -> None:
    async with gateway() as gw:
        early, caps = gw.host()
        assert "plain.mcpc" not in caps["featureSets"] and "pushEvents" not in caps

        gw.relay.mcpc_backend("plain", True)
        await early.until(lambda: len(early.changes()) == 1)
        assert early.changes() == [{"added": {"plain.mcpc": MCPC_DECLARATION}}]
        gw.relay.mcpc_backend("plain", True)  # already so: nobody is told again

        later, caps = gw.host()
        assert caps["featureSets"]["plain.mcpc"] == MCPC_DECLARATION
        assert caps["pushEvents"] is True, "the gateway's set carries push events even without an MCPL backend"
        _, alone = gw.host(view=ONLY_PLAIN)
        assert list(alone["featureSets"]) == ["mcpc"], "named by the view's federation rules"
        assert gw.relay.receipt(later.session) == {"enabled": [], "disabled": ["plain.mcpc"]}
        gw.relay.apply_update(later.session, {"enabled": ["plain.*"]})
        assert gw.relay.receipt(later.session) == {"enabled": ["plain.mcpc"], "disabled": []}

        gw.relay.mcpc_backend("plain", False)
        await early.until(lambda: len(early.changes()) == 2)
        await later.until(lambda: len(later.changes()) == 1)
        assert early.changes()[1] == later.changes()[0] == {"removed": ["plain.mcpc"]}
        gw.relay.mcpc_backend("plain", False)
        _, caps = gw.host()
        assert "plain.mcpc" not in caps["featureSets"]
        assert gw.relay.receipt(later.session) == {"enabled": [], "disabled": []}
        for host in gw.hosts:
            await host.settled()
        assert len(early.changes()) == 2 and len(later.changes()) == 1, "no announcement for what did not change"


async def test_a_push_reaches_only_hosts_that_enabled_the_set_and_take_push_events() -> None:
    async with gateway() as gw:
        gw.relay.mcpc_backend("plain", True)
        enabled, _ = gw.host(enable=["plain.mcpc"])
        by_pattern, _ = gw.host(enable=["*"])
        alone, _ = gw.host(view=ONLY_PLAIN, enable=["mcpc"])
        other_sets, _ = gw.host(enable=["fake.*"])
        nothing, _ = gw.host()
        disabled_again, _ = gw.host(enable=["*"])
        gw.relay.apply_update(disabled_again.session, {"disabled": ["plain.mcpc"]})
        no_push_caps, _ = gw.host(caps={"version": "0.4"}, enable=["*"])
        plain_mcp = gw.session()  # never negotiated MCPL
        not_asked, _ = gw.host(enable=["*"])  # not among the sessions the caller names
        named = [h.session for h in gw.hosts if h is not not_asked] + [plain_mcp]

        assert await gw.relay.push_mcpc("plain", "ev-1", PAYLOAD, named) == 3

        for host, name in ((enabled, "plain.mcpc"), (by_pattern, "plain.mcpc"), (alone, "mcpc")):
            [push] = host.pushes()
            assert push["featureSet"] == name and push["eventId"] == "ev-1" and push["payload"] == PAYLOAD
            assert isinstance(push["timestamp"], str) and push["timestamp"].endswith("Z")
        for host in (other_sets, nothing, disabled_again, no_push_caps, not_asked):
            await host.settled()
            assert host.pushes() == []
        [record] = gw.outcomes("delivered")
        assert record["backend"] == "plain" and record["feature_set"] == "mcpc" and record["hosts"] == 3
        assert record["event_id"] == "ev-1" and record["method"] == "push/event"

        gw.relay.mcpc_backend("plain", False)  # the backend went away: its set with it
        assert await gw.relay.push_mcpc("plain", "ev-2", PAYLOAD, named) == 0
        assert len(enabled.pushes()) == 1
        [denied] = gw.outcomes("denied")
        assert denied["event_id"] == "ev-2" and denied["reason"] == "Unknown feature set"
        assert await gw.relay.push_mcpc("plain", "ev-3", PAYLOAD, [plain_mcp]) == 0
        assert len(gw.outcomes("denied")) == 1, "no MCPL host named: nothing to decide, nothing recorded"


async def test_the_operators_rules_decide_per_principal() -> None:
    principals = {"bob": PrincipalConfig(mcpl=PrincipalMcpl(feature_sets=FeatureSetRules(deny=["plain.mcpc"])))}
    async with gateway(principals=principals) as gw:
        gw.relay.mcpc_backend("plain", True)
        alice, _ = gw.host(principal="alice", enable=["*"])
        bob, _ = gw.host(principal="bob", enable=["*"])
        sessions = [alice.session, bob.session]

        assert await gw.relay.push_mcpc("plain", "ev-1", PAYLOAD, sessions) == 1
        assert len(alice.pushes()) == 1
        await bob.settled()
        assert bob.pushes() == []
        assert "plain.mcpc" not in gw.relay.receipt(bob.session)["enabled"]
        assert await gw.relay.push_mcpc("plain", "ev-2", PAYLOAD, [bob.session]) == 0
        [denied] = gw.outcomes("denied")
        assert denied["reason"] == "Feature set not enabled" and denied["event_id"] == "ev-2"

        # A reload that denies "mcpc" on every backend: nobody gets it any more.
        gw.relay.reconfigure(Mcpl(feature_sets=FeatureSetRules(deny=["mcpc"])))
        assert await gw.relay.push_mcpc("plain", "ev-3", PAYLOAD, sessions) == 0
        assert len(alice.pushes()) == 1
        assert [r["event_id"] for r in gw.outcomes("denied")] == ["ev-2", "ev-3"]


async def test_a_host_that_refuses_or_stays_silent_only_lowers_the_count() -> None:
    async with gateway(Mcpl(host_request_timeout_s=0.2)) as gw:
        gw.relay.mcpc_backend("plain", True)
        refuses, _ = gw.host(enable=["*"], answer={"accepted": False, "reason": "busy"})
        silent, _ = gw.host(enable=["*"])
        silent.answer = None

        assert await gw.relay.push_mcpc("plain", "ev-1", PAYLOAD, [refuses.session, silent.session]) == 0
        assert len(refuses.pushes()) == len(silent.pushes()) == 1
        [rejected] = gw.outcomes("rejected")
        assert rejected["reason"] in ("busy", "the client did not answer push/event within 0.2s")

        accepts, _ = gw.host(enable=["*"])
        assert (
            await gw.relay.push_mcpc("plain", "ev-2", PAYLOAD, [refuses.session, silent.session, accepts.session]) == 1
        )
        assert [r["hosts"] for r in gw.outcomes("delivered")] == [1]


def _mcpl_backend() -> FakeBackend:
    backend = FakeBackend()
    mcpl = {
        "version": "0.4",
        "pushEvents": True,
        "featureSets": {"memory": {"description": "m", "uses": ["pushEvents"]}},
    }
    backend.init_result = {**LEGACY_RESULT, "capabilities": {"tools": {}, "experimental": {"mcpl": mcpl}}}
    return backend


async def test_the_backend_is_never_told_of_its_mcpc_set() -> None:
    async with gateway() as gw:
        backend = _mcpl_backend()
        conn = (await rig(backend, config())).conn
        gw.connections["fake"] = conn
        gw.relay.backend_connected(conn)
        gw.relay.mcpc_backend("fake", True)  # an MCPL backend that also speaks MCPC
        host, caps = gw.host()
        assert set(caps["featureSets"]) == {"fake.memory", "fake.mcpc"}

        gw.relay.apply_update(host.session, {"enabled": ["*"]})
        await backend.until(lambda: len(backend.carrier.find("featureSets/update")) == 2)
        told = [m["params"] for m in backend.carrier.find("featureSets/update")]
        assert told == [{"enabled": [], "disabled": ["memory"]}, {"enabled": ["memory"], "disabled": []}]
        assert gw.relay.receipt(host.session) == {"enabled": ["fake.mcpc", "fake.memory"], "disabled": []}

        gw.relay.apply_update(host.session, {"disabled": ["fake.mcpc"]})  # changes nothing the backend knows
        gw.relay.mcpc_backend("fake", False)
        gw.relay.mcpc_backend("fake", True)
        assert len(backend.carrier.find("featureSets/update")) == 2

        gw.relay.apply_update(host.session, {"enabled": ["fake.mcpc"]})
        assert await gw.relay.push_mcpc("fake", "ev-1", PAYLOAD, [host.session]) == 1
        assert host.pushes()[0]["featureSet"] == "fake.mcpc"
        assert backend.carrier.find("push/event") == [], "the push went to the host only"

        # Nor may the backend push under the gateway's set: it did not declare it.
        push = {"jsonrpc": "2.0", "id": 7, "method": "push/event", "params": {"featureSet": "mcpc", "eventId": "x"}}
        assert gw.relay.on_server_request(conn, push, None)
        await backend.until(lambda: any(m.get("id") == 7 for m, _ in backend.carrier.sent))
        [answer] = [m for m, _ in backend.carrier.sent if m.get("id") == 7]
        assert answer["error"]["message"] == "Unknown feature set"
        assert len(host.pushes()) == 1
