"""The control plane's requests (gateway/upstreams/fetch.py: JWKS, token endpoints, introspection) get the
configured ``limits.max_response_head_bytes``, as the backends' answers do (ADR 0023), not the default.

A raw server answers every request with a head of 5000 bytes whose last byte comes a moment after the rest
(a head unfinished past the limit is what is counted): within the default 64 KiB, over a 4 KiB limit.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from gateway.config import Config
from gateway.core import Gateway
from gateway.upstreams.credentials import UpstreamCredentialError
from gateway.upstreams.fetch import fetch
from gateway.upstreams.httpclient import HttpError

pytestmark = pytest.mark.timeout(30)

HEAD = 5000
LIMIT = 4096


_handlers: set[asyncio.Task[Any]] = set()


async def _answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    task = asyncio.current_task()
    assert task is not None
    _handlers.add(task)
    try:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            (int(line.split(b":")[1]) for line in head.lower().split(b"\r\n") if line.startswith(b"content-length:")),
            0,
        )
        await reader.readexactly(length)
        if head.startswith(b"GET /jwks"):
            body = orjson.dumps({"keys": []})
        else:
            body = orjson.dumps({"access_token": "t0k3n", "token_type": "Bearer", "expires_in": 300})
        start = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n"
        start += b"content-length: %d\r\n" % len(body)
        pad = b"x-pad: " + b"p" * (HEAD - len(start) - len(b"x-pad: \r\n\r\n")) + b"\r\n"
        whole = start + pad + b"\r\n"
        assert len(whole) == HEAD
        writer.write(whole[:-1])
        await writer.drain()
        await asyncio.sleep(0.1)
        writer.write(whole[-1:] + body)
        await writer.drain()
    except ConnectionError:
        pass  # refused: the client closed on the head
    finally:
        writer.close()


@pytest.fixture
async def server() -> AsyncIterator[str]:
    listening = await asyncio.start_server(_answer, "127.0.0.1", 0)
    port = listening.sockets[0].getsockname()[1]
    async with listening:
        yield f"http://127.0.0.1:{port}"
        await asyncio.gather(*_handlers)  # each answer written (or refused) before the loop ends
        _handlers.clear()


async def test_fetch_takes_a_head_cap(server: str) -> None:
    assert (await fetch("GET", f"{server}/jwks")).status == 200  # the default cap: 64 KiB
    with pytest.raises(HttpError, match=f"a response head over {LIMIT} bytes"):
        await fetch("GET", f"{server}/jwks", max_head_bytes=LIMIT)


def _gateway(server: str, limits: dict[str, Any]) -> Gateway:
    auth = {"token_endpoint": f"{server}/token", "client_id": "gw", "client_secret": "pw", "type": "client_credentials"}
    return Gateway(
        Config.model_validate(
            {
                "backends": {"b": {"transport": "http", "url": "http://127.0.0.1:1/mcp", "auth": auth}},
                "auth": {"jwt": {"jwks_url": f"{server}/jwks"}},
                "limits": limits,
            }
        )
    )


@pytest.mark.parametrize("configured", [False, True], ids=["default", "4KiB"])
async def test_the_gateway_gives_its_control_plane_the_configured_cap(server: str, configured: bool) -> None:
    gateway = _gateway(server, {"max_response_head_bytes": LIMIT} if configured else {})
    provider = gateway.upstream_auth.provider_for("b", gateway.config.backends["b"])
    assert provider is not None and gateway.authenticator.jwt is not None
    if configured:
        with pytest.raises(UpstreamCredentialError) as refused:
            await provider.for_call("alice")
        assert f"a response head over {LIMIT} bytes" in refused.value.detail
    else:
        assert (await provider.for_call("alice"))["Authorization"] == "Bearer t0k3n"
    assert await gateway.authenticator.jwt.refresh() is not configured  # the JWKS
    gateway.reload(gateway.config)  # a new authenticator, with the same cap
    assert gateway.authenticator.jwt is not None
    assert await gateway.authenticator.jwt.refresh() is not configured
    await provider.close()
