"""The MGP §16 tool-discovery index: tokenisation, BM25F ranking, filters, visibility, incremental updates."""

from __future__ import annotations

import math
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from gateway.mgp.discovery import (
    DiscoveryParamsError,
    IndexedTool,
    ToolIndex,
    parse_discover_params,
    risk_rank,
    tokenize,
)


def tool(name: str, description: str = "", **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "description": description}
    out.update(extra)
    return out


def params_schema(*names: str) -> dict[str, Any]:
    return {"type": "object", "properties": {name: {"type": "string"} for name in names}}


def names(result: Any) -> list[str]:
    return [entry["name"] for entry in result.tools]


# -- tokenisation ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("read_file", ["read", "file"]),
        ("readFile", ["read", "file"]),
        ("read-file", ["read", "file"]),
        ("filesystem.read_file", ["filesystem", "read", "file"]),
        ("getHTTPResponse_v2", ["get", "http", "response", "v", "2"]),
        ("XMLParser", ["xml", "parser"]),
        ("  Read THE File!  ", ["read", "the", "file"]),
        ("ファイル 読む", ["ファイル", "読む"]),
        ("", []),
        ("___--..", []),
    ],
)
def test_tokenize(text: str, expected: list[str]) -> None:
    assert tokenize(text) == expected


# -- ranking ---------------------------------------------------------------------------------------------------


def test_field_weights_name_over_title_over_description_over_parameters() -> None:
    index = ToolIndex()
    index.replace_backend(
        "b",
        [
            tool("gamma_tool", "does useful things well", inputSchema=params_schema("zebra")),
            tool("beta_tool", "does zebra things well"),
            tool("alpha_tool", "does useful things well", title="Zebra helper"),
            tool("zebra_tool", "does useful things well"),
            tool("delta_tool", "does useful things well"),
        ],
    )
    result = index.search("zebra", limit=10)
    assert names(result) == ["zebra_tool", "alpha_tool", "beta_tool", "gamma_tool"]
    scores = [entry["relevance_score"] for entry in result.tools]
    assert scores == sorted(scores, reverse=True) and len(set(scores)) == 4
    assert result.total_available == 5


def test_rare_term_outweighs_common_term() -> None:
    index = ToolIndex()
    index.replace_backend(
        "b",
        [tool(f"t{i}", "list items") for i in range(8)] + [tool("special", "list invoices")],
    )
    assert names(index.search("invoices list", limit=3))[0] == "special"


def test_exact_name_ranks_first_with_full_relevance() -> None:
    index = ToolIndex()
    index.replace_backend(
        "fs",
        [
            tool("read_file", "Return a path's bytes"),
            tool("file_reader_pro", "read file read file read file: read a file, read any file"),
        ],
    )
    for query in ("read_file", "read file", "readFile", "Read-File"):
        result = index.search(query, limit=2)
        assert names(result) == ["read_file", "file_reader_pro"]
        assert result.tools[0]["relevance_score"] == 1.0
        assert result.tools[1]["relevance_score"] < 1.0


def test_spec_example_read_file_before_grep() -> None:
    index = ToolIndex()
    index.replace_backend(
        "tool.terminal",
        [
            tool("grep", "Search file contents using pattern matching"),
            tool("read_file", "Read the contents of a file at the given path", inputSchema=params_schema("path")),
            tool("list_processes", "Show running processes"),
        ],
    )
    result = index.search("read file contents from disk")
    assert names(result) == ["read_file", "grep"]


def test_stopwords_do_not_change_the_winner() -> None:
    index = ToolIndex()
    index.replace_backend("b", [tool("send_email", "Send an email message"), tool("read_file", "Read a file")])
    assert names(index.search("please send the email to my boss"))[0] == "send_email"
    # a query of stopwords only still searches with them
    assert index.search("the").tools == []


def test_prefix_matching_for_short_queries_only() -> None:
    index = ToolIndex()
    index.replace_backend("b", [tool("calculator", "evaluate arithmetic expressions"), tool("weather", "forecast")])
    assert names(index.search("calc")) == ["calculator"]
    assert names(index.search("arith")) == ["calculator"]
    assert index.search("calc alpha beta gamma").tools == []  # four tokens: exact terms only
    assert index.search("c").tools == []  # one character never expands


def test_exact_match_beats_prefix_match() -> None:
    index = ToolIndex()
    index.replace_backend("b", [tool("log_viewer", "show logs"), tool("logistics", "ship parcels")])
    result = index.search("log")
    assert names(result) == ["log_viewer", "logistics"]


def test_no_match_and_empty_query() -> None:
    index = ToolIndex()
    index.replace_backend("b", [tool("zeta"), tool("alpha")])
    assert index.search("nothing here").tools == []
    browse = index.search("", limit=10)
    assert names(browse) == ["alpha", "zeta"]
    assert all(entry["relevance_score"] == 0.0 for entry in browse.tools)
    with pytest.raises(ValueError):
        index.search("x", limit=0)


# -- result shape ----------------------------------------------------------------------------------------------


def test_result_shape_is_the_spec_shape() -> None:
    index = ToolIndex()
    security = {"risk_level": "moderate", "permissions_required": ["filesystem.read"], "validator": "sandbox"}
    schema = params_schema("path")
    index.replace_backend(
        "tool.terminal",
        [tool("read_file", "Read a file", inputSchema=schema, security=security), tool("plain", "Read plain")],
    )
    wire = index.discover({"query": "read"})
    assert set(wire) == {"tools", "total_available", "search_strategy", "query_time_ms"}
    assert wire["search_strategy"] == "keyword" and wire["total_available"] == 2
    assert isinstance(wire["query_time_ms"], float) and wire["query_time_ms"] >= 0
    first = next(entry for entry in wire["tools"] if entry["name"] == "read_file")
    assert first == {
        "name": "read_file",
        "server_id": "tool.terminal",
        "description": "Read a file",
        "relevance_score": first["relevance_score"],
        "inputSchema": schema,
        "security": security,
    }
    plain = next(entry for entry in wire["tools"] if entry["name"] == "plain")
    assert "security" not in plain and plain["inputSchema"] == {"type": "object"}


def test_security_from_mgp_block_and_categories_keywords() -> None:
    entry = IndexedTool.from_tool(
        "tool.data",
        {
            "name": "stats.analyze_csv",
            "_mgp": {"security": {"risk_level": "safe"}, "categories": ["Analytics"], "keywords": ["statistics"]},
            "annotations": {"title": "Analyze CSV"},
        },
    )
    assert entry is not None
    assert entry.security == {"risk_level": "safe"} and entry.risk == 0
    assert entry.title == "Analyze CSV"
    assert entry.categories == ("analytics", "tool.data", "data", "stats")
    assert entry.keywords == ("statistics",)
    assert IndexedTool.from_tool("b", {"description": "nameless"}) is None
    assert IndexedTool.from_tool("b", {"name": ""}) is None


def test_semantic_falls_back_to_keyword_and_says_so() -> None:
    index = ToolIndex()
    index.replace_backend("b", [tool("read_file", "Read a file")])
    wire = index.discover({"query": "read", "strategy": "semantic"})
    assert wire["search_strategy"] == "semantic" and wire["fallback_strategy"] == "keyword"
    assert [entry["name"] for entry in wire["tools"]] == ["read_file"]


def test_category_strategy_lists_by_category() -> None:
    index = ToolIndex()
    index.replace_backend("fs", [tool("b_tool", categories=["filesystem"]), tool("a_tool", categories=["filesystem"])])
    index.replace_backend("net", [tool("fetch", categories=["network"])])
    wire = index.discover({"query": "filesystem", "strategy": "category"})
    assert [entry["name"] for entry in wire["tools"]] == ["a_tool", "b_tool"]
    wire = index.discover({"query": "", "strategy": "category", "filter": {"categories": ["network"]}})
    assert [entry["name"] for entry in wire["tools"]] == ["fetch"]


def test_parse_params() -> None:
    parsed = parse_discover_params({"query": "x"})
    assert parsed.max_results == 5 and parsed.strategy == "keyword" and parsed.status is None
    assert parse_discover_params({"query": "x", "max_results": 10_000}).max_results == 100
    assert parse_discover_params({"query": "x", "max_results": 0}).max_results == 1
    assert parse_discover_params({"query": "x", "max_results": 2.9}).max_results == 2
    full = parse_discover_params(
        {"query": "q", "filter": {"categories": ["fs"], "risk_level_max": "moderate", "status": "all"}}
    )
    assert full.categories == ("fs",) and full.risk_level_max == "moderate" and full.status == "all"
    for bad in (
        {"query": 3},
        {"query": "x", "strategy": "magic"},
        {"query": "x", "max_results": "5"},
        {"query": "x", "max_results": True},
        {"query": "x", "max_results": float("nan")},
        {"query": "x", "filter": []},
        {"query": "x", "filter": {"categories": "fs"}},
        {"query": "x", "filter": {"risk_level_max": "extreme"}},
        {"query": "x", "filter": {"status": "sleeping"}},
    ):
        with pytest.raises(DiscoveryParamsError):
            parse_discover_params(bad)


# -- filters ---------------------------------------------------------------------------------------------------


def risky_index() -> ToolIndex:
    index = ToolIndex()
    index.replace_backend(
        "b",
        [
            tool("file_safe", "file", security={"risk_level": "safe"}),
            tool("file_moderate", "file", security={"risk_level": "moderate"}),
            tool("file_dangerous", "file", security={"risk_level": "dangerous"}),
            tool("file_unknown", "file"),
            tool("file_weird", "file", security={"risk_level": "spicy"}),
            tool("file_escalated", "file", security={"risk_level": "safe", "effective_risk_level": "moderate"}),
        ],
    )
    return index


@pytest.mark.parametrize(
    ("ceiling", "expected"),
    [
        ("safe", {"file_safe"}),
        ("low", {"file_safe"}),
        ("moderate", {"file_safe", "file_moderate", "file_escalated"}),
        ("medium", {"file_safe", "file_moderate", "file_escalated"}),
        ("high", {"file_safe", "file_moderate", "file_escalated"}),
        ("dangerous", {"file_safe", "file_moderate", "file_escalated", "file_dangerous", "file_unknown", "file_weird"}),
        ("critical", {"file_safe", "file_moderate", "file_escalated", "file_dangerous", "file_unknown", "file_weird"}),
        ("MODERATE", {"file_safe", "file_moderate", "file_escalated"}),
    ],
)
def test_risk_level_max(ceiling: str, expected: set[str]) -> None:
    result = risky_index().search("file", limit=50, risk_level_max=ceiling)
    assert set(names(result)) == expected
    assert result.total_available == len(expected)


def test_risk_rank() -> None:
    assert risk_rank(None) == risk_rank({}) == risk_rank({"risk_level": 3}) == 3
    assert risk_rank({"risk_level": "safe"}) == 0
    assert risk_rank({"risk_level": "dangerous", "effective_risk_level": "safe"}) == 3
    with pytest.raises(ValueError):
        risky_index().search("file", risk_level_max="extreme")


def test_category_filter_explicit_derived_and_hierarchical() -> None:
    index = ToolIndex()
    index.replace_backend("tool.terminal", [tool("read_file", "read", categories=["filesystem.read"])])
    index.replace_backend("web", [tool("fetch_page", "read a page", categories=["Network/HTTP"])])
    index.replace_backend("db", [tool("sql.query", "read rows")])
    assert names(index.search("read", categories=["filesystem"])) == ["read_file"]
    assert names(index.search("read", categories=["FILESYSTEM.READ"])) == ["read_file"]
    assert names(index.search("read", categories=["files"])) == []  # not a segment boundary
    assert names(index.search("read", categories=["network"])) == ["fetch_page"]
    assert names(index.search("read", categories=["terminal"])) == ["read_file"]  # backend id segment
    assert names(index.search("read", categories=["tool.terminal"])) == ["read_file"]
    assert names(index.search("read", categories=["sql"])) == ["sql.query"]  # name namespace
    assert set(names(index.search("read", categories=["db", "web"]))) == {"sql.query", "fetch_page"}


def test_status_filter() -> None:
    index = ToolIndex()
    index.replace_backend("up", [tool("up_tool", "ping")])
    index.replace_backend("down", [tool("down_tool", "ping")], status="disconnected")
    assert names(index.search("ping")) == ["up_tool"]
    assert names(index.search("ping", status="connected")) == ["up_tool"]
    assert names(index.search("ping", status="disconnected")) == ["down_tool"]
    assert set(names(index.search("ping", status="all"))) == {"up_tool", "down_tool"}
    index.set_status("down", "connected")
    index.set_status("up", "disconnected")
    assert names(index.search("ping")) == ["down_tool"]
    assert index.backends() == {"up": "disconnected", "down": "connected"}
    with pytest.raises(ValueError):
        index.set_status("up", "asleep")
    with pytest.raises(ValueError):
        index.search("ping", status="asleep")


# -- visibility ------------------------------------------------------------------------------------------------


def test_visibility_is_applied_before_ranking() -> None:
    index = ToolIndex()
    index.replace_backend(
        "b",
        [
            tool("secret_admin_wipe", "delete all files forever"),
            tool("delete_file", "delete a file"),
            tool("list_files", "list files"),
        ],
    )
    visible = lambda t: not t.name.startswith("secret")  # noqa: E731
    result = index.search("secret admin wipe delete files", limit=10, visible=visible)
    assert "secret_admin_wipe" not in names(result)
    assert result.total_available == 2
    assert index.search("secret_admin_wipe", visible=visible).tools == []
    # the scores are those of an index that never held the hidden tool
    only_visible = ToolIndex()
    only_visible.replace_backend("b", [tool("delete_file", "delete a file"), tool("list_files", "list files")])
    for query in ("delete files", "delete", "files", "secret", "del"):
        assert index.search(query, visible=visible).tools == only_visible.search(query).tools


def test_visibility_sees_the_indexed_tool() -> None:
    seen: list[IndexedTool] = []

    def visible(entry: IndexedTool) -> bool:
        seen.append(entry)
        return entry.server_id == "ok"

    index = ToolIndex()
    index.replace_backend("ok", [tool("a", "x")])
    index.replace_backend("no", [tool("b", "x")])
    assert names(index.search("x", visible=visible)) == ["a"]
    assert {(entry.server_id, entry.name) for entry in seen} == {("ok", "a"), ("no", "b")}


# -- incremental updates ---------------------------------------------------------------------------------------


def test_replace_and_remove_backend() -> None:
    index = ToolIndex()
    assert index.replace_backend("b", [tool("old_tool", "legacy frobnicator"), tool("keep", "stay")]) == 2
    assert index.replace_backend("b", [tool("new_tool", "modern widget"), tool("keep", "stay")]) == 2
    assert index.search("frobnicator").tools == [] and index.search("frob").tools == []
    assert names(index.search("widget")) == ["new_tool"]
    assert index.get("b", "old_tool") is None and index.get("b", "new_tool") is not None
    assert ("b", "keep") in index and len(index) == 2
    assert index.remove_backend("b") and not index.remove_backend("b")
    assert len(index) == 0 and index.search("stay").tools == []
    # nothing of the removed tools lingers in the term tables
    assert index._postings == {} and index._prefixes == {}
    assert index._field_sums == [0] * 6 and index._field_present == [0] * 6


def test_duplicate_and_invalid_tools_in_one_list() -> None:
    index = ToolIndex()
    count = index.replace_backend("b", [tool("dup", "first"), tool("dup", "second"), {"description": "x"}, {}])
    assert count == 1
    entry = index.get("b", "dup")
    assert entry is not None and entry.description == "first"
    with pytest.raises(ValueError):
        index.replace_backend("b", [], status="sleeping")


def test_same_tool_name_on_two_backends() -> None:
    index = ToolIndex()
    index.replace_backend("one", [tool("search", "find documents")])
    index.replace_backend("two", [tool("search", "find documents")])
    result = index.search("search")
    assert [(entry["server_id"], entry["name"]) for entry in result.tools] == [("one", "search"), ("two", "search")]
    index.remove_backend("one")
    assert [entry["server_id"] for entry in index.search("search").tools] == ["two"]


def rebuild(lists: dict[str, list[dict[str, Any]]]) -> ToolIndex:
    fresh = ToolIndex()
    for server_id, tools in lists.items():
        fresh.replace_backend(server_id, tools)
    return fresh


# -- properties ------------------------------------------------------------------------------------------------

WORDS = ["read", "file", "write", "net", "fetch", "http", "calc", "math", "list", "user", "mail", "send", "db", "sql"]
word = st.sampled_from(WORDS)
text = st.lists(word, max_size=6).map(" ".join)
risk = st.sampled_from([None, "safe", "moderate", "dangerous", "critical"])


@st.composite
def tool_defs(draw: st.DrawFn) -> dict[str, Any]:
    name = "_".join(draw(st.lists(word, min_size=1, max_size=3)))
    out: dict[str, Any] = {"name": name, "description": draw(text)}
    if draw(st.booleans()):
        out["title"] = draw(text)
    if draw(st.booleans()):
        out["inputSchema"] = params_schema(*draw(st.lists(word, max_size=3, unique=True)))
    level = draw(risk)
    if level is not None:
        out["security"] = {"risk_level": level}
    if draw(st.booleans()):
        out["categories"] = draw(st.lists(word, max_size=2))
    return out


backend_lists = st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), st.lists(tool_defs(), max_size=8), max_size=4)
queries = st.lists(word | st.sampled_from(["re", "fi", "ca", "the", "zzz"]), max_size=5).map(" ".join)
PROPS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPS
@given(backend_lists, queries, st.integers(1, 12), risk, st.lists(word, max_size=2))
def test_scores_bounded_sorted_and_limited(
    lists: dict[str, list[dict[str, Any]]], query: str, limit: int, ceiling: str | None, cats: list[str]
) -> None:
    index = rebuild(lists)
    result = index.search(query, limit=limit, risk_level_max=ceiling, categories=cats or None)
    scores = [entry["relevance_score"] for entry in result.tools]
    assert len(scores) <= limit
    assert all(math.isfinite(score) and 0.0 <= score <= 1.0 for score in scores)
    assert scores == sorted(scores, reverse=True)
    assert len(result.tools) <= result.total_available <= len(index)
    keys = [(entry["server_id"], entry["name"]) for entry in result.tools]
    assert len(set(keys)) == len(keys)
    if tokenize(query):
        query_terms = set(tokenize(query))
        for entry in result.tools:
            indexed = index.get(entry["server_id"], entry["name"])
            assert indexed is not None
            doc_terms = set(tokenize(" ".join(indexed.field_texts())))
            # every hit matched a query term exactly or by prefix
            assert any(d == q or d.startswith(q) for q in query_terms for d in doc_terms)


@PROPS
@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.none() | st.lists(tool_defs(), max_size=6))), queries)
def test_incremental_updates_equal_a_full_rebuild(
    steps: list[tuple[str, list[dict[str, Any]] | None]], query: str
) -> None:
    index = ToolIndex()
    final: dict[str, list[dict[str, Any]]] = {}
    for server_id, tools in steps:
        if tools is None:
            index.remove_backend(server_id)
            final.pop(server_id, None)
        else:
            index.replace_backend(server_id, tools)
            final[server_id] = tools
    fresh = rebuild(final)
    assert sorted((t.server_id, t.name) for t in index.tools()) == sorted((t.server_id, t.name) for t in fresh.tools())
    assert index._postings == fresh._postings
    assert index._field_sums == fresh._field_sums and index._field_present == fresh._field_present
    assert index._prefixes == fresh._prefixes
    assert index.search(query, limit=50).tools == fresh.search(query, limit=50).tools


@PROPS
@given(backend_lists, queries, st.sets(st.sampled_from(["a", "b", "c", "d"])), risk)
def test_visibility_equals_an_index_of_the_visible_tools(
    lists: dict[str, list[dict[str, Any]]], query: str, allowed: set[str], ceiling: str | None
) -> None:
    index = rebuild(lists)
    restricted = rebuild({server_id: tools for server_id, tools in lists.items() if server_id in allowed})
    result = index.search(query, limit=50, risk_level_max=ceiling, visible=lambda t: t.server_id in allowed)
    expected = restricted.search(query, limit=50, risk_level_max=ceiling)
    assert result.tools == expected.tools
    assert result.total_available == expected.total_available
    assert all(entry["server_id"] in allowed for entry in result.tools)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from("aZbY09_-. /:é字"), max_size=30))
def test_tokenize_ascii_fast_path_agrees_with_the_run_by_run_split(value: str) -> None:
    expected: list[str] = []
    for run in re.findall(r"[^\W_]+", value):
        if run.isascii():
            expected.extend(part.lower() for part in re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+", run))
        else:
            expected.append(run.casefold())
    assert tokenize(value) == expected
