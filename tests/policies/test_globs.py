"""policies/globs.py against an independent reference (a translated regex), plus the MCPL §6-7 examples."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings, strategies as st

from policies.globs import compile_glob, is_literal, matches_any

# ---- the reference model ---------------------------------------------------------------------


def to_regex(pattern: str, separator: str | None) -> str:
    """The documented syntax, spelled as a regex. Backtracks, so only ever used on short strings."""
    out: list[str] = []
    not_sep = "." if separator is None else f"[^{re.escape(separator)}]"
    i = 0
    while i < len(pattern):
        if pattern[i] == "*":
            j = i
            while j < len(pattern) and pattern[j] == "*":
                j += 1
            if j - i >= 2 or separator is None:
                if separator is not None and pattern.startswith(separator, j):
                    out.append(f"(?:.*{re.escape(separator)})?")  # "**/" may also match nothing
                    j += len(separator)
                else:
                    out.append(".*")
            else:
                out.append(f"{not_sep}*")
            i = j
        else:
            out.append(not_sep if pattern[i] == "?" else re.escape(pattern[i]))
            i += 1
    return "".join(out)


def reference(pattern: str, text: str, separator: str | None = "/") -> bool:
    return re.fullmatch(to_regex(pattern, separator), text, re.DOTALL) is not None


def test_reference_model_sanity() -> None:
    assert reference("**/.env", ".env") and reference("**/.env", "a/b/.env") and not reference("**/.env", "x.env")
    assert reference("a*c", "abc") and not reference("a*c", "a/c") and reference("a*c", "a/c", None)
    assert reference("a?c", "abc") and not reference("a?c", "a/c") and not reference("a.c", "abc")


# ---- MCPL §6.3 and §7.2 examples -------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "text", "expected"),
    [
        ("/project/**", "/project/src/main.ts", True),
        ("/project/**", "/project/", True),
        ("/project/**", "/project/a/b", True),
        ("/project/**", "/project", False),
        ("/project/**", "/projectx/a", False),
        ("/project/**", "/other/project/a", False),
        ("/tmp/**", "/tmp/x", True),
        ("/tmp/**", "/tmp/a/b/c", True),
        ("/tmp/**", "/var/tmp/x", False),
        ("**/.env", ".env", True),
        ("**/.env", "/a/.env", True),
        ("**/.env", "a/b/.env", True),
        ("**/.env", "/project/.env", True),
        ("**/.env", "x.env", False),
        ("**/.env", "/a/x.env", False),
        ("**/.env", "/a/.env/b", False),
        ("**/.env", "/a/.envrc", False),
        ("**/secrets/**", "/project/secrets/key.pem", True),
        ("**/secrets/**", "secrets/key", True),
        ("**/secrets/**", "/a/b/secrets/", True),
        ("**/secrets/**", "/project/mysecrets/key", False),
        ("**/secrets/**", "/project/secrets", False),
        ("#general", "#general", True),
        ("#general", "#general2", False),
        ("#general", "general", False),
        ("#dev-*", "#dev-backend", True),
        ("#dev-*", "#dev-", True),
        ("#dev-*", "#dev", False),
        ("#dev-*", "#dev-a/b", False),
        ("#admin-*", "#admin-ops", True),
        ("#admin-*", "#general", False),
        ("discord:acme/*", "discord:acme/general", True),
        ("discord:acme/*", "discord:acme/general/thread", False),
        ("discord:acme/*", "discord:other/general", False),
        ("a/**/b", "a/b", True),
        ("a/**/b", "a/x/y/b", True),
        ("a/**/b", "a/xb", False),
        ("/etc/**", "/etc/hosts", True),
    ],
)
def test_scope_examples(pattern: str, text: str, expected: bool) -> None:
    assert compile_glob(pattern)(text) is expected
    assert reference(pattern, text) is expected


@pytest.mark.parametrize(
    ("pattern", "name", "expected"),
    [
        ("memory.*", "memory.retrieval", True),
        ("memory.*", "memory.a.b", True),
        ("memory.*", "memory.", True),
        ("memory.*", "memoryx", False),
        ("memory.*", "memory", False),
        ("memory.*", "mem.memory.retrieval", False),
        ("*.memory.*", "mem.memory.retrieval", True),
        ("*", "anything.at.all", True),
        ("memory.retrieval", "memory.retrieval", True),
        ("memory.retrieval", "memory.retrievalx", False),
        ("memory.?", "memory.a", True),
        ("memory.?", "memory.ab", False),
    ],
)
def test_feature_set_examples(pattern: str, name: str, expected: bool) -> None:
    assert compile_glob(pattern, separator=None)(name) is expected
    assert reference(pattern, name, None) is expected


def test_star_and_question_mark_stop_at_the_separator() -> None:
    assert compile_glob("a*")("abc") and not compile_glob("a*")("a/c")
    assert compile_glob("a?c")("abc") and not compile_glob("a?c")("a/c")
    assert compile_glob("a*", None)("a/c") and compile_glob("a?c", None)("a/c")
    assert compile_glob("a.*", ".")("a.b") and not compile_glob("a.*", ".")("a.b.c")
    assert compile_glob("a.**", ".")("a.b.c") and compile_glob("**.env", ".")("env")


def test_three_or_more_stars_are_a_double_star() -> None:
    for stars in ("***", "****", "*****"):
        assert compile_glob(f"/a/{stars}")("/a/b/c")
        assert compile_glob(f"{stars}/.env")(".env")
        assert not compile_glob(f"{stars}/.env")("x.env")


def test_everything_else_is_literal() -> None:
    for pattern in ("a.b", "[ab]", "a+", "(x)", "a|b", "^a$", "a\\d", "a{2}", "#dev-[x]"):
        assert compile_glob(pattern)(pattern)
    assert not compile_glob("[ab]")("a")
    assert not compile_glob("a.b")("axb")
    assert not compile_glob("a\\*")("a\\x/y")
    assert compile_glob("a\\*")("a\\xy")  # a backslash escapes nothing


def test_empty_pattern_and_text() -> None:
    assert compile_glob("")("") and not compile_glob("")("a")
    assert compile_glob("*")("") and compile_glob("**")("") and compile_glob("**/")("")
    assert not compile_glob("?")("")


def test_newlines_and_unicode() -> None:
    assert compile_glob("#dev-*")("#dev-a\nb")
    assert not compile_glob("#general")("#general\n")
    assert compile_glob("/tmp/?")("/tmp/é") and compile_glob("**/ü/*")("a/ü/ß")


def test_separator_must_be_one_character() -> None:
    with pytest.raises(ValueError):
        compile_glob("a*", "::")
    with pytest.raises(ValueError):
        compile_glob("a*", "")


def test_is_literal() -> None:
    assert is_literal("memory.retrieval") and is_literal("") and is_literal("[x]")
    assert not is_literal("memory.*") and not is_literal("a?") and not is_literal("**")


def test_matches_any_names_the_first_match() -> None:
    assert matches_any(["/tmp/**", "/etc/**", "/etc/hosts"], "/etc/hosts") == "/etc/**"
    assert matches_any(["/tmp/**"], "/etc/hosts") is None
    assert matches_any([], "/etc/hosts") is None
    assert matches_any(iter(["memory.*"]), "memory.a.b", separator=None) == "memory.*"
    assert matches_any(["memory.*"], "memory.a.b") == "memory.*"  # "/" is not in the name


def test_compiled_matchers_are_cached() -> None:
    assert compile_glob("/cached/**") is compile_glob("/cached/**")
    assert compile_glob("/cached/**", None) is not compile_glob("/cached/**")


# ---- no backtracking -------------------------------------------------------------------------
# A regex made of ".*" runs needs O(len(text) ** stars) steps on these; the NFA needs one pass.


@pytest.mark.parametrize(
    ("pattern", "text", "expected"),
    [
        ("*a*a*a*a*a*a*b", "a" * 5000, False),
        ("*a*a*a*a*a*a*b", "a" * 5000 + "b", True),
        ("**a**a**a**a**a**a**b", "a" * 5000, False),
        ("**/**/**/**/x", "/" * 5000, False),
        ("**/**/**/**/x", "/" * 5000 + "x", True),
        ("**/**/**/**/x", "a/" * 2500 + "y", False),
        ("**/**/**/**/x", "a/" * 2500 + "x", True),
        ("?*?*?*?*?*?*b", "a" * 5000, False),
        ("**/*a*a*a*a*/**/b", "a/" * 2500, False),
        ("*" + "**/" * 200 + "x", "/" * 5000, False),
        ("a*" * 200 + "b", "a" * 5000, False),
    ],
)
def test_pathological_patterns_are_linear(pattern: str, text: str, expected: bool) -> None:
    assert compile_glob(pattern)(text) is expected
    assert compile_glob(pattern, None)(text) is expected


def test_long_peer_chosen_labels() -> None:
    label = "/project/" + "a/" * 5000 + ".env"
    assert compile_glob("**/.env")(label)
    assert compile_glob("/project/**")(label)
    assert not compile_glob("/project/*")(label)
    assert not compile_glob("**/secrets/**")(label)


# ---- properties against the reference --------------------------------------------------------

ALPHABET = "ab/.*?"
patterns = st.text(ALPHABET, max_size=8)
texts = st.text(ALPHABET, max_size=10)
separators = st.sampled_from(["/", ".", None])


@settings(max_examples=1000)
@given(patterns, texts, separators)
def test_agrees_with_reference(pattern: str, text: str, separator: str | None) -> None:
    assert compile_glob(pattern, separator)(text) is reference(pattern, text, separator)


@settings(max_examples=500)
@given(patterns, st.data(), separators)
def test_agrees_with_reference_on_likely_matches(pattern: str, data: st.DataObject, separator: str | None) -> None:
    # Random texts rarely match; build one from the pattern by filling each wildcard with random text.
    fill = st.text("ab/.", max_size=3)
    pieces = [data.draw(fill) if char in "*?" else char for char in pattern]
    text = "".join(pieces)
    assert compile_glob(pattern, separator)(text) is reference(pattern, text, separator)


@given(st.text("ab/.", max_size=10), separators)
def test_a_literal_matches_exactly_itself(text: str, separator: str | None) -> None:
    assert compile_glob(text, separator)(text)
    assert not compile_glob(text, separator)(text + "a")


@given(patterns, texts)
def test_no_separator_means_star_is_double_star(pattern: str, text: str) -> None:
    assert compile_glob(pattern, None)(text) is compile_glob(pattern.replace("*", "**"), None)(text)
