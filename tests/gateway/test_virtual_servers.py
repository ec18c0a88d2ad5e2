"""gateway/virtual_servers.py: selection by patterns, renames, descriptions, collisions, no resolution by name."""

from __future__ import annotations

import logging
import re
from typing import Any

import pytest
from hypothesis import given, strategies as st

from gateway.config_virtual import VirtualServer, split_entry
from gateway.federation import Namer, View
from gateway.virtual_servers import SelectingNamer, Selection, VirtualView, door_names


def view(backends: tuple[str, ...] = ("a", "b"), present: tuple[str, ...] | None = None, **spec: Any) -> VirtualView:
    federated = View("*", backends, Namer("conditional", "__", backends))
    alive = set(backends if present is None else present)
    return VirtualView("ops", VirtualServer(**spec), "__", alive.__contains__, door_names(federated))


def tools(*names: str) -> list[dict[str, Any]]:
    return [{"name": n, "description": f"the {n} tool", "inputSchema": {"type": "object"}} for n in names]


# ---- selection patterns (hypothesis) ----------------------------------------------------------

_TEXT = st.text(alphabet="ab*:/_-x", max_size=12)


def _reference(pattern: str, text: str) -> bool:
    """``*`` = any run of characters, everything else literal: the meaning the config documents."""
    return re.fullmatch(".*".join(re.escape(p) for p in pattern.split("*")), text, re.DOTALL) is not None


@given(pattern=_TEXT, name=_TEXT)
def test_a_pattern_selects_exactly_the_names_its_glob_matches(pattern: str, name: str) -> None:
    if not pattern:
        return
    selection = Selection.of(VirtualServer(tools=[f"a:{pattern}"]))
    assert selection.selects("tools", "a", name) is _reference(pattern, name)
    assert selection.selects("tools", "b", name) is False, "an entry selects from its own backend only"


@given(name=st.text(max_size=40))
def test_a_literal_entry_selects_only_itself(name: str) -> None:
    selection = Selection.of(VirtualServer(tools=["a:get_forecast"]))
    assert selection.selects("tools", "a", name) is (name == "get_forecast")


@given(uri=st.text(max_size=40))
def test_resource_entries_match_the_whole_uri_colons_included(uri: str) -> None:
    selection = Selection.of(VirtualServer(resources=["a:file:///srv/*"]))
    assert selection.selects("resources", "a", uri) is uri.startswith("file:///srv/")
    assert selection.selects("resourceTemplates", "a", uri) is uri.startswith("file:///srv/")
    assert selection.selects("tools", "a", uri) is False


# ---- the merge --------------------------------------------------------------------------------


def test_only_selected_items_are_merged_under_their_own_names() -> None:
    v = view(tools=["a:get_*", "b:echo"])
    merged = v.merge("tools", [("a", tools("get_x", "get_y", "delete")), ("b", tools("echo", "get_x"))])
    assert [t["name"] for t in merged.items] == ["get_x", "get_y", "echo"]
    assert merged.index == {"get_x": ("a", "get_x"), "get_y": ("a", "get_y"), "echo": ("b", "echo")}
    assert merged.collisions == {}


def test_a_rename_and_a_description_change_only_what_is_shown() -> None:
    v = view(
        tools=["a:get_forecast", "b:*"],
        rename={"forecast": "a:get_forecast"},
        descriptions={"forecast": "Tomorrow", "echo": "Says it back"},
    )
    original = tools("get_forecast")
    merged = v.merge("tools", [("a", original), ("b", tools("echo"))])
    by_name = {t["name"]: t for t in merged.items}
    assert set(by_name) == {"forecast", "echo"}, "the original name of a renamed tool is not shown"
    assert by_name["forecast"]["description"] == "Tomorrow"
    assert by_name["forecast"]["inputSchema"] == {"type": "object"}
    assert by_name["echo"]["description"] == "Says it back"
    assert merged.index["forecast"] == ("a", "get_forecast")
    assert original[0]["name"] == "get_forecast", "the backend's cached item is never modified"


def test_a_runtime_clash_between_backends_is_withheld_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    v = view(tools=["a:*", "b:*"])
    with caplog.at_level(logging.ERROR, logger="gateway.virtual_servers"):
        merged = v.merge("tools", [("a", tools("echo", "add")), ("b", tools("echo"))])
        v.merge("tools", [("a", tools("echo", "add")), ("b", tools("echo"))])
    assert [t["name"] for t in merged.items] == ["add"]
    assert merged.collisions == {"echo": ["a:echo", "b:echo"]}
    assert "echo" not in merged.index
    assert len([r for r in caplog.records if "withheld" in r.getMessage()]) == 1
    assert "rename one of them" in caplog.records[0].getMessage()


def test_a_rename_meeting_another_name_of_the_same_backend_is_withheld() -> None:
    v = view(tools=["a:*"], rename={"add": "a:sum"})
    merged = v.merge("tools", [("a", tools("add", "sum", "echo"))])
    assert merged.collisions == {"add": ["a:add", "a:sum"]}
    assert [t["name"] for t in merged.items] == ["echo"]


def test_resources_and_templates_keep_their_uris() -> None:
    v = view(resources=["a:test://static-*", "a:test://template/*"])
    resources = [{"uri": "test://static-text"}, {"uri": "test://watched"}]
    merged = v.merge("resources", [("a", resources)])
    assert merged.index == {"test://static-text": ("a", "test://static-text")}
    templates = v.merge("resourceTemplates", [("a", [{"uriTemplate": "test://template/{id}/data"}])])
    assert templates.index == {"test://template/{id}/data": ("a", "test://template/{id}/data")}


def test_a_backend_outside_the_view_is_never_merged() -> None:
    v = view(tools=["a:*", "b:*"], present=("a",))
    assert v.backends == ("a",) and v.wanted == ("a", "b")
    merged = v.merge("tools", [("a", tools("x")), ("b", tools("y"))])
    assert list(merged.index) == ["x"]


# ---- resolution and identity --------------------------------------------------------------------


@given(name=st.text(max_size=20))
def test_no_name_or_uri_resolves_by_itself_even_over_one_backend(name: str) -> None:
    namer = SelectingNamer("__", ("a",))
    assert namer.name_in(name) is None
    assert namer.uri_in(name) is None
    assert namer.name_out("a", name) == name and namer.uri_out("a", name) == name
    assert namer.prefixed is False


def test_set_backends_keeps_the_selecting_namer() -> None:
    v = view(tools=["a:*"])
    v.merge("tools", [("a", tools("x"))])
    v.set_backends(())
    assert isinstance(v.namer, SelectingNamer) and v.backends == () and v.merged == {}


def test_the_identity_is_the_configured_one() -> None:
    v = view(
        tools=["a:*"],
        resources=["b:*"],
        server_info={"name": "ops-tools", "version": "2.1", "title": "Ops"},
        instructions="Use forecast first.",
    )
    identity = v.own_identity()
    assert identity["serverInfo"] == {"name": "ops-tools", "version": "2.1", "title": "Ops"}
    assert identity["instructions"] == "Use forecast first."
    assert set(identity["capabilities"]) == {"logging", "tools", "resources"}
    assert view(tools=["a:*"]).own_identity() == {
        "capabilities": {"logging": {}, "tools": {"listChanged": True}},
        "serverInfo": {"name": "ops", "version": "1.0.0"},
    }
    assert View("*", ("a",), Namer("never", "__", ("a",))).own_identity() is None


def test_door_names_follow_the_federated_prefixing() -> None:
    federated = View("*", ("a",), Namer("conditional", "__", ("a",)))
    names = door_names(federated)
    assert names("a", "echo") == ("echo",)
    federated.set_backends(("a", "b"))  # conditional prefixing switches on with a second backend
    assert names("a", "echo") == ("echo", "a__echo")


@given(
    backend=st.from_regex(r"[a-z0-9]([a-z0-9-]{0,20}[a-z0-9])?", fullmatch=True),
    pattern=st.text(min_size=1, max_size=30),
)
def test_an_entry_splits_at_its_first_colon(backend: str, pattern: str) -> None:
    assert split_entry(f"{backend}:{pattern}") == (backend, pattern)


@given(entry=st.text(max_size=30))
def test_split_entry_accepts_or_refuses_but_never_crashes(entry: str) -> None:
    try:
        backend, pattern = split_entry(entry)
    except ValueError as exc:
        assert "BACKEND:PATTERN" in str(exc)
    else:
        assert entry == f"{backend}:{pattern}" and pattern
