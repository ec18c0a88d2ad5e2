"""Client side of each carrier toward backends, with lifecycle (spawn, reconnect, drain)."""

from __future__ import annotations

from gateway.config import Backend as BackendConfig, Limits
from gateway.upstreams.base import Carrier


def make_carrier(name: str, config: BackendConfig, limits: Limits) -> Carrier:
    """Build a fresh carrier for one connection attempt to backend ``name``."""
    if config.transport == "stdio":
        from gateway.upstreams.stdio import StdioCarrier

        assert config.command
        return StdioCarrier(name, config.command, config.args, config.env, config.cwd, limits.max_message_bytes)
    if config.transport == "http":
        from gateway.upstreams.http import HttpCarrier

        assert config.url
        return HttpCarrier(name, config.url, config.headers, limits.max_message_bytes)
    if config.transport == "sse":
        from gateway.upstreams.sse import SseCarrier

        assert config.url
        return SseCarrier(name, config.url, config.headers, limits.max_message_bytes, config.connect_timeout_s)
    if config.transport == "ws":
        from gateway.upstreams.ws import WsCarrier

        assert config.url
        return WsCarrier(name, config.url, config.headers, limits.max_message_bytes)
    from gateway.upstreams.demo import BuiltinCarrier, DemoServer

    return BuiltinCarrier(name, DemoServer())
