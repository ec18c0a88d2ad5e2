"""Where a gateway's tail latency comes from: the gateway run with probes, and their summary (issue 15, ADR 0017).

``run`` starts the gateway (``switchboard run``'s arguments) with four probes, written as JSON to
``TAIL_PROBE_OUT`` (default ``tail_probe.json``) when the process exits (SIGTERM is a clean exit):

- every run of the cyclic garbage collector: wall time, generation, duration, objects collected
  (``gc.callbacks``); a collection stops the event loop, and every request in flight waits;
- every lean request's residence in the gateway, from its headers parsed to its answer handed to
  the transport, and the connection that carried it (fairness: does one connection starve?);
- the event loop's lag: how late a 1 ms timer fires (``asyncio.sleep``), i.e. how long one loop
  iteration keeps the loop from getting back to a ready timer (its share of a request's wait).

The probes cost a little CPU per request (a clock reading, a list append); compare trees with the
probes in both. ``summary OUT --since T0 --until T1`` prints the probes of a window (wall-clock
seconds, e.g. the measured wrk run): collections per 10k calls and their pauses, percentiles of
residence and loop lag, requests per connection.

Run: ``.venv/bin/python bench/tail_probe.py run -c sb.yaml --port 8787`` (from the tree's root),
then ``python bench/tail_probe.py summary tail_probe.json --since 1764000000 --until 1764000008``.
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import gc
import json
import os
import sys
import time
from array import array
from pathlib import Path
from typing import Any

_MAX_EVENTS = 2_000_000  # bounded: a long run keeps its first events


def _install(out: str) -> None:
    from gateway import collector
    from gateway.transports.http_protocol import CoalescingHttpToolsProtocol as Protocol

    collections_run: list[tuple[float, int, float, int]] = []
    # Arrays, not lists of tuples: a tuple kept per request would itself feed the collector.
    residence_at, residence, residence_on = array("d"), array("d"), array("q")
    lags_at, lags = array("d"), array("d")
    started = [0.0]
    clock = time.perf_counter

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[0] = clock()
        elif len(collections_run) < _MAX_EVENTS:
            collections_run.append((time.time(), info["generation"], clock() - started[0], info["collected"]))

    gc.callbacks.append(on_gc)

    lean_start = Protocol._lean_start
    response_complete = Protocol.on_response_complete

    def probed_lean_start(self: Any) -> bool:
        t0 = clock()
        ok = lean_start(self)
        if ok:
            self.cycle.probe_t0 = t0
        return ok

    def probed_response_complete(self: Any) -> None:
        t0 = getattr(self.cycle, "probe_t0", None)
        if t0 is not None and len(residence) < _MAX_EVENTS:
            residence_at.append(time.time())
            residence.append(clock() - t0)
            residence_on.append(id(self))
        response_complete(self)

    Protocol._lean_start = probed_lean_start  # type: ignore[method-assign]
    Protocol.on_response_complete = probed_response_complete  # type: ignore[method-assign]

    async def ticker() -> None:
        while len(lags) < _MAX_EVENTS:
            t0 = clock()
            await asyncio.sleep(0.001)
            lags_at.append(time.time())
            lags.append(clock() - t0 - 0.001)

    tune = collector.tune_collector
    background: list[asyncio.Task[None]] = []

    def tune_and_tick() -> None:  # called once in the running loop, after the app is built (gateway/cli.py)
        tune()
        background.append(asyncio.get_running_loop().create_task(ticker()))

    collector.tune_collector = tune_and_tick

    def dump() -> None:
        with open(out, "w") as f:
            json.dump(
                {
                    "collections": collections_run,
                    "residence": list(zip(residence_at, residence, residence_on, strict=True)),
                    "lags": list(zip(lags_at, lags, strict=True)),
                },
                f,
            )

    atexit.register(dump)


def _percentiles(values: list[float]) -> str:
    if not values:
        return "none"
    ordered = sorted(values)
    n = len(ordered)
    shown = [f"p{p}={ordered[min(n - 1, int(n * p / 100))] * 1e3:.3f}" for p in (50, 90, 99, 99.9)]
    return " ".join(shown) + f" max={ordered[-1] * 1e3:.3f} ms (n={n})"


def summary(path: str, since: float, until: float) -> str:
    data = json.loads(Path(path).read_text())
    residence = [e for e in data["residence"] if since <= e[0] <= until]
    calls = max(1, len(residence))
    lines = []
    runs = [e for e in data["collections"] if since <= e[0] <= until]
    for generation in (0, 1, 2):
        mine = [e for e in runs if e[1] == generation]
        pauses = [e[2] for e in mine]
        mean = sum(pauses) / len(pauses) * 1e3 if pauses else 0.0
        worst = max(pauses) * 1e3 if pauses else 0.0
        lines.append(
            f"gen{generation} collections: {len(mine)} ({len(mine) * 10_000 / calls:.2f} per 10k calls), "
            f"pause mean {mean:.3f} ms, max {worst:.3f} ms, {sum(e[3] for e in mine)} objects collected"
        )
    per_connection = sorted(collections.Counter(e[2] for e in residence).values())
    if per_connection:
        lines.append(
            f"requests per connection ({len(per_connection)} connections): min {per_connection[0]}, "
            f"median {per_connection[len(per_connection) // 2]}, max {per_connection[-1]}"
        )
    lines.append("residence (headers parsed -> answer written): " + _percentiles([e[1] for e in residence]))
    lines.append("loop lag (1 ms timer): " + _percentiles([e[1] for e in data["lags"] if since <= e[0] <= until]))
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if argv[:1] == ["summary"]:
        import argparse

        parser = argparse.ArgumentParser(prog="tail_probe.py summary")
        parser.add_argument("path")
        parser.add_argument("--since", type=float, default=0.0)
        parser.add_argument("--until", type=float, default=float("inf"))
        args = parser.parse_args(argv[1:])
        print(summary(args.path, args.since, args.until))
        return 0
    sys.path.insert(0, os.getcwd())  # the tree whose gateway runs: the current directory
    _install(os.environ.get("TAIL_PROBE_OUT", "tail_probe.json"))
    from gateway.cli import main as gateway_main

    return gateway_main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
