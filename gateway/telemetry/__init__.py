"""Telemetry: OpenTelemetry traces (optional extra), the log context, the MCP duration histograms.

Invariants: importing this package imports no OpenTelemetry module. With ``telemetry.otlp_endpoint``
null nothing of OpenTelemetry is imported or made; with an endpoint but without the extra
(``pip install 'switchboard-gateway[otel]'``) the gateway starts, says so once as a warning, and
traces nothing. The hooks in the pipeline then hold ``None`` (gateway/telemetry/observe.py).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from gateway.telemetry.observe import LogIdsOnly, ServerObserver, Tracing

if TYPE_CHECKING:
    from gateway.config import Config
    from gateway.config_ops import Telemetry

log = logging.getLogger(__name__)

MISSING_EXTRA = (
    "telemetry.otlp_endpoint is set but OpenTelemetry is not installed: no traces will be exported "
    "(install the extra: pip install 'switchboard-gateway[otel]')"
)


def tracing_from_config(config: Telemetry, version: str) -> Tracing | None:
    """OpenTelemetry tracing toward ``config.otlp_endpoint``, or None (off, or the extra is missing)."""
    if config.otlp_endpoint is None:
        return None
    try:
        from gateway.telemetry.otel import OtelTracing
    except ImportError as exc:
        log.warning("%s (%s)", MISSING_EXTRA, exc)
        return None
    return OtelTracing(config, version)


def server_observer(config: Config, tracing: Tracing | None) -> ServerObserver | None:
    """What watches each client request: the tracer, else the JSON log context, else nothing."""
    if tracing is not None:
        return tracing
    if config.logging.format == "json":
        return LogIdsOnly()
    return None
