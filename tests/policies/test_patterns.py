"""policies/patterns.py against an independent reference matcher, plus the MCPx §4 examples."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings, strategies as st

from policies.patterns import CapabilitySet, matches
from tests.security.grammar_model import reference

# ---- the reference model (tests/security/grammar_model.py, shared with the security suite) -------


def test_reference_model_sanity() -> None:
    assert reference("a*c", "abbbc") and reference("*", "") and reference("**", "x") and not reference("a*c", "abcd")
    assert reference("x", "x:y") and not reference("x", "xy") and not reference("x*", "y")
    assert not reference("a*c", "a:c") and reference("a*", "a:c") and not reference("a:b:c", "a:b:c:d")


# ---- MCPx §4.1-4.2 examples ------------------------------------------------------------------


@pytest.mark.parametrize("pattern", ["mcp/*", "mcp/request:*", "mcp/request:tools/*", "mcp/request:tools/call"])
def test_request_tools_call_matches(pattern: str) -> None:
    assert matches(pattern, "mcp/request:tools/call")


@pytest.mark.parametrize("pattern", ["mcp/*", "mcp/response:*", "mcp/response:tools/*"])
def test_response_tools_call_matches(pattern: str) -> None:
    assert matches(pattern, "mcp/response:tools/call")


@pytest.mark.parametrize("pattern", ["mcp/request:*", "mcp/proposal:*", "mcp/request:tools/*", "chat"])
def test_response_tools_call_does_not_match(pattern: str) -> None:
    assert not matches(pattern, "mcp/response:tools/call")


@pytest.mark.parametrize(
    ("pattern", "action", "expected"),
    [
        # Trailing "*".
        ("mcp/*", "mcp/proposal:tools/call:x", True),
        ("mcp/*", "chat", False),
        ("mcp/*", "system/presence", False),
        ("mcp/request:*", "mcp/request:notifications/progress", True),
        ("mcp/request:tools/*", "mcp/request:tools/list", True),
        ("mcp/request:tools/*", "mcp/request:tools/call:weather__get_forecast", True),
        ("mcp/request:tools/*", "mcp/request:resources/read:file:///x", False),
        ("mcp/request:resources/*", "mcp/request:resources/subscribe:file:///x", True),
        ("mcp/proposal:*", "mcp/proposal:tools/call:dangerous_operation", True),
        ("mcp/proposal:*", "mcp/request:tools/call", False),
        # Mid-pattern "*" (read-only profile).
        ("mcp/request:*/list", "mcp/request:tools/list", True),
        ("mcp/request:*/list", "mcp/request:prompts/list", True),
        ("mcp/request:*/list", "mcp/request:resources/list", True),
        ("mcp/request:*/list", "mcp/request:resources/templates/list", True),
        ("mcp/request:*/list", "mcp/request:tools/call", False),
        ("mcp/request:*/list", "mcp/request:tools/list:x", True),  # a context narrows the method
        ("mcp/request:*/list", "mcp/request:tools/call:add/list", False),
        ("mcp/request:*/list", "mcp/response:tools/list", False),
        # No "*": exact, or narrowed by a context.
        ("mcp/request:tools/call", "mcp/request:tools/call:echo", True),
        ("mcp/request:tools/call", "mcp/request:tools/callx", False),
        ("mcp/request:tools/call", "mcp/request:tools/call/x", False),
        ("mcp/request:tools/call", "mcp/request:tools", False),
        ("mcp/request:resources/read", "mcp/request:resources/read:file:///etc/hosts", True),
        ("mcp/request:tools/call:echo", "mcp/request:tools/call:echo", True),
        ("mcp/request:tools/call:echo", "mcp/request:tools/call:echo2", False),
        ("mcp/request:tools/call:echo", "mcp/request:tools/call", False),
    ],
)
def test_mcpx_examples(pattern: str, action: str, expected: bool) -> None:
    assert matches(pattern, action) is expected
    assert reference(pattern, action) is expected


@pytest.mark.parametrize("action", ["chat"])
def test_chat_matches_chat(action: str) -> None:
    assert matches("chat", action)
    assert CapabilitySet(["chat"]).allows(action)


@pytest.mark.parametrize("action", ["chatter", "chat/x", "xchat", "Chat", "cha", "", "mcp/request:chat"])
def test_chat_matches_only_chat(action: str) -> None:
    assert not matches("chat", action)
    assert not CapabilitySet(["chat"]).allows(action)


@pytest.mark.parametrize(
    ("capabilities", "allowed", "denied"),
    [
        (
            ["mcp/*", "chat"],
            ["mcp/request:tools/call:x", "mcp/response:tools/call", "mcp/proposal:tools/call", "chat"],
            ["system/presence", "system/welcome"],
        ),
        (
            ["mcp/proposal:*", "mcp/response:*", "chat"],
            ["mcp/proposal:tools/call:x", "mcp/response:tools/call:x", "chat"],
            ["mcp/request:tools/call:x", "mcp/request:tools/list"],
        ),
        (
            ["mcp/request:resources/read", "mcp/request:*/list", "mcp/response:*", "chat"],
            ["mcp/request:resources/read:file:///x", "mcp/request:tools/list", "mcp/response:x"],
            ["mcp/request:tools/call:x", "mcp/request:resources/subscribe:file:///x"],
        ),
        (
            ["mcp/request:tools/*", "mcp/response:tools/*", "chat"],
            ["mcp/request:tools/call:x", "mcp/response:tools/list"],
            ["mcp/request:resources/read:file:///x", "mcp/response:resources/read"],
        ),
    ],
    ids=["full", "proposal-only", "read-only", "tool-only"],
)
def test_mcpx_capability_profiles(capabilities: list[str], allowed: list[str], denied: list[str]) -> None:
    caps = CapabilitySet(capabilities)
    for action in allowed:
        assert caps.allows(action), action
    for action in denied:
        assert not caps.allows(action), action


# ---- literal metacharacters ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "literal", "not_matched"),
    [
        ("a.b", "a.b", "axb"),
        ("a+", "a+", "aa"),
        ("(x)", "(x)", "x"),
        ("[ab]", "[ab]", "a"),
        ("a|b", "a|b", "a"),
        ("^a$", "^a$", "a"),
        ("a\\d", "a\\d", "a1"),
        ("x?", "x?", "x"),
        ("a{2}", "a{2}", "aa"),
        ("tools/call:a.b*", "tools/call:a.bcd", "tools/call:aXbcd"),
    ],
)
def test_regex_metacharacters_are_literal(pattern: str, literal: str, not_matched: str) -> None:
    assert matches(pattern, literal)
    assert not matches(pattern, not_matched)
    assert CapabilitySet([pattern]).allows(literal)
    assert not CapabilitySet([pattern]).allows(not_matched)


def test_mid_star_crosses_slashes_but_not_colons() -> None:
    assert matches("a*z", "a/b/c/d/z")
    assert not matches("a*z", "a/b:c/d:z")
    assert matches("a*", "a/b:c/d:z")  # a final star matches the rest
    assert matches("*", "")
    assert matches("*:*", ":")
    assert not matches("*:*", "no-colon")


def test_newlines_in_actions() -> None:
    # Tool names and URIs come from peers; "*" must still span them, and "$" tricks must not apply.
    assert matches("mcp/request:tools/call:*", "mcp/request:tools/call:a\nb")
    assert matches("mcp/request:tools/call", "mcp/request:tools/call:a\nb")
    assert not matches("mcp/request:tools/call:echo", "mcp/request:tools/call:echo\n")
    assert not CapabilitySet(["chat"]).allows("chat\n")


# ---- properties against the reference --------------------------------------------------------

ALPHABET = "ab:/*.+?()[]|\\^$\n"
patterns = st.text(ALPHABET, max_size=8)
actions = st.text(ALPHABET.replace("*", "") + "*", max_size=12)


@settings(max_examples=500)
@given(patterns, actions)
def test_matches_agrees_with_reference(pattern: str, action: str) -> None:
    assert matches(pattern, action) is reference(pattern, action)


@given(patterns.filter(lambda p: "*" in p), st.data())
def test_star_substitutions_always_match(pattern: str, data: st.DataObject) -> None:
    pieces = pattern.split("*")
    # A mid-pattern star stands for a run without ":"; the final one (if any) for anything.
    fillers = [data.draw(st.text("ab/.*", max_size=4)) for _ in pieces[1:]]
    if pattern.endswith("*"):
        fillers[-1] = data.draw(st.text("ab:/.*", max_size=4))
    action = pieces[0] + "".join(f + p for f, p in zip(fillers, pieces[1:], strict=True))
    assert matches(pattern, action)


@given(patterns.filter(lambda p: "*" not in p and p.count(":") < 2), st.text(ALPHABET, max_size=6))
def test_pattern_naming_no_context_covers_any_context(pattern: str, context: str) -> None:
    assert matches(pattern, pattern)
    assert matches(pattern, f"{pattern}:{context}")


@given(
    st.lists(st.text(ALPHABET.replace("*", ""), max_size=4), min_size=3, max_size=4),
    st.text(ALPHABET, min_size=1, max_size=6),
)
def test_pattern_naming_a_context_covers_only_that_context(pieces: list[str], more: str) -> None:
    pattern = ":".join(pieces)
    assert matches(pattern, pattern)
    assert not matches(pattern, f"{pattern}:{more}")
    assert not matches(pattern, f"{pattern}{more}")


@settings(max_examples=300)
@given(st.lists(patterns, max_size=4), actions)
def test_capability_set_agrees_with_reference(pattern_list: list[str], action: str) -> None:
    caps = CapabilitySet(pattern_list)
    expected = any(reference(p, action) for p in pattern_list if p)
    assert caps.allows(action) is expected
    assert caps.allows(action) is expected  # and again, from the cache


# ---- CapabilitySet ---------------------------------------------------------------------------


def test_everything() -> None:
    caps = CapabilitySet(["chat", "*"])
    assert caps.everything
    for action in ("", "chat", "system/welcome", "mcp/request:tools/call:x"):
        assert caps.allows(action)
    assert not CapabilitySet(["mcp/*"]).everything
    assert not CapabilitySet(["**"]).everything  # same effect, but not the shortcut
    assert CapabilitySet(["**"]).allows("anything")


def test_empty_set_denies_everything() -> None:
    for caps in (CapabilitySet([]), CapabilitySet([""]), CapabilitySet(["", ""])):
        assert caps.patterns == ()
        assert not caps.allows("chat")
        assert not caps.allows("")


def test_patterns_are_deduplicated_in_order() -> None:
    caps = CapabilitySet(["b", "a", "b", "", "a"])
    assert caps.patterns == ("b", "a")
    assert repr(caps) == "CapabilitySet(['b', 'a'])"


def test_equality_and_hash_ignore_order() -> None:
    assert CapabilitySet(["a", "b"]) == CapabilitySet(["b", "a", "a"])
    assert hash(CapabilitySet(["a", "b"])) == hash(CapabilitySet(["b", "a"]))
    assert CapabilitySet(["a"]) != CapabilitySet(["a", "b"])
    assert CapabilitySet(["a"]) != ["a"]
    assert len({CapabilitySet(["a", "b"]), CapabilitySet(["b", "a"])}) == 1


def test_verdicts_are_cached() -> None:
    caps = CapabilitySet(["mcp/request:tools/*"])
    assert caps.allows("mcp/request:tools/call:a")
    assert not caps.allows("chat")
    # Take the matcher away: cached actions keep their verdict, new ones can no longer match.
    caps._matchers = ()
    assert caps.allows("mcp/request:tools/call:a")
    assert not caps.allows("chat")
    assert not caps.allows("mcp/request:tools/call:b")


def test_cache_is_bounded() -> None:
    caps = CapabilitySet(["x:*"])
    for i in range(9000):
        assert caps.allows(f"x:{i}")
    assert len(caps._cache) == 8192
    assert caps.allows("x:8999")  # uncached verdicts are still right
    assert not caps.allows("y:1")


def test_capability_set_accepts_any_iterable() -> None:
    caps = CapabilitySet(p for p in ("chat", "mcp/response:*"))
    assert caps.allows("chat") and caps.allows("mcp/response:tools/call")


def test_many_stars_on_a_long_peer_chosen_action_stay_fast() -> None:
    # Regression: a regex of ".*" runs backtracked in O(n ** stars); a 4 kB tool name took over a minute.
    action = "mcp/request:tools/call:" + ":" * 200_000
    started = time.perf_counter()
    assert not matches("mcp/*:*:*:*:x", action)
    assert not CapabilitySet(["mcp/*:*:*:x", "*a*b*c*"]).allows(action)
    assert matches("mcp/*:*:*:*:*", action)
    assert time.perf_counter() - started < 1.0
