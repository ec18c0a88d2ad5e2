"""Replicas for tests: N real gateway processes on one real Redis, behind the round-robin balancer."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from tests.support import RunningGateway, http_server, run_gateway

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}
"""A legacy ``initialize`` for raw HTTP tests."""
ACCEPT = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
"""What a Streamable HTTP POST accepts and sends."""


@dataclass
class Replicas:
    gateways: list[RunningGateway]
    url: str  # the balancer's base URL

    @property
    def mcp(self) -> str:
        return f"{self.url}/mcp"


@contextlib.contextmanager
def replicas(
    count: int, redis_url: str, config: dict[str, Any], bus: dict[str, Any] | None = None
) -> Iterator[Replicas]:
    """``count`` gateways with ``config`` on the Redis bus at ``redis_url`` (``bus``: more of that
    section, e.g. ``required`` or timeouts), and a balancer in front."""
    shared = {**config, "bus": {**(bus or {}), "kind": "redis", "url": redis_url}}
    with contextlib.ExitStack() as stack:
        gateways = [stack.enter_context(run_gateway(shared)) for _ in range(count)]
        upstreams = [arg for gw in gateways for arg in ("--upstream", gw.url)]
        url = stack.enter_context(
            http_server(
                lambda port: [sys.executable, "-m", "tests.replicas.balancer", "--port", str(port), *upstreams], path=""
            )
        )
        yield Replicas(gateways, url)
