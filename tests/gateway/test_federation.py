"""gateway/federation.py: naming modes, merged catalogs with collisions, cached paginated lists, rewriting."""

from __future__ import annotations

import asyncio
import copy
import logging
from typing import Any

import pytest
from hypothesis import given, strategies as st

from gateway import federation
from gateway.federation import BackendCatalog, Namer, View, rewrite_result

# ---- Namer -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "backends", "prefixed"),
    [
        ("always", ("a",), True),
        ("always", ("a", "b"), True),
        ("conditional", ("a",), False),
        ("conditional", ("a", "b"), True),
        ("never", ("a",), False),
        ("never", ("a", "b"), False),
    ],
)
def test_prefixing_by_mode(mode: str, backends: tuple[str, ...], prefixed: bool) -> None:
    namer = Namer(mode, "__", backends)
    assert namer.prefixed is prefixed
    assert namer.name_out("a", "echo") == ("a__echo" if prefixed else "echo")
    assert namer.uri_out("a", "file:///x") == ("a+file:///x" if prefixed else "file:///x")


def test_prefixed_name_in() -> None:
    namer = Namer("always", "__", ("a", "web-2"))
    assert namer.name_in("a__echo") == ("a", "echo")
    assert namer.name_in("web-2__search") == ("web-2", "search")
    # Only the first separator splits: the rest belongs to the backend's own name.
    assert namer.name_in("a__my__tool") == ("a", "my__tool")
    assert namer.name_in("zz__echo") is None  # unknown backend
    assert namer.name_in("echo") is None  # missing separator
    assert namer.name_in("a__") is None  # nothing after the separator
    assert namer.name_in("__echo") is None
    assert namer.name_in("") is None


def test_prefixed_uri_in() -> None:
    namer = Namer("always", "__", ("a", "web-2"))
    assert namer.uri_in("a+file:///x") == ("a", "file:///x")
    assert namer.uri_in("web-2+https://h/p?q=1") == ("web-2", "https://h/p?q=1")
    assert namer.uri_in("a+git+https://h/r") == ("a", "git+https://h/r")
    assert namer.uri_in("zz+file:///x") is None  # unknown backend
    assert namer.uri_in("file:///x") is None  # no prefix
    assert namer.uri_in("a+") is None
    assert namer.uri_in("A+file:///x") is None


def test_unprefixed_single_backend_owns_everything() -> None:
    namer = Namer("conditional", "__", ("solo",))
    assert namer.sole == "solo"
    assert namer.name_in("echo") == ("solo", "echo")
    assert namer.name_in("solo__echo") == ("solo", "solo__echo")  # not prefixed: taken as is
    assert namer.uri_in("file:///x") == ("solo", "file:///x")


def test_never_with_several_backends_defers_to_the_catalog() -> None:
    namer = Namer("never", "__", ("a", "b"))
    assert namer.sole is None
    assert namer.name_in("echo") is None
    assert namer.name_in("a__echo") is None
    assert namer.uri_in("a+file:///x") is None


def test_other_separators() -> None:
    namer = Namer("always", "::", ("a", "b"))
    assert namer.name_out("b", "t") == "b::t"
    assert namer.name_in("b::t") == ("b", "t")
    assert namer.name_in("b__t") is None


backend_names = st.from_regex(r"\A[a-z0-9]([a-z0-9-]{0,10}[a-z0-9])?\Z")
tool_names = st.text(min_size=1)
uris = st.text(min_size=1)


@given(st.lists(backend_names, min_size=1, max_size=4, unique=True), st.data())
def test_name_and_uri_round_trip(backends: list[str], data: st.DataObject) -> None:
    mode = data.draw(st.sampled_from(["always", "conditional", "never"]))
    separator = data.draw(st.sampled_from(["__", "::", "."]))
    namer = Namer(mode, separator, tuple(backends))
    backend = data.draw(st.sampled_from(backends))
    name, uri = data.draw(tool_names), data.draw(uris)
    if namer.prefixed or len(backends) == 1:
        assert namer.name_in(namer.name_out(backend, name)) == (backend, name)
        assert namer.uri_in(namer.uri_out(backend, uri)) == (backend, uri)
    else:
        assert namer.name_out(backend, name) == name
        assert namer.uri_out(backend, uri) == uri
        assert namer.name_in(name) is None


# ---- View.merge ------------------------------------------------------------------------------


def tools(*names: str) -> list[dict[str, Any]]:
    return [{"name": n, "description": f"the {n} tool", "inputSchema": {"type": "object"}} for n in names]


def test_merge_prefixes_and_indexes() -> None:
    view = View("all", ("a", "b"), Namer("conditional", "__", ("a", "b")))
    a_tools, b_tools = tools("echo", "add"), tools("echo")
    before = copy.deepcopy((a_tools, b_tools))
    merged = view.merge("tools", [("a", a_tools), ("b", b_tools)])
    assert [t["name"] for t in merged.items] == ["a__echo", "a__add", "b__echo"]
    assert merged.items[0]["description"] == "the echo tool"
    assert merged.index == {"a__echo": ("a", "echo"), "a__add": ("a", "add"), "b__echo": ("b", "echo")}
    assert merged.collisions == {}
    assert view.merged["tools"] is merged
    assert (a_tools, b_tools) == before  # the backends' own lists are never modified


def test_merge_unprefixed_keeps_the_same_items() -> None:
    view = View("solo", ("a",), Namer("conditional", "__", ("a",)))
    items = tools("echo")
    merged = view.merge("tools", [("a", items)])
    assert merged.items[0] is items[0]
    assert merged.index == {"echo": ("a", "echo")}


def test_merge_collisions_are_withheld_and_reported_once(caplog: pytest.LogCaptureFixture) -> None:
    view = View("all", ("a", "b", "c"), Namer("never", "__", ("a", "b", "c")))
    per_backend = [("a", tools("echo", "add")), ("b", tools("echo", "mul")), ("c", tools("echo"))]
    with caplog.at_level(logging.ERROR, logger="gateway.federation"):
        merged = view.merge("tools", per_backend)
        view.merge("tools", per_backend)
    assert [t["name"] for t in merged.items] == ["add", "mul"]
    assert "echo" not in merged.index
    assert merged.index == {"add": ("a", "add"), "mul": ("b", "mul")}
    assert merged.collisions == {"echo": ["a", "b", "c"]}
    reports = [r for r in caplog.records if "offered by several backends" in r.getMessage()]
    assert len(reports) == 1
    assert "'echo'" in reports[0].getMessage() and "a, b, c" in reports[0].getMessage()


def test_merge_duplicate_within_one_backend_is_not_a_collision() -> None:
    view = View("all", ("a", "b"), Namer("never", "__", ("a", "b")))
    merged = view.merge("tools", [("a", tools("echo", "echo")), ("b", [])])
    assert [t["name"] for t in merged.items] == ["echo"]
    assert merged.collisions == {}


def test_merge_resources_and_templates_rewrite_uris() -> None:
    view = View("all", ("a", "b"), Namer("always", "__", ("a", "b")))
    resources = view.merge("resources", [("a", [{"uri": "file:///x", "name": "x"}]), ("b", [{"uri": "file:///x"}])])
    assert [r["uri"] for r in resources.items] == ["a+file:///x", "b+file:///x"]
    assert resources.items[0]["name"] == "x"  # the name of a resource is not its identity
    assert resources.index["b+file:///x"] == ("b", "file:///x")
    templates = view.merge("resourceTemplates", [("a", [{"uriTemplate": "db://{table}", "name": "t"}])])
    assert templates.items == [{"uriTemplate": "a+db://{table}", "name": "t"}]
    assert templates.index == {"a+db://{table}": ("a", "db://{table}")}


def test_merge_prompts() -> None:
    view = View("all", ("a", "b"), Namer("always", "-", ("a", "b")))
    merged = view.merge("prompts", [("a", [{"name": "greet"}]), ("b", [{"name": "greet"}])])
    assert merged.index == {"a-greet": ("a", "greet"), "b-greet": ("b", "greet")}


def test_merged_index_agrees_with_name_in() -> None:
    namer = Namer("always", "__", ("a", "b"))
    view = View("all", ("a", "b"), namer)
    merged = view.merge("tools", [("a", tools("x", "y")), ("b", tools("x"))])
    for exposed, owner in merged.index.items():
        assert namer.name_in(exposed) == owner


# ---- BackendCatalog --------------------------------------------------------------------------


class FakeBackend:
    """An async ``fetch`` serving pages of a list; records every call."""

    def __init__(self, pages: dict[str | None, dict[str, Any]]) -> None:
        self.pages = pages
        self.calls: list[tuple[str, dict[str, Any] | None]] = []

    async def fetch(self, method: str, params: dict[str, Any] | None) -> dict[str, Any]:
        self.calls.append((method, params))
        await asyncio.sleep(0)
        cursor = params["cursor"] if params else None
        return self.pages[cursor]


async def test_catalog_follows_pagination() -> None:
    backend = FakeBackend(
        {
            None: {"tools": tools("a", "b"), "nextCursor": "p2"},
            "p2": {"tools": tools("c"), "nextCursor": "p3"},
            "p3": {"tools": tools("d")},
        }
    )
    catalog = BackendCatalog("x", ttl_s=30)
    items = await catalog.get("tools", backend.fetch)
    assert [t["name"] for t in items] == ["a", "b", "c", "d"]
    assert backend.calls == [("tools/list", None), ("tools/list", {"cursor": "p2"}), ("tools/list", {"cursor": "p3"})]


async def test_catalog_uses_the_right_method_and_key_per_kind() -> None:
    for kind, method in federation.METHOD_OF.items():
        key = federation.KEY_OF[kind]
        backend = FakeBackend({None: {kind: [{key: "k1"}, {key: 5}, {"other": "x"}, "junk"], "nextCursor": ""}})
        items = await BackendCatalog("x", 30).get(kind, backend.fetch)
        assert items == [{key: "k1"}]  # items without a string identity are dropped
        assert backend.calls == [(method, None)]


async def test_catalog_tolerates_a_missing_or_malformed_list() -> None:
    backend = FakeBackend({None: {"tools": "nope", "nextCursor": "p2"}, "p2": {}})
    assert await BackendCatalog("x", 30).get("tools", backend.fetch) == []
    assert len(backend.calls) == 2


async def test_catalog_stops_after_max_pages(caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(federation, "_MAX_PAGES", 5)
    calls = 0

    async def endless(method: str, params: dict[str, Any] | None) -> dict[str, Any]:
        nonlocal calls
        calls += 1
        return {"tools": tools(f"t{calls}"), "nextCursor": f"c{calls}"}

    with caplog.at_level(logging.WARNING, logger="gateway.federation"):
        items = await BackendCatalog("loopy", 30).get("tools", endless)
    assert calls == 5
    assert [t["name"] for t in items] == ["t1", "t2", "t3", "t4", "t5"]
    assert any("pagination stopped after 5 pages" in r.getMessage() for r in caplog.records)


async def test_catalog_default_max_pages_is_bounded() -> None:
    calls = 0

    async def endless(method: str, params: dict[str, Any] | None) -> dict[str, Any]:
        nonlocal calls
        calls += 1
        return {"tools": [], "nextCursor": "again"}

    await BackendCatalog("loopy", 30).get("tools", endless)
    assert calls == federation._MAX_PAGES == 100


async def test_catalog_caches_within_ttl(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr(federation.time, "monotonic", lambda: now[0])
    backend = FakeBackend({None: {"tools": tools("a")}})
    catalog = BackendCatalog("x", ttl_s=30)
    assert catalog.peek("tools") is None
    first = await catalog.get("tools", backend.fetch)
    now[0] += 29
    assert await catalog.get("tools", backend.fetch) is first
    assert len(backend.calls) == 1
    assert catalog.peek("tools") is first
    now[0] += 2  # past the TTL
    await catalog.get("tools", backend.fetch)
    assert len(backend.calls) == 2


async def test_catalog_ttl_zero_never_caches() -> None:
    backend = FakeBackend({None: {"tools": tools("a")}})
    catalog = BackendCatalog("x", ttl_s=0)
    await catalog.get("tools", backend.fetch)
    await catalog.get("tools", backend.fetch)
    assert len(backend.calls) == 2


async def test_catalog_invalidate() -> None:
    backend = FakeBackend({None: {"tools": tools("a"), "prompts": [{"name": "p"}]}})
    catalog = BackendCatalog("x", ttl_s=30)
    await catalog.get("tools", backend.fetch)
    await catalog.get("prompts", backend.fetch)
    generation = catalog.generation
    catalog.invalidate("tools")
    assert catalog.generation == generation + 1
    assert catalog.peek("tools") is None and catalog.peek("prompts") is not None
    await catalog.get("tools", backend.fetch)
    await catalog.get("prompts", backend.fetch)
    assert [m for m, _ in backend.calls] == ["tools/list", "prompts/list", "tools/list"]
    catalog.invalidate()
    assert catalog.peek("tools") is None and catalog.peek("prompts") is None


async def test_invalidate_during_fetch_makes_the_result_uncached() -> None:
    started, release = asyncio.Event(), asyncio.Event()
    calls = 0

    async def slow(method: str, params: dict[str, Any] | None) -> dict[str, Any]:
        nonlocal calls
        calls += 1
        started.set()
        await release.wait()
        return {"tools": tools(f"v{calls}")}

    catalog = BackendCatalog("x", ttl_s=30)
    task = asyncio.create_task(catalog.get("tools", slow))
    await started.wait()
    catalog.invalidate("tools")  # a list_changed arrives while the old list is in flight
    release.set()
    stale = await task
    assert [t["name"] for t in stale] == ["v1"]  # the caller still gets an answer
    assert catalog.peek("tools") is None  # but it is not kept
    fresh = await catalog.get("tools", slow)
    assert [t["name"] for t in fresh] == ["v2"]
    assert catalog.peek("tools") is fresh


async def test_concurrent_gets_share_one_fetch() -> None:
    backend = FakeBackend({None: {"tools": tools("a")}})
    catalog = BackendCatalog("x", ttl_s=30)
    results = await asyncio.gather(*(catalog.get("tools", backend.fetch) for _ in range(5)))
    assert len(backend.calls) == 1
    assert all(r is results[0] for r in results)


# ---- rewrite_result --------------------------------------------------------------------------

PREFIXED = Namer("always", "__", ("a", "b"))
BARE = Namer("conditional", "__", ("a",))


def test_rewrite_tools_call_links_and_embedded_resources() -> None:
    result = {
        "content": [
            {"type": "text", "text": "see file:///x"},
            {"type": "resource_link", "uri": "file:///x", "name": "x"},
            {"type": "resource", "resource": {"uri": "mem://y", "text": "hi"}},
            {"type": "resource", "resource": {"text": "no uri"}},
            {"type": "image", "data": "...", "mimeType": "image/png"},
            "junk",
        ],
        "isError": False,
    }
    before = copy.deepcopy(result)
    out = rewrite_result(PREFIXED, "b", "tools/call", result)
    assert out["content"] == [
        {"type": "text", "text": "see file:///x"},
        {"type": "resource_link", "uri": "b+file:///x", "name": "x"},
        {"type": "resource", "resource": {"uri": "b+mem://y", "text": "hi"}},
        {"type": "resource", "resource": {"text": "no uri"}},
        {"type": "image", "data": "...", "mimeType": "image/png"},
        "junk",
    ]
    assert out["isError"] is False
    assert result == before  # the backend's result is not modified in place
    assert PREFIXED.uri_in(out["content"][1]["uri"]) == ("b", "file:///x")


def test_rewrite_prompts_get() -> None:
    result = {
        "description": "d",
        "messages": [
            {"role": "user", "content": {"type": "text", "text": "hi"}},
            {"role": "user", "content": {"type": "resource", "resource": {"uri": "file:///p", "text": "t"}}},
            {"role": "assistant", "content": {"type": "resource_link", "uri": "file:///q", "name": "q"}},
            "junk",
        ],
    }
    out = rewrite_result(PREFIXED, "a", "prompts/get", result)
    assert out["description"] == "d"
    assert out["messages"][0] == result["messages"][0]
    assert out["messages"][1]["content"]["resource"]["uri"] == "a+file:///p"
    assert out["messages"][2]["content"]["uri"] == "a+file:///q"
    assert out["messages"][3] == "junk"
    assert result["messages"][1]["content"]["resource"]["uri"] == "file:///p"


def test_rewrite_resources_read() -> None:
    result = {"contents": [{"uri": "file:///x", "text": "1"}, {"blob": "AA=="}, 3]}
    out = rewrite_result(PREFIXED, "a", "resources/read", result)
    assert out["contents"] == [{"uri": "a+file:///x", "text": "1"}, {"blob": "AA=="}, 3]


def test_rewrite_is_a_no_op_when_not_prefixed_or_not_applicable() -> None:
    result = {"content": [{"type": "resource_link", "uri": "file:///x"}]}
    assert rewrite_result(BARE, "a", "tools/call", result) is result
    assert rewrite_result(PREFIXED, "a", "tools/list", result) is result
    assert rewrite_result(PREFIXED, "a", "tools/call", None) is None
    assert rewrite_result(PREFIXED, "a", "tools/call", ["x"]) == ["x"]
    odd = {"content": "not a list"}
    assert rewrite_result(PREFIXED, "a", "tools/call", odd) is odd
