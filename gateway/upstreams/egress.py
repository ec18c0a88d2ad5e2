"""Egress: which proxy and which TLS settings reach one backend or service, decided once at start.

The config says it (gateway/config_egress.py: a backend's ``proxy`` and ``tls``, the top-level
``egress``); the environment adds ``HTTPS_PROXY``/``HTTP_PROXY``/``NO_PROXY`` (lower-case names first,
as curl and requests read them). Invariants:

- Everything here is decided once: the environment is read when :class:`Defaults` is made (at start),
  an :class:`ssl.SSLContext` is built once per backend (:class:`BackendEgress`), and a connection pool
  gets one :class:`Route` for its origin. Nothing is decided per request, so the hot path
  (gateway/upstreams/quick.py) costs what it did.
- Precedence: a backend's own ``proxy`` (a URL is used as given; ``none`` bypasses every proxy) >
  ``egress.proxy`` > the environment. ``NO_PROXY`` (gateway/upstreams/noproxy.py) exempts hosts from the
  last two, never from a backend's explicit URL.
- Proxy credentials live only in :attr:`Proxy.authorization` and :attr:`Proxy.url`; every description
  (:attr:`Proxy.display`, log lines, errors) is without them.
- Every TLS context refuses anything older than TLS 1.2; ``verify: false`` is logged as a WARNING
  naming the backend when its context is built.
"""

from __future__ import annotations

import base64
import logging
import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from gateway.config_egress import DIRECT, Egress as EgressConfig, Tls, split_proxy_url
from gateway.upstreams.noproxy import NoProxy

if TYPE_CHECKING:
    from gateway.config_backend import Backend as BackendConfig

log = logging.getLogger(__name__)


class EgressError(Exception):
    """A proxy or TLS setting that cannot be used (a bad proxy variable, a CA file that is no PEM)."""


@dataclass(frozen=True, slots=True)
class Proxy:
    host: str
    port: int
    display: str  # scheme://host:port, without credentials: what logs and errors show
    authorization: str | None = field(default=None, repr=False)  # "Basic ..." (RFC 7617), from the userinfo
    url: str = field(default="", repr=False)  # as configured, credentials included (the websockets library's form)

    @classmethod
    def parse(cls, text: str, origin: str = "proxy") -> Proxy:
        try:
            parts = split_proxy_url(text)
        except ValueError as exc:
            raise EgressError(f"{origin}: {exc}") from None
        assert parts.hostname
        authorization = None
        if parts.username is not None:
            pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
            authorization = "Basic " + base64.b64encode(pair.encode()).decode("ascii")
        port = parts.port or 80
        host = parts.hostname
        shown = f"[{host}]" if ":" in host else host
        url = text.strip() if "://" in text else "http://" + text.strip()
        return cls(host, port, f"http://{shown}:{port}", authorization, url)


@dataclass(frozen=True, slots=True)
class Route:
    """How one origin is reached: directly or through ``proxy``; with TLS (``ssl``) for https/wss."""

    proxy: Proxy | None = None
    ssl: ssl.SSLContext | None = None
    server_hostname: str | None = None  # SNI and the name checked in the certificate; None: the URL's host
    client_cert: bool = False  # ssl presents a client certificate (else a reset TLS connection gets a hint)


@dataclass(frozen=True, slots=True)
class Defaults:
    """The gateway-wide egress settings: the environment's proxies (read once) and ``egress:``."""

    http_proxy: Proxy | None = None
    https_proxy: Proxy | None = None
    no_proxy: NoProxy = field(default_factory=NoProxy)
    configured: Proxy | None = None  # egress.proxy
    direct: bool = False  # egress.proxy: none

    @classmethod
    def load(cls, config: EgressConfig | None = None, environ: Mapping[str, str] | None = None) -> Defaults:
        env = os.environ if environ is None else environ

        def variable(name: str) -> tuple[str, str] | None:
            for spelled in (name.lower(), name.upper()):
                value = env.get(spelled, "").strip()
                if value:
                    return spelled, value
            return None

        proxies: dict[str, Proxy | None] = {}
        for scheme in ("http", "https"):
            found = variable(f"{scheme}_proxy")
            proxies[scheme] = None if found is None else Proxy.parse(found[1], f"environment variable {found[0]}")
        no_proxy = NoProxy.parse((variable("no_proxy") or ("", ""))[1])
        if no_proxy.ignored:
            log.warning("NO_PROXY entries not understood and ignored: %s", ", ".join(no_proxy.ignored))
        setting = config.proxy if config is not None else None
        configured = Proxy.parse(setting, "egress.proxy") if setting and setting != DIRECT else None
        return cls(proxies["http"], proxies["https"], no_proxy, configured, setting == DIRECT)

    def proxy_for(self, secure: bool, host: str, port: int) -> Proxy | None:
        if self.direct:
            return None
        proxy = self.configured or (self.https_proxy if secure else self.http_proxy)
        if proxy is None or self.no_proxy.matches(host, port):
            return None
        return proxy


def tls_context(tls: Tls | None, who: str) -> ssl.SSLContext:
    """One client context for ``who`` (a backend's name, or "egress"): CA bundle, client certificate,
    verification; at least TLS 1.2. A file that does not parse is an :class:`EgressError` naming it.
    ``verify: false`` is not logged here: :func:`backend_egress` does it, once per backend at start."""
    if tls is None or tls == Tls():
        return default_context()
    try:
        context = ssl.create_default_context(cafile=tls.ca_file) if tls.ca_file else ssl.create_default_context()
    except (ssl.SSLError, OSError) as exc:
        raise EgressError(f"{who}: tls.ca_file {tls.ca_file!r} is not a PEM CA bundle: {_reason(exc)}") from None
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if tls.cert_file:
        try:
            # A password callback that gives none: without it OpenSSL would prompt on the terminal for
            # an encrypted key, and the gateway would hang at start.
            context.load_cert_chain(tls.cert_file, tls.key_file, password=lambda: b"")
        except (ssl.SSLError, OSError) as exc:
            raise EgressError(
                f"{who}: tls.cert_file/key_file: not a PEM certificate and its unencrypted private key (encrypted "
                f"keys are not supported): {_reason(exc)}"
            ) from None
    if not tls.verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def insecure_warning(who: str) -> str:
    return (
        f"{who}: tls.verify is false: the server's certificate is NOT checked; anyone on the path can read and "
        "change this traffic (name its CA in tls.ca_file instead)"
    )


_DEFAULT: list[ssl.SSLContext] = []


def default_context() -> ssl.SSLContext:
    """The system's trust store, TLS ≥ 1.2; one for the process (loading the store costs milliseconds)."""
    if not _DEFAULT:
        context = ssl.create_default_context()
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        _DEFAULT.append(context)
    return _DEFAULT[0]


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError) and exc.reason:
        return str(exc.reason)
    return str(exc) or type(exc).__name__


@dataclass(frozen=True, slots=True)
class BackendEgress:
    """One backend's egress, built at start: its proxy choice and its TLS context."""

    defaults: Defaults
    proxy: Proxy | None = None  # an explicit per-backend proxy
    direct: bool = False  # per-backend `proxy: none`
    ssl: ssl.SSLContext | None = None  # None: the default context (when the URL is https/wss)
    server_name: str | None = None
    client_cert: bool = False

    @classmethod
    def build(cls, who: str, proxy: str | None, tls: Tls | None, defaults: Defaults) -> BackendEgress:
        explicit = Proxy.parse(proxy, f"{who}: proxy") if proxy and proxy != DIRECT else None
        context = tls_context(tls, who) if tls is not None else None
        cert = tls is not None and tls.cert_file is not None
        return cls(defaults, explicit, proxy == DIRECT, context, tls.server_name if tls else None, cert)

    def route(self, url: str) -> Route:
        """The route to ``url``'s origin (http, https, ws or wss)."""
        parts = urlsplit(url)
        secure = parts.scheme in ("https", "wss")
        host = parts.hostname or ""
        port = parts.port or (443 if secure else 80)
        if self.direct:
            proxy = None
        elif self.proxy is not None:
            proxy = self.proxy
        else:
            proxy = self.defaults.proxy_for(secure, host, port)
        context = (self.ssl or default_context()) if secure else None
        return Route(proxy, context, self.server_name if secure else None, self.client_cert and secure)


DIRECT_EGRESS = BackendEgress(Defaults(direct=True))  # no proxy, default TLS: what a bare pool does

_control_plane: list[BackendEgress] = []


def configure_control_plane(egress: BackendEgress | None) -> None:
    """The egress of :func:`gateway.upstreams.fetch.fetch` (JWKS, OAuth endpoints); set at start.
    None forgets it: the next :func:`control_plane` reads the environment again."""
    _control_plane.clear()
    if egress is not None:
        _control_plane.append(egress)


def control_plane() -> BackendEgress:
    """The control-plane egress: as configured at start, else the environment's proxies and the system CAs."""
    if not _control_plane:
        _control_plane.append(BackendEgress(Defaults.load()))
    return _control_plane[0]


def backend_egress(name: str, config: BackendConfig, defaults: Defaults | None = None) -> BackendEgress:
    """Backend ``name``'s egress (its ``proxy`` and ``tls``) over ``defaults`` (None: the environment);
    ``tls.verify: false`` is logged as a WARNING here. Raises :class:`EgressError`."""
    who = f"backend {name}"
    egress = BackendEgress.build(who, config.proxy, config.tls, defaults or Defaults.load())
    if config.tls is not None and not config.tls.verify:
        log.warning(insecure_warning(who))
    return egress


def control_plane_egress(config: EgressConfig, defaults: Defaults) -> BackendEgress:
    """The egress of control-plane requests (``egress.tls`` over ``defaults``); ``verify: false`` logged."""
    egress = BackendEgress.build("egress", None, config.tls, defaults)
    if not config.tls.verify:
        log.warning(insecure_warning("egress"))
    return egress


def egress_problems(config: EgressConfig, backends: Mapping[str, BackendConfig]) -> tuple[list[str], list[str]]:
    """For ``switchboard check``: what would stop the gateway at start (a proxy variable it cannot use,
    a TLS file that does not parse) and what it would warn about; nothing is logged or connected."""
    problems: list[str] = []
    warnings: list[str] = []
    try:
        defaults = Defaults.load(config)
        BackendEgress.build("egress", None, config.tls, defaults)
    except EgressError as exc:
        return [str(exc)], warnings
    if not config.tls.verify:
        warnings.append(insecure_warning("egress"))
    for name, backend in backends.items():
        if backend.transport not in ("http", "sse", "ws"):
            continue
        try:
            BackendEgress.build(f"backend {name}", backend.proxy, backend.tls, defaults)
        except EgressError as exc:
            problems.append(str(exc))
        if backend.tls is not None and not backend.tls.verify:
            warnings.append(insecure_warning(f"backend {name}"))
        if backend.tls is not None and backend.url and urlsplit(backend.url).scheme in ("http", "ws"):
            warnings.append(f"backends.{name}.tls is ignored: its url is not https or wss")
    return problems, warnings
