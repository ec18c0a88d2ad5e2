"""adapters/mcpc: the MCPC wire (shared/notes/WIRE.md "MCPC"; the ``mcpc`` 0.2.6 source).

The byte-exact comparison with the library itself is in tests/mcpc_peers/test_peers.py.
"""

from __future__ import annotations

import copy
import json
import math
from typing import Any

import pytest
from hypothesis import given, strategies as st

from adapters import mcpc
from adapters.mcpc import jsontext
from adapters.mcpc.message import message_from_dict, parse_block

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)
ids = st.none() | st.text(max_size=12) | st.integers()
message_like = st.fixed_dictionaries(
    {},
    optional={
        "type": st.sampled_from(["task", "server_event", "other"]) | json_values,
        "event": st.sampled_from(["created", "update", "complete", "failed", "notification"]) | json_values,
        "session_id": ids,
        "task_id": ids,
        "tool_name": ids,
        "result": json_values,
        "protocol": st.just("mcpc") | json_values,
    },
)

# ---- versions -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("0.2.6", (0, 2, 6)),
        ("v0.2", (0, 2)),
        ("0.2.5rc1", (0, 2, 5)),
        (" 1.0.0-dev", (1, 0, 0)),
        ("x", None),
        (3, None),
    ],
)
def test_parse_version(text: Any, parsed: tuple[int, ...] | None) -> None:
    assert mcpc.parse_version(text) == parsed


def test_compare_versions() -> None:
    assert mcpc.compare_versions("0.2.4", "0.2.5") == -1
    assert mcpc.compare_versions("0.2", "0.2.0") == 0
    assert mcpc.compare_versions("0.10.0", "0.9.9") == 1
    assert mcpc.compare_versions(None, "0.2.6") == 0  # unknown counts as the newest release
    assert mcpc.at_least("0.2.5", "0.2.5") and not mcpc.at_least("0.2.4", (0, 2, 5))


@given(st.text() | json_values)
def test_versions_never_raise(value: Any) -> None:
    mcpc.parse_version(value)
    mcpc.compare_versions(value, "0.2.5")
    assert mcpc.handshake_tool(value) in mcpc.HANDSHAKE_TOOLS


# ---- handshake ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "tool", "form"),
    [
        ("0.2.6", "_mcpc_init", mcpc.MetadataForm.PARAMS),
        ("0.2.5", "_mcpc_init", mcpc.MetadataForm.PARAMS),
        ("0.2.4", "_is_mcpc_enabled", mcpc.MetadataForm.LEGACY),
        ("0.2.3", "_is_mcpc_enabled", mcpc.MetadataForm.LEGACY),
        ("0.2.2", "is_mcpc_enabled", mcpc.MetadataForm.LEGACY),
        ("0.1.0", "is_mcpc_enabled", mcpc.MetadataForm.LEGACY),
        (None, "_mcpc_init", mcpc.MetadataForm.PARAMS),
    ],
)
def test_names_by_version(version: str | None, tool: str, form: mcpc.MetadataForm) -> None:
    assert mcpc.handshake_tool(version) == tool
    assert mcpc.metadata_form(version) is form


def test_handshake_arguments() -> None:
    info = {"mcpc_enabled": True, "mcpc_version": "0.2.6", "mcpc_provider": "switchboard"}
    assert mcpc.handshake_arguments("_mcpc_init", "switchboard") == {"mcpc_info": info}
    assert mcpc.handshake_arguments("_is_mcpc_enabled", "p")["mcpc_info"]["mcpc_version"] == "0.2.4"
    assert mcpc.handshake_arguments("is_mcpc_enabled", "p") == {}
    attempts = mcpc.handshake_attempts("p")
    assert [tool for tool, _ in attempts] == ["_mcpc_init", "_is_mcpc_enabled", "is_mcpc_enabled"]


def test_reply_text_is_the_libraries() -> None:
    # MCPCInformation(mcpc_provider="x").model_dump_json()
    assert mcpc.reply_text("x") == '{"mcpc_enabled":true,"mcpc_version":"0.2.6","mcpc_provider":"x"}'
    result = mcpc.reply_result("switchboard", "0.2.4")
    assert mcpc.info_from_result(result) == mcpc.McpcInfo(True, "0.2.4", "switchboard")


@pytest.mark.parametrize(
    ("result", "info"),
    [
        ({"content": [{"type": "text", "text": '{"mcpc_enabled":true,"mcpc_version":"0.2.6"}'}]}, ("0.2.6", None)),
        ({"content": [{"type": "text", "text": "Unknown tool: _mcpc_init"}], "isError": True}, None),
        ({"content": [{"type": "text", "text": '{"mcpc_enabled":true}'}], "isError": True}, None),
        ({"content": [{"type": "text", "text": "[1]"}]}, None),
        ({"content": "x"}, None),
        ("x", None),
    ],
)
def test_info_from_result(result: Any, info: tuple[str | None, str | None] | None) -> None:
    got = mcpc.info_from_result(result)
    assert (None if got is None else (got.version, got.provider)) == info


def test_client_side_of_the_handshake() -> None:
    args = {"mcpc_info": {"mcpc_enabled": True, "mcpc_version": "0.2.3", "mcpc_provider": "c"}}
    assert mcpc.info_from_arguments(args) == mcpc.McpcInfo(True, "0.2.3", "c")
    assert mcpc.info_from_arguments({}) is None
    assert mcpc.client_version("_is_mcpc_enabled", args) == "0.2.3"
    assert mcpc.client_version("_is_mcpc_enabled", {"mcpc_info": {"mcpc_version": "junk"}}) == "0.2.4"
    assert mcpc.client_version("is_mcpc_enabled", {}) == "0.2.2"
    assert mcpc.client_version("_mcpc_init", None) == "0.2.6"


@given(json_values, json_values)
def test_handshake_readers_never_raise(tool: Any, value: Any) -> None:
    mcpc.info_from_arguments(value)
    mcpc.info_from_arguments({"mcpc_info": value})
    mcpc.info_from_result(value)
    mcpc.info_from_result({"content": [{"type": "text", "text": json.dumps(value)}]})
    assert isinstance(mcpc.client_version(tool, value), str)


# ---- metadata -----------------------------------------------------------------------------------


def test_build_and_read_both_forms() -> None:
    args = {"x": 1}
    new = mcpc.with_metadata(args, "s", "t", "0.2.6")
    assert new == {"x": 1, "mcpc_params": {"session_id": "s", "task_id": "t"}}
    old = mcpc.with_metadata(args, "s", "t", "0.2.4")
    assert old == {"x": 1, "_metadata": {"mcpc_session_id": "s", "mcpc_task_id": "t"}}
    assert args == {"x": 1}
    assert mcpc.read_metadata(new) == mcpc.TaskRef("s", "t", mcpc.MetadataForm.PARAMS)
    assert mcpc.read_metadata(old) == mcpc.TaskRef("s", "t", mcpc.MetadataForm.LEGACY)
    assert mcpc.without_metadata(new) == args == mcpc.without_metadata(old)
    # replacing metadata of the other form
    assert mcpc.with_metadata(new, "s2", "t2", "0.2.2") == {
        "x": 1,
        "_metadata": {"mcpc_session_id": "s2", "mcpc_task_id": "t2"},
    }


def test_without_metadata_keeps_foreign_metadata() -> None:
    args = {"_metadata": {"mcpc_task_id": "t", "trace": 1}, "y": 2}
    assert mcpc.without_metadata(args) == {"_metadata": {"trace": 1}, "y": 2}
    assert args == {"_metadata": {"mcpc_task_id": "t", "trace": 1}, "y": 2}
    plain = {"_metadata": {"trace": 1}}
    assert mcpc.without_metadata(plain) is plain
    assert mcpc.read_metadata(plain) is None
    assert mcpc.read_metadata({"mcpc_params": {"session_id": 5, "task_id": "t"}}) == mcpc.TaskRef(
        None, "t", mcpc.MetadataForm.PARAMS
    )


@given(st.dictionaries(st.text(max_size=12), json_values, max_size=5) | json_values, json_values)
def test_metadata_never_raises_nor_mutates(arguments: Any, inner: Any) -> None:
    for args in (arguments, {"mcpc_params": inner}, {"_metadata": inner}, {"_metadata": {"mcpc_task_id": inner}}):
        before = copy.deepcopy(args)
        mcpc.read_metadata(args)
        stripped = mcpc.without_metadata(args)
        if isinstance(args, dict):
            mcpc.task_info(args)
        new = mcpc.with_metadata(args, "s", "t")
        assert mcpc.read_metadata(new) == mcpc.TaskRef("s", "t", mcpc.MetadataForm.PARAMS)
        assert mcpc.read_metadata(stripped) is None
        assert args == before  # (a NaN is the same object in both, so == holds)


# ---- message ------------------------------------------------------------------------------------


def test_message_serialises_as_the_library() -> None:
    message = mcpc.McpcMessage("task", "update", "s", "t", "tool", {"b": 1e16, "a": [None, 1e-7, float("nan"), "é"]})
    assert message.to_json() == (
        '{"type":"task","event":"update","session_id":"s","task_id":"t","tool_name":"tool",'
        '"result":{"b":1e16,"a":[null,1e-7,null,"é"]},"protocol":"mcpc"}'
    )
    event = mcpc.McpcMessage("server_event", "ping", "s")
    assert event.to_json() == (
        '{"type":"server_event","event":"ping","session_id":"s","task_id":null,"tool_name":null,'
        '"result":null,"protocol":"mcpc"}'
    )
    assert event.routable and not mcpc.McpcMessage("task", "update", "s", None, "x").routable
    assert mcpc.McpcMessage("task", "failed").final and not mcpc.McpcMessage("server_event", "complete").final


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            '{"type":"task","event":"created","session_id":"s","task_id":"t","tool_name":"x","result":1,"protocol":"mcpc"}',
            mcpc.McpcMessage("task", "created", "s", "t", "x", 1),
        ),
        ('{"event":"update","task_id":"t","protocol":"mcpc"}', mcpc.McpcMessage("task", "update", None, "t")),
        ('{"type":"server_event","event":"e","session_id":7,"protocol":"mcpc"}', mcpc.McpcMessage("server_event", "e")),
        ('{"type":"task","event":"update","task_id":"t"}', None),  # no protocol
        ('{"type":"other","event":"update","protocol":"mcpc"}', None),
        ('{"type":"task","event":3,"protocol":"mcpc"}', None),
        ('["mcpc"]', None),
        ("not json mcpc", None),
        ("", None),
    ],
)
def test_parse_text(text: str, expected: mcpc.McpcMessage | None) -> None:
    assert mcpc.parse_text(text) == expected


def test_messages_in_result_takes_every_mcpc_block() -> None:
    created = mcpc.McpcMessage("task", "created", "s", "t", "x", "started")
    done = mcpc.McpcMessage("task", "complete", "s", "t", "x", {"ok": True})
    result = mcpc.result_of_messages([created, done])
    result["content"].insert(1, {"type": "text", "text": "plain output"})
    result["content"].append({"type": "image", "data": "", "mimeType": "image/png"})
    assert mcpc.messages_in_result(result) == [created, done]
    assert mcpc.messages_in_content("x") == [] and mcpc.messages_in_result(None) == []


@given(message_like)
def test_message_round_trip(obj: dict[str, Any]) -> None:
    message = message_from_dict(obj)
    if message is None:
        return
    assert message_from_dict(json.loads(message.to_json())) == _without_nan(message)
    assert parse_block(message.text_block()) == _without_nan(message)


def _without_nan(message: mcpc.McpcMessage) -> mcpc.McpcMessage:
    return mcpc.McpcMessage(
        message.type,
        message.event,
        message.session_id,
        message.task_id,
        message.tool_name,
        _nan_to_none(message.result),
    )


def _nan_to_none(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, list):
        return [_nan_to_none(item) for item in value]
    if isinstance(value, dict):
        return {key: _nan_to_none(item) for key, item in value.items()}
    return value


@given(json_values | message_like, st.text())
def test_message_parsers_never_raise(value: Any, text: str) -> None:
    for candidate in (value, {"content": [value]}, {"content": [{"type": "text", "text": text}]}):
        mcpc.messages_in_result(candidate)
        mcpc.callback_messages({"id": "MCPC_CALLBACK", "result": candidate})
    mcpc.parse_text(text)
    mcpc.parse_text(json.dumps(value))
    mcpc.messages_in_content(value)
    parse_block(value)
    message_from_dict(value)


# ---- callback -----------------------------------------------------------------------------------


def test_callback_envelope() -> None:
    message = mcpc.McpcMessage("task", "update", "s", "t", "x", 50)
    line = mcpc.callback_line(message)
    inner = json.dumps(message.to_json())
    assert line == (
        '{"jsonrpc":"2.0","id":"MCPC_CALLBACK","result":{"content":[{"type":"text","text":'
        + inner
        + ',"annotations":null}],"isError":false}}'
    )
    decoded = json.loads(line)
    assert decoded == mcpc.callback_envelope(message)
    assert mcpc.is_callback(decoded) and mcpc.callback_messages(decoded) == [message]
    assert not mcpc.is_callback({"jsonrpc": "2.0", "id": 1, "result": decoded["result"]})
    assert not mcpc.is_callback({"jsonrpc": "2.0", "id": "MCPC_CALLBACK", "method": "x"})
    assert mcpc.callback_messages({"id": 1, "result": decoded["result"]}) == []


# ---- listing ------------------------------------------------------------------------------------


def test_hide() -> None:
    tools = [
        {"name": "_mcpc_init", "inputSchema": {"type": "object"}},
        {"name": "is_mcpc_enabled"},
        {"name": "_is_mcpc_enabled"},
        {
            "name": "slow",
            "inputSchema": {
                "type": "object",
                "properties": {"n": {"type": "integer"}, "mcpc_params": {}, "_metadata": {}},
                "required": ["n", "mcpc_params"],
            },
        },
        {"name": "plain", "inputSchema": {"type": "object", "properties": {"n": {}}}},
        "junk",
    ]
    before = copy.deepcopy(tools)
    hidden = mcpc.hide(tools)
    assert tools == before
    assert [tool["name"] if isinstance(tool, dict) else tool for tool in hidden] == ["slow", "plain", "junk"]
    assert hidden[0]["inputSchema"] == {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    assert hidden[1] is tools[4]
    assert mcpc.hide_in_result({"tools": tools, "nextCursor": "c"}) == {"tools": hidden, "nextCursor": "c"}
    assert mcpc.hide("x") == [] and mcpc.hide_in_result(None) is None


tool_like = st.fixed_dictionaries(
    {},
    optional={
        "name": st.sampled_from(["_mcpc_init", "is_mcpc_enabled", "t"]) | json_values,
        "inputSchema": json_values
        | st.fixed_dictionaries(
            {},
            optional={
                "properties": json_values
                | st.dictionaries(st.sampled_from(["mcpc_params", "_metadata", "a"]), json_values),
                "required": json_values | st.lists(st.sampled_from(["mcpc_params", "_metadata", "a"]) | json_values),
            },
        ),
    },
)


@given(st.lists(tool_like | json_values, max_size=5))
def test_hide_never_raises_nor_mutates(tools: list[Any]) -> None:
    before = repr(tools)
    hidden = mcpc.hide(tools)
    assert repr(tools) == before
    for tool in hidden:
        if isinstance(tool, dict):
            assert tool.get("name") not in ("_mcpc_init", "_is_mcpc_enabled", "is_mcpc_enabled")
            schema = tool.get("inputSchema")
            if isinstance(schema, dict) and isinstance(schema.get("properties"), dict):
                assert not {"mcpc_params", "_metadata"} & set(schema["properties"])


# ---- jsontext -----------------------------------------------------------------------------------


@given(json_values)
def test_dumps_is_json(value: Any) -> None:
    text = jsontext.dumps(value)
    assert jsontext.loads(text) == json.loads(json.dumps(_nan_to_none(value)))


@pytest.mark.parametrize(
    ("value", "text"),  # as pydantic-core (ryu) writes them, checked against the library
    [
        (1e16, "1e16"),
        (1e15, "1000000000000000.0"),
        (1e-7, "1e-7"),
        (1e-6, "1e-6"),
        (1e-5, "0.00001"),
        (-1.5e-5, "-0.000015"),
        (6.103515625e-05, "0.00006103515625"),
        (1e-4, "0.0001"),
        (5e-324, "5e-324"),
        (-1.7976931348623157e308, "-1.7976931348623157e308"),
        (-0.0, "-0.0"),
        (float("inf"), "null"),
        ("1e+05 NaN", '"1e+05 NaN"'),
        (2**70, "1180591620717411303424"),
    ],
)
def test_dumps_spells_numbers_as_pydantic(value: Any, text: str) -> None:
    assert jsontext.dumps(value) == text


def test_loads_never_raises() -> None:
    assert jsontext.loads("{") is jsontext.INVALID
    assert jsontext.loads(None) is jsontext.INVALID
    assert jsontext.loads("[" * 100_000) is jsontext.INVALID
    assert jsontext.loads("null") is None
