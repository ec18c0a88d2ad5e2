"""gateway/jsonrpc.py: classification of every message shape, every invalid form, parsing and builders."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from gateway import jsonrpc
from gateway.jsonrpc import RpcError, Shape


def msg(**fields: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", **fields}


# ---- valid shapes ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "shape"),
    [
        (msg(id=1, method="ping"), Shape.REQUEST),
        (msg(id="abc", method="tools/call", params={"name": "x"}), Shape.REQUEST),
        (msg(id=0, method="m", params=[1, 2]), Shape.REQUEST),
        (msg(id=1.5, method="m"), Shape.REQUEST),
        (msg(id=-7, method="m", params=None), Shape.REQUEST),
        (msg(id="", method="m"), Shape.REQUEST),
        (msg(method="notifications/initialized"), Shape.NOTIFICATION),
        (msg(method="notifications/progress", params={"progress": 1}), Shape.NOTIFICATION),
        (msg(method="n", params=[]), Shape.NOTIFICATION),
        (msg(id=1, result={}), Shape.RESPONSE),
        (msg(id="x", result=None), Shape.RESPONSE),
        (msg(id=None, result=3), Shape.RESPONSE),
        (msg(id=1, error={"code": -32601, "message": "nope"}), Shape.ERROR),
        # Parse errors are answered with a null id.
        (msg(id=None, error={"code": -32700, "message": "Parse error"}), Shape.ERROR),
    ],
)
def test_classify_valid(message: dict[str, Any], shape: Shape) -> None:
    assert jsonrpc.classify(message) is shape


def test_classify_keeps_unknown_fields_untouched() -> None:
    message = msg(id=1, method="tools/call", params={"_meta": {"x": 1}}, extension={"y": 2})
    before = orjson.dumps(message)
    assert jsonrpc.classify(message) is Shape.REQUEST
    assert orjson.dumps(message) == before


# ---- invalid forms -----------------------------------------------------------------------------


def assert_invalid(message: Any, fragment: str) -> None:
    with pytest.raises(RpcError) as info:
        jsonrpc.classify(message)
    assert info.value.code == jsonrpc.INVALID_REQUEST == -32600
    assert fragment in info.value.message


@pytest.mark.parametrize("message", [[], [msg(id=1, method="m")], "text", 1, None, True, 2.5])
def test_non_object_is_invalid(message: Any) -> None:
    assert_invalid(message, "must be an object")


@pytest.mark.parametrize(
    "message",
    [
        {"id": 1, "method": "m"},
        {"jsonrpc": "1.0", "id": 1, "method": "m"},
        {"jsonrpc": 2.0, "id": 1, "method": "m"},
        {"jsonrpc": None, "id": 1, "result": 1},
        {"jsonrpc": "2.0 ", "method": "m"},
    ],
)
def test_wrong_jsonrpc_version_is_invalid(message: dict[str, Any]) -> None:
    assert_invalid(message, '"jsonrpc" must be "2.0"')


@pytest.mark.parametrize("method", [1, "", ["m"], {"m": 1}, True, None])
def test_bad_method_type_is_invalid(method: Any) -> None:
    assert_invalid(msg(id=1, method=method), '"method" must be a non-empty string')
    assert_invalid(msg(method=method), '"method" must be a non-empty string')


def test_null_method_is_not_mistaken_for_a_response() -> None:
    # A "method" key makes it a request or notification, whatever else the message carries.
    assert_invalid(msg(id=1, method=None, result=1), '"method" must be a non-empty string')


@pytest.mark.parametrize("params", ["x", 1, True, 1.5])
def test_bad_params_type_is_invalid(params: Any) -> None:
    assert_invalid(msg(id=1, method="m", params=params), '"params" must be an object or array')
    assert_invalid(msg(method="m", params=params), '"params" must be an object or array')


@pytest.mark.parametrize("rpc_id", [True, False, None, {"a": 1}, [1], []])
def test_bad_request_ids_are_invalid(rpc_id: Any) -> None:
    assert_invalid(msg(id=rpc_id, method="m"), '"id" must be a string or number')


@pytest.mark.parametrize("rpc_id", [True, {"a": 1}, [1]])
def test_bad_response_ids_are_invalid(rpc_id: Any) -> None:
    assert_invalid(msg(id=rpc_id, result=1), "neither a request, a notification nor a response")
    assert_invalid(msg(id=rpc_id, error={"code": 1, "message": "m"}), "neither")


def test_response_without_id_is_invalid() -> None:
    assert_invalid(msg(result=1), "neither a request, a notification nor a response")
    assert_invalid(msg(), "neither")


def test_response_with_both_result_and_error_is_invalid() -> None:
    assert_invalid(msg(id=1, result=1, error={"code": 1, "message": "m"}), 'exactly one of "result" or "error"')


def test_response_with_neither_result_nor_error_is_invalid() -> None:
    assert_invalid(msg(id=1), 'exactly one of "result" or "error"')


@pytest.mark.parametrize("error", ["boom", 1, None, [], ["code", 1]])
def test_error_that_is_not_an_object_is_invalid(error: Any) -> None:
    assert_invalid(msg(id=1, error=error), '"error" must be an object')


# ---- valid_id / is_response ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "ok"), [(1, True), ("a", True), (1.0, True), (None, True), (True, False), ({}, False)]
)
def test_valid_id(value: Any, ok: bool) -> None:
    assert jsonrpc.valid_id(value) is ok


def test_is_response() -> None:
    assert jsonrpc.is_response(msg(id=1, result=1))
    assert jsonrpc.is_response(msg(id=1, error={"code": 1, "message": "x"}))
    assert not jsonrpc.is_response(msg(id=1, method="m"))
    assert not jsonrpc.is_response(msg(method="m"))
    assert not jsonrpc.is_response(msg(id=1))


# ---- loads / dumps ---------------------------------------------------------------------------


@pytest.mark.parametrize("data", [b"{", b"", b"{'a': 1}", "not json", b"[1,]", b"\xff\xfe", b'{"a":1} x'])
def test_loads_malformed_raises_parse_error(data: bytes | str) -> None:
    with pytest.raises(RpcError) as info:
        jsonrpc.loads(data)
    assert info.value.code == jsonrpc.PARSE_ERROR == -32700
    assert info.value.message.startswith("Parse error")


def test_loads_and_dumps_round_trip() -> None:
    message = msg(id=7, method="tools/call", params={"name": "é", "arguments": {"n": [1, 2.5, None, True]}})
    assert jsonrpc.loads(jsonrpc.dumps(message)) == message
    assert jsonrpc.loads(jsonrpc.dumps(message).decode()) == message
    assert isinstance(jsonrpc.dumps(message), bytes)
    # Compact: no whitespace between tokens.
    assert jsonrpc.dumps({"a": 1}) == b'{"a":1}'


# ---- builders --------------------------------------------------------------------------------


def test_request_builder() -> None:
    assert jsonrpc.request(1, "ping") == {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    built = jsonrpc.request("x", "tools/call", {"name": "echo"})
    assert built == {"jsonrpc": "2.0", "id": "x", "method": "tools/call", "params": {"name": "echo"}}
    assert jsonrpc.classify(built) is Shape.REQUEST


def test_notification_builder() -> None:
    assert jsonrpc.notification("notifications/initialized") == {
        "jsonrpc": "2.0",
        "method": "notifications/initialized",
    }
    built = jsonrpc.notification("n", {"a": 1})
    assert built["params"] == {"a": 1} and "id" not in built
    assert jsonrpc.classify(built) is Shape.NOTIFICATION


def test_result_builder() -> None:
    built = jsonrpc.result(3, {"tools": []})
    assert built == {"jsonrpc": "2.0", "id": 3, "result": {"tools": []}}
    assert jsonrpc.classify(built) is Shape.RESPONSE
    assert jsonrpc.classify(jsonrpc.result(3, None)) is Shape.RESPONSE


def test_error_builder() -> None:
    built = jsonrpc.error(3, jsonrpc.METHOD_NOT_FOUND, "Method not found")
    assert built == {"jsonrpc": "2.0", "id": 3, "error": {"code": -32601, "message": "Method not found"}}
    assert jsonrpc.classify(built) is Shape.ERROR
    with_data = jsonrpc.error(None, jsonrpc.INVALID_PARAMS, "bad", {"field": "x"})
    assert with_data["error"] == {"code": -32602, "message": "bad", "data": {"field": "x"}}
    assert jsonrpc.classify(with_data) is Shape.ERROR


def test_rpc_error_round_trip() -> None:
    exc = RpcError(jsonrpc.BACKEND_TIMEOUT, "slow", {"backend": "a"})
    assert str(exc) == "slow"
    assert exc.to_error() == {"code": -32091, "message": "slow", "data": {"backend": "a"}}
    assert RpcError(1, "m").to_error() == {"code": 1, "message": "m"}
    again = RpcError.from_error(exc.to_error())
    assert (again.code, again.message, again.data) == (exc.code, exc.message, exc.data)
    built = jsonrpc.error_from(9, exc)
    assert built == {"jsonrpc": "2.0", "id": 9, "error": exc.to_error()}


def test_rpc_error_from_incomplete_error_object() -> None:
    exc = RpcError.from_error({})
    assert exc.code == jsonrpc.INTERNAL_ERROR
    assert exc.message == ""
    assert exc.data is None
    assert RpcError.from_error({"code": "-32000", "message": 5}).code == -32000


@pytest.mark.parametrize("error", [{"code": None}, {"code": "abc"}, {"code": [1]}, {"code": float("inf")}])
def test_rpc_error_from_malformed_code(error: dict[str, Any]) -> None:
    assert RpcError.from_error(error).code == jsonrpc.INTERNAL_ERROR


@pytest.mark.parametrize("error", ["boom", None, 5, ["x"]])
def test_rpc_error_from_non_object(error: Any) -> None:
    exc = RpcError.from_error(error)
    assert exc.code == jsonrpc.INTERNAL_ERROR
    assert exc.data == error


def test_gateway_codes_are_in_the_server_error_range() -> None:
    for code in (
        jsonrpc.BACKEND_UNAVAILABLE,
        jsonrpc.BACKEND_TIMEOUT,
        jsonrpc.NAME_NOT_ROUTABLE,
        jsonrpc.CAPABILITY_DENIED,
        jsonrpc.SESSION_OVERLOADED,
        jsonrpc.PAYLOAD_TOO_LARGE,
    ):
        assert -32099 <= code <= -32000
    assert jsonrpc.CAPABILITY_DENIED == -32093


def test_ids_beyond_64_bits_come_back_exactly() -> None:
    big = 123456789012345678901234567890
    message = jsonrpc.loads(f'{{"jsonrpc":"2.0","id":{big},"method":"ping"}}'.encode())
    assert message["id"] == big and isinstance(message["id"], int)
    assert jsonrpc.loads(f'[{{"jsonrpc":"2.0","id":{-big},"method":"ping"}}]'.encode())[0]["id"] == -big
    deep = f'{{"jsonrpc":"2.0","id":{big},"method":"x","params":{{"a":' + "[" * 1010 + "]" * 1010 + "}}"
    assert isinstance(jsonrpc.loads(deep.encode())["params"]["a"], list)  # past the stdlib's depth: still parsed
