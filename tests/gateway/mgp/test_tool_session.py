"""The MGP §16.6-§16.8 per-session tool cache: budget, LRU eviction, pinned tools, mgp/tools/request."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from gateway.mgp.discovery import ToolIndex
from gateway.mgp.tool_session import ContextBudget, ToolSession, estimate_tokens, request_tools


def sized(name: str, tokens: int) -> dict[str, Any]:
    """A tool definition whose estimate is exactly ``tokens``."""
    base = {"name": name, "description": ""}
    overhead = len(json.dumps(base, separators=(",", ":")))
    base["description"] = "x" * (tokens * 4 - overhead)
    assert estimate_tokens(base) == tokens
    return base


def loaded(session: ToolSession, *tools: dict[str, Any]) -> Any:
    return session.load(("srv", tool) for tool in tools)


def test_estimate_tokens_is_a_quarter_of_the_compact_json() -> None:
    definition = {"name": "read_file", "description": "Read a file", "inputSchema": {"type": "object"}}
    compact = json.dumps(definition, separators=(",", ":"), sort_keys=True)
    assert estimate_tokens(definition) == math.ceil(len(compact) / 4)
    assert estimate_tokens({}) == 1
    assert estimate_tokens({"name": "ファイル"}) == math.ceil(len('{"name":"ファイル"}') / 4)


def test_budget_defaults_and_config() -> None:
    assert ContextBudget() == ContextBudget(8000, 2000, 3000, 3000)
    assert ContextBudget.from_config(None) == ContextBudget()
    assert ContextBudget.from_config({"tool_context_budget": {"max_tokens": 100}}) == ContextBudget(
        100, 2000, 3000, 3000
    )
    assert ContextBudget.from_config({"cache_limit": 5}).cache_limit == 5
    with pytest.raises(ValueError):
        ContextBudget(max_tokens=-1)


def test_session_status_shape() -> None:
    session = ToolSession(pinned=[sized("think", 10), sized("store", 20)])
    loaded(session, sized("read_file", 30))
    assert session.status() == {
        "pinned": ["think", "store"],
        "cached": ["read_file"],
        "total_tokens": 60,
        "max_tokens": 8000,
    }


def test_lru_eviction_order_and_touch() -> None:
    session = ToolSession(ContextBudget(max_tokens=10_000, discovery_reserve=0, cache_limit=30))
    loaded(session, sized("a", 10), sized("b", 10), sized("c", 10))
    assert session.touch("a") and not session.touch("nope")
    result = loaded(session, sized("d", 10))
    assert result.evicted == ["b"]  # least recently used: a was touched
    assert session.status()["cached"] == ["c", "a", "d"]
    result = loaded(session, sized("e", 20))
    assert result.evicted == ["c", "a"] and session.status()["cached"] == ["d", "e"]
    assert session.cached_tokens <= 30


def test_reloading_a_cached_tool_refreshes_it_without_cost() -> None:
    session = ToolSession(ContextBudget(max_tokens=10_000, discovery_reserve=0, cache_limit=30))
    loaded(session, sized("a", 10), sized("b", 10))
    result = loaded(session, sized("a", 10))
    assert result.tokens_added == 0 and session.status()["cached"] == ["b", "a"]


def test_pinned_tools_are_never_evicted() -> None:
    budget = ContextBudget(max_tokens=100, pinned_reserve=20, discovery_reserve=20, cache_limit=100)
    session = ToolSession(budget, pinned=[sized("think", 30)])
    assert session.cache_capacity == 50  # 100 - 20 (discovery) - 30 (pinned, over its reserve)
    loaded(session, sized("a", 25), sized("b", 25))
    loaded(session, sized("c", 25))
    assert session.status()["pinned"] == ["think"] and session.status()["cached"] == ["b", "c"]
    answer = session.evict(["think", "b", "ghost", "b"], reason="no_longer_needed")
    assert answer == {
        "evicted": ["b"],
        "not_evicted": [{"name": "think", "reason": "pinned"}, {"name": "ghost", "reason": "not_cached"}],
        "total_tokens": 55,
        "max_tokens": 100,
    }
    # pinning more shrinks the cache, never the pinned set
    session.pin(sized("store", 40))
    assert session.status() == {"pinned": ["think", "store"], "cached": [], "total_tokens": 70, "max_tokens": 100}
    # a pinned tool requested again is reported loaded, costs nothing, and stays pinned
    result = loaded(session, sized("think", 30))
    assert [entry["name"] for entry in result.loaded] == ["think"] and result.tokens_added == 0
    assert "think" in session and session.unpin("think") and "think" not in session


def test_pinning_a_cached_tool_moves_it() -> None:
    session = ToolSession()
    loaded(session, sized("a", 10))
    session.pin(sized("a", 10))
    assert session.status()["pinned"] == ["a"] and session.status()["cached"] == []


def test_a_tool_too_big_for_the_budget_is_refused_and_evicts_nothing() -> None:
    session = ToolSession(ContextBudget(max_tokens=10_000, discovery_reserve=0, cache_limit=30))
    loaded(session, sized("a", 10))
    result = loaded(session, sized("huge", 31))
    assert result.refused == ["huge"] and result.loaded == [] and result.evicted == []
    assert session.status()["cached"] == ["a"]


def test_loaded_entries_have_the_spec_shape() -> None:
    session = ToolSession()
    security = {"risk_level": "safe", "permissions_required": ["memory.read"]}
    definition = {"name": "analyze_csv", "description": "Compute statistics", "inputSchema": {"type": "object"}}
    result = session.load([("tool.data", {**definition, "security": security}), ("x", {"name": "bare"})])
    assert result.loaded == [
        {"name": "analyze_csv", "server_id": "tool.data", "description": "Compute statistics",
         "inputSchema": {"type": "object"}, "security": security},
        {"name": "bare", "server_id": "x", "description": "", "inputSchema": {"type": "object"}},
    ]  # fmt: skip


def test_truncate_discovery_keeps_the_prefix_that_fits() -> None:
    session = ToolSession(ContextBudget(discovery_reserve=25))
    ranked = [sized("a", 10), sized("b", 10), sized("c", 10), sized("d", 10)]
    assert [tool["name"] for tool in session.truncate_discovery(ranked)] == ["a", "b"]
    assert session.truncate_discovery([sized("big", 26)]) == []


def test_discard_drops_vanished_cached_tools_only() -> None:
    session = ToolSession(pinned=[sized("p", 10)])
    loaded(session, sized("a", 10), sized("b", 10))
    assert session.discard(["a", "p", "zz"]) == ["a"]
    assert session.names() == ["p", "b"]


# -- mgp/tools/request -----------------------------------------------------------------------------------------


def catalog() -> ToolIndex:
    index = ToolIndex()
    index.replace_backend(
        "tool.data",
        [
            {"name": "analyze_csv", "description": "Compute statistics on CSV data",
             "security": {"risk_level": "safe", "permissions_required": ["memory.read"]}},
            {"name": "plot_chart", "description": "Draw a chart from tabular data",
             "security": {"risk_level": "moderate"}},
        ],
    )  # fmt: skip
    index.replace_backend("tool.shell", [{"name": "run_shell", "description": "Run statistics scripts in a shell"}])
    return index


def test_request_fulfilled() -> None:
    session = ToolSession()
    answer = request_tools(
        catalog(),
        session,
        {
            "reason": "capability_gap",
            "context": "Processing CSV data but need statistical analysis functions",
            "requirements": {"capabilities": ["statistics", "chart"], "input_types": ["csv"]},
            "task_trace_id": "550e8400-e29b-41d4-a716-446655440000",
        },
    )
    assert answer["status"] == "fulfilled"
    assert [entry["name"] for entry in answer["tools_loaded"]] == ["analyze_csv", "plot_chart"]
    assert answer["tools_loaded"][0]["security"] == {"risk_level": "safe", "permissions_required": ["memory.read"]}
    assert answer["tools_unavailable"] == []
    assert answer["session_tools_count"] == 2 == len(session)
    assert answer["context_tokens_added"] == session.cached_tokens > 0
    assert set(answer) == {"status", "tools_loaded", "tools_unavailable", "session_tools_count", "context_tokens_added"}


def test_request_partial_unavailable_risk_and_visibility() -> None:
    index = catalog()
    answer = request_tools(index, ToolSession(), {"requirements": {"capabilities": ["statistics", "teleport"]}})
    assert answer["status"] == "partial" and answer["tools_unavailable"] == ["teleport"]
    answer = request_tools(index, ToolSession(), {"context": "teleport me", "requirements": {}})
    assert (
        answer["status"] == "unavailable"
        and answer["tools_loaded"] == []
        and answer["tools_unavailable"] == ["teleport me"]
    )
    safe = request_tools(
        index, ToolSession(), {"requirements": {"capabilities": ["chart"], "preferred_risk_level": "safe"}}
    )
    assert safe["status"] == "unavailable"  # plot_chart is moderate
    hidden = request_tools(
        index,
        ToolSession(),
        {"requirements": {"capabilities": ["statistics"]}},
        visible=lambda tool: tool.server_id != "tool.data",
    )
    assert [entry["name"] for entry in hidden["tools_loaded"]] == ["run_shell"]


def test_request_over_budget_is_unavailable() -> None:
    session = ToolSession(ContextBudget(max_tokens=10, discovery_reserve=0, cache_limit=10))
    answer = request_tools(catalog(), session, {"requirements": {"capabilities": ["statistics"]}})
    assert answer["status"] == "unavailable" and answer["context_tokens_added"] == 0 and len(session) == 0


@pytest.mark.parametrize(
    "params",
    [
        {"requirements": []},
        {"context": 5, "requirements": {}},
        {"requirements": {"capabilities": "stats"}},
        {"requirements": {"input_types": [1]}},
        {"requirements": {"preferred_risk_level": "extreme"}},
    ],
)
def test_request_rejects_malformed_params(params: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        request_tools(catalog(), ToolSession(), params)


# -- properties ------------------------------------------------------------------------------------------------

NAMES = [f"t{i}" for i in range(8)]
operation = st.one_of(
    st.tuples(st.just("load"), st.lists(st.tuples(st.sampled_from(NAMES), st.integers(10, 60)), max_size=4)),
    st.tuples(st.just("touch"), st.sampled_from(NAMES)),
    st.tuples(st.just("evict"), st.lists(st.sampled_from(NAMES), max_size=3)),
    st.tuples(st.just("pin"), st.tuples(st.sampled_from(["p1", "p2"]), st.integers(10, 40))),
)


@settings(max_examples=200, deadline=None)
@given(
    st.tuples(st.integers(0, 300), st.integers(0, 100), st.integers(0, 100), st.integers(0, 200)),
    st.lists(operation, max_size=25),
)
def test_budget_invariants_hold_after_every_operation(budget_values: tuple[int, int, int, int], ops: list[Any]) -> None:
    budget = ContextBudget(*budget_values)
    session = ToolSession(budget)
    pinned: set[str] = set()
    recency: list[str] = []  # model of the LRU order of cached tools
    for kind, arg in ops:
        if kind == "load":
            for name, tokens in arg:
                result = loaded(session, sized(name, tokens))
                if name in pinned:
                    continue
                if result.refused:
                    assert tokens > session.cache_capacity
                    continue
                if name in recency:
                    recency.remove(name)
                recency.append(name)
                for gone in result.evicted:
                    assert recency.index(gone) < len(recency) - 1  # never the one just loaded
                    recency.remove(gone)
        elif kind == "touch":
            if session.touch(arg):
                recency.remove(arg)
                recency.append(arg)
        elif kind == "evict":
            answer = session.evict(arg)
            for name in answer["evicted"]:
                recency.remove(name)
            assert not set(answer["evicted"]) & pinned
        else:
            name, tokens = arg
            session.pin(sized(name, tokens))
            pinned.add(name)
            recency = [n for n in recency if n in session.status()["cached"]]
        status = session.status()
        assert set(status["pinned"]) == pinned  # pinned tools never leave
        assert status["cached"] == recency  # least recently used first, as modelled
        assert session.cached_tokens <= budget.cache_limit
        assert session.cached_tokens <= max(0, budget.max_tokens - budget.discovery_reserve - session.pinned_tokens)
        assert status["total_tokens"] == session.pinned_tokens + session.cached_tokens
