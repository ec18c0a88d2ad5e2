"""Helpers shared by the MCPL gateway tests (test_mcpl_gateway*.py): the MCPL test backend as a gateway
backend, WebSocket URLs, a backend's records (its ``stats`` tool), bounded polling, enabling feature sets,
and the six-backend gateway configuration most of those tests share.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.e2e.mcpl_host import McplHost
from tests.support import RunningGateway, stdio_backend


def mcpl_backend(role: str, *args: str, **extra: Any) -> dict[str, Any]:
    return stdio_backend("tests.e2e.backends.mcpl_server", "--role", role, *args, **{"required": True, **extra})


def ws_url(gateway: RunningGateway, server: str | None = None) -> str:
    return gateway.ws(f"/servers/{server}/mcp/ws" if server else "/mcp/ws")


async def stats(host: McplHost, tool: str) -> dict[str, Any]:
    return await host.call_tool(tool)


async def eventually(check: Callable[[], Any], timeout: float = 10.0) -> Any:
    """Poll an async check until it returns something truthy (every wait is bounded)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = await check()
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.05)


async def enable(
    host: McplHost, tool: str, enabled: list[str], disabled: list[str] | None = None, **extra: Any
) -> dict[str, Any]:
    """Send featureSets/update and wait until the backend behind ``tool`` got a configuration."""
    before = len((await stats(host, tool))["featureSetUpdates"])
    await host.notify("featureSets/update", {"enabled": enabled, "disabled": disabled or [], **extra})

    async def arrived() -> Any:
        updates = (await stats(host, tool))["featureSetUpdates"]
        return updates[-1] if len(updates) > before else None

    return await eventually(arrived)


AUDIT_DIR = Path(tempfile.mkdtemp(prefix="switchboard-mcpl-audit-"))


def shared_gateway_config() -> dict[str, Any]:
    """§15's Memory (twice) and Compliance servers, a notes, a files and a channels server; hooks, routing and
    scope rules; an audit log in AUDIT_DIR. Each test module that uses it starts its own gateway from it."""
    return {
        "backends": {
            "mem1": mcpl_backend("memory", "--name", "mem1"),
            "mem2": mcpl_backend("memory", "--name", "mem2"),
            "comp": mcpl_backend("compliance"),
            "notes": mcpl_backend("notes"),
            "files": mcpl_backend("files"),
            "chan": mcpl_backend("channels"),
        },
        "mcpl": {
            "hook_order": ["mem2"],
            "routing": {"mem1": {"memory.*": {"modelTier": "small"}}},
            "scopes": {"files.edit": {"whitelist": ["/srv/**"], "blacklist": ["/etc/**"]}},
        },
        "audit": {"file": str(AUDIT_DIR / "audit.jsonl")},
    }
