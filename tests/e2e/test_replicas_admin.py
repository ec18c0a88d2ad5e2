"""Admin changes reach every replica (issue 14): principals created, changed and removed through the
admin API of one replica apply on the others at once, and on a replica that starts later; MGP
permission requests waiting on any replica are listed and answered on every replica; a backend
registered at runtime on one replica is served by all."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from mcp.client import Client

from tests.replicas.support import ACCEPT, INIT, replicas
from tests.support import redis_server, run_gateway, stdio_backend

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning"),
]

ADMIN = "admin-secret"
CONFIG = {
    "auth": {"admin_token": ADMIN},
    "principals": {"ops": {"tokens": ["ops-token"], "capabilities": ["*"]}},
    "backends": {"demo": {"transport": "builtin"}},
}


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    with redis_server() as (url, _proc):
        yield url


async def status_with(http: httpx.AsyncClient, url: str, token: str) -> int:
    response = await http.post(f"{url}/mcp", json=INIT, headers={**ACCEPT, "authorization": f"Bearer {token}"})
    return response.status_code


async def eventually(check: object, want: int, tries: int = 40) -> int:
    got = -1
    for _ in range(tries):
        got = await check()  # type: ignore[operator]
        if got == want:
            return got
        await asyncio.sleep(0.05)
    return got


async def test_a_principal_made_on_one_replica_is_known_on_every_replica(redis_url: str) -> None:
    config = {**CONFIG, "bus": {"kind": "redis", "url": redis_url}}
    admin = {"authorization": f"Bearer {ADMIN}"}
    with run_gateway(config) as first, run_gateway(config) as second:
        async with httpx.AsyncClient(timeout=10) as http:
            assert await status_with(http, second.url, "new-token") == 401
            put = await http.put(
                f"{first.url}/admin/principals/newbie",
                json={"tokens": ["new-token"], "capabilities": ["mcp/request:*"]},
                headers=admin,
            )
            assert put.status_code == 200
            assert await eventually(lambda: status_with(http, second.url, "new-token"), 200) == 200
            with run_gateway(config) as later:  # starts after the change: applies it from the bus
                assert await status_with(http, later.url, "new-token") == 200
            gone = await http.delete(f"{second.url}/admin/principals/newbie", headers=admin)
            assert gone.status_code == 204
            assert await eventually(lambda: status_with(http, first.url, "new-token"), 401) == 401
            assert await status_with(http, first.url, "ops-token") == 200


async def pending_on(http: httpx.AsyncClient, url: str, count: int) -> list[dict[str, Any]]:
    """The permission requests ``url`` lists, once there are ``count`` (each replica mirrors its own
    beside its request path), bounded."""
    listed: list[dict[str, Any]] = []
    for _ in range(100):
        listed = (await http.get(f"{url}/admin/mgp/permissions")).json()["pending"]
        if len(listed) == count:
            break
        await asyncio.sleep(0.05)
    return listed


async def test_an_operator_sees_and_answers_every_permission_request_on_any_replica(redis_url: str) -> None:
    """MGP interactive: each request waits on the replica whose backend asked; every replica lists
    them all, and an operator's answer, sent to any replica, runs where the request waits (through
    the bus) and reaches the backend."""
    config = {
        "backends": {"mgp": {**stdio_backend("tests.e2e.backends.mgp_server"), "required": True}},
        "auth": {"admin_token": ADMIN},
        "principals": {"alice": {"tokens": ["alice-token"], "capabilities": ["*"]}},
        "mgp": {"permission_policy": "interactive", "approved_permissions": ["filesystem.*"]},
        "bus": {"kind": "redis", "url": redis_url},
    }
    admin = {"authorization": f"Bearer {ADMIN}"}
    with run_gateway(config) as first, run_gateway(config) as second:
        async with httpx.AsyncClient(timeout=10, headers=admin) as http:
            # Each replica's own connection to the backend asked once: both are listed on both.
            listed = await pending_on(http, first.url, 2)
            assert len(listed) == 2, listed
            assert len({entry["request_id"].rsplit("@", 1)[1] for entry in listed}) == 2, "one on each replica"
            assert [e["created_at"] for e in listed] == sorted(e["created_at"] for e in listed), "oldest first"
            assert await pending_on(http, second.url, 2) == listed
            answer = {"grants": {"shell.execute": "approved"}}
            for waiting in listed:  # one waits on ``second``, one is run on ``first`` through the bus
                answered = await http.post(f"{second.url}/admin/mgp/permissions/{waiting['request_id']}", json=answer)
                assert answered.status_code == 200, answered.text
                assert answered.json()["grants"]["shell.execute"]["decision"] == "approved"
            assert await pending_on(http, first.url, 0) == []
            assert await pending_on(http, second.url, 0) == []
            missing = listed[0]["request_id"].rsplit("@", 1)[0] + "@nobody"
            gone = await http.post(f"{second.url}/admin/mgp/permissions/{missing}", json=answer)
            assert gone.status_code == 502, "a replica that is not there: a clear error, not a hang"


MGP_SERVER = {
    "id": "dyn",
    "transport": "stdio",
    "command": sys.executable,
    "args": ["-m", "tests.e2e.backends.mgp_server", "--none"],
}


async def servers_on(http: httpx.AsyncClient, url: str, want: set[str]) -> dict[str, dict[str, Any]]:
    """``/admin/mgp/servers`` of ``url`` by id, once those are ``want`` and connected, bounded."""
    by_id: dict[str, dict[str, Any]] = {}
    for _ in range(100):
        by_id = {s["id"]: s for s in (await http.get(f"{url}/admin/mgp/servers")).json()["servers"]}
        if set(by_id) == want and all(s["status"] == "connected" for s in by_id.values()):
            break
        await asyncio.sleep(0.05)
    return by_id


async def test_a_backend_registered_on_one_replica_is_served_by_every_replica(redis_url: str) -> None:
    """MGP §15 through the admin API of one replica: every replica adds the backend (its own child),
    a client whose requests land on both replicas lists and calls it, and a deregistration on
    another replica removes it everywhere."""
    config = {
        "auth": {"admin_token": ADMIN, "anonymous": {"capabilities": ["*"]}},
        "backends": {"demo": {"transport": "builtin"}},
        "federation": {"prefix": "always"},
        "mgp": {"register_commands": True},
    }
    admin = {"authorization": f"Bearer {ADMIN}"}
    with replicas(2, redis_url, config) as group:
        first, second = group.gateways
        async with httpx.AsyncClient(timeout=20, headers=admin) as http:
            created = await http.post(f"{first.url}/admin/mgp/servers", json=MGP_SERVER)
            assert created.status_code == 201, created.text
            there = await servers_on(http, second.url, {"demo", "dyn"})
            assert there["dyn"]["status"] == "connected" and there["dyn"]["source"] == "runtime", there
            assert there["dyn"]["registered_by"] == "admin"
            again = await http.post(f"{second.url}/admin/mgp/servers", json=MGP_SERVER)
            assert again.status_code == 409, "one name in the whole deployment"

            before = len(served(group.url))
            async with Client(group.mcp, mode="legacy", read_timeout_seconds=20) as client:
                for _ in range(2):  # each request on the next replica
                    assert "dyn__handshake_log" in {t.name for t in (await client.list_tools()).tools}
                for _ in range(2):
                    result = await client.call_tool("dyn__handshake_log", {})
                    assert not result.is_error, result
            assert set(served(group.url)[before:]) == {0, 1}, "both replicas served the client"

            gone = await http.delete(f"{second.url}/admin/mgp/servers/dyn")
            assert gone.status_code == 200, gone.text
            assert set(await servers_on(http, first.url, {"demo"})) == {"demo"}, "deregistered everywhere"


def served(balancer: str) -> list[int]:
    """Which upstream served each request so far (tests/replicas/balancer.py)."""
    data: dict[str, Any] = httpx.get(f"{balancer}/_balancer", timeout=5).json()
    return list(data["served"])
