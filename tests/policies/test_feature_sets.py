"""policies/feature_sets.py: a host's selection over time, the operator's rules, tagged-message checks."""

from __future__ import annotations

from fnmatch import fnmatchcase
from unittest.mock import patch

import pytest
from hypothesis import given, settings, strategies as st

from policies.chain import Decision
from policies.feature_sets import (
    FEATURE_SET_NOT_ENABLED,
    MAX_PATTERNS,
    UNKNOWN_FEATURE_SET,
    HostSelection,
    OperatorRules,
    check_server_tag,
)

MEMORY = ["memory.retrieval", "memory.extraction", "memory.consolidation", "memory.proactive"]
# Small vocabularies for the property tests, so random updates often touch the same names.
LITERALS = ["a", "b", "a.b", "a.c", "b.a"]
PATTERNS = [*LITERALS, "a.*", "*.a", "*", "?.?", "a*"]
NAMES = [*LITERALS, "", "a.", "a.b.c", "ab"]

# ---- HostSelection ---------------------------------------------------------------------------


def enabled(selection: HostSelection, names: list[str] = MEMORY) -> set[str]:
    return {name for name in names if selection.is_enabled(name)}


def test_unnamed_is_disabled() -> None:
    selection = HostSelection()
    assert enabled(selection) == set()
    selection.apply(["memory.retrieval"], [])
    assert enabled(selection) == {"memory.retrieval"}
    assert not selection.is_enabled("files.edit")
    assert not selection.is_enabled("")


def test_wildcard_with_a_literal_exception() -> None:
    selection = HostSelection()
    selection.apply(["memory.*"], ["memory.consolidation"])
    assert enabled(selection) == set(MEMORY) - {"memory.consolidation"}
    assert selection.is_enabled("memory.a.b")
    assert not selection.is_enabled("memoryx")
    # A later update enables the exception, and only it.
    selection.apply(["memory.consolidation"], [])
    assert enabled(selection) == set(MEMORY)
    # A later wildcard disable covers everything it matches, literals enabled earlier included.
    selection.apply([], ["memory.*"])
    assert enabled(selection) == set()


def test_within_one_update_a_literal_beats_a_wildcard_either_way() -> None:
    selection = HostSelection()
    selection.apply(["memory.retrieval"], ["memory.*"])
    assert enabled(selection) == {"memory.retrieval"}


def test_within_one_update_disabled_beats_enabled_of_the_same_kind() -> None:
    selection = HostSelection()
    selection.apply(["memory.retrieval"], ["memory.retrieval"])
    assert not selection.is_enabled("memory.retrieval")
    selection = HostSelection()
    selection.apply(["memory.*"], ["memory.*"])
    assert enabled(selection) == set()
    selection = HostSelection()
    selection.apply(["memory.*"], ["*.retrieval"])  # two different wildcards, both matching
    assert enabled(selection) == set(MEMORY) - {"memory.retrieval"}


def test_updates_are_deltas() -> None:
    selection = HostSelection()
    selection.apply(["memory.retrieval", "files.edit"], [])
    selection.apply(["memory.proactive"], ["files.edit"])
    assert enabled(selection, [*MEMORY, "files.edit"]) == {"memory.retrieval", "memory.proactive"}
    selection.apply([], [])
    assert enabled(selection, [*MEMORY, "files.edit"]) == {"memory.retrieval", "memory.proactive"}


def test_a_repeated_wildcard_overrides_a_literal_from_an_earlier_update() -> None:
    selection = HostSelection()
    selection.apply(["memory.*"], [])
    selection.apply([], ["memory.extraction"])
    assert not selection.is_enabled("memory.extraction")
    selection.apply(["memory.*"], [])  # names it matches get its verdict again
    assert selection.is_enabled("memory.extraction")


def test_prefixed_exposed_names() -> None:
    selection = HostSelection()
    selection.apply(["mem.*"], ["mem.memory.consolidation"])
    assert selection.is_enabled("mem.memory.retrieval")
    assert not selection.is_enabled("mem.memory.consolidation")
    assert not selection.is_enabled("memory.retrieval")


def test_non_strings_are_ignored_and_any_iterable_works() -> None:
    selection = HostSelection()
    selection.apply(iter(["memory.retrieval", 3, None, ["x"]]), (n for n in [{"a": 1}]))  # type: ignore[list-item]
    assert selection.snapshot() == {"memory.retrieval": True}
    selection.apply({"memory.extraction"}, frozenset())
    assert enabled(selection) == {"memory.retrieval", "memory.extraction"}
    selection.apply(None, 5)  # type: ignore[arg-type]
    assert enabled(selection) == {"memory.retrieval", "memory.extraction"}


def test_a_lone_string_is_one_pattern() -> None:
    selection = HostSelection()
    selection.apply("memory.*", [])  # not the patterns "m", "e", "m", ...
    assert selection.snapshot() == {"memory.*": True}
    selection.apply([], "memory.retrieval")
    assert enabled(selection) == set(MEMORY) - {"memory.retrieval"}


def test_snapshot_is_an_ordered_copy() -> None:
    selection = HostSelection()
    selection.apply(["memory.retrieval", "memory.*"], ["memory.consolidation", "x.*"])
    snapshot = selection.snapshot()
    # Precedence order within one update: wildcard enabled, wildcard disabled, literal enabled, disabled.
    assert list(snapshot.items()) == [
        ("memory.*", True),
        ("x.*", False),
        ("memory.retrieval", True),
        ("memory.consolidation", False),
    ]
    snapshot["memory.consolidation"] = True
    assert not selection.is_enabled("memory.consolidation")


def test_the_number_of_patterns_is_bounded_and_the_oldest_go_first() -> None:
    selection = HostSelection()
    names = [f"set.{i}" for i in range(MAX_PATTERNS + 500)]
    for name in names:
        selection.apply([name], [])
    assert len(selection.snapshot()) == MAX_PATTERNS
    assert not selection.is_enabled(names[0])  # forgotten: back to "unnamed = disabled"
    assert not selection.is_enabled(names[499])
    assert selection.is_enabled(names[500])
    assert selection.is_enabled(names[-1])
    selection.apply([f"bulk.{i}" for i in range(3 * MAX_PATTERNS)], [])  # one oversized update
    assert len(selection.snapshot()) == MAX_PATTERNS


def test_the_bound_fails_closed() -> None:
    selection = HostSelection()
    selection.apply(["*"], [])
    selection.apply([], ["memory.*"])
    for i in range(MAX_PATTERNS - 1):
        selection.apply([f"other.{i}"], [])
    # "*" fell out first; what "memory.*" disabled stays disabled, and the rest is now unnamed.
    assert "*" not in selection.snapshot() and "memory.*" in selection.snapshot()
    assert enabled(selection, [*MEMORY, "files.edit"]) == set()
    selection.apply(["other.last"], [])
    assert "memory.*" not in selection.snapshot()
    assert enabled(selection, [*MEMORY, "files.edit"]) == set()


@settings(max_examples=300)
@given(st.lists(st.tuples(st.lists(st.sampled_from(PATTERNS)), st.lists(st.sampled_from(PATTERNS))), max_size=12))
def test_trimming_only_ever_turns_names_off(updates: list[tuple[list[str], list[str]]]) -> None:
    unbounded, bounded = HostSelection(), HostSelection()
    for on, off in updates:
        unbounded.apply(on, off)
        with patch("policies.feature_sets.MAX_PATTERNS", 3):
            bounded.apply(on, off)
        assert len(bounded.snapshot()) <= 3
        for name in NAMES:
            assert not bounded.is_enabled(name) or unbounded.is_enabled(name), name


# The reference: per name, replay every update with the documented precedence.


def reference_state(updates: list[tuple[list[str], list[str]]], name: str) -> bool:
    state = False
    for on, off in updates:
        literal = [p for p in on + off if "*" not in p and "?" not in p]
        wildcard = [p for p in on + off if p not in literal]
        for kind in (literal, wildcard):
            hits = [p for p in kind if fnmatchcase(name, p)]
            if hits:
                state = not any(p in off for p in hits)
                break
    return state


@settings(max_examples=300)
@given(st.lists(st.tuples(st.lists(st.sampled_from(LITERALS)), st.lists(st.sampled_from(LITERALS))), max_size=12))
def test_literal_updates_match_a_dict(updates: list[tuple[list[str], list[str]]]) -> None:
    selection, model = HostSelection(), {}
    for on, off in updates:
        selection.apply(on, off)
        model.update(dict.fromkeys(on, True))
        model.update(dict.fromkeys(off, False))
    for name in NAMES:
        assert selection.is_enabled(name) is model.get(name, False), name


@settings(max_examples=300)
@given(st.lists(st.tuples(st.lists(st.sampled_from(PATTERNS)), st.lists(st.sampled_from(PATTERNS))), max_size=12))
def test_wildcard_updates_match_a_replay(updates: list[tuple[list[str], list[str]]]) -> None:
    # fnmatchcase is an independent matcher for these patterns (no "[" in them, and no separator).
    selection = HostSelection()
    for on, off in updates:
        selection.apply(on, off)
    for name in NAMES:
        assert selection.is_enabled(name) is reference_state(updates, name), name


# ---- OperatorRules ---------------------------------------------------------------------------


def test_allow_all() -> None:
    assert OperatorRules.ALLOW_ALL.allows("mem", "memory.retrieval")
    assert OperatorRules.ALLOW_ALL.allows("x", "")
    assert OperatorRules.ALLOW_ALL == OperatorRules(["*"], [])


def test_deny_beats_allow() -> None:
    rules = OperatorRules(["memory.*"], ["memory.consolidation"])
    assert rules.allows("mem", "memory.retrieval")
    assert not rules.allows("mem", "memory.consolidation")
    rules = OperatorRules(["*"], ["*"])
    assert not rules.allows("mem", "memory.retrieval")


def test_unmatched_is_not_allowed() -> None:
    rules = OperatorRules(["memory.retrieval"], [])
    assert rules.allows("mem", "memory.retrieval")
    assert not rules.allows("mem", "memory.extraction")
    assert not OperatorRules([], []).allows("mem", "memory.retrieval")


def test_qualified_and_bare_patterns() -> None:
    rules = OperatorRules(["mem.memory.*", "files.read"], ["other.*"])
    assert rules.allows("mem", "memory.retrieval")  # qualified by its backend
    assert not rules.allows("mem2", "memory.retrieval")  # another backend's set of the same name
    assert rules.allows("fs", "files.read") and rules.allows("fs2", "files.read")  # bare: any backend
    assert not rules.allows("other", "files.read")  # denied by qualified match
    assert not OperatorRules(["*"], ["memory.consolidation"]).allows("x", "memory.consolidation")
    assert not OperatorRules(["*"], ["x.memory.consolidation"]).allows("x", "memory.consolidation")
    assert OperatorRules(["*"], ["x.memory.consolidation"]).allows("y", "memory.consolidation")


def test_operator_rules_ignore_non_strings() -> None:
    rules = OperatorRules(["memory.*", 3], [None])  # type: ignore[list-item]
    assert rules.allow == ("memory.*",) and rules.deny == ()
    assert rules.allows("mem", "memory.a")


# ---- check_server_tag ------------------------------------------------------------------------

DECLARED = frozenset(MEMORY)


@pytest.mark.parametrize("tag", [None, 3, ["memory.retrieval"], {"name": "memory.retrieval"}, b"memory.retrieval"])
def test_missing_or_non_string_tag_is_invalid(tag: object) -> None:
    decision = check_server_tag(tag, DECLARED, enabled_anywhere=True, can_enable=True)
    assert not decision.allowed
    assert decision.policy == "mcpl.feature_sets"
    assert decision.code == -32602
    assert decision.reason.startswith("params.featureSet is required")
    assert decision.outcome == "invalid"


def test_undeclared_tag_is_unknown() -> None:
    decision = check_server_tag("memory.secret", DECLARED, enabled_anywhere=True, can_enable=True)
    assert decision == Decision(
        False,
        policy="mcpl.feature_sets",
        code=UNKNOWN_FEATURE_SET,
        reason="Unknown feature set",
        data={"featureSet": "memory.secret"},
        outcome="denied",
    )
    assert UNKNOWN_FEATURE_SET == -32003


@pytest.mark.parametrize("can_enable", [True, False])
def test_declared_but_not_enabled(can_enable: bool) -> None:
    decision = check_server_tag("memory.consolidation", DECLARED, enabled_anywhere=False, can_enable=can_enable)
    assert decision == Decision(
        False,
        policy="mcpl.feature_sets",
        code=FEATURE_SET_NOT_ENABLED,
        reason="Feature set not enabled",
        data={"featureSet": "memory.consolidation", "canEnable": can_enable},
        outcome="denied",
    )
    assert FEATURE_SET_NOT_ENABLED == -32001


def test_declared_and_enabled_is_allowed() -> None:
    assert check_server_tag("memory.proactive", DECLARED, True, False) == Decision(True, policy="mcpl.feature_sets")
    # ``declared`` may be the declaration mapping itself.
    declared = {"memory.proactive": {"description": "", "uses": ["pushEvents"]}}
    assert check_server_tag("memory.proactive", declared, True, False).allowed
