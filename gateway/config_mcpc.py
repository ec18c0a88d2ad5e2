"""The ``mcpc`` section of the config: MCPC task callbacks through the gateway (issue 13, ADR 0014).

Every field has a default and a description. Per backend, ``backends.NAME.mcpc`` says whether the
gateway looks for MCPC at all (gateway/config.py).
"""

from __future__ import annotations

from pydantic import Field

from gateway.config_base import StrictModel as _Model


class Mcpc(_Model):
    """How the gateway runs MCPC tasks: its name in handshakes, and the bounds on running tasks."""

    provider: str = Field(
        "switchboard",
        min_length=1,
        description="The mcpc_provider the gateway names in handshakes, toward clients and backends.",
    )
    max_tasks_per_session: int = Field(
        64, ge=1, description="Running MCPC tasks one client session may have at once (held calls included)."
    )
    max_tasks_per_backend: int = Field(1024, ge=1, description="Running MCPC tasks one backend may have at once.")
    max_message_bytes: int = Field(
        1 << 20,
        ge=1024,
        description="Largest MCPC message (its JSON text) relayed; a larger update is dropped, a larger last "
        "message fails its task.",
    )
    probe_timeout_s: float = Field(
        5.0, gt=0, description="Longest each handshake attempt of MCPC detection may take, on every connect."
    )
