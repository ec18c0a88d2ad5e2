"""Admin changes reach every replica (issue 14): principals created, changed and removed through the
admin API of one replica apply on the others at once, and on a replica that starts later."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import pytest

from tests.support import redis_server, run_gateway

pytestmark = pytest.mark.timeout(90)

ADMIN = "admin-secret"
CONFIG = {
    "auth": {"admin_token": ADMIN},
    "principals": {"ops": {"tokens": ["ops-token"], "capabilities": ["*"]}},
    "backends": {"demo": {"transport": "builtin"}},
}
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}
ACCEPT = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


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
