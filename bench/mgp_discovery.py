"""MGP §16 tool discovery: search latency over 1,000 synthetic tools, and the cost of (re)building the index.

Pure in-process (no gateway, no sockets): a synthetic catalogue of ``--tools`` tools over ``--backends``
backends (names, titles, descriptions and parameters drawn from a fixed vocabulary with a seeded RNG), then
``--queries`` searches of one to six words (short ones exercise prefix matching), with and without a
visibility predicate and filters. Prints p50/p99/max of a search, of a full rebuild and of one backend's
incremental ``replace_backend``. Run: ``.venv/bin/python bench/mgp_discovery.py [--tools N] [--queries Q]``.

``--gateway`` adds what a client pays end to end inside the gateway: ``mgp/tools/discover`` through
``Router.handle`` of a real Gateway (gateway/mgp/discovery_service.py) whose ``--backends`` backends are
this script in ``--serve K`` mode, stdio subprocesses serving their share of the same catalogue. On top of
the search it measures the router (decode, admission, audit), the index's freshness check and the chain's
visibility of every tool (the ``tools/list`` rule), which dominates at 1,000 tools.
"""

from __future__ import annotations

import argparse
import asyncio
import json
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
SELF = str(Path(__file__).resolve())


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


def serve(args: argparse.Namespace) -> None:
    """``--serve K``: a stdio MCP backend (JSON lines) listing backend K's share of the catalogue."""
    tools = catalogue(args.tools, args.backends, random.Random(args.seed))[f"backend{args.serve}"]
    for line in sys.stdin:
        if not line.strip():
            continue
        message = json.loads(line)
        if "id" not in message or "method" not in message:
            continue
        method, params = message["method"], message.get("params") or {}
        answer: dict[str, Any] = {"jsonrpc": "2.0", "id": message["id"]}
        if method == "initialize":
            answer["result"] = {
                "protocolVersion": params.get("protocolVersion", "2025-06-18"),
                "capabilities": {"tools": {"listChanged": True}},
                "serverInfo": {"name": f"backend{args.serve}", "version": "1"},
            }
        elif method == "tools/list":
            answer["result"] = {"tools": tools}
        elif method == "ping":
            answer["result"] = {}
        else:
            answer["error"] = {"code": -32601, "message": f"Method not found: {method}"}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


async def through_gateway(args: argparse.Namespace, queries: list[str]) -> list[float]:
    """Seconds per ``mgp/tools/discover`` through a real Gateway's router (see the module docstring)."""
    # Imported here: the --serve subprocesses (one per backend) need none of the gateway.
    from gateway import jsonrpc
    from gateway.config import Config
    from gateway.core import Gateway
    from policies.auth import Credentials

    command = [SELF, "--tools", str(args.tools), "--backends", str(args.backends)]
    command += ["--seed", str(args.seed)]
    backends = {
        f"backend{b}": {"transport": "stdio", "command": sys.executable, "args": [*command, "--serve", str(b)]}
        for b in range(args.backends)
    }
    gw = Gateway(Config.model_validate({"backends": backends, "federation": {"prefix": "always"}}))
    await gw.start()
    try:
        for conn in gw.connections.values():
            if not await conn.wait_ready(30):
                raise SystemExit(f"backend {conn.name} did not start: {conn.last_error}")
        session = gw.open_session("bench", gw.federated, Credentials("anonymous", "anonymous"))
        mgp = {"mgp": {"version": "0.8.0", "extensions": ["tool_discovery"]}}
        init = {"protocolVersion": "2025-06-18", "capabilities": mgp, "clientInfo": {"name": "bench", "version": "1"}}
        await gw.router.handle(
            session,
            {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": init},
            jsonrpc.Shape.REQUEST,
            session.standalone,
        )
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        await gw.router.handle(session, note, jsonrpc.Shape.NOTIFICATION, session.standalone)
        samples = []
        for number, query in enumerate([*queries[:50], *queries]):  # the first 50: warm-up
            message = {"jsonrpc": "2.0", "id": number + 1, "method": "mgp/tools/discover", "params": {"query": query}}
            started = time.perf_counter()
            answer = await gw.router.handle(session, message, jsonrpc.Shape.REQUEST, session.standalone)
            elapsed = time.perf_counter() - started
            if answer is None or "result" not in answer:
                raise SystemExit(f"discover failed: {answer}")
            if number >= 50:
                samples.append(elapsed)
        return samples
    finally:
        await gw.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tools", type=int, default=1000)
    parser.add_argument("--backends", type=int, default=20)
    parser.add_argument("--queries", type=int, default=2000)
    parser.add_argument("--rebuilds", type=int, default=20)
    parser.add_argument("--seed", type=int, default=12)
    parser.add_argument("--gateway", action="store_true", help="also: mgp/tools/discover through a real Gateway")
    parser.add_argument("--serve", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve is not None:
        serve(args)
        return
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
    if args.gateway:
        print(f"  {'discover through the gateway':38} {percentiles(asyncio.run(through_gateway(args, queries)))}")


if __name__ == "__main__":
    main()
