"""adapters/mcp_draft.py: the seed draft's names accepted as aliases, and its shapes sent back."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, strategies as st

from adapters import mcp_draft as d
from adapters.mcp import LATEST_LEGACY, LEGACY_VERSIONS

SERVER_INFO = {"name": "switchboard", "version": "1.2.3"}


# ---- normalize: initialize ---------------------------------------------------------------------


def test_draft_initialize_becomes_mcp_initialize() -> None:
    message = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "mcpVersion": "2025-06-18",
            "clientCapabilities": {"supportsProgress": True, "supportsCancellation": True},
        },
    }
    original = copy.deepcopy(message)
    canonical, alias = d.normalize(message)
    assert alias == "initialize"
    assert canonical == {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {"experimental": {"draft": {"supportsProgress": True, "supportsCancellation": True}}},
            "clientInfo": {"name": "draft-client", "version": "0"},
        },
    }
    assert message == original  # not mutated


@pytest.mark.parametrize("version", LEGACY_VERSIONS)
def test_draft_initialize_keeps_a_legacy_version(version: str) -> None:
    canonical, _ = d.normalize({"id": 1, "method": "initialize", "params": {"mcpVersion": version}})
    assert canonical["params"]["protocolVersion"] == version


@pytest.mark.parametrize("version", ["2026-07-28", "1.0", None, 5])
def test_draft_initialize_unknown_version_becomes_latest_legacy(version: Any) -> None:
    canonical, alias = d.normalize({"id": 1, "method": "initialize", "params": {"mcpVersion": version}})
    assert alias == "initialize"
    assert canonical["params"]["protocolVersion"] == LATEST_LEGACY


def test_draft_initialize_keeps_client_info_and_drops_odd_capabilities() -> None:
    canonical, _ = d.normalize(
        {
            "id": 1,
            "method": "initialize",
            "params": {"mcpVersion": "2025-06-18", "clientCapabilities": ["x"], "clientInfo": {"name": "me"}},
        }
    )
    assert canonical["params"]["capabilities"] == {}
    assert canonical["params"]["clientInfo"] == {"name": "me"}


def test_real_initialize_is_untouched() -> None:
    message = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "c", "version": "1"}},
    }
    canonical, alias = d.normalize(message)
    assert alias is None
    assert canonical is message
    # Both spellings present: the real one wins, nothing is rewritten.
    both = {"id": 2, "method": "initialize", "params": {"protocolVersion": "2025-03-26", "mcpVersion": "x"}}
    assert d.normalize(both) == (both, None)
    assert d.is_draft_initialize({"mcpVersion": "2025-06-18"}) is True
    assert d.is_draft_initialize({"mcpVersion": "x", "protocolVersion": "y"}) is False
    assert d.is_draft_initialize({}) is False


# ---- normalize: initialized, tools/invoke ------------------------------------------------------


def test_initialized_becomes_notifications_initialized() -> None:
    message = {"jsonrpc": "2.0", "method": "initialized", "params": {}}
    canonical, alias = d.normalize(message)
    assert alias == "initialized"
    assert canonical == {"jsonrpc": "2.0", "method": "notifications/initialized", "params": {}}
    assert message["method"] == "initialized"


def test_tools_invoke_becomes_tools_call_with_progress_token_of_the_id() -> None:
    message = {
        "jsonrpc": "2.0",
        "id": 10,
        "method": "tools/invoke",
        "params": {"name": "get_weather", "arguments": {"city": "Phoenix"}},
    }
    original = copy.deepcopy(message)
    canonical, alias = d.normalize(message)
    assert alias == "tools/invoke"
    assert canonical == {
        "jsonrpc": "2.0",
        "id": 10,
        "method": "tools/call",
        "params": {"name": "get_weather", "arguments": {"city": "Phoenix"}, "_meta": {"progressToken": 10}},
    }
    assert message == original


def test_tools_invoke_keeps_a_given_progress_token_and_other_meta() -> None:
    message = {
        "id": "abc",
        "method": "tools/invoke",
        "params": {"name": "t", "_meta": {"progressToken": "mine", "other": 1}},
    }
    canonical, alias = d.normalize(message)
    assert alias == "tools/invoke"
    assert canonical["method"] == "tools/call"
    assert canonical["params"]["_meta"] == {"progressToken": "mine", "other": 1}


def test_tools_invoke_adds_token_beside_existing_meta() -> None:
    canonical, _ = d.normalize({"id": "r1", "method": "tools/invoke", "params": {"name": "t", "_meta": {"k": "v"}}})
    assert canonical["params"]["_meta"] == {"k": "v", "progressToken": "r1"}


def test_tools_invoke_without_id_gets_no_token() -> None:
    canonical, alias = d.normalize({"method": "tools/invoke", "params": {"name": "t"}})
    assert alias == "tools/invoke"
    assert canonical == {"method": "tools/call", "params": {"name": "t"}}


def test_tools_invoke_without_params() -> None:
    canonical, _ = d.normalize({"id": 3, "method": "tools/invoke"})
    assert canonical == {"id": 3, "method": "tools/call", "params": {"_meta": {"progressToken": 3}}}


# ---- normalize: cancel, progress, local methods ------------------------------------------------


def test_cancel_becomes_notifications_cancelled() -> None:
    canonical, alias = d.normalize({"jsonrpc": "2.0", "method": "cancel", "params": {"id": 10}})
    assert alias == "cancel"
    assert canonical == {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 10}}


def test_cancel_keeps_a_string_reason_only() -> None:
    canonical, _ = d.normalize({"method": "cancel", "params": {"id": "x", "reason": "user"}})
    assert canonical["params"] == {"requestId": "x", "reason": "user"}
    canonical, _ = d.normalize({"method": "cancel", "params": {"id": "x", "reason": 5}})
    assert canonical["params"] == {"requestId": "x"}


def test_progress_becomes_notifications_progress() -> None:
    canonical, alias = d.normalize(
        {"jsonrpc": "2.0", "method": "progress", "params": {"id": 10, "percent": 42, "message": "Searching..."}}
    )
    assert alias == "progress"
    assert canonical == {
        "jsonrpc": "2.0",
        "method": "notifications/progress",
        "params": {"progressToken": 10, "progress": 42, "total": 100, "message": "Searching..."},
    }


def test_progress_without_percent_or_message() -> None:
    canonical, _ = d.normalize({"method": "progress", "params": {"id": "t", "message": 3}})
    assert canonical["params"] == {"progressToken": "t", "progress": 0, "total": 100}


@pytest.mark.parametrize(
    "message",
    [
        {"jsonrpc": "2.0", "id": 50, "method": "shutdown"},
        {"jsonrpc": "2.0", "method": "exit"},
    ],
)
def test_shutdown_and_exit_are_kept_as_local(message: dict[str, Any]) -> None:
    canonical, alias = d.normalize(message)
    assert canonical is message
    assert alias == message["method"]
    assert alias in d.LOCAL_METHODS


# ---- normalize: everything else ----------------------------------------------------------------


@pytest.mark.parametrize(
    "message",
    [
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "t"}},
        {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}},
        {"jsonrpc": "2.0", "id": 1, "result": {}},
        {"jsonrpc": "2.0", "id": 1, "error": {"code": -1, "message": "x"}},
        {"jsonrpc": "2.0", "id": 1, "method": 5},
        {"jsonrpc": "2.0", "id": 1, "method": "tools/changed"},  # server-to-client name, not a client alias
    ],
)
def test_non_alias_messages_are_untouched(message: dict[str, Any]) -> None:
    original = copy.deepcopy(message)
    canonical, alias = d.normalize(message)
    assert alias is None
    assert canonical is message
    assert message == original


_ALIASES = {"initialize", "initialized", "tools/invoke", "cancel", "progress", "shutdown", "exit"}


@given(
    st.text().filter(lambda s: s not in _ALIASES),
    st.dictionaries(st.text(), st.integers() | st.text() | st.none()),
)
def test_normalize_is_identity_for_any_other_method(method: str, params: dict[str, Any]) -> None:
    message = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    assert d.normalize(message) == (message, None)


# ---- reshape_response --------------------------------------------------------------------------


def response(result: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 10, "result": result}


def test_invoke_prefers_structured_content() -> None:
    result = {
        "content": [{"type": "text", "text": '{"temperature": 89}'}],
        "structuredContent": {"temperature": 89, "condition": "Sunny"},
    }
    shaped = d.reshape_response("tools/invoke", response(result), SERVER_INFO)
    assert shaped["id"] == 10
    assert shaped["result"]["status"] == "success"
    assert shaped["result"]["output"] == {"temperature": 89, "condition": "Sunny"}
    assert shaped["result"]["content"] == result["content"]


def test_invoke_single_text_becomes_a_string() -> None:
    shaped = d.reshape_response("tools/invoke", response({"content": [{"type": "text", "text": "hi"}]}), SERVER_INFO)
    assert shaped["result"] == {"status": "success", "output": "hi", "content": [{"type": "text", "text": "hi"}]}


@pytest.mark.parametrize(
    "content",
    [
        [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
        [{"type": "image", "data": "AA==", "mimeType": "image/png"}],
        [{"type": "text", "text": "a"}, {"type": "image", "data": "AA==", "mimeType": "image/png"}],
        [],
    ],
)
def test_invoke_otherwise_outputs_the_content_list(content: list[dict[str, Any]]) -> None:
    shaped = d.reshape_response("tools/invoke", response({"content": content}), SERVER_INFO)
    assert shaped["result"]["output"] == content
    assert shaped["result"]["status"] == "success"


def test_invoke_error_status() -> None:
    result = {"content": [{"type": "text", "text": "boom"}], "isError": True}
    shaped = d.reshape_response("tools/invoke", response(result), SERVER_INFO)
    assert shaped["result"]["status"] == "error"
    assert shaped["result"]["output"] == "boom"
    assert d.invoke_result({"content": [], "isError": False})["status"] == "success"


def test_invoke_result_without_content() -> None:
    assert d.invoke_result({}) == {"status": "success", "output": [], "content": []}
    assert d.invoke_result({"structuredContent": None})["output"] is None


def test_invoke_error_response_is_passed_through() -> None:
    error = {"jsonrpc": "2.0", "id": 10, "error": {"code": 4001, "message": "Missing required parameter"}}
    assert d.reshape_response("tools/invoke", error, SERVER_INFO) is error


def test_draft_initialize_response() -> None:
    result = {
        "protocolVersion": "2025-06-18",
        "capabilities": {"tools": {"listChanged": True}, "prompts": {}},
        "serverInfo": {"name": "backend", "version": "9"},
    }
    shaped = d.reshape_response("initialize", response(result), SERVER_INFO)
    assert shaped["id"] == 10
    assert shaped["result"] == {
        **result,
        "mcpVersion": "2025-06-18",
        "server": SERVER_INFO,
        "serverCapabilities": {
            "supportsToolDiscovery": True,
            "supportsResourceDiscovery": False,
            "supportsPromptDiscovery": True,
            "supportsNotifications": True,
            "supportsProgress": True,
            "supportsCancellation": True,
        },
    }


def test_draft_initialize_response_with_odd_capabilities() -> None:
    shaped = d.reshape_response("initialize", response({"protocolVersion": "x", "capabilities": []}), SERVER_INFO)
    caps = shaped["result"]["serverCapabilities"]
    assert caps["supportsToolDiscovery"] is False
    assert caps["supportsResourceDiscovery"] is False
    assert caps["supportsPromptDiscovery"] is False


@pytest.mark.parametrize("alias", [None, "initialized", "cancel", "progress", "shutdown"])
def test_other_responses_are_untouched(alias: str | None) -> None:
    resp = response({"content": [{"type": "text", "text": "x"}]})
    assert d.reshape_response(alias, resp, SERVER_INFO) is resp


def test_non_object_result_is_untouched() -> None:
    resp = response(None)
    assert d.reshape_response("tools/invoke", resp, SERVER_INFO) is resp
    assert d.reshape_response("initialize", resp, SERVER_INFO) is resp


# ---- render_outbound ---------------------------------------------------------------------------


def test_tools_list_changed_becomes_tools_changed() -> None:
    assert d.render_outbound({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}) == {
        "jsonrpc": "2.0",
        "method": "tools/changed",
        "params": {},
    }
    changes = {"added": [{"name": "new_tool"}], "removed": ["old"]}
    out = d.render_outbound(
        {"jsonrpc": "2.0", "method": "notifications/tools/list_changed", "params": {"changes": changes}}
    )
    assert out == {"jsonrpc": "2.0", "method": "tools/changed", "params": changes}


def test_resources_notifications_become_resources_changed() -> None:
    assert d.render_outbound({"jsonrpc": "2.0", "method": "notifications/resources/list_changed"}) == {
        "jsonrpc": "2.0",
        "method": "resources/changed",
        "params": {"updated": []},
    }
    assert d.render_outbound(
        {"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": "file:///a"}}
    ) == {"jsonrpc": "2.0", "method": "resources/changed", "params": {"updated": ["file:///a"]}}


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"progressToken": 10, "progress": 21, "total": 50}, {"id": 10, "percent": 42}),
        ({"progressToken": "t", "progress": 1, "total": 4, "message": "m"}, {"id": "t", "percent": 25, "message": "m"}),
        ({"progressToken": 1, "progress": 0.5, "total": 2.0}, {"id": 1, "percent": 25}),
        ({"progressToken": 1, "progress": 7}, {"id": 1, "percent": 7}),  # no total: progress as is
        ({"progressToken": 1, "progress": 7, "total": 0}, {"id": 1, "percent": 7}),  # no division by zero
        ({"progressToken": 1, "progress": 7, "message": 3}, {"id": 1, "percent": 7}),
    ],
)
def test_progress_becomes_draft_progress(params: dict[str, Any], expected: dict[str, Any]) -> None:
    out = d.render_outbound({"jsonrpc": "2.0", "method": "notifications/progress", "params": params})
    assert out == {"jsonrpc": "2.0", "method": "progress", "params": expected}


@pytest.mark.parametrize(
    "message",
    [
        {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "x"}},
        {"jsonrpc": "2.0", "method": "notifications/prompts/list_changed"},
        {"jsonrpc": "2.0", "id": 5, "method": "sampling/createMessage", "params": {}},
        {"jsonrpc": "2.0", "id": 5, "result": {}},
    ],
)
def test_other_outbound_messages_are_untouched(message: dict[str, Any]) -> None:
    assert d.render_outbound(message) is message


def test_round_trip_progress_token_of_invoke_reaches_the_draft_id() -> None:
    canonical, _ = d.normalize({"id": 77, "method": "tools/invoke", "params": {"name": "slow"}})
    token = canonical["params"]["_meta"]["progressToken"]
    out = d.render_outbound(
        {
            "jsonrpc": "2.0",
            "method": "notifications/progress",
            "params": {"progressToken": token, "progress": 3, "total": 4},
        }
    )
    assert out is not None
    assert out["params"] == {"id": 77, "percent": 75}
