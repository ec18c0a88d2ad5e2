"""The 2026-07-28 (stateless) side of ``/mcp`` in-process: discovery, calls, envelope, routing headers, methods, bodies.

A real Gateway with the builtin demo backend behind httpx's ASGI transport (no sockets, no
subprocess). Every modern request carries its client envelope in ``params._meta`` and mirrors its
method (and target) in headers; whatever goes wrong is answered with the code and HTTP status of
the one error table (gateway/errors.py).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from adapters import mcp_modern
from gateway import errors
from gateway.core import Gateway
from tests.gateway.transports.modern_door_support import (
    BODY_LIMIT,
    META,
    VERSION,
    assert_error,
    client_for,
    headers_for,
    rpc,
)

pytestmark = pytest.mark.timeout(30)


# ---- server/discover ----------------------------------------------------------------------------


async def test_server_discover_describes_the_gateway_without_a_session(door: httpx.AsyncClient) -> None:
    answer = await door.post("/mcp", headers=headers_for("server/discover"), json=rpc("server/discover", rpc_id="d"))
    assert answer.status_code == 200, answer.text
    assert "mcp-session-id" not in answer.headers, "the modern era has no sessions"
    body = answer.json()
    assert body["id"] == "d"
    result = body["result"]
    assert result["supportedVersions"] == list(mcp_modern.MODERN_VERSIONS)
    assert result["resultType"] == "complete"
    assert result["ttlMs"] == 0 and result["cacheScope"] == "private"
    assert {"tools", "resources", "prompts"} <= set(result["capabilities"])
    assert isinstance(result["_meta"][mcp_modern.SERVER_INFO_KEY]["name"], str)


async def test_a_single_server_door_describes_that_backend(door: httpx.AsyncClient) -> None:
    answer = await door.post("/servers/demo/mcp", headers=headers_for("server/discover"), json=rpc("server/discover"))
    assert answer.status_code == 200, answer.text
    result = answer.json()["result"]
    assert result["_meta"][mcp_modern.SERVER_INFO_KEY] == {"name": "switchboard-demo", "version": "1.0.0"}
    assert result["capabilities"] == {"tools": {}, "resources": {}, "prompts": {}, "logging": {}}
    call = rpc("tools/call", {"name": "add", "arguments": {"a": 1, "b": 2}}, 2)
    added = await door.post("/servers/demo/mcp", headers=headers_for("tools/call", "add"), json=call)
    assert added.json()["result"]["structuredContent"] == {"sum": 3}
    missing = await door.post("/servers/nope/mcp", headers=headers_for("server/discover"), json=rpc("server/discover"))
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == errors.INVALID_REQUEST


async def test_a_modern_session_is_never_left_behind(door_and_gateway: tuple[httpx.AsyncClient, Gateway]) -> None:
    door, gateway = door_and_gateway
    before = len(gateway.sessions)
    for rpc_id in range(3):
        answer = await door.post(
            "/mcp", headers=headers_for("server/discover"), json=rpc("server/discover", rpc_id=rpc_id)
        )
        assert answer.status_code == 200
        call = rpc("tools/call", {"name": "echo", "arguments": {"text": "x"}}, rpc_id)
        assert (await door.post("/mcp", headers=headers_for("tools/call", "echo"), json=call)).status_code == 200
    assert len(gateway.sessions) == before, "each exchange's session lives for that exchange only"


# ---- calls -------------------------------------------------------------------------------------


async def test_a_tool_call_with_the_envelope_is_answered_and_stamped(door: httpx.AsyncClient) -> None:
    call = rpc("tools/call", {"name": "add", "arguments": {"a": 2, "b": 40}}, "c-1")
    answer = await door.post("/mcp", headers=headers_for("tools/call", "add"), json=call)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["id"] == "c-1"
    assert body["result"]["structuredContent"] == {"sum": 42}
    assert body["result"]["resultType"] == "complete"
    assert "ttlMs" not in body["result"], "a tool result is not cacheable"


async def test_a_list_carries_caching_hints(door: httpx.AsyncClient) -> None:
    answer = await door.post("/mcp", headers=headers_for("tools/list"), json=rpc("tools/list", rpc_id=2))
    assert answer.status_code == 200, answer.text
    result = answer.json()["result"]
    assert sorted(t["name"] for t in result["tools"]) == ["add", "echo", "slow_count"]
    assert result["resultType"] == "complete"
    assert result["ttlMs"] == mcp_modern.DEFAULT_TTL_MS and result["cacheScope"] == "private"


async def test_a_resource_read_mirrors_its_uri_in_mcp_name(door: httpx.AsyncClient) -> None:
    read = rpc("resources/read", {"uri": "demo://readme"}, 3)
    answer = await door.post("/mcp", headers=headers_for("resources/read", "demo://readme"), json=read)
    assert answer.status_code == 200, answer.text
    assert answer.json()["result"]["contents"][0]["uri"] == "demo://readme"
    missing = rpc("resources/read", {"uri": "demo://nope"}, 4)
    refused = await door.post("/mcp", headers=headers_for("resources/read", "demo://nope"), json=missing)
    # The backend's "not found" is no malformed request: 200, with the backend's code.
    assert_error(refused, 200, errors.RESOURCE_NOT_FOUND, 4)


async def test_an_unknown_tool_is_the_backends_invalid_params_and_400(door: httpx.AsyncClient) -> None:
    call = rpc("tools/call", {"name": "nope", "arguments": {}}, 5)
    answer = await door.post("/mcp", headers=headers_for("tools/call", "nope"), json=call)
    error = assert_error(answer, 400, errors.INVALID_PARAMS, 5)
    assert error["message"] == "Unknown tool: nope"


async def test_progress_and_logs_stream_as_sse_under_the_clients_token(door: httpx.AsyncClient) -> None:
    meta = {**META, "progressToken": "tok", mcp_modern.LOG_LEVEL_KEY: "info"}
    call = rpc("tools/call", {"name": "slow_count", "arguments": {"n": 2, "delay_s": 0.01}}, "s", meta=meta)
    answer = await door.post("/mcp", headers=headers_for("tools/call", "slow_count"), json=call)
    assert answer.status_code == 200
    assert answer.headers["content-type"] == "text/event-stream"
    events = [json.loads(line[len("data: ") :]) for line in answer.text.splitlines() if line.startswith("data: ")]
    progress = [e["params"] for e in events if e.get("method") == "notifications/progress"]
    assert [(p["progressToken"], p["progress"]) for p in progress] == [("tok", 1), ("tok", 2)]
    logs = [e["params"]["data"] for e in events if e.get("method") == "notifications/message"]
    assert logs == ["count 1/2", "count 2/2"]
    assert events[-1] == {
        "jsonrpc": "2.0",
        "id": "s",
        "result": {"content": [{"type": "text", "text": "counted to 2"}], "resultType": "complete"},
    }


async def test_without_a_log_level_no_log_reaches_the_client(door: httpx.AsyncClient) -> None:
    call = rpc("tools/call", {"name": "slow_count", "arguments": {"n": 2, "delay_s": 0.01}}, "q")
    answer = await door.post("/mcp", headers=headers_for("tools/call", "slow_count"), json=call)
    assert answer.status_code == 200
    assert answer.headers["content-type"] == "application/json", "nothing preceded the result"
    assert answer.json()["result"]["content"][0]["text"] == "counted to 2"


async def test_notifications_and_responses_are_received_with_202(door: httpx.AsyncClient) -> None:
    note = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1, "_meta": META}}
    answer = await door.post("/mcp", headers=headers_for("notifications/cancelled"), json=note)
    assert answer.status_code == 202 and answer.content == b""


# ---- the envelope ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("meta", "code"),
    [
        pytest.param({}, errors.INVALID_PARAMS, id="empty-meta"),
        pytest.param("not-an-object", errors.INVALID_PARAMS, id="meta-not-object"),
        pytest.param(
            {mcp_modern.PROTOCOL_VERSION_KEY: VERSION, mcp_modern.CLIENT_CAPABILITIES_KEY: []},
            errors.INVALID_PARAMS,
            id="capabilities-not-object",
        ),
        pytest.param({mcp_modern.PROTOCOL_VERSION_KEY: VERSION}, errors.INVALID_PARAMS, id="capabilities-missing"),
    ],
)
async def test_a_malformed_envelope_is_400_invalid_params(door: httpx.AsyncClient, meta: Any, code: int) -> None:
    answer = await door.post("/mcp", headers=headers_for("tools/list"), json=rpc("tools/list", meta=meta))
    assert_error(answer, 400, code)


CAPS, INFO, LEVEL = mcp_modern.CLIENT_CAPABILITIES_KEY, mcp_modern.CLIENT_INFO_KEY, mcp_modern.LOG_LEVEL_KEY
# Each envelope field of the wrong type (MCP 2026-07-28, basic/index "Per-request protocol fields"), and
# what the refusal says: the _meta key and the type it must have.
WRONG_FIELDS = [
    pytest.param(mcp_modern.PROTOCOL_VERSION_KEY, 20260728, "must be a string, not a number", id="version-number"),
    pytest.param(mcp_modern.PROTOCOL_VERSION_KEY, None, "must be a string, not null", id="version-null"),
    pytest.param(CAPS, None, "must be an object, not null", id="caps-null"),
    pytest.param(
        CAPS, {"extensions": ["dev.cloto/mgp"]}, ".extensions must be an object, not an array", id="ext-array"
    ),
    pytest.param(CAPS, {"extensions": {"dev.cloto/mgp": "0.8"}}, "['dev.cloto/mgp'] must be an object", id="ext-entry"),
    pytest.param(CAPS, {"sampling": True}, ".sampling must be an object, not a boolean", id="sampling-bool"),
    pytest.param(CAPS, {"elicitation": {"url": []}}, ".elicitation.url must be an object", id="elicitation-url"),
    pytest.param(INFO, "client/1", "must be an object with a name and a version, not a string", id="info-string"),
    pytest.param(INFO, None, "must be an object with a name and a version, not null", id="info-null"),
    pytest.param(INFO, [], "not an array", id="info-array"),
    pytest.param(INFO, {"name": "t"}, ".version is required", id="info-no-version"),
    pytest.param(INFO, {"name": 7, "version": "1"}, ".name must be a string, not a number", id="info-name-number"),
    pytest.param(LEVEL, 7, "must be a string (one of debug,", id="level-number"),
    pytest.param(LEVEL, None, "must be a string (one of debug,", id="level-null"),
    pytest.param(LEVEL, "loud", "'loud' is not a log level; one of debug, info,", id="level-unknown"),
]
# A named tools/call takes the door's one-pass path (read_common); a list and discovery the full checks.
ENVELOPE_METHODS = [("tools/call", "echo"), ("tools/list", None), ("server/discover", None)]


@pytest.mark.parametrize(("key", "value", "said"), WRONG_FIELDS)
@pytest.mark.parametrize(("method", "name"), ENVELOPE_METHODS, ids=[m for m, _ in ENVELOPE_METHODS])
async def test_an_envelope_field_of_the_wrong_type_is_400_naming_the_key(
    door: httpx.AsyncClient, method: str, name: str | None, key: str, value: Any, said: str
) -> None:
    params = {"name": name, "arguments": {"text": "x"}} if name else {}
    body = rpc(method, params, "w", meta={**META, key: value})
    answer = await door.post("/mcp", headers=headers_for(method, name), json=body)
    error = assert_error(answer, 400, errors.INVALID_PARAMS, "w")
    assert error["message"].startswith(f"Invalid params: _meta[{key!r}]"), error
    assert said in error["message"], error


@pytest.mark.parametrize("level", ["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"])
async def test_every_log_level_of_the_spec_is_taken(door: httpx.AsyncClient, level: str) -> None:
    call = rpc(
        "tools/call", {"name": "slow_count", "arguments": {"n": 1, "delay_s": 0}}, "l", meta={**META, LEVEL: level}
    )
    answer = await door.post("/mcp", headers=headers_for("tools/call", "slow_count"), json=call)
    assert answer.status_code == 200, answer.text
    logged = "count 1/1" in answer.text
    assert logged == (level in ("debug", "info")), "the demo logs at info: only levels at or below it hear it"


async def test_capabilities_of_the_spec_shapes_and_of_the_clients_own_pass(door: httpx.AsyncClient) -> None:
    caps = {
        "sampling": {"tools": {}},
        "elicitation": {"form": {}, "url": {}},
        "roots": {},
        "experimental": {"x": {}},
        "extensions": {"com.example/thing": {"on": True}},
        "custom": [1, None],  # not a closed set: a client may define its own
    }
    meta = {**META, CAPS: caps, INFO: {"name": "t", "version": "1", "title": "T", "icons": []}}
    for method, name in ENVELOPE_METHODS:
        params = {"name": name, "arguments": {"text": "x"}} if name else {}
        answer = await door.post("/mcp", headers=headers_for(method, name), json=rpc(method, params, meta=meta))
        assert answer.status_code == 200, answer.text
    without_info = {key: value for key, value in META.items() if key != INFO}  # clientInfo is optional (a SHOULD)
    call = rpc("tools/call", {"name": "echo", "arguments": {"text": "x"}}, meta=without_info)
    assert (await door.post("/mcp", headers=headers_for("tools/call", "echo"), json=call)).status_code == 200


async def test_a_request_without_meta_but_with_the_modern_header_is_400(door: httpx.AsyncClient) -> None:
    answer = await door.post("/mcp", headers=headers_for("tools/list"), json=rpc("tools/list", meta=None))
    error = assert_error(answer, 400, errors.INVALID_PARAMS)
    assert "_meta" in error["message"]


async def test_an_unsupported_version_is_400_with_the_supported_list(door: httpx.AsyncClient) -> None:
    meta = {**META, mcp_modern.PROTOCOL_VERSION_KEY: "2099-01-01"}
    answer = await door.post(
        "/mcp",
        headers=headers_for("tools/list", **{"mcp-protocol-version": "2099-01-01"}),
        json=rpc("tools/list", meta=meta),
    )
    error = assert_error(answer, 400, errors.UNSUPPORTED_PROTOCOL_VERSION)
    assert error["data"] == {"supported": list(mcp_modern.MODERN_VERSIONS), "requested": "2099-01-01"}


async def test_an_unknown_version_header_alone_is_answered_as_modern(door: httpx.AsyncClient) -> None:
    # No _meta at all: the unknown version header still routes to the modern exchange, which says
    # what is missing rather than "session required".
    answer = await door.post(
        "/mcp",
        headers=headers_for("tools/list", **{"mcp-protocol-version": "2099-01-01"}),
        json=rpc("tools/list", meta=None),
    )
    assert_error(answer, 400, errors.INVALID_PARAMS)


async def test_a_version_header_that_disagrees_with_the_body_is_a_header_mismatch(door: httpx.AsyncClient) -> None:
    meta = {**META, mcp_modern.PROTOCOL_VERSION_KEY: "2099-01-01"}
    answer = await door.post("/mcp", headers=headers_for("tools/list"), json=rpc("tools/list", meta=meta))
    assert_error(answer, 400, errors.HEADER_MISMATCH)


@pytest.mark.parametrize(
    ("method", "headers", "params"),
    [
        pytest.param("tools/list", {"mcp-method": ""}, {}, id="mcp-method-empty"),
        pytest.param("tools/list", {"mcp-method": "prompts/list"}, {}, id="mcp-method-wrong"),
        pytest.param("tools/call", {}, {"name": "echo", "arguments": {"text": "x"}}, id="mcp-name-missing"),
        pytest.param(
            "tools/call", {"mcp-name": "add"}, {"name": "echo", "arguments": {"text": "x"}}, id="mcp-name-wrong"
        ),
        pytest.param(
            "tools/call", {"mcp-name": "=?base64?!!!?="}, {"name": "echo", "arguments": {"text": "x"}}, id="bad-b64"
        ),
        pytest.param(
            "tools/call",
            {"mcp-name": "echo", "mcp-param-region": "x"},
            {"name": "echo", "arguments": {"text": "x"}},
            id="undeclared-param-header",
        ),
    ],
)
async def test_routing_headers_must_mirror_the_body(
    door: httpx.AsyncClient, method: str, headers: dict[str, str], params: dict[str, Any]
) -> None:
    sent = headers_for(method)
    sent.update(headers)
    answer = await door.post("/mcp", headers=sent, json=rpc(method, params))
    assert_error(answer, 400, errors.HEADER_MISMATCH)


async def test_a_missing_mcp_method_header_is_a_header_mismatch(door: httpx.AsyncClient) -> None:
    sent = headers_for("tools/list")
    del sent["mcp-method"]
    answer = await door.post("/mcp", headers=sent, json=rpc("tools/list"))
    error = assert_error(answer, 400, errors.HEADER_MISMATCH)
    assert "Mcp-Method" in error["message"]


@pytest.mark.parametrize("method", ["tools/list", "tools/call", "server/discover"])
async def test_a_missing_protocol_version_header_is_a_header_mismatch(door: httpx.AsyncClient, method: str) -> None:
    """The body's envelope says 2026-07-28, so the header is required (the official SDK servers agree)."""
    sent = headers_for(method, "echo" if method == "tools/call" else None)
    del sent["mcp-protocol-version"]
    params = {"name": "echo", "arguments": {"text": "x"}} if method == "tools/call" else {}
    answer = await door.post("/mcp", headers=sent, json=rpc(method, params))
    error = assert_error(answer, 400, errors.HEADER_MISMATCH)
    assert error["message"] == "MCP-Protocol-Version header is required"


async def test_a_base64_mcp_name_matches_its_decoded_text(door: httpx.AsyncClient) -> None:
    call = rpc("tools/call", {"name": "echo", "arguments": {"text": "hi"}}, 6)
    encoded = "=?base64?ZWNobw==?="  # "echo"
    answer = await door.post("/mcp", headers=headers_for("tools/call", encoded), json=call)
    assert answer.status_code == 200, answer.text
    assert answer.json()["result"]["content"][0]["text"] == "hi"


# ---- methods ----------------------------------------------------------------------------------


async def test_an_unknown_method_is_404_method_not_found(door: httpx.AsyncClient) -> None:
    answer = await door.post("/mcp", headers=headers_for("vendor/unknown"), json=rpc("vendor/unknown", rpc_id=7))
    assert_error(answer, 404, errors.METHOD_NOT_FOUND, 7)


@pytest.mark.parametrize("method", sorted(mcp_modern.REMOVED_METHODS - {"initialize"}))
async def test_methods_the_modern_era_removed_are_404(door: httpx.AsyncClient, method: str) -> None:
    answer = await door.post("/mcp", headers=headers_for(method), json=rpc(method, rpc_id=8))
    error = assert_error(answer, 404, errors.METHOD_NOT_FOUND, 8)
    assert method in error["message"]


async def test_initialize_dressed_as_modern_is_404(door: httpx.AsyncClient) -> None:
    init = rpc("initialize", {"protocolVersion": VERSION, "capabilities": {}, "clientInfo": {"name": "t"}}, 9)
    answer = await door.post("/mcp", headers=headers_for("initialize"), json=init)
    assert_error(answer, 404, errors.METHOD_NOT_FOUND, 9)


async def test_get_and_delete_without_a_session_are_405_in_the_modern_era(door: httpx.AsyncClient) -> None:
    for verb in ("GET", "DELETE"):
        answer = await door.request(verb, "/mcp", headers=headers_for("tools/list"))
        assert answer.status_code == 405, verb
        assert answer.headers["allow"] == "POST"
        assert answer.json()["error"]["code"] == errors.INVALID_REQUEST


# ---- bodies -----------------------------------------------------------------------------------


async def test_an_oversize_body_is_413(door: httpx.AsyncClient) -> None:
    call = rpc("tools/call", {"name": "echo", "arguments": {"text": "a" * (BODY_LIMIT + 10)}})
    answer = await door.post("/mcp", headers=headers_for("tools/call", "echo"), json=call)
    assert answer.status_code == 413
    assert answer.json()["error"]["code"] == errors.INVALID_REQUEST


async def test_an_oversize_body_without_content_length_is_413(door: httpx.AsyncClient) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"x":"'
        for _ in range(5):
            yield b"a" * 1000
        yield b'"}}'

    answer = await door.post("/mcp", headers=headers_for("tools/list"), content=chunks())
    assert answer.status_code == 413


@pytest.mark.parametrize(
    ("body", "code"),
    [
        pytest.param(b"{not json", errors.PARSE_ERROR, id="not-json"),
        pytest.param(b"", errors.PARSE_ERROR, id="empty"),
        pytest.param(b"\xff\xfe", errors.PARSE_ERROR, id="not-utf8"),
        pytest.param(b'{"jsonrpc":"2.0","id":null,"method":"tools/list"}', errors.INVALID_REQUEST, id="null-id"),
        pytest.param(b'{"jsonrpc":"2.0","id":true,"method":"tools/list"}', errors.INVALID_REQUEST, id="bool-id"),
        pytest.param(b'{"jsonrpc":"2.0","id":1}', errors.INVALID_REQUEST, id="no-method"),
        pytest.param(b'{"jsonrpc":"1.0","id":1,"method":"tools/list"}', errors.INVALID_REQUEST, id="wrong-version"),
        pytest.param(b"42", errors.INVALID_REQUEST, id="scalar"),
    ],
)
async def test_a_malformed_body_is_400_with_its_json_rpc_code(door: httpx.AsyncClient, body: bytes, code: int) -> None:
    answer = await door.post("/mcp", headers=headers_for("tools/list"), content=body)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["code"] == code


async def test_a_wrong_content_type_is_415(door: httpx.AsyncClient) -> None:
    answer = await door.post(
        "/mcp", headers=headers_for("tools/list", **{"content-type": "text/plain"}), json=rpc("tools/list")
    )
    assert answer.status_code == 415


async def test_server_discover_is_held_to_the_initialize_capability() -> None:
    """``server/discover`` is the 2026-07-28 era's ``initialize``: one capability for both eras."""
    config = {
        "auth": {"admin_token": "admin-secret"},
        "principals": {
            "lister": {"tokens": ["lister-token"], "capabilities": ["mcp/request:tools/*"]},
            "client": {"tokens": ["client-token"], "capabilities": ["mcp/request:initialize", "mcp/request:tools/*"]},
        },
    }
    async for door, _ in client_for(config):
        refused = await door.post(
            "/mcp",
            headers=headers_for("server/discover", authorization="Bearer lister-token"),
            json=rpc("server/discover"),
        )
        assert "error" in refused.json() and "initialize" in refused.json()["error"]["message"]
        allowed = await door.post(
            "/mcp",
            headers=headers_for("server/discover", authorization="Bearer client-token"),
            json=rpc("server/discover"),
        )
        assert "result" in allowed.json(), allowed.text
