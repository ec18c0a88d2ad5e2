"""TLS for tests: a CA, a server certificate and a client certificate minted with ``cryptography``, and a
tiny MCP backend (raw ASGI, JSON answers) served by uvicorn over TLS on 127.0.0.1.

Everything is made fresh per test in a temporary directory (EC P-256 keys: milliseconds). The server
certificate names ``localhost`` and ``127.0.0.1``; the client certificate is for ``gateway``; a second
CA (``other_ca_file``) signed nothing the servers use, so trusting it alone must fail.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ipaddress
import socket
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import uvicorn
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.raw_asgi import read_body, respond

_DAY = datetime.timedelta(days=1)


@dataclass(frozen=True, slots=True)
class Pki:
    ca_file: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca_file: Path
    client_combined: Path  # the client certificate and its key in one PEM file

    def server_context(self, require_client_cert: bool = False) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.server_cert, self.server_key)
        if require_client_cert:
            context.load_verify_locations(self.ca_file)
            context.verify_mode = ssl.CERT_REQUIRED
        return context


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _ca(common: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common))
        .issuer_name(_name(common))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _DAY)
        .not_valid_after(now + _DAY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )  # key_cert_sign, crl_sign
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def _leaf(
    common: str, ca: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey, server: bool
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _DAY)
        .not_valid_after(now + _DAY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]),
            critical=False,
        )
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
    )
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
    return builder.sign(ca_key, hashes.SHA256()), key


def make_pki(directory: Path) -> Pki:
    """A CA, a server and a client certificate signed by it, and an unrelated CA, as PEM files in ``directory``."""
    ca, ca_key = _ca("Switchboard test CA")
    other, _ = _ca("Some other CA")
    server, server_key = _leaf("localhost", ca, ca_key, server=True)
    client, client_key = _leaf("gateway", ca, ca_key, server=False)
    pem = serialization.Encoding.PEM
    files = {
        "ca.pem": ca.public_bytes(pem),
        "other-ca.pem": other.public_bytes(pem),
        "server.pem": server.public_bytes(pem),
        "server.key": _pem_key(server_key),
        "client.pem": client.public_bytes(pem),
        "client.key": _pem_key(client_key),
        "client-combined.pem": client.public_bytes(pem) + _pem_key(client_key),
    }
    for name, data in files.items():
        (directory / name).write_bytes(data)
    return Pki(
        directory / "ca.pem",
        directory / "server.pem",
        directory / "server.key",
        directory / "client.pem",
        directory / "client.key",
        directory / "other-ca.pem",
        directory / "client-combined.pem",
    )


@dataclass
class TinyMcp:
    """A legacy-era MCP server over Streamable HTTP with JSON answers: ``initialize``, ``tools/list`` (one
    tool, ``echo``) and ``tools/call``; records every request's (method, path, host header)."""

    seen: list[tuple[str, str, str]] = field(default_factory=list)
    redirect_to: str | None = None  # answer every POST with 307 to this URL instead

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        headers = dict(scope["headers"])
        body = await read_body(receive)
        self.seen.append((scope["method"], scope["path"], headers.get(b"host", b"").decode()))
        if self.redirect_to is not None:
            await respond(send, 307, b"", [(b"location", self.redirect_to.encode())])
            return
        if scope["method"] != "POST":
            await respond(send, 405, b"")
            return
        message = orjson.loads(body)
        method, rpc_id = message.get("method"), message.get("id")
        if rpc_id is None:
            await respond(send, 202, b"")
            return
        if method == "initialize":
            result: Any = {
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "tiny", "version": "1"},
            }
        elif method == "tools/list":
            result = {"tools": [{"name": "echo", "inputSchema": {"type": "object"}}]}
        elif method == "tools/call":
            text = orjson.dumps(message["params"].get("arguments", {})).decode()
            result = {"content": [{"type": "text", "text": text}]}
        else:
            error = {"code": -32601, "message": f"no method {method}"}
            await respond(send, 200, orjson.dumps({"jsonrpc": "2.0", "id": rpc_id, "error": error}))
            return
        await respond(send, 200, orjson.dumps({"jsonrpc": "2.0", "id": rpc_id, "result": result}))


@contextlib.asynccontextmanager
async def serve(app: Any, context: ssl.SSLContext | None = None, path: str = "/mcp") -> AsyncIterator[str]:
    """``app`` under uvicorn on 127.0.0.1 (TLS with ``context``) in this loop; yields its URL; stops it."""
    sock = socket.create_server(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        app,
        log_level="critical",
        lifespan="off",
        timeout_graceful_shutdown=2,  # a stream still open when the test ends is cut, not waited for
        ssl_context_factory=(lambda _config, _default: context) if context is not None else None,
    )
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        async with asyncio.timeout(10):
            while not server.started:  # noqa: ASYNC110  # uvicorn has no started event
                await asyncio.sleep(0.01)
        yield f"{'https' if context else 'http'}://127.0.0.1:{port}{path}"
    finally:
        server.should_exit = True
        with contextlib.suppress(Exception):
            async with asyncio.timeout(10):
                await serving
        sock.close()
