"""MCPC task messages in other dialects' shapes and back (adapters/mcpc/translate.py): examples of
each translation, and properties over arbitrary JSON (nothing raises, inputs are never modified,
only MCPC text blocks are touched)."""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from adapters.mcpc import jsontext
from adapters.mcpc.message import COMPLETE, FAILED, SERVER_EVENT, TASK, UPDATE, McpcMessage, parse_block, parse_text
from adapters.mcpc.translate import (
    as_text,
    event_payload,
    failed_result,
    final_result,
    log_params,
    map_messages,
    outcome_of_error,
    outcome_of_result,
    progress_params,
    task_message,
    update_notifications,
)

# JSON values without NaN (NaN != NaN would make "unchanged" unprovable, and JSON has none).
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)
optional_ids = st.none() | st.text(min_size=1, max_size=12)
messages = st.builds(
    McpcMessage,
    type=st.sampled_from([TASK, SERVER_EVENT]),
    event=st.sampled_from(["created", "update", "complete", "failed"]) | st.text(max_size=8),
    session_id=optional_ids,
    task_id=optional_ids,
    tool_name=optional_ids,
    result=json_values,
)
final_messages = st.builds(
    task_message, st.sampled_from([COMPLETE, FAILED]), optional_ids, optional_ids, optional_ids, json_values
)
mcpc_blocks = messages.map(lambda m: m.text_block()) | st.builds(
    lambda m, extra: {**extra, "type": "text", "text": m.to_json()},
    messages,
    st.dictionaries(st.sampled_from(["annotations", "_meta"]), json_values, max_size=2),
)
other_blocks = (
    st.builds(lambda t: {"type": "text", "text": t}, st.text(max_size=20))
    | st.builds(lambda v: {"type": "text", "text": json.dumps(v)}, json_values)  # JSON, but not MCPC
    | st.just({"type": "image", "data": "AAAA", "mimeType": "image/png"})
    | st.just({"type": "text", "text": '{"protocol":"mcpc","event":1}'})  # junk that looks like it
    | json_values
)
results = (
    st.builds(
        lambda content, extra: {**extra, "content": content},
        st.lists(mcpc_blocks | other_blocks, max_size=6),
        st.dictionaries(st.sampled_from(["isError", "structuredContent", "_meta"]), json_values, max_size=2),
    )
    | json_values
)

# No deadline: a loaded CI machine must not fail a property on time.
relaxed = settings(deadline=None)


# ---- properties ------------------------------------------------------------------------------------


@relaxed
@given(results)
def test_map_messages_touches_only_mcpc_text_blocks_and_never_its_input(result: Any) -> None:
    before = copy.deepcopy(result)
    seen: list[McpcMessage] = []

    def rename(message: McpcMessage) -> McpcMessage:
        seen.append(message)
        return replace(message, session_id="client-s", task_id="client-t", tool_name="client-tool")

    out = map_messages(result, rename)
    assert result == before, "the input is never modified"
    if not seen:
        assert out is result, "a result without MCPC messages is returned as it is"
        return
    assert isinstance(out, dict) and {k: v for k, v in out.items() if k != "content"} == {
        k: v for k, v in result.items() if k != "content"
    }
    assert len(out["content"]) == len(result["content"])
    changed = iter(seen)
    for old, new in zip(result["content"], out["content"], strict=True):
        message = parse_block(old)
        if message is None:
            assert new is old
            continue
        assert message == next(changed)
        assert {k: v for k, v in new.items() if k != "text"} == {k: v for k, v in old.items() if k != "text"}
        renamed = parse_text(new["text"])
        assert renamed == replace(message, session_id="client-s", task_id="client-t", tool_name="client-tool")


@relaxed
@given(results)
def test_map_messages_that_changes_nothing_returns_the_input(result: Any) -> None:
    assert map_messages(result, lambda message: None) is result


@relaxed
@given(json_values)
def test_outcome_of_result_never_raises(result: Any) -> None:
    event, value = outcome_of_result(result)
    assert event in (COMPLETE, FAILED)
    if isinstance(result, dict) and result.get("isError") is True:
        assert event == FAILED
    if not isinstance(result, dict):
        assert (event, value) == (COMPLETE, result)


@relaxed
@given(results)
def test_outcome_of_result_keeps_the_whole_result_unless_it_is_one_text(result: Any) -> None:
    before = copy.deepcopy(result)
    _, value = outcome_of_result(result)
    assert result == before
    if isinstance(result, dict):
        assert value is result or (isinstance(value, str) and value == result["content"][0]["text"])


@relaxed
@given(json_values)
def test_outcome_of_error_never_raises_and_always_fails(error: Any) -> None:
    event, reason = outcome_of_error(error)
    assert event == FAILED and isinstance(reason, str) and reason
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        assert reason == error["message"]


@relaxed
@given(final_messages)
def test_final_result_is_a_tools_call_result(message: McpcMessage) -> None:
    result = final_result(message)
    assert result["isError"] is (message.event == FAILED)
    assert isinstance(result["content"], list)
    source = message.result
    if isinstance(source, dict) and isinstance(source.get("content"), list):
        assert {k: v for k, v in result.items() if k != "isError"} == {
            k: v for k, v in source.items() if k != "isError"
        }
    else:
        assert result["content"] == [{"type": "text", "text": as_text(source)}]


@relaxed
@given(messages)
def test_event_payload_carries_the_message_as_text_and_object(message: McpcMessage) -> None:
    payload = event_payload(message)
    [block] = payload["content"]
    assert block["type"] == "text" and block["text"] == message.to_json()
    assert payload["mcpc"] == message.to_dict()
    assert parse_text(block["text"]) == message


@relaxed
@given(messages, st.none() | st.integers() | st.text(max_size=5), st.integers(min_value=1, max_value=99))
def test_update_notifications_are_well_formed(message: McpcMessage, token: Any, count: int) -> None:
    notes = update_notifications(message, token, count, "lib", "lib__slow")
    assert notes, "an update always shows"
    for method, params in notes:
        assert method in ("notifications/progress", "notifications/message")
        if method == "notifications/progress":
            assert token is not None and params["progressToken"] == token
            assert isinstance(params["progress"], int | float)
        else:
            assert isinstance(params["level"], str) and "data" in params
    if token is None:
        assert [m for m, _ in notes] == ["notifications/message"]


# ---- examples --------------------------------------------------------------------------------------


def upd(result: Any) -> McpcMessage:
    return task_message(UPDATE, "s", "t", "slow_task", result)


def test_as_text_keeps_strings_and_writes_anything_else_as_the_library_would() -> None:
    assert as_text("hello") == "hello"
    assert as_text({"a": [1, 2.5, None]}) == '{"a":[1,2.5,null]}'
    assert as_text(1e16) == jsontext.dumps(1e16) == "1e16"
    assert as_text(None) == "null"


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        ({"step": 1}, {"progressToken": "k", "progress": 3, "message": '{"step":1}'}),
        ("halfway", {"progressToken": "k", "progress": 3, "message": "halfway"}),
        (
            {"progress": 0.5, "total": 1, "message": "m"},
            {"progressToken": "k", "progress": 0.5, "total": 1, "message": "m"},
        ),
        ({"progress": 2}, {"progressToken": "k", "progress": 2}),
        ({"progress": 2, "total": "x"}, {"progressToken": "k", "progress": 2}),
        ({"progress": True}, {"progressToken": "k", "progress": 3, "message": '{"progress":true}'}),
        ({"progress": 1, "extra": 1}, {"progressToken": "k", "progress": 3, "message": '{"progress":1,"extra":1}'}),
    ],
)
def test_progress_params(result: Any, expected: dict[str, Any]) -> None:
    assert progress_params(upd(result), "k", 3) == expected


def test_log_params_name_the_clients_tool_for_tasks_only() -> None:
    assert log_params(upd({"x": 1}), "lib", "lib__slow_task") == {
        "level": "info",
        "logger": "lib",
        "data": {"mcpc": "task", "event": "update", "result": {"x": 1}, "tool": "lib__slow_task"},
    }
    event = McpcMessage(type=SERVER_EVENT, event="tick", result=[1])
    assert log_params(event, "lib", "") == {
        "level": "info",
        "logger": "lib",
        "data": {"mcpc": "server_event", "event": "tick", "result": [1]},
    }


def test_update_notifications_by_shape() -> None:
    line = {"level": "warning", "logger": "x", "data": {"d": 1}}
    assert update_notifications(upd(line), "k", 1, "lib", "t") == [("notifications/message", line)]
    progress = {"progress": 1, "total": 4}
    assert update_notifications(upd(progress), "k", 1, "lib", "t") == [
        ("notifications/progress", {"progressToken": "k", "progress": 1, "total": 4})
    ]
    [(method, params)] = update_notifications(upd(progress), None, 1, "lib", "t")
    assert method == "notifications/message" and params["data"]["result"] == progress
    assert [m for m, _ in update_notifications(upd("text"), "k", 1, "lib", "t")] == [
        "notifications/progress",
        "notifications/message",
    ]
    not_a_line = {"level": "loud", "data": 1}
    assert update_notifications(upd(not_a_line), None, 1, "lib", "t")[0][1]["data"]["result"] == not_a_line


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        ({"content": [{"type": "text", "text": "42"}]}, (COMPLETE, "42")),
        ({"content": [{"type": "text", "text": "42"}], "isError": False}, (COMPLETE, "42")),
        ({"content": [{"type": "text", "text": "no"}], "isError": True}, (FAILED, "no")),
        ("bare", (COMPLETE, "bare")),
        (None, (COMPLETE, None)),
    ],
)
def test_outcome_of_result_examples(result: Any, expected: tuple[str, Any]) -> None:
    assert outcome_of_result(result) == expected


@pytest.mark.parametrize(
    "result",
    [
        {"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {"content": [{"type": "text", "text": "a"}], "structuredContent": {"a": 1}},
        {"content": [{"type": "image", "data": "AA", "mimeType": "image/png"}]},
        {"content": []},
        {"no": "content"},
    ],
)
def test_outcome_of_result_keeps_anything_richer_whole(result: dict[str, Any]) -> None:
    assert outcome_of_result(result) == (COMPLETE, result)
    assert outcome_of_result({**result, "isError": True}) == (FAILED, {**result, "isError": True})


def test_outcome_of_error_examples() -> None:
    assert outcome_of_error({"code": -32000, "message": "backend fell over"}) == (FAILED, "backend fell over")
    assert outcome_of_error({"code": -32000, "message": 7}) == (FAILED, "the call failed")
    assert outcome_of_error("x") == (FAILED, "the call failed")


def test_final_results() -> None:
    assert final_result(task_message(COMPLETE, "s", "t", "x", "done")) == {
        "content": [{"type": "text", "text": "done"}],
        "isError": False,
    }
    assert final_result(task_message(FAILED, "s", "t", "x", {"why": "boom"})) == {
        "content": [{"type": "text", "text": '{"why":"boom"}'}],
        "isError": True,
    }
    whole = {"content": [{"type": "text", "text": "a"}], "structuredContent": {"a": 1}, "isError": True}
    assert final_result(task_message(COMPLETE, "s", "t", "x", whole)) == {**whole, "isError": False}
    assert failed_result("nope") == {"content": [{"type": "text", "text": "nope"}], "isError": True}
