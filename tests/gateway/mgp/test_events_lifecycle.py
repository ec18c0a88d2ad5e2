"""The events ``lifecycle`` channel (gateway/mgp/events.py, MGP_COMMUNICATION.md §13.2) fed from the
gateway's real lifecycle state machine (gateway/mgp/lifecycle.py, §11.2): subscribers see every
state — a backend's own word (``restarting``), an operator's drain (``draining`` then
``disconnected``), the gateway's own transitions — with a severity ``min_severity`` filters by."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from adapters.mgp import names
from gateway.core import Gateway
from gateway.mgp.lifecycle import GATEWAY_ID
from tests.gateway.mgp.demo_gateway import ask, rpc
from tests.gateway.mgp.feature_support import client, gateway, pushed

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
async def gw() -> AsyncIterator[Gateway]:
    async for running in gateway():
        yield running


def lifecycle_events(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e["data"] for e in events if e["channel"] == "lifecycle"]


async def test_every_state_of_the_machine_is_an_event(gw: Gateway) -> None:
    session = await client(gw, "alice")
    await ask(gw, session, rpc("mgp/events/subscribe", {"channels": ["lifecycle"]}))
    conn = gw.connections["demo"]
    said = {"method": names.LIFECYCLE, "params": {"new_state": "restarting", "reason": "upgrading"}}
    gw.mgp.lifecycle.on_notification(conn, said)  # the backend's own word (§11.5)
    gw.mgp.lifecycle.on_notification(conn, {"method": names.LIFECYCLE, "params": {"new_state": "connected"}})
    gw.mgp.lifecycle.begin_drain("demo", "operator")  # what mgp/lifecycle/shutdown does (gateway/mgp/drain.py)
    gw.mgp.lifecycle.end_drain("demo", "drained")
    changes = lifecycle_events(await pushed(session, names.EVENT))
    assert [(c["server_id"], c["previous_state"], c["new_state"]) for c in changes] == [
        ("demo", "connected", "restarting"),
        ("demo", "restarting", "connected"),
        ("demo", "connected", "draining"),
        ("demo", "draining", "disconnected"),
    ]
    assert changes[0]["reason"] == "upgrading" and changes[0]["timestamp"].endswith("Z")
    assert gw.mgp.lifecycle.state("demo") == "disconnected", "the events say what the machine says"


async def test_the_gateways_own_transitions_and_severities(gw: Gateway) -> None:
    session = await client(gw, "alice")
    errors_only = {"channels": ["lifecycle"], "filter": {"min_severity": "error"}}
    await ask(gw, session, rpc("mgp/events/subscribe", errors_only))
    gw.mgp.lifecycle.gateway("draining", "test")  # warning: filtered out
    gw.mgp.lifecycle.gateway("error", "test: broken")
    events = await pushed(session, names.EVENT)
    assert [(e["server_id"], e["new_state"]) for e in lifecycle_events(events)] == [(GATEWAY_ID, "error")]
