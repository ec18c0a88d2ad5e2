"""Reaching Redis the ways deployments do, each against a real server: TLS (``rediss://``, with a CA
file, a client certificate, or no verification), passwords (in the URL, with a user, in a file) and
Sentinel (``redis+sentinel://``, following a failover). Certificates are made here with
``cryptography``; the config section (``bus:``) builds the same buses."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ipaddress
import logging
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from pydantic import ValidationError

from gateway.bus.configured import bus_from_config
from gateway.bus.redis import RedisBus
from gateway.bus.redis_urls import RedisOptions, parse_sentinel_url, redact
from gateway.config import BusConfig
from tests.gateway.bus.test_redis_faults import BINARY, RedisProcess, needs_redis, started, until
from tests.support import free_port

pytestmark = pytest.mark.timeout(90)


# ---- URL parsing ------------------------------------------------------------------------------------


def test_sentinel_urls() -> None:
    url = parse_sentinel_url("redis+sentinel://:s3cret@10.0.0.1:26380,sentinel-b,[::1]:26390/mymaster/2")
    assert url.hosts == (("10.0.0.1", 26380), ("sentinel-b", 26379), ("::1", 26390))
    assert (url.service, url.db, url.username, url.password, url.tls) == ("mymaster", 2, None, "s3cret", False)
    url = parse_sentinel_url("rediss+sentinel://app:p%40ss@h:1/svc?sentinel_password=x&sentinel_username=s")
    assert (url.username, url.password, url.db, url.tls) == ("app", "p@ss", 0, True)
    assert (url.sentinel_username, url.sentinel_password) == ("s", "x")
    for bad in (
        "redis+sentinel://h:1",  # no service
        "redis+sentinel://h:1/svc/zero",
        "redis+sentinel://h:port/svc",
        "redis+sentinel://h:1/svc?retries=3",
        "redis://h:1/svc",
    ):
        with pytest.raises(ValueError):
            parse_sentinel_url(bad)


def test_redact_drops_credentials_and_query() -> None:
    assert redact("redis://user:pw@host:6379/0") == "redis://host:6379/0"
    assert redact("rediss://:pw@host/1?password=x") == "rediss://host/1"
    assert redact("redis+sentinel://:pw@a:1,b:2/m/0?sentinel_password=y") == "redis+sentinel://a:1,b:2/m/0"


def test_bus_config_checks_tls_options() -> None:
    assert BusConfig().tls_verify is True
    assert type(bus_from_config(BusConfig())).__name__ == "MemoryBus"
    with pytest.raises(ValidationError, match="rediss://"):
        BusConfig.model_validate({"kind": "redis", "url": "redis://h/0", "tls_ca_file": "/ca.pem"})
    with pytest.raises(ValidationError, match="go together"):
        BusConfig.model_validate({"kind": "redis", "url": "rediss://h/0", "tls_cert_file": "/c.pem"})
    with pytest.raises(ValueError, match="not both"):
        RedisBus("redis://:pw@h/0", options=RedisOptions(password_file="/pw"))


# ---- TLS ----------------------------------------------------------------------------------------------


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _cert(
    subject: str, key: ec.EllipticCurvePrivateKey, issuer: tuple[str, ec.EllipticCurvePrivateKey] | None, ca: bool
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    issuer_name, signer = (_name(issuer[0]), issuer[1]) if issuer else (_name(subject), key)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if not ca:
        sans = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(signer, hashes.SHA256())


def _write(path: Path, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> tuple[str, str]:
    cert_file, key_file = path.with_suffix(".crt"), path.with_suffix(".key")
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return str(cert_file), str(key_file)


class Pki:
    """A CA, a server certificate for 127.0.0.1/localhost, and a client certificate, on disk."""

    def __init__(self, directory: Path) -> None:
        ca_key, server_key, client_key = (ec.generate_private_key(ec.SECP256R1()) for _ in range(3))
        ca = _cert("switchboard test CA", ca_key, None, ca=True)
        self.ca_file, _ = _write(directory / "ca", ca, ca_key)
        issuer = ("switchboard test CA", ca_key)
        self.server_cert, self.server_key = _write(
            directory / "server", _cert("127.0.0.1", server_key, issuer, False), server_key
        )
        self.client_cert, self.client_key = _write(
            directory / "client", _cert("gateway", client_key, issuer, False), client_key
        )


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


@contextlib.asynccontextmanager
async def tls_redis(pki: Pki, clients: str) -> AsyncIterator[str]:
    """A redis-server speaking only TLS; ``clients`` is its tls-auth-clients (yes: a client certificate is
    required). Yields its rediss:// URL."""
    tls = ("--tls-cert-file", pki.server_cert, "--tls-key-file", pki.server_key, "--tls-ca-cert-file", pki.ca_file)
    server = RedisProcess(*tls, "--tls-auth-clients", clients, tls=True)
    try:
        await server.start()
    except Exception as exc:  # a redis-server built without TLS exits at once
        await server.stop()
        pytest.skip(f"this redis-server does not speak TLS ({exc})")
    try:
        yield f"rediss://127.0.0.1:{server.port}/0"
    finally:
        await server.stop()


async def works(bus: RedisBus) -> None:
    assert bus.healthy, bus.problem
    key = uuid.uuid4().hex
    assert await bus.set(key, b"v", ttl_s=30)
    assert await bus.get(key) == b"v"
    assert await bus.incr(key + ":n") == 1


@needs_redis
async def test_tls_verified_against_a_ca_file(pki: Pki) -> None:
    async with tls_redis(pki, "no") as url:
        async with started(RedisBus(url, options=RedisOptions(tls_ca_file=pki.ca_file))) as bus:
            await works(bus)
        async with started(
            RedisBus(url.replace("127.0.0.1", "localhost"), options=RedisOptions(tls_ca_file=pki.ca_file))
        ) as bus:
            await works(bus)
        # The system's CAs do not know the test CA: refused, and /readyz would say why.
        async with started(RedisBus(url)) as bus:
            assert not bus.healthy and bus.problem and "certificate verify failed" in bus.problem
        async with started(RedisBus(url, options=RedisOptions(tls_verify=False))) as bus:
            await works(bus)


@needs_redis
async def test_tls_with_a_client_certificate(pki: Pki) -> None:
    async with tls_redis(pki, "yes") as url:
        with_cert = RedisOptions(tls_ca_file=pki.ca_file, tls_cert_file=pki.client_cert, tls_key_file=pki.client_key)
        async with started(RedisBus(url, options=with_cert)) as bus:
            await works(bus)
        async with started(RedisBus(url, options=RedisOptions(tls_ca_file=pki.ca_file))) as bus:
            assert not bus.healthy, "the server wants a client certificate"
        config = BusConfig.model_validate(
            {
                "kind": "redis",
                "url": url,
                "tls_ca_file": pki.ca_file,
                "tls_cert_file": pki.client_cert,
                "tls_key_file": pki.client_key,
            }
        )
        configured = bus_from_config(config)
        assert isinstance(configured, RedisBus)
        async with started(configured) as bus:
            await works(bus)


# ---- passwords ------------------------------------------------------------------------------------------


@needs_redis
async def test_passwords_in_the_url_with_a_user_and_in_a_file(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="gateway.bus")
    server = RedisProcess("--requirepass", "default-pw", "--user", "alice", "on", ">alice-pw", "~*", "&*", "+@all")
    await server.start()
    try:
        host = f"127.0.0.1:{server.port}"
        async with started(RedisBus(f"redis://:default-pw@{host}/0")) as bus:
            await works(bus)
        async with started(RedisBus(f"redis://alice:alice-pw@{host}/0")) as bus:
            await works(bus)
        secret = tmp_path / "redis-password"
        secret.write_text("default-pw\n")
        async with started(RedisBus(f"redis://{host}/0", options=RedisOptions(password_file=str(secret)))) as bus:
            await works(bus)
        async with started(RedisBus(f"redis://alice@{host}/1", options=RedisOptions(password_file=str(secret)))) as bus:
            assert not bus.healthy, "alice's password is not the default user's"
        config = BusConfig.model_validate({"kind": "redis", "url": f"redis://{host}/0", "password_file": str(secret)})
        configured = bus_from_config(config)
        assert isinstance(configured, RedisBus)
        async with started(RedisBus(f"redis://:default-pw@{host}/0")) as admin:
            await admin.redis.config_set("requirepass", "rotated-pw")
        secret.write_text("rotated-pw\n")
        async with started(configured) as bus:
            await works(bus)  # built before the rotation: the file is read when connecting
        async with started(RedisBus(f"redis://:wrong-pw@{host}/0")) as bus:
            assert not bus.healthy and bus.problem
            assert "wrong-pw" not in bus.problem
    finally:
        await server.stop()
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "AuthenticationError" in logged or "WRONGPASS" in logged or "invalid" in logged.lower()
    for secret_text in ("default-pw", "alice-pw", "rotated-pw", "wrong-pw"):
        assert secret_text not in logged, "no password reaches a log"


@needs_redis
async def test_a_unix_socket_with_a_password_in_the_query(tmp_path: Path) -> None:
    socket = tmp_path / "redis.sock"
    server = RedisProcess("--unixsocket", str(socket), "--requirepass", "pw")
    await server.start()
    try:
        async with started(RedisBus(f"unix://{socket}?db=2&password=pw")) as bus:
            await works(bus)
            assert bus.problem is None
        assert redact(f"unix://{socket}?db=2&password=pw") == f"unix://{socket}"
    finally:
        await server.stop()


# ---- Sentinel --------------------------------------------------------------------------------------------


class SentinelProcess(RedisProcess):
    """``redis-server sentinel.conf --sentinel`` watching ``master`` (quorum 1, quick failover)."""

    def __init__(self, master_port: int, service: str, password: str | None = None, pki: Pki | None = None) -> None:
        super().__init__()
        conf = Path(self._workdir.name) / "sentinel.conf"
        ports = [f"port {self.port}"]
        if pki is not None:  # TLS toward clients and toward the master
            ports = ["port 0", f"tls-port {self.port}", "tls-replication yes", "tls-auth-clients no"]
            ports += [
                f"tls-cert-file {pki.server_cert}",
                f"tls-key-file {pki.server_key}",
                f"tls-ca-cert-file {pki.ca_file}",
            ]
        lines = [
            *ports,
            "bind 127.0.0.1",
            f"dir {self._workdir.name}",
            f"sentinel monitor {service} 127.0.0.1 {master_port} 1",
            f"sentinel down-after-milliseconds {service} 500",
            f"sentinel failover-timeout {service} 2000",
        ]
        if password is not None:
            lines.append(f"sentinel auth-pass {service} {password}")
        conf.write_text("\n".join(lines) + "\n")
        self.conf = conf

    def argv(self) -> list[str]:
        assert BINARY is not None
        return [BINARY, str(self.conf), "--sentinel"]


@needs_redis
async def test_sentinel_finds_the_master_and_follows_a_failover() -> None:
    service = f"svc{uuid.uuid4().hex[:8]}"
    master = RedisProcess("--requirepass", "pw", "--masterauth", "pw")
    await master.start()
    replica = RedisProcess("--requirepass", "pw", "--masterauth", "pw", "--replicaof", "127.0.0.1", str(master.port))
    await replica.start()
    sentinel = SentinelProcess(master.port, service, password="pw")
    try:
        try:
            await sentinel.start()
        except Exception as exc:
            pytest.skip(f"this redis-server cannot run as a Sentinel ({exc})")
        dead = free_port()  # a Sentinel that is not there: the others answer
        url = f"redis+sentinel://:pw@127.0.0.1:{dead},127.0.0.1:{sentinel.port}/{service}/0"
        async with started(RedisBus(url, f"test-{uuid.uuid4().hex}:")) as bus:
            await works(bus)
            await bus.set("before", b"1")
            async with asyncio.timeout(10):  # the replica acknowledges it (WAIT within the socket timeout)
                while await bus.redis.wait(1, 500) < 1:
                    pass
            await master.kill()
            await until(lambda: not bus.healthy, 4.0, "the master is gone")
            # The Sentinel promotes the replica; the bus asks the Sentinel again and follows.
            await until(lambda: bus.healthy, 20.0, "the bus reaches the new master")
            assert await bus.get("before") == b"1", "the replica had it"
            await works(bus)
            host = await bus.redis.connection_pool.get_master_address()  # type: ignore[attr-defined]
            assert tuple(host) == ("127.0.0.1", replica.port)
    finally:
        await sentinel.stop()
        await replica.stop()
        await master.stop()


@needs_redis
async def test_sentinel_over_tls(pki: Pki) -> None:
    service = f"svc{uuid.uuid4().hex[:8]}"
    tls = ("--tls-cert-file", pki.server_cert, "--tls-key-file", pki.server_key, "--tls-ca-cert-file", pki.ca_file)
    master = RedisProcess(*tls, "--tls-auth-clients", "no", "--requirepass", "pw", tls=True)
    try:
        await master.start()
    except Exception as exc:
        await master.stop()
        pytest.skip(f"this redis-server does not speak TLS ({exc})")
    sentinel = SentinelProcess(master.port, service, password="pw", pki=pki)
    try:
        await sentinel.start()
        url = f"rediss+sentinel://:pw@127.0.0.1:{sentinel.port}/{service}/0"
        async with started(RedisBus(url, options=RedisOptions(tls_ca_file=pki.ca_file))) as bus:
            await works(bus)
        async with started(RedisBus(url)) as bus:
            assert not bus.healthy, "the Sentinel's certificate is not trusted without the CA file"
    finally:
        await sentinel.stop()
        await master.stop()
