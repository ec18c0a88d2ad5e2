"""fetch() (gateway/upstreams/fetch.py), the control plane's one exchange: same-origin redirects only, bounded;
proxy and TLS from the control-plane egress."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.config_egress import Tls
from gateway.upstreams.egress import BackendEgress, Defaults, Proxy, configure_control_plane, control_plane
from gateway.upstreams.fetch import fetch
from gateway.upstreams.httpclient import HttpError
from tests.raw_asgi import read_body, respond
from tests.support_connect_proxy import ConnectProxy
from tests.support_tls import Pki, make_pki, serve

pytestmark = pytest.mark.timeout(30)


class Redirecting:
    """/to/<status>/<path...> answers <status> with Location /<path...>; /abs/<status>?<url> points at a
    whole URL; /echo answers the method and body it got; /loop/<n> goes round in a circle of three."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, bytes, str]] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = await read_body(receive)
        path: str = scope["path"]
        headers = dict(scope["headers"])
        self.seen.append((scope["method"], path, body, headers.get(b"authorization", b"").decode()))
        parts = path.strip("/").split("/")
        if parts[0] == "to":
            await respond(send, int(parts[1]), b"", [(b"location", ("/" + "/".join(parts[2:])).encode())])
        elif parts[0] == "abs":
            location = scope["query_string"]
            await respond(send, int(parts[1]), b"", [(b"location", location)])
        elif parts[0] == "loop":
            nxt = (int(parts[1]) + 1) % 3
            await respond(send, 302, b"", [(b"location", f"/loop/{nxt}".encode())])
        elif parts[0] == "chain":
            left = int(parts[1])
            if left == 0:
                await respond(send, 200, b'{"end": true}')
            else:
                await respond(send, 301, b"", [(b"location", f"{left - 1}".encode())])  # relative
        else:
            ctype = headers.get(b"content-type", b"").decode()
            await respond(send, 200, orjson.dumps({"method": scope["method"], "body": body.decode(), "ctype": ctype}))


@pytest.fixture
async def site() -> AsyncIterator[tuple[str, Redirecting]]:
    app = Redirecting()
    async with serve(app, path="") as url:
        yield url, app


@pytest.fixture(autouse=True)
def fresh_control_plane() -> Iterator[None]:
    configure_control_plane(BackendEgress(Defaults.load(environ={})))
    yield
    configure_control_plane(None)


@pytest.mark.parametrize("status", [301, 302, 307, 308])
async def test_same_origin_redirects_keep_method_body_and_headers(site: tuple[str, Redirecting], status: int) -> None:
    url, app = site
    answer = await fetch(
        "POST",
        f"{url}/to/{status}/echo",
        headers={"authorization": "Basic Y2xpZW50OnNlY3JldA==", "content-type": "application/x-www-form-urlencoded"},
        body=b"grant_type=client_credentials",
    )
    assert answer.status == 200
    assert orjson.loads(answer.body) == {
        "method": "POST",
        "body": "grant_type=client_credentials",
        "ctype": "application/x-www-form-urlencoded",
    }
    assert [seen[3] for seen in app.seen] == ["Basic Y2xpZW50OnNlY3JldA=="] * 2


async def test_303_becomes_a_get_without_body(site: tuple[str, Redirecting]) -> None:
    url, _app = site
    answer = await fetch(
        "POST", f"{url}/to/303/echo", headers={"content-type": "application/json"}, body=b'{"token": "t"}'
    )
    assert orjson.loads(answer.body) == {"method": "GET", "body": "", "ctype": ""}


async def test_relative_locations_and_a_bounded_chain(site: tuple[str, Redirecting]) -> None:
    url, app = site
    assert (await fetch("GET", f"{url}/chain/5")).body == b'{"end": true}'
    app.seen.clear()
    with pytest.raises(HttpError, match="more than 5 redirects"):
        await fetch("GET", f"{url}/chain/9")
    assert len(app.seen) == 6  # the first request and five redirects, no more
    assert (await fetch("GET", f"{url}/chain/9", max_redirects=9)).status == 200


async def test_a_loop_is_stopped_where_it_closes(site: tuple[str, Redirecting]) -> None:
    url, app = site
    with pytest.raises(HttpError, match=r"redirect loop at http://127\.0\.0\.1:.*/loop/0"):
        await fetch("GET", f"{url}/loop/0")
    assert len(app.seen) == 3


async def test_cross_origin_is_refused_without_following(site: tuple[str, Redirecting]) -> None:
    url, app = site
    port = url.rsplit(":", 1)[1]
    for other in (f"http://localhost:{port}/echo", f"http://127.0.0.1:{int(port) + 1}/echo", "http://evil.test/x"):
        app.seen.clear()
        with pytest.raises(HttpError, match=r"another origin .*same-origin redirects only"):
            await fetch("GET", f"{url}/abs/302?{other}", headers={"authorization": "Bearer secret"})
        assert len(app.seen) == 1


async def test_odd_locations_are_refused(site: tuple[str, Redirecting]) -> None:
    url, _app = site
    with pytest.raises(HttpError, match="non-HTTP URL"):
        await fetch("GET", f"{url}/abs/302?file:///etc/passwd")
    port = url.rsplit(":", 1)[1]
    with pytest.raises(HttpError, match="credentials in it") as caught:
        await fetch("GET", f"{url}/abs/302?http://user:pw@127.0.0.1:{port}/echo")
    assert "pw" not in str(caught.value)


async def test_no_location_is_an_answer(site: tuple[str, Redirecting]) -> None:
    url, _app = site
    # /abs/302 with an empty query: a 302 whose Location is empty is handed back as it is.
    assert (await fetch("GET", f"{url}/abs/302")).status == 302


async def test_https_to_http_is_refused(tmp_path: Path, site: tuple[str, Redirecting]) -> None:
    plain, _app = site
    pki = make_pki(tmp_path)
    secure_app = Redirecting()
    async with serve(secure_app, pki.server_context(), path="") as secure:
        egress = BackendEgress.build("egress", None, Tls(ca_file=str(pki.ca_file)), Defaults.load(environ={}))
        answer = await fetch("GET", f"{secure}/to/302/echo", egress=egress)  # https → same origin: followed
        assert orjson.loads(answer.body)["method"] == "GET"
        with pytest.raises(HttpError, match="from https to http"):
            await fetch("GET", f"{secure}/abs/301?{plain}/echo", egress=egress)


async def test_fetch_through_the_proxy_with_the_company_ca(tmp_path: Path) -> None:
    pki: Pki = make_pki(tmp_path)
    app = Redirecting()
    async with serve(app, pki.server_context(), path="") as url, ConnectProxy() as proxy:
        configure_control_plane(
            BackendEgress.build(
                "egress", None, Tls(ca_file=str(pki.ca_file)), Defaults.load(environ={"HTTPS_PROXY": proxy.url})
            )
        )
        answer = await fetch("POST", f"{url}/to/307/echo", body=b"x")
    assert orjson.loads(answer.body)["body"] == "x"
    assert len(proxy.tunnels) == 2  # one exchange per hop, each through the proxy


def test_the_control_plane_defaults_to_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.corp:3128")
    configure_control_plane(None)
    route = control_plane().route("https://idp.example.com/jwks")
    assert route.proxy == Proxy.parse("http://proxy.corp:3128")
    assert route.ssl is not None


async def test_a_gateway_fetches_its_jwks_through_egress(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The control plane as the Gateway wires it: egress.proxy and egress.tls reach the JWKS fetch."""
    import logging

    import jwt
    from cryptography.hazmat.primitives.asymmetric import ec

    from gateway.config import Config
    from gateway.core import Gateway

    for name in ("HTTPS_PROXY", "https_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    pki = make_pki(tmp_path)
    key = jwt.algorithms.ECAlgorithm.to_jwk(ec.generate_private_key(ec.SECP256R1()).public_key(), as_dict=True)
    document = orjson.dumps({"keys": [{**key, "kid": "k1", "alg": "ES256", "use": "sig"}]})

    async def jwks(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            await read_body(receive)
            await respond(send, 200, document)

    async with serve(jwks, pki.server_context(), path="/jwks.json") as url, ConnectProxy() as proxy:
        config = Config.model_validate(
            {
                "auth": {"jwt": {"jwks_url": url}},
                "egress": {"proxy": proxy.url, "tls": {"ca_file": str(pki.ca_file)}},
            }
        )
        gateway = Gateway(config)
        with caplog.at_level(logging.INFO):
            await gateway.start()
            await gateway.stop()
    assert any("JWKS loaded from" in record.getMessage() for record in caplog.records), caplog.text
    assert proxy.tunnels == [url.split("/")[2]]
