"""Host and IP normalisation for MGP's ``network_restricted`` validator (MGP §4.5), without DNS.

The question this module answers: *does this host text, read the way any plausible client library
would read it, name a place a tool must not be sent to?* Places refused: loopback, "this host"
(0.0.0.0/8, ``::``), RFC 1918 private ranges, CGNAT (100.64.0.0/10), link-local (169.254.0.0/16,
fe80::/10), unique-local (fc00::/7) and site-local IPv6, multicast, reserved and documentation ranges,
and the cloud metadata endpoints (169.254.169.254, 169.254.170.2, 100.100.100.200, 192.0.0.192,
fd00:ec2::254 and the metadata host names).

Invariants:

- **Every reading is checked.** IPv4 text is read as ``inet_aton`` reads it (1 to 4 parts, each
  decimal, octal with a leading ``0`` or hex with ``0x``; the last part fills the remaining bytes),
  so ``2130706433``, ``0x7f000001``, ``0177.0.0.1`` and ``127.1`` are all 127.0.0.1. IPv6 that embeds an
  IPv4 address (IPv4-mapped ``::ffff:a.b.c.d``, IPv4-compatible ``::a.b.c.d``, NAT64 ``64:ff9b::/96``,
  6to4 ``2002::/16``, Teredo) is judged by the address it embeds as well as by itself.
- **Host text is normalised first**: percent-decoding (repeated, so double encoding does not hide a
  host), Unicode NFKC with the ideographic full stops mapped to ``.`` (what IDNA/UTS 46 does, so
  fullwidth digits and dots are ASCII ones), lower case, brackets, an IPv6 zone id (``%eth0``) and
  trailing dots removed; a host is cut at a NUL or control character, where a C resolver stops.
- **Every parser's reading of a URL**: the host after the last ``@``, and each userinfo piece as a
  host too (parsers disagree on where userinfo ends); ``\\`` read as ``/``; special schemes with one
  slash or none (``http:127.0.0.1``); scheme-relative ``//host``; several hosts (``mongodb://a,b``).
- **Errs towards refusing**: IPv4-mapped addresses are refused even when the mapped address is public
  (``::ffff:0:0/96`` is reserved), and documentation, benchmarking and 6to4-relay ranges are refused
  although ``ipaddress`` calls a few of them global.
- What a redirect from a public URL leads to is beyond a validator of arguments.
- **No DNS lookups.** A name other than the known local and metadata names passes: the gateway
  cannot know where a name points without resolving it, and resolving it here would not help, because
  the backend resolves it again later (DNS rebinding makes the two answers differ at will). Names
  are refused only when they are local by definition (``localhost`` and ``*.localhost`` (RFC 6761),
  ``*.local`` (mDNS), ``*.internal`` (ICANN private use), ``*.home.arpa`` (RFC 8375)), known
  metadata names, publicly known loopback names (``localtest.me``, ``lvh.me``...), or wildcard-DNS
  names that spell a refused address (``127.0.0.1.nip.io``, ``10-0-0-1.sslip.io``). Enforcement
  for other names belongs to the backend's egress policy.

Pure functions, standard library only.
"""

from __future__ import annotations

import ipaddress
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import unquote

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# ---- refused networks, most specific first (the first match names the reason) ------------------

METADATA_ADDRESSES: frozenset[IPAddress] = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",  # AWS, GCP, Azure, OCI, DigitalOcean, OpenStack... instance metadata
        "169.254.170.2",  # AWS ECS task metadata
        "100.100.100.200",  # Alibaba Cloud
        "192.0.0.192",  # Oracle Cloud (classic)
        "fd00:ec2::254",  # AWS IMDS over IPv6
    )
)

_V4_BLOCKED: tuple[tuple[ipaddress.IPv4Network, str], ...] = tuple(
    (ipaddress.IPv4Network(net), label)
    for net, label in (
        ("0.0.0.0/8", "unspecified"),
        ("10.0.0.0/8", "private"),
        ("100.64.0.0/10", "cgnat"),
        ("127.0.0.0/8", "loopback"),
        ("169.254.0.0/16", "link-local"),
        ("172.16.0.0/12", "private"),
        ("192.0.0.0/24", "reserved"),
        ("192.0.2.0/24", "reserved"),
        ("192.88.99.0/24", "reserved"),
        ("192.168.0.0/16", "private"),
        ("198.18.0.0/15", "reserved"),
        ("198.51.100.0/24", "reserved"),
        ("203.0.113.0/24", "reserved"),
        ("224.0.0.0/4", "multicast"),
        ("240.0.0.0/4", "reserved"),  # includes 255.255.255.255
    )
)

_V6_BLOCKED: tuple[tuple[ipaddress.IPv6Network, str], ...] = tuple(
    (ipaddress.IPv6Network(net), label)
    for net, label in (
        ("::/128", "unspecified"),
        ("::1/128", "loopback"),
        ("::/96", "reserved"),  # IPv4-compatible (deprecated); the embedded address is judged too
        ("::ffff:0:0/96", "reserved"),  # only reached when the mapped address itself passes
        ("64:ff9b:1::/48", "private"),  # local-use NAT64 (RFC 8215)
        ("100::/64", "reserved"),  # discard-only
        ("2001:db8::/32", "reserved"),  # documentation
        ("2001:10::/28", "reserved"),  # ORCHID
        ("fc00::/7", "unique-local"),
        ("fe80::/10", "link-local"),
        ("fec0::/10", "site-local"),
        ("ff00::/8", "multicast"),
    )
)

_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_6TO4 = ipaddress.IPv6Network("2002::/16")
_V4_MAPPED = ipaddress.IPv6Network("::ffff:0:0/96")
_V4_COMPAT = ipaddress.IPv6Network("::/96")

# ---- refused names -----------------------------------------------------------------------------

LOCAL_NAMES = frozenset(
    {
        "localhost",
        "localhost.localdomain",
        "ip6-localhost",
        "ip6-loopback",
        "localtest.me",  # public DNS names that resolve to 127.0.0.1
        "lvh.me",
        "vcap.me",
    }
)
LOOPBACK_SUFFIXES = (".localhost", ".localtest.me", ".lvh.me", ".vcap.me")
# Names local by definition: mDNS (RFC 6762), ICANN's private-use TLD, the home network (RFC 8375).
PRIVATE_SUFFIXES = ((".local", "link-local"), (".internal", "private"), (".home.arpa", "private"))
METADATA_NAMES = frozenset(
    {
        "metadata",
        "metadata.google.internal",
        "metadata.goog",
        "instance-data",
        "instance-data.ec2.internal",
        "metadata.azure.com",
        "metadata.tencentyun.com",
    }
)
# Wildcard DNS services: NAME.<ip>.nip.io resolves to <ip>; the address is in the name.
WILDCARD_DNS_SUFFIXES = (".nip.io", ".sslip.io", ".xip.io", ".traefik.me")

_IDEOGRAPHIC_STOPS = str.maketrans({"\u3002": ".", "\uff0e": ".", "\uff61": "."})
_HEX_PART = re.compile(r"0x[0-9a-f]*\Z")
_OCT_PART = re.compile(r"0[0-7]*\Z")
_DEC_PART = re.compile(r"[1-9][0-9]*\Z")


@dataclass(frozen=True, slots=True)
class HostVerdict:
    """Why a host is refused: ``category`` (loopback, private, metadata...) and the address or name."""

    host: str
    category: str
    address: str | None = None

    @property
    def reason(self) -> str:
        where = f" ({self.address})" if self.address and self.address != self.host else ""
        host = self.host if len(self.host) <= 64 else self.host[:64] + "..."
        return f"host {host!r}{where} is {_ARTICLE.get(self.category, 'a')} {self.category} destination"


_ARTICLE = {"unspecified": "an", "unique-local": "a", "metadata": "a cloud"}


def normalise_host(host: str) -> str:
    """The host as a resolver would see it: percent-decoded, NFKC, lower case, no brackets, zone or
    trailing dots."""
    text = host
    for _ in range(4):  # %2531 -> %31 -> 1: decode until stable (bounded)
        decoded = unquote(text) if "%" in text else text
        if decoded == text:
            break
        text = decoded
    text = unicodedata.normalize("NFKC", text).translate(_IDEOGRAPHIC_STOPS).strip().lower()
    if text.startswith("[") and "]" in text:
        text = text[1 : text.index("]")]
    if "%" in text and ":" in text:  # IPv6 zone id (fe80::1%eth0)
        text = text.split("%", 1)[0]
    return text.rstrip(".")


def parse_ipv4(text: str, *, min_parts: int = 1) -> ipaddress.IPv4Address | None:
    """``text`` read as ``inet_aton`` reads it, or None. ``min_parts`` above 1 refuses the short forms
    (``2130706433``, ``127.1``), for free text, where a bare number is more likely a number than a host."""
    parts = text.split(".")
    if not max(1, min_parts) <= len(parts) <= 4:
        return None
    values: list[int] = []
    for part in parts:
        if _HEX_PART.match(part):
            values.append(int(part[2:] or "0", 16))
        elif _OCT_PART.match(part):
            values.append(int(part, 8))
        elif _DEC_PART.match(part):
            values.append(int(part))
        else:
            return None
    *head, last = values
    if any(v > 255 for v in head) or last >= 1 << (8 * (5 - len(values))):
        return None
    number = last
    for index, value in enumerate(head):
        number |= value << (8 * (3 - index))
    return ipaddress.IPv4Address(number)


def parse_ip(host: str, *, min_parts: int = 1) -> IPAddress | None:
    """A normalised host read as an IP address (any IPv4 form, or IPv6), or None for a name."""
    if ":" in host:
        try:
            return ipaddress.IPv6Address(host)
        except ValueError:
            return None
    return parse_ipv4(host, min_parts=min_parts)


def _embedded_ipv4(address: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    found: list[ipaddress.IPv4Address] = []
    number = int(address)
    if address in _V4_MAPPED or address in _NAT64:
        found.append(ipaddress.IPv4Address(number & 0xFFFFFFFF))
    elif address in _V4_COMPAT and number > 1:
        found.append(ipaddress.IPv4Address(number))
    if address in _6TO4:
        found.append(ipaddress.IPv4Address((number >> 80) & 0xFFFFFFFF))
    if address.teredo is not None:
        found.extend(address.teredo)
    return found


def classify_ip(address: IPAddress) -> str | None:
    """The refused category of an address (``metadata``, ``loopback``, ``private``...), or None."""
    if address in METADATA_ADDRESSES:
        return "metadata"
    if isinstance(address, ipaddress.IPv6Address):
        for embedded in _embedded_ipv4(address):
            category = classify_ip(embedded)
            if category is not None:
                return category
        for net6, label in _V6_BLOCKED:
            if address in net6:
                return label
        return None
    for net4, label in _V4_BLOCKED:
        if address in net4:
            return label
    return None


def _wildcard_dns_address(host: str) -> IPAddress | None:
    for suffix in WILDCARD_DNS_SUFFIXES:
        if host.endswith(suffix):
            labels = host[: -len(suffix)].split(".")
            candidates = [".".join(labels[-4:])]
            candidates += [".".join(label.split("-")[-4:]) for label in labels]
            candidates += [f"0x{label}" for label in labels if re.fullmatch(r"[0-9a-f]{8}", label)]
            for candidate in candidates:
                address = parse_ipv4(candidate, min_parts=1 if candidate.startswith("0x") else 4)
                if address is not None and classify_ip(address) is not None:
                    return address
    return None


def check_host(
    host: str,
    *,
    min_parts: int = 1,
    bare_names: bool = True,
    allowed: Iterable[str] = (),
    blocked: Iterable[str] = (),
) -> HostVerdict | None:
    """Why ``host`` (a URL authority's host, or a bare host) is refused, or None when it may be used.

    ``min_parts`` and ``bare_names=False`` are for hosts found in free text: short IPv4 forms and
    dotless names other than ``localhost`` (``metadata`` is also a word) are then not hosts.
    ``allowed`` are operator exceptions (names, addresses or CIDR networks) that win over every rule;
    ``blocked`` are further names refused (exact, or ``.suffix``).
    """
    # A resolver written in C stops at a NUL or control character (``localhost%00.evil.example``).
    name = re.split(r"[\x00-\x1f\x7f\s]", normalise_host(host), maxsplit=1)[0].rstrip(".")
    if not name:
        return None
    address = parse_ip(name, min_parts=min_parts)
    if address is None and not bare_names and "." not in name and name != "localhost":
        return None
    if _allowed(name, address, allowed):
        return None
    if address is not None:
        category = classify_ip(address)
        return HostVerdict(host, category, str(address)) if category is not None else None
    for entry in blocked:
        entry = normalise_host(entry)
        if entry and (name == entry or (entry.startswith(".") and name.endswith(entry))):
            return HostVerdict(host, "blocked")
    if name in METADATA_NAMES:
        return HostVerdict(host, "metadata")
    if name in LOCAL_NAMES or name.endswith(LOOPBACK_SUFFIXES):
        return HostVerdict(host, "loopback")
    for suffix, category in PRIVATE_SUFFIXES:
        if name.endswith(suffix):
            return HostVerdict(host, category)
    embedded = _wildcard_dns_address(name)
    if embedded is not None:
        category = classify_ip(embedded)
        if category is not None:
            return HostVerdict(host, category, str(embedded))
    return None


def _allowed(name: str, address: IPAddress | None, allowed: Iterable[str]) -> bool:
    for entry in allowed:
        entry = entry.strip().lower()
        if "/" in entry and address is not None:
            try:
                if address in ipaddress.ip_network(entry, strict=False):
                    return True
            except ValueError:
                continue
        elif address is not None:
            other = parse_ip(normalise_host(entry))
            if other is not None and other == address:
                return True
        elif normalise_host(entry) == name:
            return True
    return False


# ---- finding hosts in text ----------------------------------------------------------------------

_STOP = r"/\\?#\s\"'<>`"
# Any scheme followed by two or more slashes (either direction: WHATWG reads ``\`` as ``/``).
_URL_SLASHES = re.compile(rf"(?<![a-z0-9+.-])([a-z][a-z0-9+.-]*+):[/\\]{{2,}}([^{_STOP}]*)", re.IGNORECASE)
# Special schemes, which parsers accept with one slash or none (``http:127.0.0.1``).
_URL_SPECIAL = re.compile(
    rf"\b(?:https?|wss?|ftps?|sftp|tftp|gopher|dict|ldaps?|smb|file|redis|rediss|mysql|postgres(?:ql)?|"
    rf"mongodb(?:\+srv)?|amqps?|mqtt|telnet|ssh|jdbc:[a-z0-9]+):[/\\]?([^{_STOP}]*)",
    re.IGNORECASE,
)
_SCHEME_RELATIVE = re.compile(rf"(?:^|[\s\"'(=,])[/\\]{{2}}([^{_STOP}]+)")
_TOKEN_SPLIT = re.compile(r"[\s,;()<>\"'`|&{}]+")


def split_authority(authority: str) -> tuple[list[str], list[str]]:
    """(hosts, userinfo parts) of a URL authority, ports removed. Several hosts (``mongodb://a,b``)
    are all returned; the userinfo is returned too, because parsers disagree about where it ends."""
    *userinfo, hostport = authority.split("@")
    hosts = [_strip_port(_HOST_END.split(part, maxsplit=1)[0]) for part in hostport.split(",")]
    users = [piece for info in userinfo for piece in info.split(":") if piece]
    return [h for h in hosts if h], users


# Characters no host contains: a parser stops the host there (``jar:http://127.0.0.1!/``).
_HOST_END = re.compile(r"[!$&'()*+;=<>\"{}|^`]")


def _strip_port(hostport: str) -> str:
    hostport = hostport.strip()
    if hostport.startswith("["):
        end = hostport.find("]")
        return hostport[: end + 1] if end >= 0 else hostport
    if ":" in hostport:
        try:
            ipaddress.IPv6Address(normalise_host(hostport))
        except ValueError:
            return hostport.split(":", 1)[0]  # host:port, or host:port:junk
    return hostport


def refused_hosts(
    text: str,
    *,
    host_position: bool = False,
    short_forms: bool = True,
    allowed: Iterable[str] = (),
    blocked: Iterable[str] = (),
) -> list[HostVerdict]:
    """Every refused host in ``text``: in URLs (any reading of the authority), as the whole value
    when ``host_position`` (the value of a ``host``/``url``-like argument: every IPv4 form), and as
    bare tokens of free text (full dotted IPv4 in any radix, IPv6, dotted local or metadata names).
    ``short_forms=False`` refuses to read a whole value without a dot as a number-address (for keys
    such as ``target``, where ``"3"`` is more likely a count than 0.0.0.3).
    Tabs and line breaks are also removed and the text read again, as URL parsers do, and a
    percent-encoded text is also read decoded (a URL handed on in a query string)."""
    found: list[HostVerdict] = []
    seen: set[tuple[str, int, bool]] = set()

    def check(host: str, min_parts: int, bare_names: bool) -> None:
        key = (host, min_parts, bare_names)
        if not host or key in seen:
            return
        seen.add(key)
        verdict = check_host(host, min_parts=min_parts, bare_names=bare_names, allowed=allowed, blocked=blocked)
        if verdict is not None and all(v.host != verdict.host for v in found):
            found.append(verdict)

    def authority(value: str, users_too: bool, min_parts: int = 1) -> None:
        hosts, users = split_authority(value)
        for host in hosts:
            check(host, min_parts, True)
        if users_too:
            for user in users:
                check(user, 4, False)

    readings = [text]
    squeezed = re.sub(r"[\t\r\n]", "", text)
    if squeezed != text:
        readings.append(squeezed)
    if "%" in text:  # a URL handed on percent-encoded (``?next=http%3A%2F%2F127.0.0.1``) is decoded later
        decoded = unquote(unquote(text))
        if decoded != text:
            readings.append(decoded)
    for reading in readings:
        for match in _URL_SLASHES.finditer(reading):
            authority(match.group(2), True)
        for match in _URL_SPECIAL.finditer(reading):
            authority(match.group(1), True)
        for match in _SCHEME_RELATIVE.finditer(reading):
            authority(match.group(1), True)
        if host_position:
            whole = re.split(r"[/\\?#]", reading.strip(), maxsplit=1)[0]
            if whole and not any(c.isspace() for c in whole):
                authority(whole, False, 1 if short_forms else 2)
        for token in _TOKEN_SPLIT.split(reading):
            token = token.strip(".,:;!?[]") if not token.startswith("[") else token
            if not token or "://" in token:
                continue
            head = re.split(r"[/\\?#]", token, maxsplit=1)[0]
            hosts, _ = split_authority(head)
            for host in hosts:
                check(host, 4, False)
    return found
