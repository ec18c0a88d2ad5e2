"""policies/netguard.py: every spelling of a local, private or metadata address is refused; public ones pass."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given, settings, strategies as st

from policies.netguard import (
    check_host,
    classify_ip,
    normalise_host,
    parse_ipv4,
    refused_hosts,
    split_authority,
)

# ---- parsing as inet_aton does -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1", "127.0.0.1"),
        ("2130706433", "127.0.0.1"),
        ("0x7f000001", "127.0.0.1"),
        ("017700000001", "127.0.0.1"),
        ("0177.0.0.1", "127.0.0.1"),
        ("0x7f.0.0.1", "127.0.0.1"),
        ("0x7f.0x0.0x0.0x1", "127.0.0.1"),
        ("127.1", "127.0.0.1"),
        ("127.0.1", "127.0.0.1"),
        ("10.1", "10.0.0.1"),
        ("192.168.257", "192.168.1.1"),
        ("0", "0.0.0.0"),
        ("0x", "0.0.0.0"),
        ("169.254.43518", "169.254.169.254"),
        ("0251.0376.0251.0376", "169.254.169.254"),
        ("2852039166", "169.254.169.254"),
    ],
)
def test_ipv4_forms_read_as_inet_aton_reads_them(text: str, expected: str) -> None:
    assert str(parse_ipv4(text)) == expected


@pytest.mark.parametrize(
    "text", ["256.0.0.1", "1.2.3.4.5", "08.0.0.1", "1..2", "", "a.b.c.d", "127.0.0.256", "4294967296"]
)
def test_not_ipv4(text: str) -> None:
    assert parse_ipv4(text) is None


def test_short_forms_are_not_hosts_in_free_text() -> None:
    assert parse_ipv4("127.1", min_parts=4) is None
    assert parse_ipv4("2130706433", min_parts=4) is None
    assert str(parse_ipv4("0177.0.0.1", min_parts=4)) == "127.0.0.1"


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("LOCALHOST", "localhost"),
        ("localhost.", "localhost"),
        ("localhost...", "localhost"),
        ("[::1]", "::1"),
        ("[fe80::1%25eth0]", "fe80::1"),
        ("fe80::1%eth0", "fe80::1"),
        ("%31%32%37.0.0.1", "127.0.0.1"),
        ("%2531%2532%2537.0.0.1", "127.0.0.1"),
        ("\uff11\uff12\uff17\uff0e\uff10\uff0e\uff10\uff0e\uff11", "127.0.0.1"),
        ("127\u30020\u30020\u30021", "127.0.0.1"),
        ("METADATA.Google.Internal.", "metadata.google.internal"),
    ],
)
def test_normalise_host(host: str, expected: str) -> None:
    assert normalise_host(host) == expected


# ---- a table of real SSRF spellings ------------------------------------------------------------

REFUSED_HOSTS = [
    ("127.0.0.1", "loopback"),
    ("127.255.255.254", "loopback"),
    ("2130706433", "loopback"),
    ("0x7f000001", "loopback"),
    ("0X7F000001", "loopback"),
    ("0177.0.0.1", "loopback"),
    ("0177.0000.0000.0001", "loopback"),
    ("127.1", "loopback"),
    ("127.0.0.1.", "loopback"),
    ("localhost", "loopback"),
    ("LocalHost", "loopback"),
    ("localhost.", "loopback"),
    ("app.localhost", "loopback"),
    ("ip6-localhost", "loopback"),
    ("localtest.me", "loopback"),
    ("foo.lvh.me", "loopback"),
    ("0.0.0.0", "unspecified"),
    ("0", "unspecified"),
    ("::", "unspecified"),
    ("::1", "loopback"),
    ("[::1]", "loopback"),
    ("0:0:0:0:0:0:0:1", "loopback"),
    ("::ffff:127.0.0.1", "loopback"),
    ("[::ffff:127.0.0.1]", "loopback"),
    ("::ffff:7f00:1", "loopback"),
    ("[0:0:0:0:0:ffff:7f00:0001]", "loopback"),
    ("::127.0.0.1", "loopback"),
    ("64:ff9b::127.0.0.1", "loopback"),
    ("64:ff9b::a9fe:a9fe", "metadata"),
    ("2002:7f00:1::1", "loopback"),
    ("2002:a9fe:a9fe::", "metadata"),
    ("10.0.0.1", "private"),
    ("10.255.255.255", "private"),
    ("167772161", "private"),
    ("172.16.0.1", "private"),
    ("172.31.255.254", "private"),
    ("192.168.1.1", "private"),
    ("0xc0.0xa8.1.1", "private"),
    ("0300.0250.01.01", "private"),
    ("::ffff:192.168.0.1", "private"),
    ("100.64.0.1", "cgnat"),
    ("100.127.255.254", "cgnat"),
    ("169.254.1.1", "link-local"),
    ("fe80::1", "link-local"),
    ("[fe80::1%25eth0]", "link-local"),
    ("fc00::1", "unique-local"),
    ("fd12:3456:789a::1", "unique-local"),
    ("fec0::1", "site-local"),
    ("169.254.169.254", "metadata"),
    ("2852039166", "metadata"),
    ("0xa9fea9fe", "metadata"),
    ("0251.0376.0251.0376", "metadata"),
    ("169.254.43518", "metadata"),
    ("::ffff:169.254.169.254", "metadata"),
    ("::ffff:a9fe:a9fe", "metadata"),
    ("169.254.170.2", "metadata"),
    ("100.100.100.200", "metadata"),
    ("fd00:ec2::254", "metadata"),
    ("[FD00:EC2::254]", "metadata"),
    ("metadata.google.internal", "metadata"),
    ("METADATA.GOOGLE.INTERNAL.", "metadata"),
    ("metadata", "metadata"),
    ("metadata.goog", "metadata"),
    ("instance-data", "metadata"),
    ("instance-data.ec2.internal", "metadata"),
    ("printer.local", "link-local"),
    ("db.internal", "private"),
    ("nas.home.arpa", "private"),
    ("224.0.0.1", "multicast"),
    ("ff02::1", "multicast"),
    ("255.255.255.255", "reserved"),
    ("%31%32%37.0.0.1", "loopback"),
    ("%6c%6f%63%61%6c%68%6f%73%74", "loopback"),
    ("\uff11\uff12\uff17\uff0e\uff10\uff0e\uff10\uff0e\uff11", "loopback"),
    ("127.0.0.1.nip.io", "loopback"),
    ("app.10.0.0.1.nip.io", "private"),
    ("10-0-0-1.sslip.io", "private"),
    ("magic-169-254-169-254.sslip.io", "metadata"),
    ("7f000001.nip.io", "loopback"),
]


@pytest.mark.parametrize(("host", "category"), REFUSED_HOSTS)
def test_refused_hosts(host: str, category: str) -> None:
    verdict = check_host(host)
    assert verdict is not None, host
    assert verdict.category == category
    assert host in verdict.reason and category in verdict.reason


@pytest.mark.parametrize(
    "host",
    [
        "example.com",
        "8.8.8.8",
        "1.1.1.1",
        "93.184.216.34",
        "2606:4700:4700::1111",
        "[2001:4860:4860::8888]",
        "172.32.0.1",  # just outside 172.16.0.0/12
        "172.15.255.255",
        "100.128.0.1",  # just outside CGNAT
        "169.255.0.1",
        "11.0.0.1",
        "192.169.0.1",
        "localhost.example.com",  # a public name that merely contains the word
        "metadata.example.com",
        "mylocalhost.com",
        "internal.example.com",
        "8.8.8.8.nip.io",
        "api.github.com",
    ],
)
def test_public_hosts_pass(host: str) -> None:
    assert check_host(host) is None


def test_names_are_not_resolved() -> None:
    """No DNS: a name that may well point inside passes (see the module docstring for why)."""
    assert check_host("intranet.corp.example") is None
    assert check_host("rebind.attacker.example") is None


def test_operator_allowlist_and_blocklist() -> None:
    assert check_host("10.1.2.3", allowed=["10.1.0.0/16"]) is None
    assert check_host("10.2.0.1", allowed=["10.1.0.0/16"]) is not None
    assert check_host("0x7f000001", allowed=["127.0.0.1"]) is None
    assert check_host("db.internal", allowed=["db.internal"]) is None
    assert check_host("evil.example", blocked=["evil.example"]) is not None
    assert check_host("a.b.corp.example", blocked=[".corp.example"]) is not None
    assert check_host("corp.example.org", blocked=[".corp.example"]) is None


def test_split_authority() -> None:
    assert split_authority("user:pw@127.0.0.1:8080") == (["127.0.0.1"], ["user", "pw"])
    assert split_authority("[::1]:443") == (["[::1]"], [])
    assert split_authority("a:1,b:2") == (["a", "b"], [])
    assert split_authority("good@evil@10.0.0.1") == (["10.0.0.1"], ["good", "evil"])


# ---- finding hosts in text ----------------------------------------------------------------------

REFUSED_TEXT = [
    "http://127.0.0.1/admin",
    "https://localhost:8443/",
    "http://good.example@127.0.0.1/",
    "http://user:pass@169.254.169.254/latest/meta-data/iam/security-credentials/",
    "http://127.0.0.1@example.com/",  # userinfo read as the host by some parsers
    "http://2130706433/",
    "http://0x7f000001/",
    "http://0177.0.0.1/",
    "http://127.1/",
    "http://127.0.0.1./",
    "HTTP://LOCALHOST/",
    "http://[::1]:80/",
    "http://[::ffff:127.0.0.1]/",
    "http://[0:0:0:0:0:ffff:127.0.0.1]/",
    "http://[fd00:ec2::254]/latest/meta-data/",
    "http://[fe80::1%25eth0]/",
    "http://%31%32%37.0.0.1/",
    "http://metadata.google.internal/computeMetadata/v1/instance/",
    "http://metadata/computeMetadata/v1/",
    "http:\\\\127.0.0.1\\admin",
    "http:/127.0.0.1/",
    "http:127.0.0.1",
    "//127.0.0.1/x",
    "gopher://127.0.0.1:6379/_FLUSHALL",
    "redis://10.0.0.5:6379",
    "dict://localhost:11211/stat",
    "file://localhost/etc/passwd",
    "mongodb://db.example.com,10.0.0.2:27017/app",
    "ws://192.168.0.10/socket",
    "ftp://[::1]/",
    "http://127.0.0.1.nip.io/",
    "please fetch http://10.0.0.1:8080/internal and summarise",
    "connect to 10.0.0.1 now",
    "ssh to 192.168.1.20:22",
    "the box at 0177.0.0.1 is mine",
    "open [::1]:8080 please",
    "talk to localhost:3000",
    "http://127.0.0\n.1/",  # tabs and line breaks are removed by URL parsers
    "http://loc\talhost/",
    "http://\uff11\uff12\uff17\uff0e\uff10\uff0e\uff10\uff0e\uff11/",
]


@pytest.mark.parametrize("text", REFUSED_TEXT)
def test_hosts_in_text_are_found(text: str) -> None:
    assert refused_hosts(text), text


@pytest.mark.parametrize(
    "text",
    [
        "https://example.com/a?b=c",
        "the temperature is 10.5 degrees",
        "version 1.2.3.4 is out",
        "fetch the metadata of this file",
        "it happened at 12:30:00",
        "call me at 555-0100",
        "the value 2130706433 is a large number",
        "127 people attended",
        "see https://docs.python.org/3/library/ipaddress.html",
        "note: 127.1 is a score",
        "localhost-like naming is common",
    ],
)
def test_prose_and_public_urls_pass(text: str) -> None:
    assert refused_hosts(text) == []


def test_host_position_reads_every_form() -> None:
    assert refused_hosts("2130706433") == []
    assert refused_hosts("2130706433", host_position=True)
    assert refused_hosts("127.1:8080", host_position=True)
    assert refused_hosts("metadata", host_position=True)
    assert refused_hosts("127.1/admin", host_position=True)
    assert refused_hosts("example.com:443", host_position=True) == []


# ---- hypothesis: every encoding of a refused address is caught; public addresses pass ----------

REFUSED_V4 = [
    ipaddress.IPv4Network(n)
    for n in (
        "127.0.0.0/8",
        "10.0.0.0/8",
        "172.16.0.0/12",
        "192.168.0.0/16",
        "100.64.0.0/10",
        "169.254.0.0/16",
        "0.0.0.0/8",
    )
]


@st.composite
def refused_v4(draw: st.DrawFn) -> ipaddress.IPv4Address:
    net = draw(st.sampled_from(REFUSED_V4))
    return net[draw(st.integers(0, net.num_addresses - 1))]


def _part(draw: st.DrawFn, value: int) -> str:
    radix = draw(st.sampled_from(["dec", "oct", "hex", "HEX"]))
    if radix == "oct":
        return "0" * draw(st.integers(1, 3)) + format(value, "o")
    if radix == "hex":
        return "0x" + "0" * draw(st.integers(0, 2)) + format(value, "x")
    if radix == "HEX":
        return "0X" + format(value, "X")
    return str(value)


@st.composite
def ipv4_spelling(draw: st.DrawFn, address: ipaddress.IPv4Address) -> str:
    n = int(address)
    octets = list(address.packed)
    parts = draw(st.sampled_from([1, 2, 3, 4]))
    if parts == 1:
        values = [n]
    elif parts == 2:
        values = [octets[0], n & 0xFFFFFF]
    elif parts == 3:
        values = [octets[0], octets[1], n & 0xFFFF]
    else:
        values = octets
    return ".".join(_part(draw, v) for v in values)


@st.composite
def spelling(draw: st.DrawFn, address: ipaddress.IPv4Address) -> str:
    """One way of writing ``address`` as a URL host (v4 forms, IPv4-in-IPv6, encodings)."""
    form = draw(st.sampled_from(["v4", "mapped", "mapped-hex", "compat", "nat64", "6to4"]))
    n = int(address)
    if form == "v4":
        host = draw(ipv4_spelling(address))
        if draw(st.booleans()):
            host += "."
    elif form == "mapped":
        host = f"[::ffff:{address}]"
    elif form == "mapped-hex":
        host = f"[0:0:0:0:0:ffff:{n >> 16:x}:{n & 0xFFFF:x}]"
    elif form == "compat":
        host = f"[::{address}]" if n > 1 else f"[::ffff:{address}]"
    elif form == "nat64":
        host = f"[64:ff9b::{address}]"
    else:
        host = f"[2002:{n >> 16:x}:{n & 0xFFFF:x}::1]"
    if draw(st.booleans()):
        host = host.upper()
    if draw(st.booleans()) and not host.startswith("["):  # percent-encode some characters
        host = "".join(f"%{ord(c):02X}" if draw(st.booleans()) else c for c in host)
    return host


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_every_spelling_of_a_refused_ipv4_is_caught(data: st.DataObject) -> None:
    address = data.draw(refused_v4())
    host = data.draw(spelling(address))
    assert check_host(host) is not None, (host, address)
    userinfo = data.draw(st.sampled_from(["", "user@", "good.example.com@", "a:b@"]))
    port = data.draw(st.sampled_from(["", ":80", ":8080"]))
    url = f"http://{userinfo}{host}{port}/path?q=1"
    assert refused_hosts(url), url


def _is_public_v4(n: int) -> bool:
    address = ipaddress.IPv4Address(n)
    # The gateway refuses a little more than the standard library's "not global": all of 192.0.0.0/24
    # and the deprecated 6to4 relay anycast 192.88.99.0/24.
    return (
        address.is_global
        and not address.is_multicast
        and address not in ipaddress.IPv4Network("192.0.0.0/24")
        and address not in ipaddress.IPv4Network("192.88.99.0/24")
    )


@settings(max_examples=400, deadline=None)
@given(st.integers(0, 2**32 - 1).filter(_is_public_v4), st.data())
def test_random_public_ipv4_passes_in_every_spelling(n: int, data: st.DataObject) -> None:
    address = ipaddress.IPv4Address(n)
    assert classify_ip(address) is None
    assert check_host(str(address)) is None
    host = data.draw(ipv4_spelling(address))
    assert check_host(host) is None, host
    assert refused_hosts(f"http://{host}/") == []
    assert refused_hosts(f"connect to {address} now") == []


def _is_public_v6(n: int) -> bool:
    address = ipaddress.IPv6Address(n)
    return (
        address.is_global
        and address not in ipaddress.IPv6Network("2002::/16")
        and address not in ipaddress.IPv6Network("2001::/32")
    )


@settings(max_examples=300, deadline=None)
@given(st.integers(0x2000 << 112, (0x4000 << 112) - 1).filter(_is_public_v6))
def test_random_public_ipv6_passes(n: int) -> None:
    address = ipaddress.IPv6Address(n)
    assert classify_ip(address) is None
    assert check_host(f"[{address}]") is None
    assert refused_hosts(f"http://[{address.exploded}]:443/") == []


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**121 - 1))
def test_every_unique_local_ipv6_is_caught(low: int) -> None:
    address = ipaddress.IPv6Address((0xFC << 120) | low)
    verdict = check_host(f"[{address}]")
    assert verdict is not None and verdict.category in ("unique-local", "metadata")
    assert refused_hosts(f"https://[{address.exploded.upper()}]/")
