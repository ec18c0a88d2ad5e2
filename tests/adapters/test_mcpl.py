"""The MCPL adapter reads both wire shapes real servers send, and never fails on odd ones."""

from __future__ import annotations

from typing import Any

from hypothesis import given, strategies as st

from adapters import mcpl

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)

OBJECT_FORM = {
    "version": "0.4",
    "featureSets": {
        "memory.retrieval": {"description": "Retrieve", "uses": ["contextHooks.beforeInference"]},
        "memory.proactive": {"description": "Push", "uses": ["pushEvents"]},
    },
}
ARRAY_FORM = {
    "version": "0.4",
    "featureSets": [
        {"name": "memory.retrieval", "description": "Retrieve", "uses": ["contextHooks.beforeInference"]},
        {"name": "memory.proactive", "description": "Push", "uses": ["pushEvents"], "rollback": True},
        {"description": "no name: skipped"},
        "not an object",
    ],
}


def test_object_and_array_feature_sets_read_alike() -> None:
    from_object = mcpl.feature_sets(OBJECT_FORM)
    from_array = mcpl.feature_sets(ARRAY_FORM)
    assert set(from_object) == set(from_array) == {"memory.retrieval", "memory.proactive"}
    assert from_array["memory.proactive"] == {"description": "Push", "uses": ["pushEvents"], "rollback": True}
    assert "name" not in from_array["memory.retrieval"]


@given(JSON)
def test_feature_sets_never_fail_and_always_normalize(raw: Any) -> None:
    out = mcpl.feature_sets({"featureSets": raw})
    for name, decl in out.items():
        assert isinstance(name, str) and name
        assert isinstance(decl["uses"], list) and all(isinstance(u, str) for u in decl["uses"])


@given(JSON)
def test_capability_readers_never_fail(raw: Any) -> None:
    caps = {"channels": raw, "contextHooks": raw, "featureSets": raw}
    mcpl.channel_capabilities(caps)
    mcpl.hook_flags(caps)
    enabled, disabled, scopes = mcpl.update_params({"enabled": raw, "disabled": raw, "scopes": raw})
    assert all(isinstance(n, str) for n in enabled + disabled) and isinstance(scopes, dict)


def test_channels_as_a_boolean_or_an_object() -> None:
    assert mcpl.channel_capabilities({"channels": True}) == dict.fromkeys(
        ("register", "publish", "observe", "lifecycle", "streaming"), True
    )
    assert mcpl.channel_capabilities({"channels": {"publish": True}})["publish"] is True
    assert mcpl.channel_capabilities({"channels": {"publish": True}})["observe"] is False
    assert mcpl.channel_capabilities({"channels": False}) == {}


def test_hook_flags() -> None:
    assert mcpl.hook_flags({"contextHooks": {"afterInference": {"blocking": True}}}) == (False, True, True)
    assert mcpl.hook_flags({"contextHooks": {"beforeInference": True, "afterInference": {"blocking": False}}}) == (
        True,
        True,
        False,
    )


def test_host_capabilities_are_the_union_of_the_backends() -> None:
    memory = {"pushEvents": True, "contextHooks": {"beforeInference": True}, "inferenceRequest": {"streaming": True}}
    compliance = {"contextHooks": {"afterInference": {"blocking": True}}, "channels": True}
    merged = mcpl.host_capabilities({"m.a": {"uses": []}}, [memory, compliance])
    assert merged == {
        "version": "0.4",
        "pushEvents": True,
        "contextHooks": {"beforeInference": True, "afterInference": {"blocking": True}},
        "inferenceRequest": {"streaming": True},
        "channels": dict.fromkeys(("register", "publish", "observe", "lifecycle", "streaming"), True),
        "featureSets": {"m.a": {"uses": []}},
    }
    assert mcpl.host_capabilities({}, []) == {"version": "0.4", "featureSets": {}}


def test_without_mcpl_keeps_other_experimental_capabilities() -> None:
    caps = {"tools": {}, "experimental": {"mcpl": {}, "other": {"x": 1}}}
    assert mcpl.without_mcpl(caps) == {"tools": {}, "experimental": {"other": {"x": 1}}}
    assert mcpl.without_mcpl({"tools": {}, "experimental": {"mcpl": {}}}) == {"tools": {}}
    assert mcpl.without_mcpl({"tools": {}}) == {"tools": {}}
