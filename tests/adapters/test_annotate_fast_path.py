"""adapters.annotate's fast path for plain tools/call: it must agree with running every annotator."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings, strategies as st

import adapters
from adapters.mcp import decode
from gateway import jsonrpc
from gateway.events import Event

_VALUES = st.one_of(
    st.none(),
    st.text(max_size=6),
    st.integers(),
    st.booleans(),
    st.dictionaries(st.text(max_size=4), st.text(max_size=4), max_size=2),
)
_TRACE = st.sampled_from(["abc123", "0af7651916cd43dd8448eb211c80319c", "not a trace", 5])
_TRACEPARENT = st.sampled_from(["00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "garbage", 3])
_NAMES = st.one_of(
    st.sampled_from(["echo", "_mcpc_init", "is_mcpc_enabled", "_is_mcpc_enabled"]),
    _VALUES,
    st.lists(st.integers(), max_size=2),
)
_ARGUMENTS = st.one_of(
    _VALUES,
    st.fixed_dictionaries(
        {},
        optional={
            "text": st.text(max_size=4),
            "mcpc_params": st.one_of(
                _VALUES, st.fixed_dictionaries({"session_id": st.text(max_size=3), "task_id": st.text(max_size=3)})
            ),
            "_metadata": st.one_of(
                _VALUES,
                st.fixed_dictionaries(
                    {},
                    optional={"mcpc_session_id": st.text(max_size=3), "mcpc_task_id": _VALUES, "other": st.integers()},
                ),
            ),
        },
    ),
)
_META = st.one_of(
    _VALUES, st.fixed_dictionaries({}, optional={"progressToken": st.integers(), "traceparent": _TRACEPARENT})
)
_PARAMS = st.fixed_dictionaries(
    {},
    optional={
        "name": _NAMES,
        "arguments": _ARGUMENTS,
        "featureSet": _VALUES,
        "scope": _VALUES,
        "_mgp": st.one_of(_VALUES, st.fixed_dictionaries({}, optional={"trace_id": _TRACE})),
        "trace_id": _TRACE,
        "_meta": _META,
    },
)


def _slow(event: Event) -> Event:
    for annotator in adapters._ANNOTATORS:
        annotator(event)
    return event


@settings(max_examples=400, deadline=None)
@given(
    params=st.one_of(_PARAMS, _VALUES),
    trace=st.one_of(st.none(), _TRACE),
    method=st.sampled_from(["tools/call", "prompts/get", "mgp/access/query"]),
)
def test_fast_path_agrees_with_every_annotator(params: Any, trace: Any, method: str) -> None:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    if trace is not None:
        message["trace_id"] = trace
    fast = adapters.annotate(decode(message, jsonrpc.Shape.REQUEST, session="s", principal="p"))
    slow = _slow(decode(message, jsonrpc.Shape.REQUEST, session="s", principal="p"))
    assert fast.facets == slow.facets
    assert fast.trace_id == slow.trace_id


def test_plain_call_takes_the_fast_path() -> None:
    message = jsonrpc.request(
        1, "tools/call", {"name": "echo", "arguments": {"text": "x"}, "_meta": {"progressToken": 1}}
    )
    assert adapters._plain_call(message)
    marked = jsonrpc.request(1, "tools/call", {"name": "echo", "arguments": {"mcpc_params": {}}})
    assert not adapters._plain_call(marked)


@settings(max_examples=400, deadline=None)
@given(
    params=st.one_of(_PARAMS, _VALUES),
    trace=st.one_of(st.none(), _TRACE),
    method=st.sampled_from(["tools/call", "prompts/get", "mgp/access/query"]),
    shape=st.sampled_from([jsonrpc.Shape.REQUEST, jsonrpc.Shape.NOTIFICATION]),
)
def test_decode_is_annotate_of_the_mcp_decode(params: Any, trace: Any, method: str, shape: jsonrpc.Shape) -> None:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    if trace is not None:
        message["trace_id"] = trace
    one = adapters.decode(message, shape, "s", "p")
    two = _slow(decode(message, shape, session="s", principal="p"))
    for name in ("kind", "method", "payload", "dialect", "context", "rpc_id", "principal", "session", "facets"):
        assert getattr(one, name) == getattr(two, name), name
    assert one.trace_id == two.trace_id
    assert one.action == two.action
