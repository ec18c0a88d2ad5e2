"""MGP lifecycle end to end (MGP §11.2, §11.3, §11.6): a real gateway process (its stdio door) in
front of a real stdio backend (tests/e2e/backends/crashy.py) that is killed, restarts, and is given
up on once ``restart.max_restarts`` is exceeded within ``restart.window_s``; the client follows it
all with ``mgp/health/status`` and ``mgp/health/ping``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import LinePeer, crashy_backend, initialize_request, spawn_module

pytestmark = pytest.mark.timeout(60)

SERVER_NOT_READY = 2000
UPSTREAM_UNAVAILABLE = 5002  # §14.3: the gateway's own "backend unavailable", as an MGP client reads it


@asynccontextmanager
async def gateway_over_stdio(tmp_path: Path, config: dict[str, Any]) -> AsyncIterator[LinePeer]:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    async with spawn_module("gateway", "stdio", "-c", str(path), stderr=asyncio.subprocess.PIPE, grace_s=0) as proc:
        peer = LinePeer(proc)
        mgp = {"version": "0.3.0", "extensions": ["lifecycle"]}
        await peer.send(initialize_request(0, capabilities={"mgp": mgp}))
        assert "result" in await peer.until(lambda m: m.get("id") == 0)
        await peer.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        yield peer


class Asker:
    def __init__(self, peer: LinePeer) -> None:
        self.peer = peer
        self.ids = iter(range(1, 1_000_000))

    async def __call__(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        rpc_id = next(self.ids)
        await self.peer.send({"jsonrpc": "2.0", "id": rpc_id, "method": method, "params": params or {}})
        return await self.peer.until(lambda m: m.get("id") == rpc_id and "method" not in m)

    async def until_status(self, accept: Callable[[dict[str, Any]], bool], timeout: float = 15) -> dict[str, Any]:
        async with asyncio.timeout(timeout):
            while True:
                status = (await self("mgp/health/status", {"server_id": "crashy"}))["result"]
                if accept(status):
                    return status
                await asyncio.sleep(0.05)


async def test_a_killed_backend_restarts_until_its_restart_limit(tmp_path: Path) -> None:
    restart = {"initial_backoff_s": 0.2, "max_backoff_s": 0.2, "max_restarts": 1, "window_s": 60}
    config = {"backends": {"crashy": crashy_backend(required=True, restart=restart)}}
    async with gateway_over_stdio(tmp_path, config) as peer:
        ask = Asker(peer)
        first = await ask.until_status(lambda s: s["state"] == "connected")
        assert first["status"] == "healthy" and first["checks"] == {"connected": True, "responding": True}
        ping = (await ask("mgp/health/ping", {"server_id": "crashy"}))["result"]
        assert ping["status"] == "healthy" and ping["latency_ms"] >= 0
        first_pid = (await ask("tools/call", {"name": "ok"}))["result"]["content"][0]["text"].rsplit(" ", 1)[1]

        # Killed: the call fails at once, the backend is restarted (a new process) and connected again.
        assert (await ask("tools/call", {"name": "die"}))["error"]["code"] == UPSTREAM_UNAVAILABLE
        again = await ask.until_status(lambda s: s["state"] == "connected" and s["resources"]["restarts"] == 1)
        assert again["status"] == "healthy"
        second_pid = (await ask("tools/call", {"name": "ok"}))["result"]["content"][0]["text"].rsplit(" ", 1)[1]
        assert second_pid != first_pid, "a new process answers"

        # Killed again within the window: max_restarts (1) is exceeded, the gateway gives up (§11.6).
        assert (await ask("tools/call", {"name": "die"}))["error"]["code"] == UPSTREAM_UNAVAILABLE
        gave_up = await ask.until_status(lambda s: s["state"] == "error")
        assert gave_up["status"] == "unhealthy" and "restart_limit_exceeded" in gave_up["reason"]
        assert "restart_limit_exceeded" in gave_up["last_error"]
        refused = (await ask("mgp/health/ping", {"server_id": "crashy"}))["error"]
        assert refused["code"] == SERVER_NOT_READY and refused["data"]["_mgp"]["category"] == "lifecycle"
        assert refused["data"]["_mgp"]["details"]["state"] == "error"
        await asyncio.sleep(0.5)  # longer than the backoff: it really stays down
        assert (await ask.until_status(lambda s: True))["state"] == "error"
        gateway = (await ask("mgp/health/status"))["result"]
        assert gateway["status"] == "unhealthy" and gateway["servers"]["crashy"]["state"] == "error"
