"""Opening a connection for the backend HTTP client: directly, through a proxy's CONNECT tunnel, or to
the proxy itself (plain http targets, which the pool then addresses in absolute form).

HTTPS through a proxy (RFC 9110 §9.3.6): ``CONNECT host:port`` on a TCP connection to the proxy, a
2xx answer, then TLS over the tunnel with SNI and the certificate check against the target's name.
Invariants:

- The caller bounds the whole opening (TCP to the proxy, the CONNECT exchange, the TLS handshake)
  with one timeout; the proxy's answer head is bounded in size (:data:`MAX_HEAD`).
- Every failure is a :class:`~gateway.upstreams.httpclient.ConnectError` whose text names the proxy
  without its credentials and the target; a TLS failure says what to configure. The transport of a
  failed opening is closed.
- ``Proxy-Authorization`` is written only on the CONNECT request (or, absolute form, on requests to
  the proxy), never logged.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from typing import TypeVar

from gateway.upstreams.egress import Proxy, Route

MAX_HEAD = 16 * 1024  # a CONNECT answer's status line and headers

P = TypeVar("P", bound=asyncio.Protocol)


class TunnelError(OSError):
    """The proxy could not be reached or refused the tunnel; the text is ready for an error message."""


class _ConnectAnswer(asyncio.Protocol):
    """Reads the proxy's answer to CONNECT: the head only (a 2xx has no body, RFC 9110 §9.3.6).

    ``head`` ends with the head's bytes, or with a str saying what went wrong instead: never with an
    exception, which asyncio would report as never retrieved when the opening was cancelled before
    anyone awaited it (create_connection closes the transport it made then)."""

    def __init__(self) -> None:
        self.head: asyncio.Future[bytes | str] = asyncio.get_running_loop().create_future()
        self._buffer = b""

    def data_received(self, data: bytes) -> None:
        if self.head.done():
            return
        self._buffer += data
        end = self._buffer.find(b"\r\n\r\n")
        if end >= 0:
            if end + 4 != len(self._buffer):
                self.head.set_result("sent data after its answer to CONNECT")
            else:
                self.head.set_result(self._buffer[:end])
        elif len(self._buffer) > MAX_HEAD:
            self.head.set_result(f"answered CONNECT with a head over {MAX_HEAD} bytes")

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.head.done():
            self.head.set_result("closed the connection before answering CONNECT")


def connect_request(proxy: Proxy, authority: str) -> bytes:
    auth = f"proxy-authorization: {proxy.authorization}\r\n" if proxy.authorization else ""
    return f"CONNECT {authority} HTTP/1.1\r\nhost: {authority}\r\n{auth}\r\n".encode("latin-1")


def _status(head: bytes) -> tuple[int, str]:
    line = head.split(b"\r\n", 1)[0].decode("latin-1")
    version, _, rest = line.partition(" ")
    code, _, reason = rest.partition(" ")
    if not version.startswith("HTTP/1.") or len(code) != 3 or not code.isdigit():
        raise TunnelError(f"answered CONNECT with no HTTP status line ({line[:60]!r})")
    return int(code), reason.strip()


_HINTS = {
    407: " (the proxy wants credentials: put user:password in the proxy URL, or check them)",
    403: " (the proxy's policy forbids this destination)",
}


async def open_connection(
    factory: Callable[[], P], host: str, port: int, route: Route, authority: str
) -> tuple[asyncio.BaseTransport, P]:
    """A connected ``factory()`` protocol toward ``host``:``port`` as ``route`` says; ``authority`` is
    ``host:port`` as written in CONNECT. The caller holds the timeout."""
    loop = asyncio.get_running_loop()
    proxy = route.proxy
    server_hostname = (route.server_hostname or host) if route.ssl is not None else None
    if proxy is None:
        try:
            return await loop.create_connection(factory, host, port, ssl=route.ssl, server_hostname=server_hostname)
        except ssl.SSLError as exc:
            raise TunnelError(tls_failure(exc, authority)) from None
    try:
        transport, answer = await loop.create_connection(_ConnectAnswer, proxy.host, proxy.port)
    except OSError as exc:
        raise TunnelError(f"cannot connect to proxy {proxy.display}: {exc.strerror or exc}") from None
    try:
        if route.ssl is None:
            # A plain http target: the proxy itself is the peer (requests in absolute form).
            protocol = factory()
            transport.set_protocol(protocol)
            protocol.connection_made(transport)
            return transport, protocol
        transport.write(connect_request(proxy, authority))
        head = await answer.head
        if isinstance(head, str):
            raise TunnelError(f"proxy {proxy.display} {head} (CONNECT to {authority})")
        status, reason = _status(head)
        if not 200 <= status < 300:
            raise TunnelError(
                f"proxy {proxy.display} refused CONNECT to {authority}: {status} {reason}{_HINTS.get(status, '')}"
            )
        protocol = factory()
        try:
            tls = await loop.start_tls(
                transport,
                protocol,
                route.ssl,
                server_hostname=server_hostname,
            )
        except ssl.SSLError as exc:
            raise TunnelError(tls_failure(exc, authority) + f" (through proxy {proxy.display})") from None
        if tls is None:
            raise TunnelError(f"TLS over the tunnel of proxy {proxy.display} to {authority} failed")
        protocol.connection_made(tls)
        return tls, protocol
    except BaseException:
        transport.close()
        raise


def tls_failure(exc: ssl.SSLError, authority: str) -> str:
    """What went wrong in a TLS handshake with ``authority``, and what to configure."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        why = exc.verify_message or exc.reason or "certificate verify failed"
        return (
            f"TLS: the certificate of {authority} is not trusted ({why}); name its CA in tls.ca_file, or set "
            "tls.server_name when the certificate is for another name"
        )
    return tls_alert(exc, f"TLS handshake with {authority} failed")


def tls_alert(exc: ssl.SSLError, prefix: str) -> str:
    reason = str(exc.reason or exc)
    hint = ""
    if "CERTIFICATE_REQUIRED" in reason or "HANDSHAKE_FAILURE" in reason:
        hint = " (the server may require a client certificate: tls.cert_file and tls.key_file)"
    elif "UNKNOWN_CA" in reason or "BAD_CERTIFICATE" in reason:
        hint = " (the server does not accept the client certificate in tls.cert_file)"
    return f"{prefix}: {reason}{hint}"


def reset_hint(client_cert: bool) -> str:
    """What to say when a new TLS connection is closed before any answer. TLS 1.3 checks a client
    certificate after the handshake: a server that wants one and got none often just resets the
    connection, and the alert saying why is lost."""
    if client_cert:
        return (
            " (the backend closed a new TLS connection without answering: does it accept the client certificate "
            "in tls.cert_file?)"
        )
    return (
        " (the backend closed a new TLS connection without answering: if it requires a client certificate, set "
        "tls.cert_file and tls.key_file)"
    )
