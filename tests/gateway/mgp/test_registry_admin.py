"""MGP §15 registration with the admin token (issue 12: "registration of a new backend at runtime
requires the admin token"): ``/admin/mgp/servers`` is the same registry as ``mgp/discovery/register``,
through the real app (httpx over ASGI)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from gateway.core import Gateway
from tests.gateway.mgp.test_registry import MGP_SERVER
from tests.gateway.transports.modern_door_support import client_for

pytestmark = pytest.mark.timeout(30)

ADMIN = {"authorization": "Bearer admin-secret"}


@pytest.fixture
async def door() -> AsyncIterator[tuple[httpx.AsyncClient, Gateway]]:
    config = {"auth": {"admin_token": "admin-secret", "anonymous": {}}, "mgp": {"register_commands": True}}
    async for pair in client_for(config):
        yield pair


async def test_an_operator_registers_lists_and_deregisters_with_the_admin_token(
    door: tuple[httpx.AsyncClient, Gateway],
) -> None:
    http, gateway = door
    created = await http.post("/admin/mgp/servers", json=MGP_SERVER, headers=ADMIN)
    assert created.status_code == 201, created.text
    body = created.json()
    assert body["id"] == "dyn" and body["status"] == "connected" and body["source"] == "runtime"
    assert body["tools"] == ["handshake_log"] and body["registered_by"] == "admin"
    assert "dyn" in gateway.federated.backends
    listed = (await http.get("/admin/mgp/servers", headers=ADMIN)).json()["servers"]
    assert {s["id"]: s["source"] for s in listed} == {"demo": "config", "dyn": "runtime"}
    again = await http.post("/admin/mgp/servers", json=MGP_SERVER, headers=ADMIN)
    assert again.status_code == 409
    assert (await http.delete("/admin/mgp/servers/demo", headers=ADMIN)).status_code == 409, "config backends stay"
    gone = await http.delete("/admin/mgp/servers/dyn?reason=done", headers=ADMIN)
    assert gone.status_code == 200 and gone.json() == {
        "id": "dyn",
        "deregistered": True,
        "registered_by": "admin",
        "reason": "done",
    }
    assert "dyn" not in gateway.federated.backends
    assert (await http.delete("/admin/mgp/servers/dyn", headers=ADMIN)).status_code == 404


async def test_without_the_admin_token_nothing_is_registered(door: tuple[httpx.AsyncClient, Gateway]) -> None:
    http, gateway = door
    refused = await http.post("/admin/mgp/servers", json=MGP_SERVER, headers={"authorization": "Bearer nope"})
    assert refused.status_code == 401
    assert (await http.post("/admin/mgp/servers", json=MGP_SERVER)).status_code == 401
    assert "dyn" not in gateway.connections
    bad = await http.post("/admin/mgp/servers", json={"id": "Bad Name", "transport": "http"}, headers=ADMIN)
    assert bad.status_code == 400 and "dyn" not in gateway.connections
    assert (await http.post("/admin/mgp/servers", content=b"[1]", headers=ADMIN)).status_code == 400
