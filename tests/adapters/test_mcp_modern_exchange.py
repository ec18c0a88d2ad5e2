"""The modern era's per-request checks as the door runs them: ``check_routing`` (the header values
given one by one), ``detach_envelope``, and the plain-form fast path of header values."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, strategies as st

from adapters import mcp_modern as m
from tests.support import modern_meta

MODERN = "2026-07-28"
KEYS = sorted(m.ENVELOPE_KEYS)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)


def _call(name: Any = "echo", meta: dict[str, Any] | None = None) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name, "arguments": {}, "_meta": meta if meta is not None else modern_meta()}
    return {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}


def _reference_check_headers(headers: dict[str, str], message: dict[str, Any]) -> None:
    """The checks as first written (before the door passed the values one by one): the oracle."""

    def field_of(name: str) -> str | None:
        value = headers.get(name)
        return value.strip(" \t") if value is not None else None

    method = message.get("method")
    header_method = field_of("mcp-method")
    if header_method is None:
        raise m.ModernRejection(400, m.HEADER_MISMATCH, "Mcp-Method header is required")
    if header_method != method:
        raise m.ModernRejection(
            400, m.HEADER_MISMATCH, f"Mcp-Method header {header_method!r} does not match {method!r}"
        )
    field = m.NAME_FIELD.get(str(method))
    if field is not None:
        params = message.get("params") or {}
        target = params.get(field) if isinstance(params, dict) else None
        header_name = field_of("mcp-name")
        if header_name is None:
            raise m.ModernRejection(400, m.HEADER_MISMATCH, f"Mcp-Name header is required for {method}")
        decoded = m.decode_header_value(header_name)
        if decoded is None or decoded != target:
            raise m.ModernRejection(400, m.HEADER_MISMATCH, f"Mcp-Name header does not match params.{field}")


@given(
    method=st.sampled_from(["tools/call", "prompts/get", "resources/read", "tools/list", "x"]),
    header_method=st.none() | st.sampled_from(["tools/call", " tools/call\t", "tools/list", "x", ""]),
    header_name=st.none() | st.sampled_from(["echo", " echo ", "=?base64?ZWNobw==?=", "=?base64?!!?=", "other", ""]),
    target=st.none() | st.sampled_from(["echo", "other", 3]),
)
def test_check_routing_decides_as_check_headers(
    method: str, header_method: str | None, header_name: str | None, target: Any
) -> None:
    field = m.NAME_FIELD.get(method, "name")
    message = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {field: target} if target is not None else {}}
    headers = {k: v for k, v in (("mcp-method", header_method), ("mcp-name", header_name)) if v is not None}

    def outcome(check: Any) -> tuple[int, int, str] | None:
        try:
            check()
        except m.ModernRejection as exc:
            return exc.status, exc.code, exc.message
        return None

    expected = outcome(lambda: _reference_check_headers(headers, message))
    assert outcome(lambda: m.check_routing(message, header_method, header_name)) == expected
    envelope = m.read_envelope({"params": {"_meta": modern_meta()}})
    assert outcome(lambda: m.check_headers(headers, message, envelope)) == expected


def test_check_routing_accepts_a_base64_name_and_refuses_a_malformed_one() -> None:
    m.check_routing(_call(), "tools/call", "=?base64?ZWNobw==?=")
    with pytest.raises(m.ModernRejection) as refused:
        m.check_routing(_call(), "tools/call", "=?base64?ZWNobw=?=")
    assert refused.value.code == m.HEADER_MISMATCH


@given(extra=st.dictionaries(st.text(max_size=8).filter(lambda k: k not in m.ENVELOPE_KEYS), json_values, max_size=4))
def test_detach_envelope_leaves_everything_but_the_envelope(extra: dict[str, Any]) -> None:
    message = _call(meta={**modern_meta(), m.LOG_LEVEL_KEY: "info", **extra})
    before = copy.deepcopy(message)
    m.detach_envelope(message)
    expected = {k: v for k, v in before["params"].items() if k != "_meta"}
    if extra:
        expected["_meta"] = extra
    assert message["params"] == expected
    assert {k: v for k, v in message.items() if k != "params"} == {k: v for k, v in before.items() if k != "params"}


def test_detach_envelope_after_read_envelope_keeps_what_the_envelope_said() -> None:
    message = _call(meta={**modern_meta(), "progressToken": 5})
    envelope = m.read_envelope(message, MODERN)
    m.detach_envelope(message)
    assert message["params"]["_meta"] == {"progressToken": 5}
    assert envelope.version == MODERN and envelope.capabilities == {} and envelope.client_info["name"] == "t"


@given(st.text(max_size=12))
def test_a_plain_header_value_decodes_to_itself(value: str) -> None:
    if not value.startswith("=?"):
        assert m.decode_header_value(value) == value
    assert m.decode_header_value(m.encode_header_value(value)) == value


def test_check_param_headers_with_nothing_declared_and_nothing_sent_passes() -> None:
    m.check_param_headers({}, {"type": "object"}, {"a": 1})
    m.check_param_headers({}, None, None)
    with pytest.raises(m.ModernRejection):
        m.check_param_headers({"mcp-param-a": "1"}, {"type": "object"}, {"a": 1})
