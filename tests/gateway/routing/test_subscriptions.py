"""The subscription table (gateway/routing/subscriptions.py) against recording stand-in connections.

Stand-ins, not real backends: what is checked is which requests the table sends and when, which a
real backend would hide (it answers resources/subscribe either way).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

from gateway.config import Limits
from gateway.federation import Namer, View
from gateway.routing.subscriptions import Subscriptions
from gateway.sessions import ClientSession, SessionStore
from policies.principal import ANONYMOUS_ALL


@dataclass
class RecordingConnection:
    name: str
    era: str = "legacy"
    state: str = "ready"
    listen_resources: set[str] = field(default_factory=set)
    sent: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    relistens: int = 0

    async def request(self, method: str, params: dict[str, Any], timeout: float) -> dict[str, Any]:
        return {}

    def spawn(self, coroutine: Coroutine[Any, Any, Any]) -> None:
        frame = coroutine.cr_frame
        assert frame is not None
        self.sent.append((frame.f_locals["method"], frame.f_locals["params"]))
        coroutine.close()

    def relisten(self) -> None:
        self.relistens += 1


def setup(era: str = "legacy") -> tuple[Subscriptions, RecordingConnection, SessionStore]:
    conn = RecordingConnection("b", era=era)
    store = SessionStore(Limits(), lambda s: None)
    return Subscriptions({"b": conn}, store), conn, store  # type: ignore[dict-item]


def session(store: SessionStore) -> ClientSession:
    view = View("b", ("b",), Namer("never", "__", ("b",)))
    return store.create("test", view, ANONYMOUS_ALL)


def test_one_upstream_subscription_for_many_holders_released_by_the_last() -> None:
    table, conn, store = setup()
    first, second = session(store), session(store)
    table.add(first, "b", "x://1")
    table.add(second, "b", "x://1")
    assert conn.sent == [("resources/subscribe", {"uri": "x://1"})]
    assert not table.release(first, "b", "x://1")
    assert table.release(second, "b", "x://1")
    assert not table.held("b", "x://1")


def test_a_session_that_ends_lets_go_and_the_backend_is_told_when_it_was_the_last() -> None:
    table, conn, store = setup()
    first, second = session(store), session(store)
    table.add(first, "b", "x://1")
    table.add(second, "b", "x://2")
    table.session_ended(first)
    assert conn.sent[-1] == ("resources/unsubscribe", {"uri": "x://1"})
    assert table.held("b", "x://2") and not table.held("b", "x://1")


def test_a_modern_backend_watches_through_its_listen_filter() -> None:
    table, conn, store = setup(era="modern")
    holder = session(store)
    assert table.by_listen_filter("b")
    table.add(holder, "b", "x://1")
    assert conn.listen_resources == {"x://1"} and conn.relistens == 1 and conn.sent == []
    assert table.release(holder, "b", "x://1") and table.stop_listening("b", "x://1")
    assert conn.listen_resources == set()


async def test_a_reconnected_backend_is_told_again_and_updates_reach_only_holders() -> None:
    table, conn, store = setup()
    holder, bystander = session(store), session(store)
    table.add(holder, "b", "x://1")
    conn.sent.clear()
    table.backend_connected(conn)  # type: ignore[arg-type]
    assert conn.sent == [("resources/subscribe", {"uri": "x://1"})]
    message = {"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": "x://1"}}
    table.deliver_update(conn, message, message["params"])  # type: ignore[arg-type]
    table.deliver_update(conn, message, {"uri": ["not", "hashable"]})  # type: ignore[arg-type]
    delivered = await asyncio.wait_for(holder.standalone.read(0), 1)
    assert [m["params"]["uri"] for _, m in delivered] == ["x://1"]
    assert bystander.standalone.last_seq == 0
