"""From a Redis URL and options to a connected client: plain, TLS, passwords and Sentinel.

URL forms (``bus.url``):

* ``redis://[[user]:password@]host[:port][/db]``: plain TCP (port 6379, db 0 by default);
* ``rediss://...``: the same over TLS, verified against ``tls_ca_file`` (else the system's CAs),
  with a client certificate when ``tls_cert_file``/``tls_key_file`` are given;
* ``unix:///path/to/socket?db=0``: a Unix socket;
* ``redis+sentinel://[[user]:password@]host1[:port1],host2[:port2]/service_name[/db]``: ask these
  Sentinels (port 26379 by default) for the master of ``service_name`` and follow failovers;
  ``rediss+sentinel://`` speaks TLS to the Sentinels and the master. The URL's credentials are the
  master's; ``?sentinel_password=...`` (and ``sentinel_username``) authenticate to the Sentinels.

``password_file`` holds the password (one line; trailing newline ignored) instead of the URL; it is
read again on every new connection, so a rotated password needs no restart.

Invariants: every client has bounded connect and command timeouts and no retries of its own (the
bus decides what a failure means); :func:`redact` is the only form of a URL that reaches a log.
"""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from redis import asyncio as aioredis
from redis.asyncio.connection import ConnectionPool, SSLConnection, parse_url
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel
from redis.backoff import NoBackoff
from redis.credentials import CredentialProvider

SENTINEL_SCHEMES = ("redis+sentinel", "rediss+sentinel")
_SENTINEL_PORT = 26379


@dataclass(frozen=True, slots=True)
class RedisOptions:
    """What a URL does not say. ``timeout_s`` bounds each connect and each command's answer."""

    timeout_s: float = 1.0
    password_file: str | None = None
    tls_ca_file: str | None = None
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    tls_verify: bool = True


@dataclass(frozen=True, slots=True)
class SentinelUrl:
    hosts: tuple[tuple[str, int], ...]
    service: str
    db: int
    username: str | None
    password: str | None
    tls: bool
    sentinel_username: str | None
    sentinel_password: str | None


def redact(url: str) -> str:
    """``url`` without its credentials and query (which may hold a password)."""
    parts = urlsplit(url)
    netloc = parts.netloc.rpartition("@")[2]
    return f"{parts.scheme}://{netloc}{parts.path}"


def parse_sentinel_url(url: str) -> SentinelUrl:
    parts = urlsplit(url)
    if parts.scheme not in SENTINEL_SCHEMES:
        raise ValueError(f"not a Sentinel URL: {redact(url)}")
    userinfo, _, hostlist = parts.netloc.rpartition("@")
    username, _, password = userinfo.partition(":") if userinfo else ("", "", "")
    hosts = [_host_port(item.strip(), url) for item in hostlist.split(",")]
    path = [p for p in parts.path.split("/") if p]
    if not path or len(path) > 2 or (len(path) == 2 and not path[1].isdigit()):
        raise ValueError(f"Sentinel URL needs /service_name[/db] after the hosts: {redact(url)}")
    query = {k: v[0] for k, v in parse_qs(parts.query).items() if v}
    unknown = set(query) - {"sentinel_password", "sentinel_username"}
    if unknown:
        raise ValueError(f"unknown Sentinel URL option(s): {', '.join(sorted(unknown))}")
    return SentinelUrl(
        hosts=tuple(hosts),
        service=unquote(path[0]),
        db=int(path[1]) if len(path) == 2 else 0,
        username=unquote(username) or None,
        password=unquote(password) or None,
        tls=parts.scheme == "rediss+sentinel",
        sentinel_username=query.get("sentinel_username"),
        sentinel_password=query.get("sentinel_password"),
    )


def _host_port(item: str, url: str) -> tuple[str, int]:
    """``host``, ``host:port``, ``[v6]`` or ``[v6]:port``."""
    if item.startswith("["):
        host, _, rest = item[1:].partition("]")
        port = rest.removeprefix(":") if rest else str(_SENTINEL_PORT)
    else:
        host, _, port = item.partition(":")
        port = port or str(_SENTINEL_PORT)
    if not host or not port.isdigit():
        raise ValueError(f"Sentinel URL needs host[:port] items separated by commas: {redact(url)}")
    return host, int(port)


class PasswordFile(CredentialProvider):
    """Credentials whose password is read from a file on every new connection."""

    def __init__(self, path: str, username: str | None) -> None:
        self._path = Path(path)
        self._username = username

    def _read(self) -> str:
        return self._path.read_text(encoding="utf-8").rstrip("\r\n")

    def get_credentials(self) -> tuple[str] | tuple[str, str]:
        password = self._read()
        return (self._username, password) if self._username else (password,)

    async def get_credentials_async(self) -> tuple[str] | tuple[str, str]:
        password = await asyncio.to_thread(self._read)
        return (self._username, password) if self._username else (password,)


def _common(options: RedisOptions) -> dict[str, Any]:
    return {
        "socket_connect_timeout": options.timeout_s,
        "socket_timeout": options.timeout_s,
        "retry": Retry(NoBackoff(), 0),  # no hidden retries: a failure is reported at once
    }


def _tls(options: RedisOptions) -> dict[str, Any]:
    return {
        "ssl_ca_certs": options.tls_ca_file,
        "ssl_certfile": options.tls_cert_file,
        "ssl_keyfile": options.tls_key_file,
        "ssl_cert_reqs": ssl.CERT_REQUIRED if options.tls_verify else ssl.CERT_NONE,
        "ssl_check_hostname": options.tls_verify,
    }


def _credentials(username: str | None, password: str | None, options: RedisOptions) -> dict[str, Any]:
    if options.password_file is not None:
        return {"credential_provider": PasswordFile(options.password_file, username)}
    return {"username": username, "password": password}


class RedisConnection:
    """A client for the bus's commands, and whatever else must be closed with it (Sentinels)."""

    def __init__(self, url: str, options: RedisOptions) -> None:
        self.where = redact(url)
        self._sentinel: Sentinel | None = None
        scheme = urlsplit(url).scheme
        if scheme in SENTINEL_SCHEMES:
            self.client = self._sentinel_client(parse_sentinel_url(url), options)
            return
        kwargs: dict[str, Any] = dict(parse_url(url))
        username, password = kwargs.pop("username", None), kwargs.pop("password", None)
        if options.password_file is not None and password is not None:
            raise ValueError("give the Redis password in the URL or in password_file, not both")
        kwargs.update(_common(options), **_credentials(username, password, options))
        if kwargs.get("connection_class") is SSLConnection:
            kwargs.update(_tls(options))
        self.client = aioredis.Redis.from_pool(ConnectionPool(**kwargs))

    def _sentinel_client(self, target: SentinelUrl, options: RedisOptions) -> aioredis.Redis:
        if options.password_file is not None and target.password is not None:
            raise ValueError("give the Redis password in the URL or in password_file, not both")
        tls = {"ssl": True, **_tls(options)} if target.tls else {}
        sentinel_kwargs = {
            **_common(options),
            **tls,
            "username": target.sentinel_username,
            "password": target.sentinel_password,
        }
        self._sentinel = Sentinel(  # type: ignore[no-untyped-call]  # redis-py leaves it unannotated
            list(target.hosts),
            sentinel_kwargs=sentinel_kwargs,
            db=target.db,
            **_common(options),
            **tls,
            **_credentials(target.username, target.password, options),
        )
        self.where = f"Sentinel service {target.service!r} ({', '.join(f'{h}:{p}' for h, p in target.hosts)})"
        client: aioredis.Redis = self._sentinel.master_for(target.service)
        return client

    async def close(self) -> None:
        await self.client.aclose()
        if self._sentinel is not None:
            for sentinel in self._sentinel.sentinels:
                await sentinel.aclose()
