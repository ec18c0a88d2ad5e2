"""How the gateway reaches the network on its own behalf: proxies and TLS toward backends and services.

Models only; gateway/upstreams/egress.py turns them into one decision per backend at start (the proxy
to use, one :class:`ssl.SSLContext`). Invariants:

- A proxy is an ``http://`` URL (``host:port`` alone means ``http://host:port``, as in curl). HTTPS
  targets go through it with CONNECT (RFC 9110 §9.3.6), plain HTTP targets in absolute form (RFC 9112
  §3.2.2). Userinfo becomes ``Proxy-Authorization: Basic`` (RFC 7617) and is never shown: every
  description of a proxy (:func:`proxy_display`) drops it.
- TLS files must exist and be readable when the config is loaded, so ``switchboard check`` names a
  wrong path; whether they parse is known when the context is built at start (a clear startup error).
- ``tls.verify: false`` is allowed (a lab with self-signed certificates) but logged as a WARNING at
  start, naming the backend.
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import SplitResult, urlsplit

from pydantic import Field, field_validator, model_validator

from gateway.config_base import StrictModel as _Model

DIRECT = "none"  # the value of a `proxy` setting that bypasses every proxy


def split_proxy_url(text: str) -> SplitResult:
    """The parts of a proxy URL; ValueError with a clear reason if it is not an http:// proxy."""
    raw = text.strip()
    if "://" not in raw:
        raw = "http://" + raw  # curl's rule: a proxy without a scheme is an HTTP proxy
    parts = urlsplit(raw)
    if parts.scheme.lower() != "http":
        raise ValueError(
            f"proxy scheme {parts.scheme!r} is not supported: use an http:// proxy (HTTPS targets are tunnelled "
            "through it with CONNECT)"
        )
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"proxy {proxy_display(text)!r} has an invalid port") from None
    if not parts.hostname:
        raise ValueError(f"proxy {proxy_display(text)!r} names no host")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValueError(f"proxy {proxy_display(text)!r} must be scheme://[user:password@]host[:port] only")
    del port
    return parts


def proxy_display(text: str) -> str:
    """A proxy URL without its credentials, for logs and error messages."""
    raw = text.strip()
    scheme, sep, rest = raw.partition("://")
    if not sep:
        scheme, rest = "http", raw
    host = rest.rpartition("@")[2].split("/", 1)[0]
    return f"{scheme}://{host}"


def proxy_setting(value: Any) -> str | None:
    """A `proxy` setting as given in YAML, validated: None (the default), ``"none"`` (direct) or a URL."""
    if value is None:
        return None
    if value is False:
        return DIRECT
    if not isinstance(value, str):
        raise ValueError("proxy must be a URL (http://host:port), 'none' or false")
    if value.strip().lower() in ("none", "direct", ""):
        return DIRECT
    split_proxy_url(value)
    text = value.strip()
    # Kept with its scheme, so that every URL-shaped secret is found by the same rules (the admin
    # API's redaction hides the userinfo of anything with "://").
    return text if "://" in text else "http://" + text


PROXY_DESCRIPTION = (
    "The HTTP proxy to reach it through: an http:// URL (userinfo becomes Proxy-Authorization: Basic, never "
    "logged), 'none' or false for a direct connection, null (the default) for the gateway's default "
    "(egress.proxy, else the HTTPS_PROXY/HTTP_PROXY environment variables with NO_PROXY). HTTPS and wss "
    "targets are tunnelled with CONNECT; plain http targets are sent to the proxy in absolute form."
)


def _readable(path: str, what: str) -> str:
    expanded = os.path.expanduser(path)
    if not os.path.isfile(expanded):
        raise ValueError(f"{what} {path!r} does not exist or is not a file")
    if not os.access(expanded, os.R_OK):
        raise ValueError(f"{what} {path!r} is not readable by the gateway")
    return expanded


class Tls(_Model):
    """TLS toward an https/wss endpoint (the gateway is the client)."""

    ca_file: str | None = Field(
        None,
        description="PEM bundle of the CA certificates to trust instead of the system's (a company CA). Replaces "
        "the system store, as curl's --cacert does.",
    )
    cert_file: str | None = Field(
        None, description="PEM client certificate (chain) presented to the server (mutual TLS)."
    )
    key_file: str | None = Field(
        None, description="PEM private key of cert_file (unencrypted); omit when cert_file holds the key too."
    )
    verify: bool = Field(
        True,
        description="Check the server's certificate and host name. false accepts any certificate (logged as a "
        "WARNING at start): for a lab only, never in production.",
    )
    server_name: str | None = Field(
        None,
        description="Host name sent in SNI and checked against the certificate, when it differs from the URL's "
        "host (a backend reached by IP address, or through a tunnel).",
    )

    @field_validator("ca_file")
    @classmethod
    def _ca(cls, value: str | None) -> str | None:
        return None if value is None else _readable(value, "tls.ca_file")

    @field_validator("cert_file")
    @classmethod
    def _cert(cls, value: str | None) -> str | None:
        return None if value is None else _readable(value, "tls.cert_file")

    @field_validator("key_file")
    @classmethod
    def _key(cls, value: str | None) -> str | None:
        return None if value is None else _readable(value, "tls.key_file")

    @model_validator(mode="after")
    def _pairs(self) -> Tls:
        if self.key_file and not self.cert_file:
            raise ValueError("tls.key_file needs tls.cert_file (the certificate it belongs to)")
        return self


class Egress(_Model):
    """The gateway's defaults for reaching the network: backends without their own settings, and the
    control-plane requests it makes itself (JWKS, OAuth token and introspection endpoints)."""

    proxy: str | None = Field(
        None,
        description="HTTP proxy for every backend without its own `proxy` and for control-plane requests: an "
        "http:// URL, 'none' or false to ignore the environment, null (the default) to use HTTPS_PROXY/HTTP_PROXY "
        "(lower-case names first). NO_PROXY (or no_proxy) applies to it and to the environment's proxies: a comma "
        "list of host names (matching the host and its subdomains, a leading dot optional), IP addresses, CIDR "
        "ranges, host:port, or * for all. As in curl and requests, localhost is not exempt unless listed.",
    )
    tls: Tls = Field(
        default_factory=Tls,
        description="TLS for control-plane requests (JWKS, OAuth endpoints): a company CA bundle, a client "
        "certificate. Backends have their own `tls`.",
    )

    @field_validator("proxy", mode="before")
    @classmethod
    def _proxy(cls, value: Any) -> str | None:
        return proxy_setting(value)
