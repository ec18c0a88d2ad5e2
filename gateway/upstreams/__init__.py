"""Client side of each carrier toward backends, with lifecycle (spawn, reconnect, drain)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from gateway.config import Backend as BackendConfig, Limits
from gateway.upstreams.base import Carrier
from gateway.upstreams.egress import BackendEgress


def make_carrier(
    name: str,
    config: BackendConfig,
    limits: Limits,
    egress: BackendEgress | None = None,
    identity: Callable[[], Mapping[str, str] | None] | None = None,
) -> Carrier:
    """Build a fresh carrier for one connection attempt to backend ``name``. ``egress``: its proxy and
    TLS, built once at start (:func:`gateway.upstreams.egress.backend_egress`); None: built here from
    ``config`` and the environment (tools and tests). ``identity``: the gateway's own credential toward it
    when its auth is not static (gateway/upstreams/credentials.py; http only)."""
    if egress is None and config.transport in ("http", "sse", "ws"):
        from gateway.upstreams.egress import backend_egress

        egress = backend_egress(name, config)
    headers = config.headers
    if config.auth is not None and config.auth.type == "static":  # upstream auth (issue 17)
        headers = {**headers, **config.auth.headers}
    if config.transport == "stdio":
        from gateway.upstreams.stdio import StdioCarrier

        assert config.command
        return StdioCarrier(name, config.command, config.args, config.env, config.cwd, limits.max_message_bytes)
    if config.transport == "http":
        from gateway.upstreams.http import HttpCarrier

        assert config.url
        return HttpCarrier(
            name,
            config.url,
            headers,
            limits.max_message_bytes,
            egress,
            identity,
            max_head_bytes=limits.max_response_head_bytes,
        )
    if config.transport == "sse":
        from gateway.upstreams.sse import SseCarrier

        assert config.url
        return SseCarrier(
            name,
            config.url,
            headers,
            limits.max_message_bytes,
            config.connect_timeout_s,
            egress,
            max_head_bytes=limits.max_response_head_bytes,
        )
    if config.transport == "ws":
        from gateway.upstreams.ws import WsCarrier

        assert config.url
        return WsCarrier(name, config.url, headers, limits.max_message_bytes, egress)
    from gateway.upstreams.demo import BuiltinCarrier, DemoServer

    return BuiltinCarrier(name, DemoServer())
