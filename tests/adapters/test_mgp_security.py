"""adapters/mgp: security metadata (§4), trust levels, effective_risk_level (§4.6), rejections (§14.7)."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import given, strategies as st

from adapters.mgp import rejection, security
from adapters.mgp.rejection import Rejection
from adapters.mgp.security import SecurityMeta

# ---- effective_risk_level: the draft's three tables and max() ------------------------------------------

TRUST = {"core": "safe", "standard": "moderate", "experimental": "dangerous", "untrusted": "dangerous"}
VALIDATOR = {
    None: "safe",  # no validator contributes nothing
    "readonly": "safe",
    "sandbox": "moderate",
    "network_restricted": "moderate",
    "code_safety": "moderate",
    "none": "dangerous",
    "made_up": "dangerous",  # one the kernel cannot apply: fail closed
}
PERMISSIONS: dict[tuple[str, ...], str] = {
    (): "safe",
    ("memory.read", "network.outbound"): "safe",
    ("filesystem.write",): "moderate",
    ("filesystem.read", "filesystem.write"): "moderate",
    ("shell.execute",): "dangerous",
    ("code_execution", "filesystem.write"): "dangerous",
}
ORDER = ["safe", "moderate", "dangerous"]


@pytest.mark.parametrize(("trust", "validator", "permissions"), list(itertools.product(TRUST, VALIDATOR, PERMISSIONS)))
def test_effective_risk_level_table(trust: str, validator: str | None, permissions: tuple[str, ...]) -> None:
    expected = max(TRUST[trust], VALIDATOR[validator], PERMISSIONS[permissions], key=ORDER.index)
    assert security.effective_risk_level(trust, validator, permissions) == expected


@pytest.mark.parametrize(
    ("trust", "validator", "permissions", "expected"),
    [
        ("core", "readonly", [], "safe"),
        ("core", "sandbox", ["filesystem.read"], "moderate"),
        ("standard", "readonly", [], "moderate"),  # trust floor
        ("core", "readonly", ["shell.execute"], "dangerous"),
        ("trusted", None, [], "safe"),  # the seed's names
        ("sandboxed", "readonly", [], "dangerous"),
        ("bogus", "readonly", [], "dangerous"),  # unknown trust: untrusted
        (None, None, [], "dangerous"),
    ],
)
def test_effective_risk_level_examples(trust: Any, validator: Any, permissions: list[str], expected: str) -> None:
    assert security.effective_risk_level(trust, validator, permissions) == expected


@pytest.mark.parametrize(
    ("configured", "declared", "effective"),
    [
        (None, None, "standard"),
        ("core", None, "core"),
        ("core", "standard", "standard"),  # a server may lower itself
        ("untrusted", "core", "untrusted"),  # never raise itself (§2.3 note)
        ("standard", "trusted", "standard"),
        ("trusted", "sandboxed", "untrusted"),
        ("experimental", "nonsense", "experimental"),
    ],
)
def test_effective_trust(configured: Any, declared: Any, effective: str) -> None:
    assert security.effective_trust(configured, declared) == effective


# ---- the security block ----------------------------------------------------------------------------------

FULL = {
    "risk_level": "dangerous",
    "permissions_required": ["shell.execute"],
    "side_effects": ["filesystem", "process"],
    "validator": "code_safety",
    "reversible": False,
    "confirmation_required": True,
    "code_safety": {
        "level": "standard",
        "language": "python",
        "max_code_size_bytes": 10000,
        "blocked_imports": ["subprocess"],
        "blocked_patterns": ["eval("],
        "allowed_imports": ["json"],
    },
}


def test_a_full_block_round_trips() -> None:
    meta = security.parse_security(FULL)
    assert meta is not None
    assert meta.permissions_required == ("shell.execute",) and meta.reversible is False
    assert meta.to_wire() == FULL


def test_a_bad_block_is_read_leniently() -> None:
    meta = security.parse_security(
        {
            "risk_level": "catastrophic",
            "permissions_required": "shell.execute",
            "side_effects": ["network", 3],
            "validator": "",
            "reversible": "no",
            "confirmation_required": 1,
            "code_safety": {"level": "paranoid", "max_code_size_bytes": -1, "blocked_imports": ["os", 2]},
            "x-vendor": {"k": 1},
        }
    )
    assert meta == SecurityMeta(
        side_effects=("network",), code_safety={"blocked_imports": ["os"]}, extra={"x-vendor": {"k": 1}}
    )
    assert security.parse_security("dangerous") is None and security.parse_security(None) is None


def test_config_merges_over_the_declaration_and_the_kernel_assesses() -> None:
    declared = security.parse_security({"risk_level": "safe", "validator": "none", "effective_risk_level": "safe"})
    configured = security.parse_security({"validator": "sandbox", "permissions_required": ["filesystem.write"]})
    merged = security.merge(declared, configured)
    assert merged is not None
    assert (merged.risk_level, merged.validator, merged.permissions_required) == (
        "safe",
        "sandbox",
        ("filesystem.write",),
    )
    assert merged.effective_risk_level is None  # a server cannot set the kernel's field
    assert security.assess(merged, "core").effective_risk_level == "moderate"
    dangerous = security.assess(merged, "untrusted")
    assert dangerous.effective_risk_level == "dangerous" and dangerous.confirmation_required is True
    assert security.merge(None, configured) is configured and security.merge(declared, None) is declared
    assert security.assess(None, "core") == SecurityMeta(effective_risk_level="safe")


def test_secure_tool_keeps_the_tool_and_injects_the_kernel_view() -> None:
    tool = {"name": "run", "inputSchema": {"type": "object"}, "security": {"risk_level": "safe"}}
    out = security.secure_tool(tool, "standard", security.parse_security({"permissions_required": ["shell.execute"]}))
    assert out["security"] == {
        "risk_level": "safe",
        "effective_risk_level": "dangerous",
        "permissions_required": ["shell.execute"],
        "confirmation_required": True,
    }
    assert out["name"] == "run" and tool["security"] == {"risk_level": "safe"}  # the input is untouched
    plain = security.secure_tool({"name": "echo"}, "core")
    assert plain["security"] == {"effective_risk_level": "safe"}


# ---- the rejection envelope ----------------------------------------------------------------------------

_text = st.text(max_size=30)
_extra = st.dictionaries(
    st.text(min_size=1, max_size=8).filter(lambda k: k not in (*rejection._KNOWN, "remediation")),
    st.recursive(st.none() | st.booleans() | st.integers() | _text, lambda c: st.lists(c, max_size=3), max_leaves=5),
    max_size=3,
)
rejections = st.builds(
    Rejection,
    reason=_text,
    status=st.sampled_from(rejection.STATUSES),
    code=st.none() | st.sampled_from(rejection.CODES) | _text,
    retryable=st.booleans(),
    remediation_hint=st.none() | _text,
    extra=_extra,
)


@given(rejections)
def test_rejection_round_trip(original: Rejection) -> None:
    result = rejection.result(original)
    assert result["isError"] is True and result["content"][0]["type"] == "text"
    body = json.loads(result["content"][0]["text"])
    assert {"status", "reason", "retryable"} <= body.keys()
    assert rejection.parse(json.loads(json.dumps(result))) == original


def test_rejection_wire_example_of_the_draft() -> None:
    text = (
        '{"status":"rejected","code":"ACCESS_DENIED","reason":"Caller is not on the allowlist for sensitive_op.",'
        '"remediation_hint":"Ask the operator to grant access.","retryable":true}'
    )
    parsed = rejection.parse({"isError": True, "content": [{"type": "text", "text": text}]})
    assert parsed == Rejection(
        reason="Caller is not on the allowlist for sensitive_op.",
        code="ACCESS_DENIED",
        remediation_hint="Ask the operator to grant access.",
    )
    assert rejection.result(parsed)["content"][0]["text"] == text


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"status": "denied", "reason": "no"}, Rejection(reason="no", status="denied")),  # retryable defaults true
        (
            {"status": "rejected", "reason": "r", "remediation": "ask", "chain": ["a", "b"]},
            Rejection(reason="r", remediation_hint="ask", extra={"chain": ["a", "b"]}),
        ),
        ({"status": "Rejected", "reason": "r"}, None),  # case-sensitive sentinel
        ({"status": "REJECTED", "reason": "r"}, None),
        ({"status": "rejected"}, None),
        ({"status": "rejected", "reason": "r", "retryable": "no"}, None),
        ({"status": "rejected", "reason": "r", "code": 7}, None),
        ({"error": "free-form"}, None),  # a generic runtime error
    ],
)
def test_rejection_parse_cases(body: dict[str, Any], expected: Rejection | None) -> None:
    result = {"isError": True, "content": [{"type": "text", "text": json.dumps(body)}]}
    assert rejection.parse(result) == expected
    assert rejection.parse({**result, "isError": False}) is None  # isError is authoritative
    assert rejection.parse({k: v for k, v in result.items() if k != "isError"}) is None


def test_rejection_found_among_other_contents_and_not_in_junk() -> None:
    body = json.dumps({"status": "rejected", "reason": "r", "code": "CODE_UNSAFE"})
    content = [{"type": "image", "data": "x"}, {"type": "text", "text": "not json"}, {"type": "text", "text": body}]
    assert rejection.parse({"isError": True, "content": content}) == Rejection(reason="r", code="CODE_UNSAFE")
    junks: tuple[Any, ...] = (
        None,
        [],
        {"isError": True},
        {"isError": True, "content": "x"},
        {"isError": "true", "content": []},
    )
    for junk in junks:
        assert rejection.parse(junk) is None
    with pytest.raises(ValueError):
        rejection.result(Rejection(reason="r", status="refused"))


def test_code_safety_rejection_carries_the_section_7_4_fields() -> None:
    found = rejection.parse(
        rejection.result(rejection.code_safety(["Blocked import: 'subprocess'"], {"max_code_size_bytes": 10}))
    )
    assert found is not None and found.code == "CODE_UNSAFE" and found.retryable
    assert found.extra == {"violations": ["Blocked import: 'subprocess'"], "hints": {"max_code_size_bytes": 10}}
    assert "subprocess" in found.reason
