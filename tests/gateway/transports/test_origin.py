"""The Host/Origin rule (gateway/transports/origin.py): same-origin requests, and what stays refused."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings, strategies as st

from gateway.config import Config
from gateway.transports.lean import UNIQUE_HEADERS_KEY
from gateway.transports.origin import OriginGuard

PUBLIC = {"listen": {"host": "0.0.0.0", "port": 8080}, "auth": {"admin_token": "x" * 32}}


def scope(*headers: tuple[str, str]) -> dict[str, Any]:
    return {"headers": [(n.encode(), v.encode()) for n, v in headers]}


def test_an_origin_naming_the_requests_own_host_is_same_origin() -> None:
    guard = OriginGuard(Config.model_validate(PUBLIC))
    for origin in ("https://gateway.example.com", "http://gateway.example.com", "HTTPS://Gateway.Example.com"):
        assert guard.check(scope(("host", "gateway.example.com"), ("origin", origin))) is None, origin
    port = scope(("host", "gateway.example.com:8443"), ("origin", "https://gateway.example.com:8443"))
    assert guard.check(port) is None


def test_a_cross_site_origin_is_still_refused() -> None:
    guard = OriginGuard(Config.model_validate(PUBLIC))
    for origin in ("https://evil.example", "https://gateway.example.com:9999", "https://evil.gateway.example.com"):
        verdict = guard.check(scope(("host", "gateway.example.com"), ("origin", origin)))
        assert verdict is not None and verdict[0] == 403, origin
    assert guard.check(scope(("host", "null"), ("origin", "null"))) == (403, "Origin 'null' is not allowed")
    # A verdict is cached per Origin value: the same-origin allowance must not leak to another Host.
    assert guard.check(scope(("host", "evil.example"), ("origin", "https://gateway.example.com"))) is not None


def test_a_rebound_name_is_refused_by_the_host_rule_first() -> None:
    # Loopback-bound: only loopback Host names; a page at a name rebound to 127.0.0.1 sends its own.
    guard = OriginGuard(Config.model_validate({"listen": {"host": "127.0.0.1", "port": 8080}}))
    verdict = guard.check(scope(("host", "rebound.example:8080"), ("origin", "http://rebound.example:8080")))
    assert verdict is not None and verdict[0] == 421
    allowed_hosts = OriginGuard(Config.model_validate({**PUBLIC, "security": {"allowed_hosts": ["gw.example"]}}))
    verdict = allowed_hosts.check(scope(("host", "other.example"), ("origin", "https://other.example")))
    assert verdict is not None and verdict[0] == 421
    assert allowed_hosts.check(scope(("host", "gw.example"), ("origin", "https://gw.example"))) is None


_VALUES = st.sampled_from(
    [
        "127.0.0.1",
        "localhost:8080",
        "[::1]:1",
        "gateway.example.com",
        "evil.example",
        "http://localhost:8080",
        "https://gateway.example.com",
        "http://evil.example",
        "null",
        "",
        "HTTP://LOCALHOST",
    ]
)


@settings(max_examples=300, deadline=None)
@given(
    host=st.one_of(st.none(), _VALUES),
    origin=st.one_of(st.none(), _VALUES),
    public=st.booleans(),
)
def test_the_lean_cycles_header_table_gives_the_same_verdicts(
    host: str | None, origin: str | None, public: bool
) -> None:
    """With the protocol's table of unrepeated headers (transports/lean.py) the rule reads two keys
    instead of scanning the list: the verdicts must be the same, cached or not."""
    config = PUBLIC if public else {"listen": {"host": "127.0.0.1", "port": 8080}}
    scanning, looking_up = OriginGuard(Config.model_validate(config)), OriginGuard(Config.model_validate(config))
    headers = [("content-type", "application/json")]
    headers += [("host", host)] if host is not None else []
    headers += [("origin", origin)] if origin is not None else []
    plain = scope(*headers)
    table = dict(plain["headers"])
    lean = {**plain, UNIQUE_HEADERS_KEY: table}
    for _ in range(2):  # the second time from the verdict caches
        assert looking_up.check(lean) == scanning.check(plain)
