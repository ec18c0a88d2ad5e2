"""Prometheus metrics, in a registry per gateway instance (tests run several side by side).

A handled client request is one ``observe_call``: the request counter, its duration histogram and
the MCP server-duration histogram, updated through the live cells of its label set, found with one
dict lookup (``_CallCells``). Same series and values as ``observe_request`` + ``observe_server``.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterator, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily

from gateway.loop_metrics import LoopCounter, LoopHistogram

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        # Updated on every call: lock-free collectors on the loop's thread (gateway/loop_metrics.py).
        self.requests = LoopCounter(
            "switchboard_requests_total",
            "Client requests handled, by method, backend and outcome.",
            ["method", "backend", "outcome"],
        )
        self.latency = LoopHistogram(
            "switchboard_request_duration_seconds",
            "Time from a client request's arrival to its answer.",
            ["method", "backend"],
            _LATENCY_BUCKETS,
        )
        r.register(self.requests)
        r.register(self.latency)
        self.sessions = Gauge("switchboard_active_sessions", "Client sessions alive.", ["transport"], registry=r)
        self.backend_up = Gauge(
            "switchboard_backend_up",
            "1 if the backend is connected and initialized.",
            ["backend"],
            registry=r,
        )
        self.backend_restarts = Counter(
            "switchboard_backend_restarts_total",
            "Times a backend connection was re-established.",
            ["backend"],
            registry=r,
        )
        self.backend_inflight = Gauge(
            "switchboard_backend_inflight", "Requests waiting on a backend.", ["backend"], registry=r
        )
        # per-principal stdio backends (issue 17): their children, by state (connecting, ready, down, stopping).
        self.backend_children = Gauge(
            "switchboard_backend_children",
            "Children of a per-principal stdio backend, by state.",
            ["backend", "state"],
            registry=r,
        )
        self.dropped_clients = Counter(
            "switchboard_slow_clients_dropped_total",
            "Streams closed because the client could not keep up.",
            ["transport"],
            registry=r,
        )
        self.name_collisions = Gauge(
            "switchboard_name_collisions",
            "Names withheld because several backends offer them.",
            ["view", "kind"],
            registry=r,
        )

        # Audit stream (gateway/audit.py) and tool definition pinning (policies/pinning.py).
        self.audit_records = LoopCounter(
            "switchboard_audit_records_total", "Audit records emitted, by outcome.", ["outcome"]
        )
        r.register(self.audit_records)  # one per request, like the two above
        self.audit_dropped = Counter(
            "switchboard_audit_dropped_total",
            "Audit records dropped because the writer could not keep up (or was closed).",
            registry=r,
        )
        self.tool_definition_changes = Counter(
            "switchboard_tool_definition_changes_total",
            "Tools whose definition differs from the pinned one, counted once per new definition.",
            ["backend"],
            registry=r,
        )
        self.mcpx_envelopes = Counter(
            "switchboard_mcpx_envelopes_total",
            "MCPx envelopes from participants, by outcome (routed, refused, invalid).",
            ["outcome"],
            registry=r,
        )
        self.mcpx_deliveries = Counter(
            "switchboard_mcpx_deliveries_total", "MCPx envelopes delivered to participants.", registry=r
        )
        self.mcpl_decisions = Counter(
            "switchboard_mcpl_decisions_total",
            "MCPL decisions and relays, by method and outcome.",
            ["method", "outcome"],
            registry=r,
        )
        self.mcpl_push = Counter(
            "switchboard_mcpl_push_events_total",
            "push/event from backends, by outcome (accepted, duplicate, rejected).",
            ["outcome"],
            registry=r,
        )
        self.mcpl_dropped = Counter(
            "switchboard_mcpl_dropped_total",
            "Hook answers dropped: tagged with a disabled, unknown or no feature set.",
            ["hook", "reason"],
            registry=r,
        )
        # MCPC (gateway/mcpc/): tasks the gateway keeps, whoever runs them (a backend or the gateway).
        self.mcpc_tasks_started = Counter(
            "switchboard_mcpc_tasks_started_total", "MCPC tasks started, by backend.", ["backend"], registry=r
        )
        self.mcpc_tasks_finished = Counter(
            "switchboard_mcpc_tasks_finished_total",
            "MCPC tasks ended, by backend and outcome (completed, failed, expired, lost, dropped).",
            ["backend", "outcome"],
            registry=r,
        )
        self.mcpc_tasks_running = Gauge(
            "switchboard_mcpc_tasks_running", "MCPC tasks running, by backend.", ["backend"], registry=r
        )
        self.mcpc_messages = Counter(
            "switchboard_mcpc_messages_total",
            "MCPC messages from backends, by kind (task, server_event) and outcome (relayed, unknown, too_large, "
            "denied).",
            ["kind", "outcome"],
            registry=r,
        )
        self.bus_up = Gauge(
            "switchboard_bus_up", "1 while the bus's Redis answers (the memory bus: always 1).", registry=r
        )
        self.mcpl_hook_seconds = Histogram(
            "switchboard_mcpl_hook_seconds",
            "Time one backend took to answer a context hook.",
            ["hook"],
            registry=r,
        )

        # Config reloads (gateway/reload_status.py): a refused file keeps the running config.
        self.config_reloads = Counter(
            "switchboard_config_reloads_total",
            "Config reload attempts, by outcome (ok, failed).",
            ["outcome"],
            registry=r,
        )
        self.config_last_reload_success = Gauge(
            "switchboard_config_last_reload_success",
            "1 if the last config reload was applied (or none was tried yet), 0 if it was refused.",
            registry=r,
        )

        # Identity (issue 17): the gateway's own exchanges with the authorization server.
        self.auth_exchanges = Counter(
            "switchboard_auth_exchanges_total",
            "Exchanges with the authorization server, by exchange (jwks, introspection) and outcome "
            "(jwks: ok, failed; introspection: active, inactive, unavailable).",
            ["exchange", "outcome"],
            registry=r,
        )

        # The MCP semantic conventions' operation durations (issue 16), observed on every call with or
        # without OpenTelemetry: a light collector (gateway/loop_metrics.py), not a Histogram.
        self.mcp_server_duration = LoopHistogram(
            "mcp_server_operation_duration_seconds",
            "MCP request duration as the gateway's clients see it (mcp.server.operation.duration).",
            ["mcp_method_name", "error_type"],
        )
        self.mcp_client_duration = LoopHistogram(
            "mcp_client_operation_duration_seconds",
            "Duration of the gateway's requests to its backends (mcp.client.operation.duration).",
            ["mcp_method_name", "backend", "error_type"],
        )
        r.register(self.mcp_server_duration)
        r.register(self.mcp_client_duration)
        # (method, backend, outcome, error_type) -> the live cells ``observe_call`` updates. Bounded
        # as the series are: known methods or ``other``, configured backends, outcome words, codes.
        self._calls: dict[tuple[str, str, str, str], _CallCells] = {}
        # Both histograms' bucket of a duration from one bisect: on the union of their bounds, then a
        # precomputed index into each (no bound of either lies between two neighbours of the union).
        self._call_bounds, self._latency_at, self._server_at = _merged(
            self.latency.bounds, self.mcp_server_duration.bounds
        )
        # Backend calls: the client-duration series of each label set, kept (as ``_calls``).
        self._clients: dict[tuple[str, str, str], list[float]] = {}
        self._client_bounds = self.mcp_client_duration.bounds

    def observe_call(self, method: str, backend: str, outcome: str, error_type: str, seconds: float) -> None:
        """One client request answered: ``observe_request(method, backend, outcome, seconds)`` and
        ``observe_server(method, error_type, seconds)`` in one dict lookup."""
        cells = self._calls.get((method, backend, outcome, error_type))
        if cells is None:
            cells = self._call_cells(method, backend, outcome, error_type)
        count, latency, server = cells
        count[0] += 1
        at = bisect_left(self._call_bounds, seconds)
        latency[self._latency_at[at]] += 1
        latency[-1] += seconds
        server[self._server_at[at]] += 1
        server[-1] += seconds

    def _call_cells(self, method: str, backend: str, outcome: str, error_type: str) -> _CallCells:
        cells = (
            self.requests.cell((method, backend, outcome)),
            self.latency.series((method, backend)),
            self.mcp_server_duration.series((method, error_type)),
        )
        self._calls[(method, backend, outcome, error_type)] = cells
        return cells

    def observe_server(self, method: str, error_type: str, seconds: float) -> None:
        """One client request answered (``method``: a known method or ``other``; ``error_type``: "" if ok)."""
        self.mcp_server_duration.observe((method, error_type), seconds)

    def observe_client(self, method: str, backend: str, error_type: str, seconds: float) -> None:
        """One request to a backend answered (or failed): ``mcp_client_duration.observe`` on a kept
        series (one frame less on every forwarded call)."""
        key = (method, backend, error_type)
        series = self._clients.get(key)
        if series is None:
            series = self._clients[key] = self.mcp_client_duration.series(key)
        series[bisect_left(self._client_bounds, seconds)] += 1
        series[-1] += seconds

    def watch_bus(self, stats: Callable[[], Mapping[str, int]]) -> None:
        """``switchboard_bus_degraded_total{kind}``: bus operations served locally while Redis was away."""
        self.registry.register(_BusStats(stats))

    def observe_request(self, method: str, backend: str, outcome: str, seconds: float | None) -> None:
        """Count one handled request (and its latency)."""
        self.requests.inc((method, backend, outcome))
        if seconds is not None:
            self.latency.observe((method, backend), seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)


def _merged(a: tuple[float, ...], b: tuple[float, ...]) -> tuple[tuple[float, ...], tuple[int, ...], tuple[int, ...]]:
    """The union of two sorted bounds, and for each ``bisect_left`` index into it the one into ``a`` and into ``b``."""
    union = tuple(sorted({*a, *b}))
    edges = (*union, float("inf"))  # index len(union): above every bound, the +Inf bucket of both
    return union, tuple(bisect_left(a, e) for e in edges), tuple(bisect_left(b, e) for e in edges)


# The request counter's cell, the duration histogram's series, the server-duration histogram's series.
_CallCells = tuple[list[float], list[float], list[float]]


class _BusStats:
    """A collector of the bus's own counters (read when scraped)."""

    def __init__(self, stats: Callable[[], Mapping[str, int]]) -> None:
        self._stats = stats

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(
            "switchboard_bus_degraded", "Bus operations while Redis was away, by kind.", labels=["kind"]
        )
        for kind, value in self._stats().items():
            family.add_metric([kind], value)
        yield family
