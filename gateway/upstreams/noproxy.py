"""``NO_PROXY``: which hosts are reached directly although a proxy is configured.

There is no standard; this follows curl (CURLOPT_NOPROXY, the informal reference) with what requests and
Go add, so that a value written for those tools means the same here:

- A comma-separated list; whitespace around entries is ignored; matching is case-insensitive.
- ``*`` alone matches every host.
- A name matches itself and every subdomain: ``example.com`` and ``.example.com`` (and ``*.example.com``,
  as Go reads it) all match ``example.com`` and ``api.example.com``, never ``badexample.com``.
  A trailing dot (a fully qualified name) is ignored on both sides.
- An IP address matches that address (IPv6 with or without brackets, in any spelling); a CIDR range
  (``10.0.0.0/8``, ``fd00::/8``, curl ≥ 7.86) matches the addresses in it. Names are not resolved:
  ``127.0.0.1`` does not exempt ``localhost``.
- ``host:port`` (``[v6]:port``) matches that host on that port only (requests; curl ignores the port).
- Nothing is exempt implicitly, not even ``localhost`` or loopback addresses (curl and requests; Go
  differs), so that an egress proxy sees every connection unless the operator says otherwise.

Entries that are none of these (``10.0.0.0/99``) are kept in :attr:`NoProxy.ignored` for a warning.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

_IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
_IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True, slots=True)
class NoProxy:
    everything: bool = False
    names: tuple[tuple[str, int | None], ...] = ()  # (domain without leading dot, port or None)
    addresses: tuple[tuple[_IpAddress, int | None], ...] = ()
    networks: tuple[_IpNetwork, ...] = ()
    ignored: tuple[str, ...] = field(default=())

    @classmethod
    def parse(cls, text: str | None) -> NoProxy:
        if not text:
            return cls()
        names: list[tuple[str, int | None]] = []
        addresses: list[tuple[_IpAddress, int | None]] = []
        networks: list[_IpNetwork] = []
        ignored: list[str] = []
        everything = False
        for raw in text.split(","):
            entry = raw.strip().lower()
            if not entry:
                continue
            if entry == "*":
                everything = True
                continue
            if "/" in entry:
                try:
                    networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
                except ValueError:
                    ignored.append(raw.strip())
                continue
            host, port = _split_port(entry)
            if port == -1:
                ignored.append(raw.strip())
                continue
            address = _ip(host)
            if address is not None:
                addresses.append((address, port))
                continue
            name = host.rstrip(".")
            name = name[2:] if name.startswith("*.") else name.lstrip(".")
            if not name or "*" in name:
                ignored.append(raw.strip())
                continue
            names.append((name, port))
        return cls(everything, tuple(names), tuple(addresses), tuple(networks), tuple(ignored))

    def matches(self, host: str, port: int) -> bool:
        """True when a connection to ``host``:``port`` bypasses the proxy."""
        if self.everything:
            return True
        host = host.lower().strip("[]").rstrip(".")
        address = _ip(host)
        if address is not None:
            for entry, entry_port in self.addresses:
                if entry == address and entry_port in (None, port):
                    return True
            return any(address.version == net.version and address in net for net in self.networks)
        for name, entry_port in self.names:
            if entry_port not in (None, port):
                continue
            if host == name or host.endswith("." + name):
                return True
        return False


def _split_port(entry: str) -> tuple[str, int | None]:
    """``host``, ``host:port``, ``[v6]``, ``[v6]:port`` or a bare IPv6 address; port -1: malformed."""
    if entry.startswith("["):
        host, _, rest = entry[1:].partition("]")
        if not rest:
            return host, None
        return host, _port(rest[1:]) if rest.startswith(":") else -1
    if entry.count(":") == 1:
        host, _, port = entry.partition(":")
        return host, _port(port)
    return entry, None  # a name, or a bare IPv6 address (curl's spelling: no brackets, no port)


def _port(text: str) -> int:
    return int(text) if text.isdigit() and 0 < int(text) < 65536 else -1


def _ip(text: str) -> _IpAddress | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None
