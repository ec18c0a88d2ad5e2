"""The backend HTTP client (gateway/upstreams/httpclient.py) through a real CONNECT proxy and over TLS with a
CA made in the test: what goes on the wire, and the errors when something refuses."""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest

from gateway.config_egress import Tls
from gateway.upstreams.egress import Proxy, Route, tls_context
from gateway.upstreams.httpclient import ConnectError, ConnectionPool, HttpError
from tests.support import free_port
from tests.support_connect_proxy import ConnectProxy
from tests.support_tls import Pki, TinyMcp, make_pki, serve

pytestmark = pytest.mark.timeout(30)

INIT = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}})
HEADERS = {"content-type": "application/json", "accept": "application/json"}


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return make_pki(tmp_path)


@pytest.fixture
async def https_backend(pki: Pki) -> AsyncIterator[tuple[str, TinyMcp]]:
    app = TinyMcp()
    async with serve(app, pki.server_context()) as url:
        yield url, app


async def _post(pool: ConnectionPool, path: str = "/mcp") -> dict[str, object]:
    response = await pool.request("POST", path, HEADERS, INIT)
    body = await response.read()
    assert response.status == 200, body
    answer: dict[str, object] = orjson.loads(body)
    return answer


def _trusting(pki: Pki) -> Route:
    return Route(ssl=tls_context(Tls(ca_file=str(pki.ca_file)), "t"))


async def test_https_through_connect_with_the_company_ca(pki: Pki, https_backend: tuple[str, TinyMcp]) -> None:
    url, app = https_backend
    async with ConnectProxy() as proxy:
        route = Route(Proxy.parse(proxy.url), _trusting(pki).ssl)
        pool = ConnectionPool(url, route=route)
        try:
            assert "tools" in (await _post(pool))["result"]  # type: ignore[operator]
            await _post(pool)  # the kept-alive tunnel serves the next request
        finally:
            await pool.aclose()
    port = url.split(":")[2].split("/")[0]
    assert proxy.tunnels == [f"127.0.0.1:{port}"]  # one tunnel, reused
    assert [seen[2] for seen in app.seen] == [f"127.0.0.1:{port}"] * 2  # the Host the backend saw


async def test_plain_http_through_the_proxy_in_absolute_form_with_credentials() -> None:
    app = TinyMcp()
    async with serve(app) as url, ConnectProxy(user="gw", password="pa:ss@1") as proxy:
        pool = ConnectionPool(url, route=Route(Proxy.parse(proxy.url.replace("pa:ss@1", "pa%3Ass%401"))))
        try:
            await _post(pool)
            await _post(pool)
        finally:
            await pool.aclose()
    assert proxy.forwarded == [url, url]  # absolute form, RFC 9112 §3.2.2
    assert proxy.tunnels == []
    assert proxy.credentials == ["Basic Z3c6cGE6c3NAMQ=="] * 2  # gw:pa:ss@1
    assert [seen[:2] for seen in app.seen] == [("POST", "/mcp")] * 2


@pytest.mark.parametrize("status", [403, 502])
async def test_a_refused_connect_names_the_proxy_and_the_status(
    pki: Pki, https_backend: tuple[str, TinyMcp], status: int
) -> None:
    url, _app = https_backend
    async with ConnectProxy(refuse=status) as proxy:
        pool = ConnectionPool(url, route=Route(Proxy.parse(proxy.url), _trusting(pki).ssl))
        with pytest.raises(ConnectError, match=f"proxy http://127.0.0.1:{proxy.port} refused CONNECT to .*{status}"):
            await _post(pool)
        await pool.aclose()


async def test_proxy_credentials_wrong_is_a_407_without_the_password(
    pki: Pki, https_backend: tuple[str, TinyMcp]
) -> None:
    url, _app = https_backend
    async with ConnectProxy(user="gw", password="right") as proxy:
        route = Route(Proxy.parse(f"http://gw:wrong-secret@127.0.0.1:{proxy.port}"), _trusting(pki).ssl)
        pool = ConnectionPool(url, route=route)
        with pytest.raises(ConnectError) as caught:
            await _post(pool)
        await pool.aclose()
    text = str(caught.value)
    assert "407" in text and "credentials" in text
    assert "wrong-secret" not in text and "gw:" not in text


async def test_a_proxy_that_is_not_there(pki: Pki) -> None:
    route = Route(Proxy.parse(f"http://127.0.0.1:{free_port()}"), _trusting(pki).ssl)
    pool = ConnectionPool("https://127.0.0.1:9/mcp", route=route, connect_timeout_s=5)
    with pytest.raises(ConnectError, match=r"cannot connect to proxy http://127\.0\.0\.1:"):
        await _post(pool)
    await pool.aclose()


async def test_unknown_ca_refused_directly_and_through_the_proxy(pki: Pki, https_backend: tuple[str, TinyMcp]) -> None:
    url, app = https_backend
    other = tls_context(Tls(ca_file=str(pki.other_ca_file)), "t")
    pool = ConnectionPool(url, route=Route(ssl=other))
    with pytest.raises(ConnectError, match=r"is not trusted .*tls\.ca_file"):
        await _post(pool)
    await pool.aclose()
    async with ConnectProxy() as proxy:
        pool = ConnectionPool(url, route=Route(Proxy.parse(proxy.url), other))
        with pytest.raises(ConnectError, match=r"is not trusted .*through proxy"):
            await _post(pool)
        await pool.aclose()
    assert app.seen == []  # nothing was sent to a server the gateway does not trust


async def test_the_system_store_does_not_trust_a_private_ca(https_backend: tuple[str, TinyMcp]) -> None:
    url, _app = https_backend
    pool = ConnectionPool(url)
    with pytest.raises(ConnectError, match="not trusted"):
        await _post(pool)
    await pool.aclose()


async def test_server_name_checks_the_certificate_against_another_name(
    pki: Pki, https_backend: tuple[str, TinyMcp]
) -> None:
    url, _app = https_backend
    good = tls_context(Tls(ca_file=str(pki.ca_file), server_name="localhost"), "t")
    pool = ConnectionPool(url, route=Route(ssl=good, server_hostname="localhost"))
    await _post(pool)
    await pool.aclose()
    pool = ConnectionPool(url, route=Route(ssl=good, server_hostname="elsewhere.test"))
    with pytest.raises(ConnectError, match="not trusted"):
        await _post(pool)
    await pool.aclose()


async def test_client_certificate_required(pki: Pki) -> None:
    app = TinyMcp()
    async with serve(app, pki.server_context(require_client_cert=True)) as url:
        with_cert = Tls(ca_file=str(pki.ca_file), cert_file=str(pki.client_cert), key_file=str(pki.client_key))
        pool = ConnectionPool(url, route=Route(ssl=tls_context(with_cert, "t")))
        await _post(pool)
        await pool.aclose()
        combined = Tls(ca_file=str(pki.ca_file), cert_file=str(pki.client_combined))  # key in the same file
        pool = ConnectionPool(url, route=Route(ssl=tls_context(combined, "t")))
        await _post(pool)
        await pool.aclose()
        pool = ConnectionPool(url, route=_trusting(pki))
        with pytest.raises(HttpError, match="client certificate"):
            await _post(pool)
        await pool.aclose()
    assert len(app.seen) == 2


async def test_verify_false_accepts_any_certificate(https_backend: tuple[str, TinyMcp]) -> None:
    url, _app = https_backend
    pool = ConnectionPool(url, route=Route(ssl=tls_context(Tls(verify=False), "t")))
    await _post(pool)
    await pool.aclose()


def test_a_route_that_does_not_fit_the_scheme_is_refused(pki: Pki) -> None:
    with pytest.raises(ValueError, match="does not fit"):
        ConnectionPool("http://127.0.0.1:1/mcp", route=_trusting(pki))


async def test_a_proxy_that_never_answers_connect_is_bounded_by_the_connect_timeout(pki: Pki) -> None:
    accepted: list[asyncio.StreamWriter] = []

    async def silent(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)  # holds the connection open and says nothing

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        route = Route(Proxy.parse(f"http://127.0.0.1:{port}"), _trusting(pki).ssl)
        pool = ConnectionPool("https://127.0.0.1:9/mcp", route=route, connect_timeout_s=0.3)
        started = time.monotonic()
        with pytest.raises(
            ConnectError, match=rf"through proxy http://127\.0\.0\.1:{port}: no connection within 0\.3 s"
        ):
            await _post(pool)
        assert time.monotonic() - started < 2
        await pool.aclose()
    finally:
        for writer in accepted:
            writer.close()
        server.close()
        await server.wait_closed()


def test_every_context_refuses_less_than_tls_1_2(pki: Pki) -> None:
    for tls in (None, Tls(ca_file=str(pki.ca_file)), Tls(verify=False), Tls(cert_file=str(pki.client_combined))):
        assert tls_context(tls, "t").minimum_version >= ssl.TLSVersion.TLSv1_2
