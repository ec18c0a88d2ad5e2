"""The operability sections of the config (issue 16): ``telemetry``, ``logging`` and ``ui``.

Every field has a default and a description (``switchboard schema`` prints them). Telemetry is off
until ``otlp_endpoint`` is set; it needs the optional extra ``switchboard-gateway[otel]``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from gateway.config_base import StrictModel as _Model


class Telemetry(_Model):
    """``telemetry:``: OpenTelemetry traces following the MCP semantic conventions."""

    otlp_endpoint: str | None = Field(
        None,
        description="OTLP collector endpoint, e.g. http://127.0.0.1:4318 (http/protobuf) or http://127.0.0.1:4317 "
        "(grpc). null: no traces are made at all.",
    )
    protocol: Literal["http/protobuf", "grpc"] = Field("http/protobuf", description="OTLP transport.")
    service_name: str = Field("switchboard", description="service.name of the exported resource.")
    sample_ratio: float = Field(
        1.0, ge=0.0, le=1.0, description="Share of new traces recorded (parent-based: a sampled parent is kept)."
    )


class Logging(_Model):
    """``logging:``: how the gateway's own log lines look."""

    format: Literal["text", "json"] = Field(
        "text", description="text: one readable line each; json: one JSON object per line with trace and session ids."
    )
    level: Literal["debug", "info", "warning", "error"] | None = Field(
        None, description="Least severe level written (default: the top-level log_level, info)."
    )


class Ui(_Model):
    """``ui:``: the dashboard at /ui."""

    enabled: bool = Field(True, description="Serve the dashboard at /ui.")
    readers: list[str] = Field(
        default_factory=list,
        description="Principals who may open the read-only pages besides the admin (with their own credential).",
    )
