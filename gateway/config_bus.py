"""The ``bus`` section of the config: one replica in memory, or many sharing Redis (issue 14).

Every field has a default and a description; the URL forms are read by gateway/bus/redis_urls.py.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from gateway.config_base import StrictModel as _Model


class BusConfig(_Model):
    """``bus:``. URL forms (gateway/bus/redis_urls.py): ``redis://[[user]:password@]host[:port][/db]``,
    ``rediss://...`` (TLS), ``unix:///path?db=N``, and ``redis+sentinel://[[user]:password@]host1[:port1],
    host2[:port2]/service_name[/db]`` (``rediss+sentinel://`` for TLS; ``?sentinel_password=`` for the
    Sentinels' own). While Redis is away the gateway keeps serving what it can locally and /readyz says so."""

    kind: Literal["memory", "redis"] = Field(
        "memory", description="memory: one replica; redis: replicas share channels, keys and counters."
    )
    url: str = Field(
        "redis://127.0.0.1:6379/0",
        description="redis: the server URL: redis://, rediss:// (TLS), unix:// or redis+sentinel://h1:p1,h2:p2/service/db.",
    )
    prefix: str = Field("switchboard:", description="redis: prefix of every key and channel.")
    password_file: str | None = Field(
        None, description="redis: a file holding the password (not in the URL then); read on every new connection."
    )
    tls_ca_file: str | None = Field(
        None, description="rediss: CA certificates (PEM) to verify the server; default: the system's."
    )
    tls_cert_file: str | None = Field(
        None, description="rediss: client certificate (PEM), for servers that ask for one."
    )
    tls_key_file: str | None = Field(None, description="rediss: the client certificate's private key (PEM).")
    tls_verify: bool = Field(
        True, description="rediss: verify the server's certificate and host name (false: only for tests)."
    )
    timeout_s: float = Field(
        1.0,
        gt=0,
        le=60,
        description="redis: bound of each connect and each answer; an operation waits at most twice this.",
    )
    health_interval_s: float = Field(1.0, gt=0, le=60, description="redis: how often the gateway PINGs Redis.")
    publish_queue: int = Field(
        1024, ge=0, le=1_000_000, description="redis: publishes kept while Redis is away (the oldest dropped first)."
    )
    required: bool = Field(
        False,
        description="redis: /readyz answers 503 while Redis is away. Off by default: /readyz reports it but stays "
        "ready, since every replica shares the one Redis and taking them all out of service would turn a Redis "
        "outage into a gateway outage.",
    )

    @model_validator(mode="after")
    def _tls_needs_rediss(self) -> BusConfig:
        tls = [n for n in ("tls_ca_file", "tls_cert_file", "tls_key_file") if getattr(self, n) is not None]
        if tls and not self.url.startswith(("rediss://", "rediss+sentinel://")):
            raise ValueError(f"bus.{tls[0]} needs a rediss:// (or rediss+sentinel://) url")
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("bus.tls_cert_file and bus.tls_key_file go together")
        return self
