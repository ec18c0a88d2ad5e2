"""Admin changes reach every replica (issue 14): principals created, changed and removed through the
admin API of one replica apply on the others at once, and on a replica that starts later."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import pytest

from tests.replicas.support import ACCEPT, INIT
from tests.support import redis_server, run_gateway, stdio_backend

pytestmark = pytest.mark.timeout(90)

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


async def test_an_operator_answers_a_permission_request_on_any_replica(redis_url: str) -> None:
    """MGP interactive: the request waits on the replica whose backend asked; the operator's answer,
    sent to another replica, runs there through the bus and reaches the backend."""
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
            [waiting] = (await http.get(f"{first.url}/admin/mgp/permissions")).json()["pending"]
            answer = {"grants": {"shell.execute": "approved"}}
            answered = await http.post(f"{second.url}/admin/mgp/permissions/{waiting['request_id']}", json=answer)
            assert answered.status_code == 200, answered.text
            assert answered.json()["grants"]["shell.execute"]["decision"] == "approved"
            assert (await http.get(f"{first.url}/admin/mgp/permissions")).json()["pending"] == []
            missing = waiting["request_id"].rsplit("@", 1)[0] + "@nobody"
            gone = await http.post(f"{second.url}/admin/mgp/permissions/{missing}", json=answer)
            assert gone.status_code == 502, "a replica that is not there: a clear error, not a hang"
