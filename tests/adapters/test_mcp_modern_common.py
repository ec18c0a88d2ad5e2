"""read_common: the one-pass check of a common modern request accepts only what the full checks accept."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from adapters import mcp_modern
from adapters.mcp_modern import (
    CLIENT_CAPABILITIES_KEY,
    CLIENT_INFO_KEY,
    LOG_LEVEL_KEY,
    PROTOCOL_VERSION_KEY,
    Envelope,
    ModernRejection,
    read_common,
)


def _request(method: str = "tools/call", name: Any = "echo", meta: Any = None) -> dict[str, Any]:
    if meta is None:
        meta = {
            PROTOCOL_VERSION_KEY: "2026-07-28",
            CLIENT_CAPABILITIES_KEY: {},
            CLIENT_INFO_KEY: {"name": "t", "version": "1"},
        }
    field = mcp_modern.NAME_FIELD.get(method, "name")
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": {field: name, "_meta": meta}}


def _full(message: dict[str, Any], version: str | None, method: bytes | None, name: bytes | None) -> Envelope | None:
    try:
        envelope = mcp_modern.read_envelope(message, version)
        mcp_modern.check_routing(
            message,
            method.decode("latin-1") if method is not None else None,
            name.decode("latin-1") if name is not None else None,
        )
    except ModernRejection:
        return None
    return envelope


def test_the_common_shape_passes_in_one_step() -> None:
    message = _request()
    envelope = read_common(message, "2026-07-28", b"tools/call", b"echo")
    assert envelope == _full(message, "2026-07-28", b"tools/call", b"echo")
    assert envelope is not None and envelope[2] == {"name": "t", "version": "1"}  # (client_info)
    assert envelope[3] is None  # (log_level)
    for method, field in mcp_modern.NAME_FIELD.items():
        assert read_common(_request(method, "x"), "2026-07-28", method.encode(), b"x") is not None, field


def test_anything_else_is_left_to_the_full_checks() -> None:
    message = _request()
    assert read_common(message, None, b"tools/call", b"echo") is None  # no version header
    assert read_common(message, " 2026-07-28", b"tools/call", b"echo") is None
    assert read_common(message, "2026-07-28", None, b"echo") is None
    assert read_common(message, "2026-07-28", b"tools/call", None) is None
    assert read_common(message, "2026-07-28", b"tools/list", b"echo") is None
    assert read_common(message, "2026-07-28", b"tools/call", b"=?base64?ZWNobw==?=") is None
    assert read_common(_request("tools/list"), "2026-07-28", b"tools/list", b"echo") is None
    assert (
        read_common(_request(meta={PROTOCOL_VERSION_KEY: "2026-07-28"}), "2026-07-28", b"tools/call", b"echo") is None
    )
    assert read_common(_request(name=" echo"), "2026-07-28", b"tools/call", b" echo") is None  # full: mismatch
    assert _full(_request(name=" echo"), "2026-07-28", b"tools/call", b" echo") is None


def test_a_log_level_and_capabilities_are_read_as_the_full_checks_read_them() -> None:
    caps = {"sampling": {}, "extensions": {"dev.cloto/mgp": {"version": "0.8"}}}
    meta = {**_request()["params"]["_meta"], CLIENT_CAPABILITIES_KEY: caps, LOG_LEVEL_KEY: "debug"}
    message = _request(meta=meta)
    common = read_common(message, "2026-07-28", b"tools/call", b"echo")
    assert common == Envelope("2026-07-28", caps, {"name": "t", "version": "1"}, "debug")
    assert common == _full(message, "2026-07-28", b"tools/call", b"echo")


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (CLIENT_INFO_KEY, 3),
        (CLIENT_INFO_KEY, None),
        (CLIENT_INFO_KEY, {"name": "t"}),
        (CLIENT_INFO_KEY, {"name": "t", "version": 1}),
        (LOG_LEVEL_KEY, None),
        (LOG_LEVEL_KEY, "loud"),
        (LOG_LEVEL_KEY, ["debug"]),
        (CLIENT_CAPABILITIES_KEY, {"extensions": []}),
        (CLIENT_CAPABILITIES_KEY, {"sampling": {"tools": True}}),
    ],
)
def test_a_field_of_the_wrong_type_is_left_to_the_full_checks_which_refuse_it(key: str, value: Any) -> None:
    message = _request(meta={**_request()["params"]["_meta"], key: value})
    assert read_common(message, "2026-07-28", b"tools/call", b"echo") is None
    with pytest.raises(ModernRejection) as excinfo:
        mcp_modern.read_envelope(message, "2026-07-28")
    assert excinfo.value.code == -32602 and excinfo.value.status == 400
    assert key in excinfo.value.message


def test_without_client_info_the_full_checks_decide_and_accept() -> None:
    meta = {PROTOCOL_VERSION_KEY: "2026-07-28", CLIENT_CAPABILITIES_KEY: {}}
    message = _request(meta=meta)
    assert read_common(message, "2026-07-28", b"tools/call", b"echo") is None
    assert _full(message, "2026-07-28", b"tools/call", b"echo") == Envelope("2026-07-28", {}, {}, None)


def test_a_remembered_mcp_name_is_checked_as_a_new_one() -> None:
    """Plain Mcp-Name values are remembered decoded and stripped: the same raw value again gives the
    same answer as the first time, and as the full checks; the base64 form is never remembered."""
    cases = [(b" echo\t", "echo"), (b"echo", "other"), (b"=?base64?ZWNobw==?=", "echo"), (b"caf\xe9", "caf\u00e9")]
    for raw, body_name in cases:
        answers = [read_common(_request(name=body_name), "2026-07-28", b"tools/call", raw) for _ in range(2)]
        assert answers[0] == answers[1], raw
        if answers[0] is not None:
            assert answers[0] == _full(_request(name=body_name), "2026-07-28", b"tools/call", raw)
    assert mcp_modern._PLAIN_NAMES[b" echo\t"] == "echo" and mcp_modern._PLAIN_NAMES[b"caf\xe9"] == "caf\u00e9"
    assert b"=?base64?ZWNobw==?=" not in mcp_modern._PLAIN_NAMES


def test_names_past_the_bound_are_checked_without_being_remembered() -> None:
    saved = dict(mcp_modern._PLAIN_NAMES)
    try:
        mcp_modern._PLAIN_NAMES.update({f"n{i}".encode(): f"n{i}" for i in range(mcp_modern._PLAIN_NAMES_MAX)})
        assert read_common(_request(name="fresh"), "2026-07-28", b"tools/call", b"fresh") is not None
        assert read_common(_request(name="other"), "2026-07-28", b"tools/call", b"fresh") is None
        assert b"fresh" not in mcp_modern._PLAIN_NAMES
    finally:
        mcp_modern._PLAIN_NAMES.clear()
        mcp_modern._PLAIN_NAMES.update(saved)


_texts = st.sampled_from(["echo", " echo", "echo\t", "=?base64?ZWNobw==?=", "", "x y", "2026-07-28", "tools/call"])
_values: st.SearchStrategy[Any] = st.one_of(st.none(), st.integers(), _texts, st.just({}), st.just([]))
_heads = st.one_of(st.none(), _texts.map(lambda t: t.encode("latin-1")))


@given(
    method=st.sampled_from(["tools/call", "prompts/get", "resources/read", "tools/list", "initialize", " tools/call"]),
    name=_values,
    version=st.one_of(st.none(), st.sampled_from(["2026-07-28", " 2026-07-28", "2025-11-25", "2099-01-01"])),
    meta_version=st.one_of(st.none(), st.sampled_from(["2026-07-28", "2025-11-25"]), st.integers()),
    capabilities=st.one_of(st.none(), st.just({}), st.just({"sampling": {}}), st.just([])),
    info=_values,
    level=_values,
    header_method=st.one_of(
        st.none(), st.sampled_from([b"tools/call", b"prompts/get", b"resources/read", b" tools/call", b"tools/list"])
    ),
    header_name=_heads,
    meta_kind=st.sampled_from(["dict", "missing", "list"]),
)
def test_it_never_accepts_what_the_full_checks_refuse(
    method: str,
    name: Any,
    version: str | None,
    meta_version: Any,
    capabilities: Any,
    info: Any,
    level: Any,
    header_method: bytes | None,
    header_name: bytes | None,
    meta_kind: str,
) -> None:
    meta: Any = {}
    for key, value in (
        (PROTOCOL_VERSION_KEY, meta_version),
        (CLIENT_CAPABILITIES_KEY, capabilities),
        (CLIENT_INFO_KEY, info),
        (LOG_LEVEL_KEY, level),
    ):
        if value is not None:
            meta[key] = value
    message = _request(method, name, meta)
    if meta_kind == "missing":
        del message["params"]["_meta"]
    elif meta_kind == "list":
        message["params"]["_meta"] = [meta]
    common = read_common(message, version, header_method, header_name)
    if common is not None:
        assert common == _full(message, version, header_method, header_name)


# ---- any JSON in any envelope field -----------------------------------------------------------

_ABSENT = object()  # the field left out of _meta
_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
_json: st.SearchStrategy[Any] = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6)
    | st.sampled_from([*_LEVELS, "2026-07-28", "DEBUG"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
# Besides any JSON, values shaped like each field, so that nearly valid ones (one member wrong) come up often.
_info = _json | st.fixed_dictionaries(
    {}, optional={"name": st.text(max_size=4) | _json, "version": st.text(max_size=4) | _json, "title": _json}
)
_members = st.sampled_from(["sampling", "elicitation", "roots", "experimental", "extensions", "tasks", "custom"])
_settings = st.dictionaries(
    st.sampled_from(["tools", "context", "form", "url", "dev.cloto/mgp", "x"]), _json, max_size=3
)
_capabilities = _json | st.dictionaries(_members, _settings | _json, max_size=4)


_FIELDS = {
    PROTOCOL_VERSION_KEY: st.just("2026-07-28") | _json,
    CLIENT_CAPABILITIES_KEY: _capabilities,
    CLIENT_INFO_KEY: _info,
    LOG_LEVEL_KEY: st.sampled_from(_LEVELS) | _json,
}
_WELL_FORMED = {
    PROTOCOL_VERSION_KEY: "2026-07-28",
    CLIENT_CAPABILITIES_KEY: {},
    CLIENT_INFO_KEY: {"name": "t", "version": "1"},
    LOG_LEVEL_KEY: "info",
}
# A well-formed envelope with some of its fields changed to another value, or left out.
_changes = st.lists(
    st.sampled_from(sorted(_FIELDS)).flatmap(lambda key: st.tuples(st.just(key), st.just(_ABSENT) | _FIELDS[key])),
    max_size=4,
)


@settings(max_examples=500)
@given(changes=_changes, header=st.sampled_from(["2026-07-28", "2026-07-28", None]))
def test_any_json_in_the_envelope_is_read_alike_or_refused(changes: list[tuple[str, Any]], header: str | None) -> None:
    """For any JSON value in each envelope field, read_common returns what read_envelope returns, or
    None; read_common never raises, and read_envelope raises nothing but ModernRejection."""
    fields = {**_WELL_FORMED, **dict(changes)}
    meta = {key: value for key, value in fields.items() if value is not _ABSENT}
    message = _request(meta=meta)
    try:
        full: Envelope | None = mcp_modern.read_envelope(message, header)
    except ModernRejection as exc:
        assert exc.status == 400 and exc.code in (-32602, -32020, -32022), exc.message
        full = None
    common = read_common(message, header, b"tools/call", b"echo")
    if common is not None:
        assert common == full
    if full is not None:
        # What was accepted is of the spec's types.
        assert type(full.version) is str and isinstance(full.capabilities, dict)
        assert isinstance(full.client_info, dict)
        if CLIENT_INFO_KEY in meta:
            assert full.client_info is meta[CLIENT_INFO_KEY], "read as sent, never replaced"
        assert full.log_level is None if LOG_LEVEL_KEY not in meta else full.log_level in _LEVELS
