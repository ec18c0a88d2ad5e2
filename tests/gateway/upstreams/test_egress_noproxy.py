"""NO_PROXY matching (gateway/upstreams/noproxy.py): curl's rules, with requests' host:port, and the proxy
variables read once by :class:`gateway.upstreams.egress.Defaults`."""

from __future__ import annotations

import ipaddress
import re

import pytest
from hypothesis import given, strategies as st

from gateway.upstreams.egress import Defaults, EgressError, Proxy
from gateway.upstreams.noproxy import NoProxy

CASES = [
    # (NO_PROXY, host, port, bypass)
    ("example.com", "example.com", 443, True),
    ("example.com", "api.example.com", 443, True),
    ("example.com", "deep.api.example.com", 80, True),
    ("example.com", "badexample.com", 443, False),
    ("example.com", "example.com.evil.net", 443, False),
    (".example.com", "example.com", 443, True),
    (".example.com", "api.example.com", 443, True),
    ("*.example.com", "api.example.com", 443, True),
    ("EXAMPLE.com", "Api.Example.COM", 443, True),
    ("example.com.", "api.example.com", 443, True),
    ("example.com", "api.example.com.", 443, True),
    (" a.test , example.com ", "example.com", 443, True),
    (",,", "example.com", 443, False),
    ("*", "anything.at.all", 1, True),
    ("other.test,*", "x", 1, True),
    ("10.0.0.0/8", "10.200.3.4", 443, True),
    ("10.0.0.0/8", "11.0.0.1", 443, False),
    ("192.168.1.7", "192.168.1.7", 443, True),
    ("192.168.1.7", "192.168.1.8", 443, False),
    ("::1", "::1", 443, True),
    ("[::1]", "[::1]", 443, True),
    ("0:0::1", "::1", 443, True),
    ("fd00::/8", "fd12::5", 443, True),
    ("fd00::/8", "10.0.0.1", 443, False),
    ("localhost:8080", "localhost", 8080, True),
    ("localhost:8080", "localhost", 9090, False),
    ("[::1]:8443", "::1", 8443, True),
    ("[::1]:8443", "::1", 443, False),
    ("10.1.2.3:8443", "10.1.2.3", 8443, True),
    # Nothing is exempt implicitly, and names are never resolved.
    ("", "localhost", 80, False),
    ("", "127.0.0.1", 80, False),
    ("127.0.0.1", "localhost", 80, False),
    ("localhost", "127.0.0.1", 80, False),
]


@pytest.mark.parametrize(("no_proxy", "host", "port", "bypass"), CASES)
def test_no_proxy_examples(no_proxy: str, host: str, port: int, bypass: bool) -> None:
    assert NoProxy.parse(no_proxy).matches(host, port) is bypass


def test_entries_not_understood_are_kept_for_a_warning() -> None:
    rules = NoProxy.parse("10.0.0.0/99,host:notaport,*.,good.test")
    assert rules.ignored == ("10.0.0.0/99", "host:notaport", "*.")
    assert rules.matches("good.test", 443)


_LABEL = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,10}[a-z0-9])?", fullmatch=True)
_TLD = st.from_regex(r"[a-z]{2,6}", fullmatch=True)  # alphabetic, so that no name is an IP address
_DOMAIN = st.builds(lambda labels, tld: ".".join([*labels, tld]), st.lists(_LABEL, max_size=3), _TLD)


@given(_DOMAIN, _LABEL, st.integers(1, 65535), st.sampled_from(["", "."]))
def test_a_name_covers_itself_and_its_subdomains_only(domain: str, label: str, port: int, dot: str) -> None:
    rules = NoProxy.parse(dot + domain)
    assert rules.matches(domain, port)
    assert rules.matches(f"{label}.{domain}", port)
    assert rules.matches(domain.upper(), port)
    assert not rules.matches(f"{label}{domain}", port)  # a suffix that is no label boundary
    # The name followed by another label (ending in "-x": never the domain's alphabetic last label, so the
    # result is never a subdomain; "{label}x" was, for a one-label domain: "ax" and label "a" gave ax.ax).
    assert not rules.matches(f"{domain}.{label}-x", port)


@given(st.ip_addresses(v=4), st.integers(0, 32), st.integers(1, 65535))
def test_cidr_ranges_match_exactly_their_addresses(address: ipaddress.IPv4Address, bits: int, port: int) -> None:
    network = ipaddress.ip_network(f"{address}/{bits}", strict=False)
    rules = NoProxy.parse(str(network))
    assert rules.matches(str(address), port)
    outside = int(network.network_address) - 1
    if outside >= 0:
        assert not rules.matches(str(ipaddress.IPv4Address(outside)), port)


@given(st.text(max_size=80), st.text(max_size=30), st.integers(0, 70000))
def test_any_value_parses_and_any_host_is_answered(value: str, host: str, port: int) -> None:
    rules = NoProxy.parse(value)
    assert rules.matches(host, port) in (True, False)


def test_proxy_variables_lower_case_first_and_credentials_kept_out_of_sight() -> None:
    defaults = Defaults.load(
        environ={
            "https_proxy": "http://alice:s%40cret@proxy.corp:3128",
            "HTTPS_PROXY": "http://ignored:1",
            "HTTP_PROXY": "plainproxy.corp:8080",
            "NO_PROXY": "internal.corp",
        }
    )
    assert defaults.https_proxy is not None and defaults.http_proxy is not None
    assert defaults.https_proxy.display == "http://proxy.corp:3128"
    assert defaults.https_proxy.authorization == "Basic YWxpY2U6c0BjcmV0"  # alice:s@cret
    assert "cret" not in repr(defaults)
    assert defaults.http_proxy.display == "http://plainproxy.corp:8080"  # no scheme: http, as curl reads it
    assert defaults.proxy_for(True, "api.example.com", 443) is defaults.https_proxy
    assert defaults.proxy_for(False, "api.example.com", 80) is defaults.http_proxy
    assert defaults.proxy_for(True, "svc.internal.corp", 443) is None


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("socks5://proxy:1080", "not supported"),
        ("https://proxy:443", "not supported"),
        ("http://proxy:99999", "invalid port"),
        ("http://proxy:3128/path", "host[:port] only"),
        ("http://", "names no host"),
    ],
)
def test_a_proxy_variable_that_cannot_be_used_stops_the_start_clearly(value: str, reason: str) -> None:
    with pytest.raises(EgressError, match=re.escape(reason)) as caught:
        Defaults.load(environ={"HTTPS_PROXY": value})
    assert "HTTPS_PROXY" in str(caught.value)


def test_a_proxy_error_never_shows_the_password() -> None:
    with pytest.raises(EgressError) as caught:
        Proxy.parse("http://bob:hunter2@proxy:3128/x")
    assert "hunter2" not in str(caught.value)
