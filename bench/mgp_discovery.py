"""MGP §16 tool discovery: search latency over 1,000 synthetic tools, and the cost of (re)building the index.

Pure in-process (no gateway, no sockets): a synthetic catalogue of ``--tools`` tools over ``--backends``
backends (names, titles, descriptions and parameters drawn from a fixed vocabulary with a seeded RNG), then
``--queries`` searches of one to six words (short ones exercise prefix matching), with and without a
visibility predicate and filters. Prints p50/p99/max of a search, of a full rebuild and of one backend's
incremental ``replace_backend``. Run: ``.venv/bin/python bench/mgp_discovery.py [--tools N] [--queries Q]``.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gateway.mgp.discovery import IndexedTool, ToolIndex

VERBS = "read write list create delete update search fetch send parse convert compute render query sync".split()
NOUNS = (
    "file directory issue ticket email message user account invoice payment image chart table row record "
    "calendar event page document repository branch commit container volume secret metric alert log report "
    "customer order product shipment weather forecast translation summary embedding vector index cache"
).split()
EXTRA = "quickly safely remote local cloud batch recursive paginated cached detailed raw json csv http sql".split()
RISKS = ["safe", "moderate", "dangerous", None]


def catalogue(tools: int, backends: int, rng: random.Random) -> dict[str, list[dict[str, Any]]]:
    lists: dict[str, list[dict[str, Any]]] = {f"backend{b}": [] for b in range(backends)}
    for number in range(tools):
        verb, noun = rng.choice(VERBS), rng.choice(NOUNS)
        words = [rng.choice(VERBS + NOUNS + EXTRA) for _ in range(rng.randint(8, 30))]
        tool: dict[str, Any] = {
            "name": f"{verb}_{noun}_{number}",
            "title": f"{verb.title()} {noun}",
            "description": f"{verb.title()} a {noun}. " + " ".join(words),
            "inputSchema": {
                "type": "object",
                "properties": {f"{rng.choice(NOUNS)}_{p}": {"type": "string"} for p in range(rng.randint(0, 5))},
            },
        }
        risk = rng.choice(RISKS)
        if risk:
            tool["security"] = {"risk_level": risk, "permissions_required": [f"{noun}.{verb}"]}
        lists[f"backend{number % backends}"].append(tool)
    return lists


def percentiles(samples: list[float]) -> str:
    ordered = sorted(samples)
    p50 = statistics.median(ordered)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return f"p50 {p50 * 1000:8.3f} ms   p99 {p99 * 1000:8.3f} ms   max {ordered[-1] * 1000:8.3f} ms"


def build(lists: dict[str, list[dict[str, Any]]]) -> ToolIndex:
    index = ToolIndex()
    for server_id, tools in lists.items():
        index.replace_backend(server_id, tools)
    return index


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tools", type=int, default=1000)
    parser.add_argument("--backends", type=int, default=20)
    parser.add_argument("--queries", type=int, default=2000)
    parser.add_argument("--rebuilds", type=int, default=20)
    parser.add_argument("--seed", type=int, default=12)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    lists = catalogue(args.tools, args.backends, rng)

    rebuilds = []
    for _ in range(args.rebuilds):
        started = time.perf_counter()
        index = build(lists)
        rebuilds.append(time.perf_counter() - started)
    one = next(iter(lists))
    replaces = []
    for _ in range(args.rebuilds * 5):
        started = time.perf_counter()
        index.replace_backend(one, lists[one])
        replaces.append(time.perf_counter() - started)

    vocabulary = VERBS + NOUNS + EXTRA
    queries = []
    for _ in range(args.queries):
        words = [rng.choice(vocabulary) for _ in range(rng.randint(1, 6))]
        if len(words) <= 2 and rng.random() < 0.5:
            words[-1] = words[-1][: max(2, len(words[-1]) // 2)]  # a typed-ahead prefix
        queries.append(" ".join(words))
    hidden = {f"backend{b}" for b in range(0, args.backends, 3)}

    def visible(tool: IndexedTool) -> bool:
        return tool.server_id not in hidden

    def filtered(query: str) -> object:
        return index.search(query, limit=5, visible=visible, risk_level_max="moderate")

    modes: list[tuple[str, Callable[[str], object]]] = [
        ("search (no filter)", lambda q: index.search(q, limit=5)),
        ("search + visibility", lambda q: index.search(q, limit=5, visible=visible)),
        ("search + visibility + risk<=moderate", filtered),
        ("discover (wire params)", lambda q: index.discover({"query": q, "max_results": 5})),
    ]
    print(f"MGP discovery: {len(index)} tools over {len(lists)} backends, {len(queries)} queries per mode")
    print(f"  {'full rebuild':38} {percentiles(rebuilds)}")
    print(f"  {'replace_backend (' + str(len(lists[one])) + ' tools)':38} {percentiles(replaces)}")
    for label, run in modes:
        for query in queries[:50]:  # warm-up
            run(query)
        samples = []
        for query in queries:
            started = time.perf_counter()
            run(query)
            samples.append(time.perf_counter() - started)
        print(f"  {label:38} {percentiles(samples)}")


if __name__ == "__main__":
    main()
