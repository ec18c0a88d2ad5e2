"""What the audit, events and callbacks tests share: a demo gateway with principals, MGP clients that
negotiated ``audit``/``events``/``callbacks``, and a look at what a session was pushed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from gateway.config import Config
from gateway.core import Gateway
from gateway.sessions import ClientSession
from policies.auth import Credentials
from tests.gateway.mgp.demo_gateway import mgp_session_of

# The extensions of these features, served whether or not SERVER_EXTENSIONS lists them yet.
PRINCIPALS = {
    "alice": {"tokens": ["alice-token"], "capabilities": ["mcp/*"]},
    "bob": {"tokens": ["bob-token"], "capabilities": ["mcp/*"]},
    "auditor": {"tokens": ["auditor-token"], "capabilities": ["mcp/*", "mgp/request:mgp/audit/*"]},
}


async def gateway(**config: Any) -> AsyncIterator[Gateway]:
    """The demo gateway (builtin backend ``demo``) with ``PRINCIPALS`` and ``config`` on top."""
    base: dict[str, Any] = {
        "backends": {"demo": {"transport": "builtin"}},
        "federation": {"prefix": "never"},
        "principals": PRINCIPALS,
    }
    gw = Gateway(Config.model_validate({**base, **config}))
    await gw.start()
    try:
        assert await gw.connections["demo"].wait_ready(10)
        yield gw
    finally:
        await gw.stop()


async def client(gw: Gateway, name: str | None = None, **kw: Any) -> ClientSession:
    """An initialized MGP 0.8 client session (of principal ``name``, anonymous if None)."""
    credentials = Credentials("static", name) if name else None
    session, _ = await mgp_session_of(gw, credentials=credentials, **kw)
    return session


async def pushed(session: ClientSession, method: str) -> list[dict[str, Any]]:
    """The params of every ``method`` notification pushed to ``session`` so far (no waiting)."""
    try:
        async with asyncio.timeout(0.05):
            batch = await session.standalone.read(0)
    except TimeoutError:
        batch = []
    return [m.get("params", {}) for _, m in batch if m.get("method") == method]
