"""adapters/mcp_modern.py: era detection, envelope and header validation, header values, result stamping."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from hypothesis import given, strategies as st

from adapters import mcp_modern as m
from adapters.mcp import LEGACY_VERSIONS

MODERN = m.LATEST_MODERN


def meta(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        m.PROTOCOL_VERSION_KEY: MODERN,
        m.CLIENT_CAPABILITIES_KEY: {"sampling": {}},
        m.CLIENT_INFO_KEY: {"name": "c", "version": "1"},
    }
    for key, value in overrides.items():
        if value is None:
            base.pop(key, None)
        else:
            base[key] = value
    return base


def request(method: str = "tools/list", params: dict[str, Any] | None = None, **meta_overrides: Any) -> dict[str, Any]:
    body = dict(params or {})
    body["_meta"] = meta(**meta_overrides)
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": body}


def envelope() -> m.Envelope:
    return m.read_envelope(request())


def b64(text: str) -> str:
    return f"=?base64?{base64.b64encode(text.encode()).decode()}?="


def rejected(excinfo: pytest.ExceptionInfo[m.ModernRejection], code: int, status: int = 400) -> m.ModernRejection:
    exc = excinfo.value
    assert exc.code == code
    assert exc.status == status
    return exc


# ---- looks_modern ------------------------------------------------------------------------------


@pytest.mark.parametrize("version", LEGACY_VERSIONS)
def test_legacy_header_version_is_not_modern(version: str) -> None:
    assert m.looks_modern(version, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}) is False


@pytest.mark.parametrize("version", [*m.MODERN_VERSIONS, "2099-01-01", "garbage"])
def test_modern_or_unknown_header_version_is_modern(version: str) -> None:
    assert m.looks_modern(version, None) is True
    assert m.looks_modern(version, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}) is True


def test_no_header_and_no_meta_is_not_modern() -> None:
    assert m.looks_modern(None, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}) is False
    assert m.looks_modern(None, {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}) is False
    assert m.looks_modern(None, {"params": {"_meta": {"progressToken": 1}}}) is False
    assert m.looks_modern(None, None) is False
    assert m.looks_modern(None, [request()]) is False


def test_protocol_version_meta_key_makes_a_message_modern() -> None:
    assert m.looks_modern(None, request()) is True
    # Even an unsupported value: the key alone marks the era, so the answer is -32022, not "no session".
    assert m.looks_modern(None, request(**{m.PROTOCOL_VERSION_KEY: "1999-01-01"})) is True


def test_legacy_header_with_modern_meta_is_modern() -> None:
    assert m.looks_modern("2025-06-18", request()) is True


def test_params_not_a_dict_is_not_modern() -> None:
    assert m.looks_modern(None, {"method": "x", "params": ["_meta"]}) is False
    assert m.looks_modern(None, {"method": "x", "params": {"_meta": [m.PROTOCOL_VERSION_KEY]}}) is False


# ---- read_envelope -----------------------------------------------------------------------------


def test_read_envelope_returns_the_client_envelope() -> None:
    env = m.read_envelope(request(**{m.LOG_LEVEL_KEY: "debug"}), MODERN)
    assert env == m.Envelope(MODERN, {"sampling": {}}, {"name": "c", "version": "1"}, "debug")


def test_read_envelope_defaults_client_info_and_log_level() -> None:
    env = m.read_envelope(request(**{m.CLIENT_INFO_KEY: None}))  # (None here: the key is left out)
    assert env.client_info == {}
    assert env.log_level is None


def raw_meta(**fields: Any) -> dict[str, Any]:
    """A well-formed envelope with ``fields`` set as given, JSON null (None) included."""
    return {**meta(), **{KEYS[name]: value for name, value in fields.items()}}


KEYS = {
    "version": m.PROTOCOL_VERSION_KEY,
    "capabilities": m.CLIENT_CAPABILITIES_KEY,
    "info": m.CLIENT_INFO_KEY,
    "level": m.LOG_LEVEL_KEY,
}
CAPS = m.CLIENT_CAPABILITIES_KEY
INFO = m.CLIENT_INFO_KEY
LEVEL = m.LOG_LEVEL_KEY


# Each envelope field of the wrong type, and what the refusal says (MCP 2026-07-28, basic/index,
# "Per-request protocol fields"; schema RequestMetaObject, ClientCapabilities, Implementation, LoggingLevel).
WRONG_TYPES = [
    pytest.param("version", None, f"_meta[{m.PROTOCOL_VERSION_KEY!r}] must be a string, not null", id="version-null"),
    pytest.param("version", 20260728, "must be a string, not a number", id="version-number"),
    pytest.param("version", ["2026-07-28"], "must be a string, not an array", id="version-array"),
    pytest.param("capabilities", None, f"_meta[{CAPS!r}] must be an object, not null", id="caps-null"),
    pytest.param("capabilities", [], f"_meta[{CAPS!r}] must be an object, not an array", id="caps-array"),
    pytest.param("capabilities", "all", "must be an object, not a string", id="caps-string"),
    pytest.param(
        "capabilities",
        {"extensions": []},
        f"_meta[{CAPS!r}].extensions must be an object, not an array",
        id="extensions-array",
    ),
    pytest.param(
        "capabilities",
        {"extensions": "dev.cloto/mgp"},
        ".extensions must be an object, not a string",
        id="extensions-string",
    ),
    pytest.param("capabilities", {"extensions": None}, ".extensions must be an object, not null", id="extensions-null"),
    pytest.param(
        "capabilities",
        {"extensions": {"dev.cloto/mgp": True}},
        f"_meta[{CAPS!r}].extensions['dev.cloto/mgp'] must be an object, not a boolean",
        id="extension-bool",
    ),
    pytest.param(
        "capabilities",
        {"experimental": {"x": [1]}},
        ".experimental['x'] must be an object, not an array",
        id="experimental-entry",
    ),
    pytest.param(
        "capabilities", {"experimental": 1}, ".experimental must be an object, not a number", id="experimental"
    ),
    pytest.param("capabilities", {"sampling": True}, ".sampling must be an object, not a boolean", id="sampling"),
    pytest.param(
        "capabilities",
        {"sampling": {"tools": True}},
        ".sampling.tools must be an object, not a boolean",
        id="sampling-tools",
    ),
    pytest.param(
        "capabilities", {"sampling": {"context": "all"}}, ".sampling.context must be an object", id="sampling-context"
    ),
    pytest.param("capabilities", {"elicitation": []}, ".elicitation must be an object, not an array", id="elicitation"),
    pytest.param(
        "capabilities",
        {"elicitation": {"url": None}},
        ".elicitation.url must be an object, not null",
        id="elicitation-url",
    ),
    pytest.param(
        "capabilities", {"elicitation": {"form": 1}}, ".elicitation.form must be an object", id="elicitation-form"
    ),
    pytest.param("capabilities", {"roots": None}, ".roots must be an object, not null", id="roots"),
    pytest.param(
        "info", None, f"_meta[{INFO!r}] must be an object with a name and a version, not null", id="info-null"
    ),
    pytest.param("info", "c/1", "must be an object with a name and a version, not a string", id="info-string"),
    pytest.param("info", ["c", "1"], "not an array", id="info-array"),
    pytest.param("info", 7, "not a number", id="info-number"),
    pytest.param("info", {}, f"_meta[{INFO!r}].name is required", id="info-empty"),
    pytest.param("info", {"name": "c"}, f"_meta[{INFO!r}].version is required", id="info-no-version"),
    pytest.param(
        "info",
        {"name": 1, "version": "1"},
        f"_meta[{INFO!r}].name must be a string, not a number",
        id="info-name-number",
    ),
    pytest.param("info", {"name": "c", "version": None}, ".version must be a string, not null", id="info-version-null"),
    pytest.param("level", None, f"_meta[{LEVEL!r}] must be a string (one of debug, info,", id="level-null"),
    pytest.param(
        "level",
        7,
        "one of debug, info, notice, warning, error, critical, alert, emergency), not a number",
        id="level-number",
    ),
    pytest.param("level", ["debug"], "not an array", id="level-array"),
    pytest.param("level", {"level": "debug"}, "not an object", id="level-object"),
    pytest.param("level", True, "not a boolean", id="level-bool"),
    pytest.param(
        "level", "loud", f"_meta[{LEVEL!r}] 'loud' is not a log level; one of debug, info,", id="level-unknown"
    ),
    pytest.param("level", "DEBUG", "'DEBUG' is not a log level", id="level-upper-case"),
    pytest.param("level", "", "'' is not a log level", id="level-empty"),
]


@pytest.mark.parametrize(("field", "value", "said"), WRONG_TYPES)
def test_an_envelope_field_of_the_wrong_type_is_refused_by_name(field: str, value: Any, said: str) -> None:
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": raw_meta(**{field: value})}}
    with pytest.raises(m.ModernRejection) as excinfo:
        m.read_envelope(message, MODERN)  # (a version of the wrong type is told before the header)
    exc = rejected(excinfo, -32602)
    assert exc.message.startswith("Invalid params: "), exc.message
    assert said in exc.message
    assert KEYS[field] in exc.message


@pytest.mark.parametrize("level", ["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"])
def test_every_log_level_of_the_spec_is_read(level: str) -> None:
    assert m.read_envelope(request(**{m.LOG_LEVEL_KEY: level}), MODERN).log_level == level


@pytest.mark.parametrize(
    "capabilities",
    [
        {},
        {"sampling": {}, "elicitation": {}, "roots": {}},
        {
            "sampling": {"tools": {}, "context": {}},
            "elicitation": {"form": {}, "url": {}},
            "roots": {"listChanged": True},
        },
        {"extensions": {}, "experimental": {}},
        {"extensions": {"dev.cloto/mgp": {"version": "0.8", "extensions": ["permissions"]}}},
        {"experimental": {"x": {"any": [1, None]}}},
        {"tasks": None, "custom": [1, 2], "elicitation": {"other": 1}},  # not a closed set: their own members
    ],
)
def test_well_formed_capabilities_pass_as_sent(capabilities: dict[str, Any]) -> None:
    env = m.read_envelope(request(**{m.CLIENT_CAPABILITIES_KEY: capabilities}), MODERN)
    assert env.capabilities is not None and env.capabilities == capabilities


def test_client_info_passes_with_members_of_its_own() -> None:
    info = {"name": "c", "version": "1", "title": "C", "websiteUrl": "https://c.example", "icons": []}
    assert m.read_envelope(request(**{m.CLIENT_INFO_KEY: info}), MODERN).client_info == info


def test_an_unsupported_version_is_told_before_the_fields_it_would_govern() -> None:
    meta = raw_meta(version="2099-01-01", info="x", level=3, capabilities={"extensions": []})
    with pytest.raises(m.ModernRejection) as excinfo:
        m.read_envelope({"params": {"_meta": meta}})
    rejected(excinfo, m.UNSUPPORTED_PROTOCOL_VERSION)


def test_fields_are_judged_in_the_order_of_the_spec_table() -> None:
    meta = raw_meta(capabilities=[], info="x", level=3)
    with pytest.raises(m.ModernRejection) as excinfo:
        m.read_envelope({"params": {"_meta": meta}}, MODERN)
    assert m.CLIENT_CAPABILITIES_KEY in excinfo.value.message
    meta = raw_meta(info="x", level=3)
    with pytest.raises(m.ModernRejection) as excinfo:
        m.read_envelope({"params": {"_meta": meta}}, MODERN)
    assert m.CLIENT_INFO_KEY in excinfo.value.message


@pytest.mark.parametrize(
    "message",
    [
        {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
        {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": None}},
        {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": "x"}},
        {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": [1]},
    ],
)
def test_missing_meta_is_400_invalid_params(message: dict[str, Any]) -> None:
    with pytest.raises(m.ModernRejection) as excinfo:
        m.read_envelope(message, MODERN)
    rejected(excinfo, -32602)
    assert "_meta" in excinfo.value.message


def test_missing_protocol_version_is_invalid_params() -> None:
    with pytest.raises(m.ModernRejection) as excinfo:
        m.read_envelope(request(**{m.PROTOCOL_VERSION_KEY: None}))
    rejected(excinfo, -32602)
    assert m.PROTOCOL_VERSION_KEY in excinfo.value.message


@pytest.mark.parametrize("caps", [None, "x", [], 1])
def test_missing_or_non_object_client_capabilities_is_invalid_params(caps: Any) -> None:
    with pytest.raises(m.ModernRejection) as excinfo:
        m.read_envelope(request(**{m.CLIENT_CAPABILITIES_KEY: caps}), MODERN)
    rejected(excinfo, -32602)
    assert m.CLIENT_CAPABILITIES_KEY in excinfo.value.message


def test_empty_client_capabilities_object_is_fine() -> None:
    assert m.read_envelope(request(**{m.CLIENT_CAPABILITIES_KEY: {}})).capabilities == {}


def test_header_version_mismatch_is_32020() -> None:
    with pytest.raises(m.ModernRejection) as excinfo:
        m.read_envelope(request(), "2025-06-18")
    rejected(excinfo, m.HEADER_MISMATCH)


def test_header_mismatch_is_checked_before_unsupported_version() -> None:
    # Both versions unsupported and different: the mismatch wins.
    with pytest.raises(m.ModernRejection) as excinfo:
        m.read_envelope(request(**{m.PROTOCOL_VERSION_KEY: "1999-01-01"}), "2099-01-01")
    rejected(excinfo, m.HEADER_MISMATCH)
    # A modern header over an unsupported body version is also a mismatch, not -32022.
    with pytest.raises(m.ModernRejection) as excinfo:
        m.read_envelope(request(**{m.PROTOCOL_VERSION_KEY: "1999-01-01"}), MODERN)
    rejected(excinfo, m.HEADER_MISMATCH)


@pytest.mark.parametrize("header", [None, "2099-01-01", " 2099-01-01\t"])
def test_unsupported_version_is_32022_with_supported_and_requested(header: str | None) -> None:
    with pytest.raises(m.ModernRejection) as excinfo:
        m.read_envelope(request(**{m.PROTOCOL_VERSION_KEY: "2099-01-01"}), header)
    exc = rejected(excinfo, m.UNSUPPORTED_PROTOCOL_VERSION)
    assert exc.data == {"supported": list(m.MODERN_VERSIONS), "requested": "2099-01-01"}


def test_legacy_version_in_meta_is_unsupported() -> None:
    with pytest.raises(m.ModernRejection) as excinfo:
        m.read_envelope(request(**{m.PROTOCOL_VERSION_KEY: "2025-06-18"}))
    exc = rejected(excinfo, m.UNSUPPORTED_PROTOCOL_VERSION)
    assert exc.data["requested"] == "2025-06-18"
    assert MODERN in exc.data["supported"]


def test_header_version_whitespace_is_tolerated() -> None:
    assert m.read_envelope(request(), f" {MODERN}\t").version == MODERN


def test_unsupported_version_wins_over_missing_capabilities() -> None:
    with pytest.raises(m.ModernRejection) as excinfo:
        m.read_envelope(request(**{m.PROTOCOL_VERSION_KEY: "2099-01-01", m.CLIENT_CAPABILITIES_KEY: None}))
    rejected(excinfo, m.UNSUPPORTED_PROTOCOL_VERSION)


def test_modern_error_codes() -> None:
    assert {-32020, -32021, -32022} == m.MODERN_ERROR_CODES


# ---- check_headers -----------------------------------------------------------------------------


def test_mcp_method_header_is_required() -> None:
    with pytest.raises(m.ModernRejection) as excinfo:
        m.check_headers({}, request("tools/list"), envelope())
    rejected(excinfo, m.HEADER_MISMATCH)


def test_mcp_method_header_must_match() -> None:
    with pytest.raises(m.ModernRejection) as excinfo:
        m.check_headers({"mcp-method": "prompts/list"}, request("tools/list"), envelope())
    rejected(excinfo, m.HEADER_MISMATCH)


def test_matching_mcp_method_passes_with_whitespace() -> None:
    assert m.check_headers({"mcp-method": " tools/list\t"}, request("tools/list"), envelope()) is None


@pytest.mark.parametrize(
    ("method", "params", "name"),
    [
        ("tools/call", {"name": "echo", "arguments": {}}, "echo"),
        ("prompts/get", {"name": "greet"}, "greet"),
        ("resources/read", {"uri": "file:///tmp/a b.txt"}, "file:///tmp/a b.txt"),
    ],
)
def test_mcp_name_required_and_matched(method: str, params: dict[str, Any], name: str) -> None:
    message = request(method, params)
    with pytest.raises(m.ModernRejection) as excinfo:
        m.check_headers({"mcp-method": method}, message, envelope())
    rejected(excinfo, m.HEADER_MISMATCH)
    assert "Mcp-Name" in excinfo.value.message

    with pytest.raises(m.ModernRejection) as excinfo:
        m.check_headers({"mcp-method": method, "mcp-name": name + "x"}, message, envelope())
    rejected(excinfo, m.HEADER_MISMATCH)

    assert m.check_headers({"mcp-method": method, "mcp-name": name}, message, envelope()) is None
    assert m.check_headers({"mcp-method": method, "mcp-name": f"  {name} "}, message, envelope()) is None
    assert m.check_headers({"mcp-method": method, "mcp-name": b64(name)}, message, envelope()) is None
    assert m.check_headers({"mcp-method": method, "mcp-name": f"\t{b64(name)} "}, message, envelope()) is None


def test_mcp_name_is_compared_against_uri_not_name_for_resources_read() -> None:
    message = request("resources/read", {"uri": "test://a", "name": "other"})
    with pytest.raises(m.ModernRejection):
        m.check_headers({"mcp-method": "resources/read", "mcp-name": "other"}, message, envelope())
    m.check_headers({"mcp-method": "resources/read", "mcp-name": "test://a"}, message, envelope())


def test_mcp_name_base64_form_carries_non_ascii() -> None:
    message = request("tools/call", {"name": "météo 天気"})
    headers = {"mcp-method": "tools/call", "mcp-name": b64("météo 天気")}
    assert m.check_headers(headers, message, envelope()) is None
    with pytest.raises(m.ModernRejection):
        m.check_headers({"mcp-method": "tools/call", "mcp-name": "météo 天気"[:5]}, message, envelope())


@pytest.mark.parametrize(
    "header",
    [
        "=?base64?ZWNobw?=",  # unpadded
        "=?base64?ZWNobx==?=",  # non-canonical trailing bits
        "=?base64?ZW=Nobw==?=",  # padding in the middle
        "=?base64?/w==?=",  # not UTF-8
        "=?base64?ZWNobw===?=",  # too much padding
    ],
)
def test_malformed_base64_never_matches(header: str) -> None:
    message = request("tools/call", {"name": "echo"})
    with pytest.raises(m.ModernRejection) as excinfo:
        m.check_headers({"mcp-method": "tools/call", "mcp-name": header}, message, envelope())
    rejected(excinfo, m.HEADER_MISMATCH)


def test_malformed_base64_does_not_match_an_absent_name() -> None:
    # A None decode must not compare equal to a missing params.name.
    message = request("tools/call", {"arguments": {}})
    with pytest.raises(m.ModernRejection) as excinfo:
        m.check_headers({"mcp-method": "tools/call", "mcp-name": "=?base64?ZWNobw?="}, message, envelope())
    rejected(excinfo, m.HEADER_MISMATCH)


def test_mcp_name_present_but_body_field_missing_is_mismatch() -> None:
    with pytest.raises(m.ModernRejection):
        m.check_headers({"mcp-method": "prompts/get", "mcp-name": "x"}, request("prompts/get", {}), envelope())


def test_mcp_name_not_required_for_other_methods() -> None:
    assert m.check_headers({"mcp-method": "tools/list"}, request("tools/list"), envelope()) is None
    assert (
        m.check_headers({"mcp-method": "server/discover", "mcp-name": "x"}, request("server/discover"), envelope())
        is None
    )


# ---- header values -----------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["echo", "a b", "file:///x?y=1", "", "~!@#$%^&*()"])
def test_safe_values_are_sent_plain(value: str) -> None:
    assert m.encode_header_value(value) == value
    assert m.decode_header_value(value) == value


@pytest.mark.parametrize("value", ["é", "a\nb", " lead", "trail ", "\ttab", "\x7f", "=?base64?ZWNobw==?="])
def test_unsafe_values_are_base64(value: str) -> None:
    encoded = m.encode_header_value(value)
    assert encoded == b64(value)
    assert m.decode_header_value(encoded) == value


def test_value_that_looks_like_malformed_base64_form_is_encoded() -> None:
    # Sent plain, it would decode to None; so it is encoded and survives.
    value = "=?base64?YQ?="
    assert m.decode_header_value(value) is None
    assert m.decode_header_value(m.encode_header_value(value)) == value


@given(st.text())
def test_header_value_round_trip(value: str) -> None:
    encoded = m.encode_header_value(value)
    assert all(0x20 <= ord(ch) <= 0x7E for ch in encoded)
    assert encoded == encoded.strip()
    assert m.decode_header_value(encoded) == value


@given(st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E)))
def test_printable_ascii_round_trip_plain_when_safe(value: str) -> None:
    encoded = m.encode_header_value(value)
    if value == value.strip() and not value.startswith("=?base64?"):
        assert encoded == value
    assert m.decode_header_value(encoded) == value


# ---- x-mcp-header parameters -------------------------------------------------------------------


SCHEMA: dict[str, Any] = {
    "type": "object",
    "x-mcp-header": "Root",  # the root itself is not a property: ignored
    "properties": {
        "region": {"type": "string", "x-mcp-header": "Region"},
        "dry": {"type": "boolean", "x-mcp-header": "Dry-Run"},
        "count": {"type": "integer", "x-mcp-header": "Count"},
        "plain": {"type": "string"},
        "target": {
            "type": "object",
            "properties": {"zone": {"type": "string", "x-mcp-header": "Zone"}},
        },
        "list": {"type": "array", "items": {"type": "string", "x-mcp-header": "Item"}},
        "choice": {"anyOf": [{"type": "string", "x-mcp-header": "Choice"}]},
        "empty": {"type": "string", "x-mcp-header": ""},
        "nonstr": {"type": "string", "x-mcp-header": 5},
    },
    "$defs": {"d": {"type": "string", "x-mcp-header": "Def"}},
}


def test_param_header_paths_follow_properties_chains_only() -> None:
    assert m.param_header_paths(SCHEMA) == {
        ("region",): "Region",
        ("dry",): "Dry-Run",
        ("count",): "Count",
        ("target", "zone"): "Zone",
    }


@pytest.mark.parametrize("schema", [None, "x", [], {}, {"properties": []}, {"properties": {"a": "x"}}])
def test_param_header_paths_of_odd_schemas_are_empty(schema: Any) -> None:
    assert m.param_header_paths(schema) == {}


def test_param_headers_render_present_scalars() -> None:
    args = {"region": "eu-west", "dry": True, "count": 3, "plain": "p", "target": {"zone": "zürich"}}
    assert m.param_headers(SCHEMA, args) == {
        "Mcp-Param-Region": "eu-west",
        "Mcp-Param-Dry-Run": "true",
        "Mcp-Param-Count": "3",
        "Mcp-Param-Zone": b64("zürich"),
    }


def test_param_headers_booleans_lowercase_and_absent_or_non_scalar_skipped() -> None:
    assert m.param_headers(SCHEMA, {"dry": False}) == {"Mcp-Param-Dry-Run": "false"}
    assert m.param_headers(SCHEMA, {"region": None, "target": "not an object", "count": [1]}) == {}
    assert m.param_headers(SCHEMA, None) == {}


def lower(headers: dict[str, str]) -> dict[str, str]:
    return {k.lower(): v for k, v in headers.items()}


def test_check_param_headers_accepts_what_param_headers_produces() -> None:
    args = {"region": "eu", "dry": False, "count": 0, "target": {"zone": "日本"}}
    headers = {"mcp-method": "tools/call", "mcp-name": "t", **lower(m.param_headers(SCHEMA, args))}
    assert m.check_param_headers(headers, SCHEMA, args) is None


def test_check_param_headers_tolerates_whitespace() -> None:
    assert m.check_param_headers({"mcp-param-region": " eu\t"}, SCHEMA, {"region": "eu"}) is None


def test_missing_param_header_for_present_argument_is_32020() -> None:
    with pytest.raises(m.ModernRejection) as excinfo:
        m.check_param_headers({}, SCHEMA, {"region": "eu"})
    rejected(excinfo, m.HEADER_MISMATCH)
    assert "required" in excinfo.value.message


def test_param_header_for_absent_argument_is_32020() -> None:
    with pytest.raises(m.ModernRejection) as excinfo:
        m.check_param_headers({"mcp-param-region": "eu"}, SCHEMA, {})
    rejected(excinfo, m.HEADER_MISMATCH)
    assert "absent" in excinfo.value.message


def test_undeclared_param_header_is_32020() -> None:
    with pytest.raises(m.ModernRejection) as excinfo:
        m.check_param_headers({"mcp-param-plain": "p"}, SCHEMA, {"plain": "p"})
    rejected(excinfo, m.HEADER_MISMATCH)
    assert "not declared" in excinfo.value.message
    # Any Mcp-Param-* header at all is undeclared for a tool without annotations.
    with pytest.raises(m.ModernRejection):
        m.check_param_headers({"mcp-param-x": "1"}, {"type": "object"}, {})


@pytest.mark.parametrize(
    ("header", "args"),
    [
        ("True", {"dry": True}),
        ("1", {"dry": True}),
        ("false", {"dry": True}),
        ("us", {"region": "eu"}),
        ("=?base64?ZXU?=", {"region": "eu"}),  # malformed base64
    ],
)
def test_param_header_mismatch_is_32020(header: str, args: dict[str, Any]) -> None:
    token = "dry-run" if "dry" in args else "region"
    with pytest.raises(m.ModernRejection) as excinfo:
        m.check_param_headers({f"mcp-param-{token}": header}, SCHEMA, args)
    rejected(excinfo, m.HEADER_MISMATCH)


def test_param_header_base64_form_matches() -> None:
    assert m.check_param_headers({"mcp-param-region": b64("eu")}, SCHEMA, {"region": "eu"}) is None


def test_other_headers_are_ignored_by_param_check() -> None:
    headers = {"mcp-method": "tools/call", "content-type": "application/json", "mcp-name": "t"}
    assert m.check_param_headers(headers, SCHEMA, {}) is None


# ---- results -----------------------------------------------------------------------------------


def test_stamp_result_adds_result_type() -> None:
    result = {"content": []}
    stamped = m.stamp_result("tools/call", result)
    assert stamped == {"content": [], "resultType": "complete"}
    assert result == {"content": []}  # not mutated


def test_stamp_result_keeps_existing_result_type() -> None:
    result = {"resultType": "input_required", "inputRequests": {}}
    assert m.stamp_result("tools/call", result) == result


@pytest.mark.parametrize("method", sorted(m.CACHEABLE))
def test_cacheable_results_get_caching_hints(method: str) -> None:
    assert m.stamp_result(method, {"x": 1}) == {
        "x": 1,
        "resultType": "complete",
        "ttlMs": m.DEFAULT_TTL_MS,
        "cacheScope": "private",
    }


def test_caching_hints_are_not_overwritten() -> None:
    assert m.stamp_result("tools/list", {"tools": [], "ttlMs": 5000, "cacheScope": "public"}) == {
        "tools": [],
        "ttlMs": 5000,
        "cacheScope": "public",
        "resultType": "complete",
    }
    partial = m.stamp_result("resources/read", {"contents": [], "ttlMs": 10})
    assert partial["ttlMs"] == 10
    assert partial["cacheScope"] == "private"
    partial = m.stamp_result("prompts/list", {"prompts": [], "cacheScope": "public"})
    assert partial["ttlMs"] == m.DEFAULT_TTL_MS
    assert partial["cacheScope"] == "public"


@pytest.mark.parametrize("method", ["tools/call", "prompts/get", "server/discover", None])
def test_non_cacheable_results_get_no_hints(method: str | None) -> None:
    stamped = m.stamp_result(method, {"a": 1})
    assert "ttlMs" not in stamped
    assert "cacheScope" not in stamped
    assert stamped["resultType"] == "complete"


@pytest.mark.parametrize("result", [None, [], "x", 3])
def test_stamp_result_leaves_non_objects(result: Any) -> None:
    assert m.stamp_result("tools/list", result) == result


def test_strip_modern_fields() -> None:
    result = {"tools": [], "resultType": "complete", "ttlMs": 0, "cacheScope": "private"}
    assert m.strip_modern_fields(result) == {"tools": []}
    assert result["resultType"] == "complete"  # not mutated
    plain = {"content": []}
    assert m.strip_modern_fields(plain) is plain
    assert m.strip_modern_fields(None) is None
    assert m.strip_modern_fields(["resultType"]) == ["resultType"]


def test_strip_undoes_stamp() -> None:
    for method in ["tools/list", "tools/call", "resources/read"]:
        assert m.strip_modern_fields(m.stamp_result(method, {"k": "v"})) == {"k": "v"}


# ---- toward modern backends --------------------------------------------------------------------


def test_envelope_meta() -> None:
    assert m.envelope_meta({"roots": {}}, {"name": "gw"}) == {
        m.PROTOCOL_VERSION_KEY: MODERN,
        m.CLIENT_CAPABILITIES_KEY: {"roots": {}},
        m.CLIENT_INFO_KEY: {"name": "gw"},
    }
    assert m.envelope_meta({}, {}, "warning")[m.LOG_LEVEL_KEY] == "warning"
    assert m.LOG_LEVEL_KEY not in m.envelope_meta({}, {}, "")


def test_stamp_request_merges_meta_and_does_not_mutate() -> None:
    params = {"name": "echo", "_meta": {"progressToken": 7, m.PROTOCOL_VERSION_KEY: "old"}}
    stamped = m.stamp_request(params, {"sampling": {}}, {"name": "gw"}, "info")
    assert stamped["name"] == "echo"
    assert stamped["_meta"] == {
        "progressToken": 7,
        m.PROTOCOL_VERSION_KEY: MODERN,
        m.CLIENT_CAPABILITIES_KEY: {"sampling": {}},
        m.CLIENT_INFO_KEY: {"name": "gw"},
        m.LOG_LEVEL_KEY: "info",
    }
    assert params["_meta"] == {"progressToken": 7, m.PROTOCOL_VERSION_KEY: "old"}


def test_stamp_request_without_params_or_with_odd_meta() -> None:
    assert m.stamp_request(None, {}, {}, None) == {"_meta": m.envelope_meta({}, {})}
    assert m.stamp_request({"_meta": "x"}, {}, {}, None) == {"_meta": m.envelope_meta({}, {})}


def test_stamped_request_passes_read_envelope() -> None:
    params = m.stamp_request({"name": "echo"}, {"x": {}}, {"name": "gw", "version": "1"}, "debug")
    env = m.read_envelope({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}, MODERN)
    assert env == m.Envelope(MODERN, {"x": {}}, {"name": "gw", "version": "1"}, "debug")


def test_request_headers_plain_and_encoded_name() -> None:
    assert m.request_headers("tools/list", None) == {"Mcp-Method": "tools/list"}
    assert m.request_headers("tools/call", {"name": "echo"}) == {"Mcp-Method": "tools/call", "Mcp-Name": "echo"}
    assert m.request_headers("prompts/get", {"name": "héllo"}) == {
        "Mcp-Method": "prompts/get",
        "Mcp-Name": b64("héllo"),
    }
    assert m.request_headers("resources/read", {"uri": "test://x"})["Mcp-Name"] == "test://x"
    assert "Mcp-Name" not in m.request_headers("tools/call", {"name": 5})
    assert "Mcp-Name" not in m.request_headers("tools/list", {"name": "x"})


def test_request_headers_include_param_headers_for_tools_call_only() -> None:
    params = {"name": "t", "arguments": {"region": "eu", "dry": True, "target": {"zone": " z"}}}
    assert m.request_headers("tools/call", params, SCHEMA) == {
        "Mcp-Method": "tools/call",
        "Mcp-Name": "t",
        "Mcp-Param-Region": "eu",
        "Mcp-Param-Dry-Run": "true",
        "Mcp-Param-Zone": b64(" z"),
    }
    assert m.request_headers("prompts/get", {"name": "p", "arguments": {"region": "eu"}}, SCHEMA) == {
        "Mcp-Method": "prompts/get",
        "Mcp-Name": "p",
    }


GW_INFO = {"name": "switchboard", "version": "1"}


def test_request_headers_pass_the_server_side_checks() -> None:
    params = m.stamp_request({"name": "t", "arguments": {"count": 12, "target": {"zone": "ß"}}}, {}, GW_INFO, None)
    message = {"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": params}
    headers = lower(m.request_headers("tools/call", params, SCHEMA))
    env = m.read_envelope(message, MODERN)
    m.check_headers(headers, message, env)
    m.check_param_headers(headers, SCHEMA, params["arguments"])
    assert headers["mcp-param-count"] == "12"
