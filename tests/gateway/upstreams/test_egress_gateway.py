"""A real Gateway reaching its backends through a real CONNECT proxy and over TLS with a CA made in the test:
the environment's proxy variables, NO_PROXY, a backend's own ``proxy``, ``egress.proxy``, ``tls`` (CA, client
certificate, verify: false), for HTTP and WebSocket backends; and one gateway process end to end."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from websockets.asyncio.server import ServerConnection, serve as ws_serve

from gateway.config import Config
from gateway.core import Gateway
from gateway.upstreams.egress import configure_control_plane
from tests.raw_asgi import read_body
from tests.support import modern_headers, modern_meta, run_gateway
from tests.support_connect_proxy import ConnectProxy
from tests.support_tls import Pki, TinyMcp, make_pki, serve

pytestmark = pytest.mark.timeout(60)

WAIT_S = 10.0
PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy")


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    yield
    configure_control_plane(None)  # the Gateways made here set it


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return make_pki(tmp_path)


@pytest.fixture
async def backend(pki: Pki) -> AsyncIterator[tuple[str, TinyMcp]]:
    app = TinyMcp()
    async with serve(app, pki.server_context()) as url:
        yield url, app


@contextlib.asynccontextmanager
async def running(backends: dict[str, Any], **top: Any) -> AsyncIterator[Gateway]:
    gateway = Gateway(Config.model_validate({"backends": backends, **top}))
    await gateway.start()
    try:
        yield gateway
    finally:
        async with asyncio.timeout(WAIT_S):
            await gateway.stop()


async def _echo(gateway: Gateway, name: str = "b") -> str:
    conn = gateway.connections[name]
    assert await conn.wait_ready(WAIT_S), conn.last_error
    answer = await conn.request("tools/call", {"name": "echo", "arguments": {"x": 1}}, timeout=WAIT_S)
    text: str = answer["result"]["content"][0]["text"]
    return text


async def _failure(gateway: Gateway, name: str = "b") -> str:
    conn = gateway.connections[name]
    async with asyncio.timeout(WAIT_S):
        while conn.last_error is None:  # noqa: ASYNC110  # the connection has no event for its first failure
            await asyncio.sleep(0.02)
    assert not conn._ready.is_set()
    return conn.last_error


def _authority(url: str) -> str:
    return url.split("/")[2]


async def test_https_backend_through_the_environment_proxy(
    pki: Pki, backend: tuple[str, TinyMcp], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, _app = backend
    async with ConnectProxy(user="gw", password="s3cret") as proxy:
        monkeypatch.setenv("HTTPS_PROXY", proxy.url)
        config = {"b": {"transport": "http", "url": url, "tls": {"ca_file": str(pki.ca_file)}}}
        async with running(config) as gateway:
            assert await _echo(gateway) == '{"x":1}'
    assert proxy.tunnels and set(proxy.tunnels) == {_authority(url)}
    assert all(credential == "Basic Z3c6czNjcmV0" for credential in proxy.credentials)


async def test_no_proxy_and_proxy_none_go_direct(
    pki: Pki, backend: tuple[str, TinyMcp], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, _app = backend
    tls = {"ca_file": str(pki.ca_file)}
    async with ConnectProxy() as proxy:
        monkeypatch.setenv("https_proxy", proxy.url)
        monkeypatch.setenv("no_proxy", "example.test, 127.0.0.0/8")
        async with running({"b": {"transport": "http", "url": url, "tls": tls}}) as gateway:
            await _echo(gateway)
        monkeypatch.delenv("no_proxy")
        async with running({"b": {"transport": "http", "url": url, "tls": tls, "proxy": "none"}}) as gateway:
            await _echo(gateway)
        async with running({"b": {"transport": "http", "url": url, "tls": tls, "proxy": False}}) as gateway:
            await _echo(gateway)
    assert proxy.tunnels == []


async def test_a_backend_proxy_overrides_the_environment_and_ignores_no_proxy(
    pki: Pki, backend: tuple[str, TinyMcp], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, _app = backend
    async with ConnectProxy() as mine, ConnectProxy() as environment:
        monkeypatch.setenv("HTTPS_PROXY", environment.url)
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        config = {"b": {"transport": "http", "url": url, "proxy": mine.url, "tls": {"ca_file": str(pki.ca_file)}}}
        async with running(config) as gateway:
            await _echo(gateway)
    assert mine.tunnels and environment.tunnels == []


async def test_egress_proxy_for_https_and_plain_http_backends(pki: Pki, backend: tuple[str, TinyMcp]) -> None:
    url, _app = backend
    plain_app = TinyMcp()
    async with serve(plain_app) as plain, ConnectProxy() as proxy:
        config = {
            "b": {"transport": "http", "url": url, "tls": {"ca_file": str(pki.ca_file)}},
            "p": {"transport": "http", "url": plain},
        }
        async with running(config, egress={"proxy": proxy.url}) as gateway:
            await _echo(gateway, "b")
            await _echo(gateway, "p")
    assert set(proxy.tunnels) == {_authority(url)}
    assert proxy.forwarded and set(proxy.forwarded) == {plain}  # absolute form
    assert {seen[2] for seen in plain_app.seen} == {_authority(plain)}


async def test_a_refusing_proxy_is_a_clear_backend_error(pki: Pki, backend: tuple[str, TinyMcp]) -> None:
    url, _app = backend
    async with ConnectProxy(refuse=403) as proxy:
        config = {"b": {"transport": "http", "url": url, "proxy": proxy.url, "tls": {"ca_file": str(pki.ca_file)}}}
        async with running(config) as gateway:
            error = await _failure(gateway)
    assert f"proxy http://127.0.0.1:{proxy.port} refused CONNECT to {_authority(url)}: 403" in error


async def test_unknown_ca_is_refused_with_what_to_configure(pki: Pki, backend: tuple[str, TinyMcp]) -> None:
    url, app = backend
    async with running({"b": {"transport": "http", "url": url}}) as gateway:
        error = await _failure(gateway)
    assert "not trusted" in error and "tls.ca_file" in error
    async with running({"b": {"transport": "http", "url": url, "tls": {"ca_file": str(pki.other_ca_file)}}}) as gw:
        assert "not trusted" in await _failure(gw)
    assert app.seen == []


async def test_client_certificate_required(pki: Pki) -> None:
    app = TinyMcp()
    async with serve(app, pki.server_context(require_client_cert=True)) as url:
        tls = {"ca_file": str(pki.ca_file), "cert_file": str(pki.client_cert), "key_file": str(pki.client_key)}
        async with running({"b": {"transport": "http", "url": url, "tls": tls}}) as gateway:
            await _echo(gateway)
        async with running({"b": {"transport": "http", "url": url, "tls": {"ca_file": str(pki.ca_file)}}}) as gw:
            error = await _failure(gw)
    assert "client certificate" in error and "tls.cert_file" in error


async def test_verify_false_works_and_is_warned_about(
    backend: tuple[str, TinyMcp], caplog: pytest.LogCaptureFixture
) -> None:
    url, _app = backend
    with caplog.at_level(logging.WARNING, logger="gateway.upstreams.egress"):
        async with running({"insecure": {"transport": "http", "url": url, "tls": {"verify": False}}}) as gateway:
            await _echo(gateway, "insecure")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("backend insecure: tls.verify is false" in text for text in warnings), warnings


class WsMcp:
    """A legacy-era MCP server over WebSocket (subprotocol mcp) with the same answers as TinyMcp."""

    def __init__(self) -> None:
        self.http = TinyMcp()

    async def __call__(self, ws: ServerConnection) -> None:
        async for frame in ws:
            message = orjson.loads(frame)
            if "id" not in message:
                continue
            answer = await self._answer(message)
            await ws.send(answer.decode())

    async def _answer(self, message: dict[str, Any]) -> bytes:
        sent: list[bytes] = []

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": orjson.dumps(message), "more_body": False}

        async def send(event: dict[str, Any]) -> None:
            if event["type"] == "http.response.body":
                sent.append(event["body"])

        await self.http({"type": "http", "method": "POST", "path": "/", "headers": []}, receive, send)
        return sent[0]


async def test_wss_backend_through_the_proxy_with_the_company_ca(pki: Pki, monkeypatch: pytest.MonkeyPatch) -> None:
    async with (
        ws_serve(WsMcp(), "127.0.0.1", 0, ssl=pki.server_context(), subprotocols=["mcp"]) as server,  # type: ignore[list-item]
        ConnectProxy() as proxy,
    ):
        port = next(iter(server.sockets)).getsockname()[1]
        url = f"wss://127.0.0.1:{port}/mcp"
        monkeypatch.setenv("HTTPS_PROXY", proxy.url)
        async with running({"b": {"transport": "ws", "url": url, "tls": {"ca_file": str(pki.ca_file)}}}) as gateway:
            assert await _echo(gateway) == '{"x":1}'
        async with running({"b": {"transport": "ws", "url": url}}) as gateway:
            assert "not trusted" in await _failure(gateway)
    assert proxy.tunnels and set(proxy.tunnels) == {f"127.0.0.1:{port}"}


def _call_through(gateway_url: str) -> dict[str, Any]:
    body = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": "echo", "arguments": {"via": "proxy"}, "_meta": modern_meta()},
    }
    with httpx.Client(trust_env=False, timeout=WAIT_S) as http:
        answer = http.post(f"{gateway_url}/mcp", json=body, headers=modern_headers("tools/call", "echo"))
    assert answer.status_code == 200, answer.text
    result: dict[str, Any] = answer.json()
    return result


async def test_a_gateway_process_through_the_environment_proxy_with_verify_false(
    backend: tuple[str, TinyMcp], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, _app = backend
    async with ConnectProxy() as proxy:
        monkeypatch.setenv("HTTPS_PROXY", proxy.url)
        config = {"backends": {"lab": {"transport": "http", "url": url, "tls": {"verify": False}, "required": True}}}

        def scenario() -> tuple[dict[str, Any], str]:
            with run_gateway(config) as gw:
                return _call_through(gw.url), gw.log_with("tls.verify is false")

        answer, log = await asyncio.to_thread(scenario)
    assert answer["result"]["content"][0]["text"] == '{"via":"proxy"}'
    assert "WARNING" in log and "backend lab: tls.verify is false" in log
    assert set(proxy.tunnels) == {_authority(url)}


class SseMcp:
    """A legacy HTTP+SSE (2024-11-05) MCP server: GET /sse streams, POST /messages is answered on the stream."""

    def __init__(self) -> None:
        self.json = TinyMcp()
        self.queue: asyncio.Queue[bytes] = asyncio.Queue(maxsize=64)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        if scope["method"] == "GET":
            await send(
                {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]}
            )
            endpoint = b"event: endpoint\ndata: /messages\n\n"
            await send({"type": "http.response.body", "body": endpoint, "more_body": True})
            await read_body(receive)
            gone = asyncio.ensure_future(receive())  # the next event is http.disconnect
            try:
                while True:
                    message = asyncio.ensure_future(self.queue.get())
                    await asyncio.wait((message, gone), return_when=asyncio.FIRST_COMPLETED)
                    if not message.done():
                        message.cancel()
                        return
                    body = b"data: " + message.result() + b"\n\n"
                    await send({"type": "http.response.body", "body": body, "more_body": True})
            finally:
                gone.cancel()
        sent: list[bytes] = []

        async def capture(event: dict[str, Any]) -> None:
            if event["type"] == "http.response.body":
                sent.append(event["body"])

        await self.json(scope, receive, capture)
        if sent and sent[0]:
            await self.queue.put(sent[0])
        await send({"type": "http.response.start", "status": 202, "headers": [(b"content-length", b"0")]})
        await send({"type": "http.response.body", "body": b""})


async def test_sse_backends_through_the_proxy(pki: Pki) -> None:
    async with (
        serve(SseMcp(), path="/sse") as plain,
        serve(SseMcp(), pki.server_context(), path="/sse") as secure,
        ConnectProxy() as proxy,
    ):
        config = {
            "p": {"transport": "sse", "url": plain},
            "s": {"transport": "sse", "url": secure, "tls": {"ca_file": str(pki.ca_file)}},
        }
        async with running(config, egress={"proxy": proxy.url}) as gateway:
            assert await _echo(gateway, "p") == '{"x":1}'
            assert await _echo(gateway, "s") == '{"x":1}'
    assert set(proxy.tunnels) == {_authority(secure)}
    assert plain in proxy.forwarded and plain.replace("/sse", "/messages") in proxy.forwarded


async def test_mcp_calls_never_follow_a_redirect(pki: Pki) -> None:
    target = TinyMcp()
    async with serve(target) as elsewhere:
        mover = TinyMcp(redirect_to=elsewhere)
        async with serve(mover) as url, running({"b": {"transport": "http", "url": url, "era": "legacy"}}) as gateway:
            error = await _failure(gateway)
    assert "redirect (HTTP 307)" in error and "do not follow redirects" in error
    assert target.seen == []  # nothing went where the redirect pointed


async def test_a_plain_http_backend_behind_a_proxy_that_wants_credentials() -> None:
    app = TinyMcp()
    async with serve(app) as url, ConnectProxy(user="gw", password="right") as proxy:
        config = {"b": {"transport": "http", "url": url, "era": "legacy", "proxy": f"http://127.0.0.1:{proxy.port}"}}
        async with running(config) as gateway:
            error = await _failure(gateway)
    assert "wants credentials (HTTP 407)" in error
    assert app.seen == []


async def test_a_wss_backend_behind_a_refusing_proxy(pki: Pki) -> None:
    async with ConnectProxy(user="gw", password="right") as proxy:
        url = "wss://127.0.0.1:9/mcp"
        wrong = f"http://gw:wrong-one@127.0.0.1:{proxy.port}"
        config = {"b": {"transport": "ws", "url": url, "proxy": wrong, "tls": {"ca_file": str(pki.ca_file)}}}
        async with running(config) as gateway:
            error = await _failure(gateway)
    assert f"proxy http://127.0.0.1:{proxy.port} refused CONNECT to {url}: 407" in error
    assert "wrong-one" not in error
