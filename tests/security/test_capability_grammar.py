"""The capability grammar against its reference model, and the escapes the security review found.

Issue 10, holes 4 and 5: ``mcp/request:*/list`` admitted ``tools/call "add/list"`` (a mid-pattern
``*`` crossed ``:``), and ``mcp/request:tools/call:echo`` admitted the tools ``echo:add`` and
``echo:`` (a pattern naming a tool was not exact). Every case here was a failing test first.
"""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings, strategies as st

from gateway.events import Kind, action_string
from policies.patterns import CapabilitySet, matches
from tests.security.grammar_model import reference

# ---- the escapes, as the attacker sent them --------------------------------------------------

READ_ONLY = ["mcp/request:initialize", "mcp/request:*/list"]


@pytest.mark.parametrize(
    ("method", "context"),
    [
        ("tools/call", "add/list"),
        ("resources/read", "demo://readme/list"),
        ("prompts/get", "greet/list"),
        ("tools/call", "x:tools/list"),
        ("resources/read", "file:///tools/list"),
        ("completion/complete", "a/list"),
    ],
)
def test_mid_star_never_reaches_into_the_context(method: str, context: str) -> None:
    action = action_string(Kind.REQUEST, method, context)
    assert not matches("mcp/request:*/list", action), action
    assert not CapabilitySet(READ_ONLY).allows(action), action


@pytest.mark.parametrize(
    "action",
    ["mcp/request:tools/list", "mcp/request:prompts/list", "mcp/request:resources/templates/list"],
)
def test_mid_star_still_matches_within_its_segment(action: str) -> None:
    assert CapabilitySet(READ_ONLY).allows(action)


@pytest.mark.parametrize("tool", ["echo:add", "echo:", "echo::", "echo:echo", "echo\n", "echo ", "Echo", "echo2"])
def test_a_pattern_naming_a_tool_is_exact(tool: str) -> None:
    action = action_string(Kind.REQUEST, "tools/call", tool)
    assert not matches("mcp/request:tools/call:echo", action), tool
    assert not CapabilitySet(["mcp/request:tools/call:echo"]).allows(action), tool


def test_a_pattern_naming_a_uri_is_exact() -> None:
    caps = CapabilitySet(["mcp/request:resources/read:demo://readme"])
    assert caps.allows("mcp/request:resources/read:demo://readme")
    for uri in ("demo://readme:x", "demo://readme/x", "demo://readme?x", "demo://readme#x", "demo://readm"):
        assert not caps.allows(f"mcp/request:resources/read:{uri}"), uri


@pytest.mark.parametrize(
    ("pattern", "action", "expected"),
    [
        # A trailing "*" still matches the rest, ":" included.
        ("mcp/request:tools/call:ec*", "mcp/request:tools/call:echo:add", True),
        ("mcp/request:resources/read:file:///*", "mcp/request:resources/read:file:///etc/hosts", True),
        ("mcp/request:resources/read:file:///*", "mcp/request:resources/read:http://x/file:///", False),
        ("mcp/*", "mcp/request:tools/call:a:b:c", True),
        ("*", "anything:at:all", True),
        # A mid "*" is confined to its own segment, in every segment.
        ("*:tools/call", "mcp/request:tools/call:echo", True),
        ("*:tools/call", "mcp/x:y:tools/call", False),
        ("mcp/request:tools/call:db_*_read", "mcp/request:tools/call:db_users_read", True),
        ("mcp/request:tools/call:db_*_read", "mcp/request:tools/call:db_x:y_read", False),
        ("mcp/request:resources/read:demo://*/readme", "mcp/request:resources/read:demo://a/b/readme", True),
        ("mcp/request:resources/read:demo://*/readme", "mcp/request:resources/read:demo://a:1/readme", False),
        # A pattern naming KIND:METHOD covers every context of that method, with or without a mid "*".
        ("mcp/request:tools/call", "mcp/request:tools/call:echo:add", True),
        ("mcp/request:*/read", "mcp/request:resources/read:demo://readme", True),
        ("mcp/request:*/read", "mcp/request:tools/call:x/read", False),
        ("mcp/request", "mcp/request:tools/call:x", True),
        ("mcp/request", "mcp/requestx:tools/call", False),
        # Unicode: compared by code point; look-alikes of ":" and of names are other characters.
        ("mcp/request:tools/call:\u00e9ch\u043e", "mcp/request:tools/call:\u00e9ch\u043e", True),
        ("mcp/request:tools/call:echo", "mcp/request:tools/call:\u0435cho", False),  # Cyrillic ie
        ("mcp/request:*/list", "mcp/request:tools/call:add\u2236list", False),  # RATIO, not a colon
        ("mcp/request:tools/call:e*", "mcp/request:tools/call:e\u0301", True),
    ],
)
def test_grammar_examples(pattern: str, action: str, expected: bool) -> None:
    assert matches(pattern, action) is expected
    assert reference(pattern, action) is expected


# ---- the whole grammar against the reference -------------------------------------------------

# Separators, stars, the characters tool names and URIs are made of, regex metacharacters,
# newlines and a few non-ASCII look-alikes.
ALPHABET = "ab:/*.?\n\u2236\u0435é"
patterns = st.text(ALPHABET, max_size=10)
actions = st.text(ALPHABET.replace("*", "") + "*", max_size=14)


@settings(max_examples=1500, deadline=None)
@given(patterns, actions)
def test_matcher_agrees_with_reference(pattern: str, action: str) -> None:
    assert matches(pattern, action) is reference(pattern, action)


@settings(max_examples=300, deadline=None)
@given(st.lists(patterns, max_size=4), actions)
def test_capability_set_agrees_with_reference(pattern_list: list[str], action: str) -> None:
    caps = CapabilitySet(pattern_list)
    expected = any(reference(p, action) for p in pattern_list if p)
    assert caps.allows(action) is expected
    assert caps.allows(action) is expected  # and again, from the cache


# Names as peers choose them (any code point but surrogates); "*" would make the allowed name a pattern.
NAMES = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="*"), min_size=1, max_size=12)


@settings(max_examples=400, deadline=None)
@given(NAMES, NAMES)
def test_naming_one_tool_admits_no_other(allowed: str, called: str) -> None:
    caps = CapabilitySet([action_string(Kind.REQUEST, "tools/call", allowed)])
    assert caps.allows(action_string(Kind.REQUEST, "tools/call", called)) is (allowed == called)


@settings(max_examples=400, deadline=None)
@given(NAMES, st.sampled_from(["tools/call", "prompts/get", "resources/read", "resources/subscribe"]))
def test_read_only_profile_admits_no_call_whatever_its_name(name: str, method: str) -> None:
    assert not CapabilitySet(READ_ONLY).allows(action_string(Kind.REQUEST, method, name))


@settings(max_examples=300, deadline=None)
@given(NAMES, NAMES)
def test_a_narrowed_set_never_gains(granted_tool: str, called_tool: str) -> None:
    configured = CapabilitySet(["mcp/request:tools/*"])
    claim = CapabilitySet([f"mcp/request:tools/call:{granted_tool}"])
    action = action_string(Kind.REQUEST, "tools/call", called_tool)
    narrowed = configured.narrowed(claim)
    assert narrowed.allows(action) is (configured.allows(action) and claim.allows(action))


def test_matching_stays_linear_on_hostile_actions() -> None:
    started = time.perf_counter()
    colons = "mcp/request:tools/call:" + ":" * 200_000
    stars = "mcp/request:tools/call:" + "a" * 200_000
    assert not CapabilitySet(["mcp/*:*:*:x", "*a*b*c*", "mcp/request:*/list"]).allows(colons)
    assert not matches("mcp/request:tools/call:*a*a*a*a*b", stars)
    assert matches("mcp/request:tools/call:*a*a*a*a*", stars)
    assert time.perf_counter() - started < 2.0
