"""A real Gateway with the builtin demo backend, driven straight through ``Router.handle``: what the
in-process MGP tests share."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from adapters.mgp import extensions
from gateway import jsonrpc
from gateway.config import Config
from gateway.core import Gateway
from gateway.sessions import ClientSession
from policies.auth import Credentials
from tests.support import initialize_request

ECHO = {"name": "echo", "arguments": {"text": "hi"}}
ADD = {"name": "add", "arguments": {"a": 1, "b": 2}}


def rpc(method: str, params: dict[str, Any] | None = None, rpc_id: Any = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rpc_id, "method": method, **({"params": params} if params is not None else {})}


async def started(mgp: dict[str, Any] | None = None) -> AsyncIterator[Gateway]:
    """The gateway, started with ``mgp`` as its MGP section, and stopped afterwards."""
    config = Config.model_validate(
        {"backends": {"demo": {"transport": "builtin"}}, "federation": {"prefix": "never"}, "mgp": mgp or {}}
    )
    gw = Gateway(config)
    await gw.start()
    try:
        assert await gw.connections["demo"].wait_ready(10)
        yield gw
    finally:
        await gw.stop()


async def session_of(gw: Gateway) -> ClientSession:
    """An initialized anonymous session on the federated view."""
    session = gw.open_session("test", gw.federated, Credentials("anonymous", "anonymous"))
    await gw.router.handle(session, initialize_request(0), jsonrpc.Shape.REQUEST, session.standalone)
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    await gw.router.handle(session, note, jsonrpc.Shape.NOTIFICATION, session.standalone)
    return session


async def ask(gw: Gateway, session: ClientSession, message: dict[str, Any], **kw: Any) -> dict[str, Any]:
    answer = await gw.router.handle(session, message, jsonrpc.Shape.REQUEST, session.standalone, **kw)
    assert answer is not None
    return answer


ALL_EXTENSIONS = list(extensions.DRAFT_EXTENSIONS)  # every extension the draft names


async def mgp_session_of(
    gw: Gateway,
    version: str = "0.8.0",
    extensions: list[str] | None = None,
    *,
    experimental: bool = False,
    credentials: Credentials | None = None,
) -> tuple[ClientSession, dict[str, Any]]:
    """An initialized session of a client that declared MGP ``version`` with ``extensions`` (all the
    draft's by default); returns it with the initialize result."""
    session = gw.open_session("test", gw.federated, credentials or Credentials("anonymous", "anonymous"))
    declared = {"version": version, "extensions": ALL_EXTENSIONS if extensions is None else extensions}
    capabilities: dict[str, Any] = {"experimental": {"mgp": declared}} if experimental else {"mgp": declared}
    request = initialize_request(0, capabilities=capabilities)
    answer = await gw.router.handle(session, request, jsonrpc.Shape.REQUEST, session.standalone)
    assert answer is not None and "result" in answer, answer
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    await gw.router.handle(session, note, jsonrpc.Shape.NOTIFICATION, session.standalone)
    return session, answer["result"]
