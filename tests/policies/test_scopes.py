"""policies/scopes.py: MCPL §7.6 evaluation with an operator layer, host-initiated actions, wire shapes."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from policies.scopes import ScopeRules, ScopeVerdict, evaluate, merge_for_backend, permits, to_wire

# The §7.2 example configuration.
FILES = ScopeRules(whitelist=("/project/**", "/tmp/**"), blacklist=("**/.env", "**/secrets/**"))
DISCORD = ScopeRules(whitelist=("#general", "#dev-*"), blacklist=("#admin-*",))
NONE = ScopeRules()

# ---- evaluate --------------------------------------------------------------------------------


def test_operator_blacklist_denies() -> None:
    operator = ScopeRules(blacklist=("/etc/**",))
    verdict = evaluate("/etc/hosts", NONE, operator)
    assert verdict == ScopeVerdict(
        "deny", "'/etc/hosts' is blacklisted by the operator ('/etc/**')", pattern="/etc/**", by="operator"
    )


def test_operator_blacklist_beats_host_whitelist_and_cache() -> None:
    operator = ScopeRules(blacklist=("**/secrets/**",))
    host = ScopeRules(whitelist=("/project/**",))
    verdict = evaluate("/project/secrets/key", host, operator, approved={"/project/secrets/key"})
    assert (verdict.outcome, verdict.by, verdict.pattern) == ("deny", "operator", "**/secrets/**")


def test_operator_blacklist_beats_operator_whitelist() -> None:
    operator = ScopeRules(whitelist=("/project/**",), blacklist=("**/.env",))
    assert evaluate("/project/.env", NONE, operator).outcome == "deny"


def test_operator_blacklist_is_checked_before_host_blacklist() -> None:
    operator = ScopeRules(blacklist=("/project/**",))
    verdict = evaluate("/project/.env", FILES, operator)
    assert (verdict.outcome, verdict.by, verdict.pattern) == ("deny", "operator", "/project/**")


def test_host_blacklist_denies() -> None:
    verdict = evaluate("/project/.env", FILES, NONE)
    assert verdict == ScopeVerdict(
        "deny", "'/project/.env' is blacklisted by the host ('**/.env')", pattern="**/.env", by="host"
    )
    assert evaluate("#admin-ops", DISCORD, NONE).outcome == "deny"


def test_host_blacklist_beats_operator_whitelist() -> None:
    operator = ScopeRules(whitelist=("/project/**",))
    verdict = evaluate("/project/.env", FILES, operator)
    assert (verdict.outcome, verdict.by) == ("deny", "host")


def test_host_whitelist_approves() -> None:
    verdict = evaluate("/project/src/main.ts", FILES, NONE)
    assert verdict == ScopeVerdict(
        "approve", "'/project/src/main.ts' is whitelisted by the host ('/project/**')", "/project/**", "host"
    )
    assert evaluate("#dev-backend", DISCORD, NONE).outcome == "approve"
    assert evaluate("#general", DISCORD, NONE).outcome == "approve"


def test_operator_whitelist_approves_and_is_checked_first() -> None:
    operator = ScopeRules(whitelist=("/project/src/**",))
    verdict = evaluate("/project/src/main.ts", FILES, operator)
    assert (verdict.outcome, verdict.by, verdict.pattern) == ("approve", "operator", "/project/src/**")
    verdict = evaluate("/opt/x", NONE, ScopeRules(whitelist=("/opt/*",)))
    assert (verdict.outcome, verdict.by) == ("approve", "operator")
    assert verdict.reason == "'/opt/x' is whitelisted by the operator ('/opt/*')"


def test_cached_approval() -> None:
    verdict = evaluate("/etc/hosts", FILES, NONE, approved=["/etc/hosts"])
    assert (verdict.outcome, verdict.by, verdict.pattern) == ("approve", "cache", None)
    # Exact labels only: the cache holds labels, not patterns.
    assert evaluate("/etc/passwd", FILES, NONE, approved=["/etc/hosts"]).outcome == "ask"
    assert evaluate("/etc/hosts", FILES, NONE, approved=["/etc/*"]).outcome == "ask"


def test_host_blacklist_beats_cache() -> None:
    assert evaluate("/project/.env", FILES, NONE, approved={"/project/.env"}).outcome == "deny"


def test_otherwise_ask() -> None:
    verdict = evaluate("/etc/hosts", FILES, NONE)
    assert (verdict.outcome, verdict.by, verdict.pattern) == ("ask", "none", None)
    assert "/etc/hosts" in verdict.reason
    assert evaluate("#random", DISCORD, NONE).outcome == "ask"
    assert evaluate("anything", NONE, NONE).outcome == "ask"


def test_star_does_not_cross_the_separator() -> None:
    assert evaluate("#dev-a/b", DISCORD, NONE).outcome == "ask"
    assert evaluate("/projectx/a", FILES, NONE).outcome == "ask"


# ---- permits ---------------------------------------------------------------------------------


def test_permits_without_a_whitelist() -> None:
    verdict = permits("/etc/hosts", FILES, NONE)
    assert (verdict.outcome, verdict.by, verdict.pattern) == ("approve", "none", None)
    assert permits("anything", NONE, NONE).outcome == "approve"


def test_permits_names_the_whitelist_that_matched() -> None:
    assert permits("/project/a", FILES, NONE).by == "host"
    assert permits("/project/a", FILES, ScopeRules(whitelist=("/project/*",))).by == "operator"


def test_permits_honours_both_blacklists_operator_first() -> None:
    operator = ScopeRules(blacklist=("/etc/**", "**/.env"))
    verdict = permits("/etc/hosts", FILES, operator)
    assert (verdict.outcome, verdict.by, verdict.pattern) == ("deny", "operator", "/etc/**")
    assert permits("/project/.env", FILES, operator).by == "operator"
    verdict = permits("/project/secrets/k", FILES, operator)
    assert (verdict.outcome, verdict.by, verdict.pattern) == ("deny", "host", "**/secrets/**")
    assert permits("#admin-ops", DISCORD, NONE).outcome == "deny"


# ---- from_wire / to_wire ---------------------------------------------------------------------


def test_from_wire() -> None:
    assert ScopeRules.from_wire({"whitelist": ["#general", "#dev-*"], "blacklist": ["#admin-*"]}) == DISCORD
    assert ScopeRules.from_wire({"whitelist": ["#general"]}) == ScopeRules(whitelist=("#general",))
    assert ScopeRules.from_wire({"blacklist": ["#admin-*"]}) == ScopeRules(blacklist=("#admin-*",))
    assert ScopeRules.from_wire({}) == NONE


@pytest.mark.parametrize(
    "value",
    [None, 3, "x", ["#general"], {"whitelist": "#general"}, {"whitelist": {"#general": True}}, {"blacklist": 5}],
)
def test_from_wire_tolerates_wrong_types(value: object) -> None:
    assert ScopeRules.from_wire(value) == NONE


def test_from_wire_drops_non_strings_and_duplicates() -> None:
    rules = ScopeRules.from_wire({"whitelist": ["a", 1, None, ["b"], "a", "c"], "blacklist": [{"x": 1}, "d"]})
    assert rules == ScopeRules(whitelist=("a", "c"), blacklist=("d",))


def test_to_wire_round_trips() -> None:
    assert to_wire(FILES) == {"whitelist": ["/project/**", "/tmp/**"], "blacklist": ["**/.env", "**/secrets/**"]}
    assert to_wire(NONE) == {"whitelist": [], "blacklist": []}
    assert ScopeRules.from_wire(to_wire(FILES)) == FILES


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=9), children, max_size=4),
    max_leaves=20,
)
wire_rules = st.fixed_dictionaries(
    {}, optional={"whitelist": json_values | st.lists(json_values), "blacklist": json_values | st.lists(json_values)}
)


@given(json_values | wire_rules)
def test_from_wire_never_raises(value: object) -> None:
    rules = ScopeRules.from_wire(value)
    assert all(isinstance(p, str) for p in rules.whitelist + rules.blacklist)
    assert ScopeRules.from_wire(to_wire(rules)) == rules


# ---- merge_for_backend -----------------------------------------------------------------------


def test_merge_nothing() -> None:
    assert merge_for_backend([]) == NONE
    assert merge_for_backend(iter([])) == NONE


def test_merge_one_is_itself() -> None:
    assert merge_for_backend([FILES]) == FILES


def test_merge_unions_blacklists_and_intersects_whitelists() -> None:
    a = ScopeRules(whitelist=("/project/**", "/tmp/**", "/a/*"), blacklist=("**/.env", "/etc/**"))
    b = ScopeRules(whitelist=("/a/*", "/tmp/**", "/b/*"), blacklist=("/etc/**", "**/secrets/**"))
    c = ScopeRules(whitelist=("/tmp/**", "/a/*"), blacklist=("**/.env",))
    merged = merge_for_backend([a, b, c])
    assert merged == ScopeRules(whitelist=("/tmp/**", "/a/*"), blacklist=("**/.env", "/etc/**", "**/secrets/**"))


def test_merge_with_an_empty_whitelist_whitelists_nothing() -> None:
    assert merge_for_backend([FILES, ScopeRules(blacklist=("#x",))]) == ScopeRules(
        whitelist=(), blacklist=("**/.env", "**/secrets/**", "#x")
    )


def test_merge_compares_patterns_not_what_they_match() -> None:
    merged = merge_for_backend([ScopeRules(whitelist=("/a/**",)), ScopeRules(whitelist=("/a/b/**",))])
    assert merged.whitelist == ()


def test_merge_drops_duplicates() -> None:
    a = ScopeRules(whitelist=("/x", "/x"), blacklist=("/y", "/y"))
    assert merge_for_backend([a, a]) == ScopeRules(whitelist=("/x",), blacklist=("/y",))


patterns = st.lists(st.sampled_from(["/a/*", "/a/**", "/b/**", "**/.env", "/c"]), max_size=4).map(tuple)
rule_sets = st.builds(ScopeRules, patterns, patterns)


@given(st.lists(rule_sets, min_size=1, max_size=4), st.sampled_from(["/a/x", "/a/x/y", "/b/.env", "/c", "/d"]))
def test_merged_rules_are_never_more_permissive_than_any_session(rules: list[ScopeRules], label: str) -> None:
    merged = evaluate(label, merge_for_backend(rules), NONE)
    for one in rules:
        alone = evaluate(label, one, NONE)
        if alone.outcome == "deny":
            assert merged.outcome == "deny"
        if merged.outcome == "approve":
            assert alone.outcome == "approve"
