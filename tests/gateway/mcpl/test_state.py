"""Exposed names of feature sets and channels, and what a backend declared and registered."""

from __future__ import annotations

from typing import Any

from gateway.config import Mcpl
from gateway.federation import Namer, View
from gateway.mcpl.state import MAX_CHANNELS, MAX_CONVERSATIONS, BackendMcpl, McplSession, RelayState, exposed, resolve


def view(mode: str, *backends: str) -> View:
    return View("*", backends, Namer(mode, "__", backends))


def test_names_are_prefixed_with_dots_only_when_the_view_federates() -> None:
    assert exposed(view("conditional", "mem", "comp"), "mem", "memory.retrieval") == "mem.memory.retrieval"
    assert exposed(view("conditional", "mem"), "mem", "memory.retrieval") == "memory.retrieval"
    assert exposed(view("always", "mem"), "mem", "memory.retrieval") == "mem.memory.retrieval"
    assert exposed(view("never", "mem", "comp"), "mem", "memory.retrieval") == "memory.retrieval"


def test_resolve_splits_at_the_first_dot_and_checks_the_declaration() -> None:
    owners = {"mem": {"memory.retrieval": {}}, "comp": {"compliance.redaction": {}}}
    federated = view("conditional", "mem", "comp")
    assert resolve(federated, "mem.memory.retrieval", owners) == [("mem", "memory.retrieval")]
    assert resolve(federated, "mem.nope", owners) == []
    assert resolve(federated, "memory.retrieval", owners) == [], "a federated view needs the prefix"
    assert resolve(federated, "ghost.memory.retrieval", owners) == []


def test_an_unprefixed_name_can_stand_for_several_backends() -> None:
    owners = {"a": {"memory.retrieval": {}}, "b": {"memory.retrieval": {}}}
    assert resolve(view("never", "a", "b"), "memory.retrieval", owners) == [
        ("a", "memory.retrieval"),
        ("b", "memory.retrieval"),
    ]


def test_feature_sets_changed_adds_and_removes() -> None:
    backend = BackendMcpl({"featureSets": {"m.a": {"description": "", "uses": ["pushEvents"]}}})
    added, removed = backend.changed({"m.b": {"description": "", "uses": ["inferenceRequest"]}}, ["m.a", "m.ghost"])
    assert (added, removed) == (["m.b"], ["m.a"])
    assert backend.using("inferenceRequest") == ["m.b"] and backend.using("pushEvents") == []
    assert backend.changed([{"name": "m.c", "uses": []}], None) == (["m.c"], []), "array form in changes too"


def test_channel_registry_is_bounded_and_ignores_invalid_descriptors() -> None:
    backend = BackendMcpl({})
    taken = backend.register([{"id": "a"}, {"id": ""}, {"type": "x"}, "nope", {"id": 5}])
    assert [d["id"] for d in taken] == ["a"]
    backend.register([{"id": f"c{n}"} for n in range(MAX_CHANNELS + 10)])
    assert len(backend.channels) == MAX_CHANNELS
    assert backend.register([{"id": "a", "label": "updated"}])[0]["label"] == "updated", "known ids still update"
    assert backend.unregister(["a", "ghost", 3]) == ["a"]


def test_session_approvals_are_bounded_per_session() -> None:
    session = McplSession({})
    for n in range(1100):
        session.approve("files", "files.edit", f"/p/{n}")
    labels = session.approved("files", "files.edit")
    assert len(labels) == 1024 and "/p/0" not in labels and "/p/1099" in labels


def test_relay_state_keeps_conversation_pins_bounded_newest_last() -> None:
    state = RelayState(Mcpl())
    for n in range(MAX_CONVERSATIONS + 2):
        state.pin_conversation(f"c{n}", "s1")
    state.pin_conversation("c2", "s2")  # seen again: moves to the newest end
    assert len(state.conversations) == MAX_CONVERSATIONS
    assert state.pinned("c0") is None and state.pinned("c1") is None, "the oldest are forgotten first"
    assert state.pinned("c2") == "s2" and next(reversed(state.conversations)) == "c2"


def test_relay_state_forgets_what_an_ended_session_left_behind() -> None:
    state = RelayState(Mcpl())
    conn: Any = object()
    state.route_chunks("s1", "g1", conn, 7)
    state.route_chunks("s2", "g1", conn, 8)
    state.effective_cache[("s1", "mem")] = frozenset({"memory.a"})
    state.effective_cache[("s2", "mem")] = frozenset()
    state.session_ended("s1")
    assert list(state.chunk_routes) == [("s2", "g1")] and list(state.effective_cache) == [("s2", "mem")]
    state.drop_chunk_routes("s2", conn, 8)
    assert not state.chunk_routes
    assert state.backend("nope").feature_sets == {} and not state.is_mcpl("nope"), "unknown backends declare nothing"
