"""Per-request metrics kept on the event loop's thread, for Prometheus, at a few hundred ns per call.

The request counter and the duration histograms are updated on every call; ``prometheus_client``'s
Counter and Histogram take a lock per update and look the label child up per call (issue 15 measured
them among a call's costs). Here one update is a dict lookup and an addition (a histogram: a bisect
and two additions) on plain lists.

Invariants: updated and collected on the event loop's thread only (the gateway updates them in its
router and forwarder and serves ``/metrics`` on the same loop), so no lock is needed; a scrape sees
each series as one consistent snapshot because nothing runs between its reads. Label cardinality is
the caller's business (known methods or ``other``, configured backend names, a few outcome words).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Sequence

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily

# The convention's advisory boundaries (0.01 ... 300 s) with finer ones below 10 ms in front: a
# gateway's own share of a call is often under a millisecond, and the convention's boundaries stay
# a subset, so its aggregations still line up.
BUCKETS: tuple[float, ...] = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.02,
    0.05,
    0.1,
    0.2,
    0.5,
    1.0,
    2.0,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
)


class LoopHistogram:
    """A histogram family with fixed label names; register it on a ``CollectorRegistry``."""

    def __init__(self, name: str, documentation: str, labels: Sequence[str], buckets: Sequence[float] = BUCKETS):
        self.name = name
        self._doc = documentation
        self._labels = list(labels)
        self._bounds = tuple(buckets)
        # Per label values: the count of each bucket (not cumulative; then +Inf), then the sum.
        self._series: dict[tuple[str, ...], list[float]] = {}

    @property
    def bounds(self) -> tuple[float, ...]:
        return self._bounds

    def series(self, labels: tuple[str, ...]) -> list[float]:
        """The live list of one label set (made on first use): bucket counts, +Inf, then the sum. A
        caller that observes one label set often keeps it and updates it itself (``Metrics.observe_call``)."""
        series = self._series.get(labels)
        if series is None:
            series = self._series[labels] = [0] * (len(self._bounds) + 2)
        return series

    def observe(self, labels: tuple[str, ...], seconds: float) -> None:
        series = self._series.get(labels) or self.series(labels)
        series[bisect_left(self._bounds, seconds)] += 1
        series[-1] += seconds

    def describe(self) -> Iterator[HistogramMetricFamily]:
        yield HistogramMetricFamily(self.name, self._doc, labels=self._labels)

    def collect(self) -> Iterator[HistogramMetricFamily]:
        family = HistogramMetricFamily(self.name, self._doc, labels=self._labels)
        bounds = [*(_bound(b) for b in self._bounds), "+Inf"]
        for labels, series in list(self._series.items()):
            cumulative, buckets = 0.0, []
            for bound, count in zip(bounds, series[:-1], strict=True):
                cumulative += count
                buckets.append((bound, cumulative))
            family.add_metric(list(labels), buckets, series[-1])
        yield family


def _bound(value: float) -> str:
    """A bucket's ``le`` as prometheus_client writes it (``0.5``, ``1.0``)."""
    return repr(float(value))


class LoopCounter:
    """A counter family with fixed label names; register it on a ``CollectorRegistry`` (``name`` with or
    without ``_total``: the exposition writes it, as prometheus_client's counters do)."""

    def __init__(self, name: str, documentation: str, labels: Sequence[str]) -> None:
        self.name = name
        self._doc = documentation
        self._labels = list(labels)
        # Per label values, a one-item list: a caller may keep it (``cell``) and add to it in place.
        self._values: dict[tuple[str, ...], list[float]] = {}

    def cell(self, labels: tuple[str, ...]) -> list[float]:
        """The live one-item list holding the value of one label set (made on first use)."""
        cell = self._values.get(labels)
        if cell is None:
            cell = self._values[labels] = [0.0]
        return cell

    def inc(self, labels: tuple[str, ...], amount: float = 1.0) -> None:
        cell = self._values.get(labels) or self.cell(labels)
        cell[0] += amount

    def describe(self) -> Iterator[CounterMetricFamily]:
        yield CounterMetricFamily(self.name, self._doc, labels=self._labels)

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(self.name, self._doc, labels=self._labels)
        for labels, cell in list(self._values.items()):
            family.add_metric(list(labels), cell[0])
        yield family
