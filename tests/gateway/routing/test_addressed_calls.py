"""AddressedCalls: requests routed by what they address (gateway/routing/addressed_calls.py).

The catalog and the forwarder are recording stand-ins: what is tested is this module's own choices
(which backend, which rewritten params, which refusals), not the backends'."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from gateway import jsonrpc
from gateway.routing.addressed_calls import AddressedCalls
from gateway.routing.call import Call, PolicyDenied, Routed


class Catalog:
    async def resolve_uri(self, view: Any, uri: Any, principal: Any) -> tuple[str, str]:
        return "files", str(uri).removeprefix("files+")

    async def resolve_name(self, view: Any, kind: str, name: Any, principal: Any) -> tuple[str, str]:
        return "prompts", str(name).removeprefix("prompts_")


class Forwarder:
    def __init__(self) -> None:
        self.sent: list[tuple[str, Any]] = []

    async def forward(self, call: Call, backend: str, params: Any) -> Routed:
        self.sent.append((backend, params))
        return Routed(jsonrpc.result(call.rpc_id, {}), backend)


def make_call(method: str, params: dict[str, Any], *, backends: list[str] | None = None, **view: Any) -> Call:
    view_fields = {"backends": backends or ["only"], "curated": False, "guard": None, **view}
    session = SimpleNamespace(view=SimpleNamespace(**view_fields))
    payload = {"jsonrpc": "2.0", "id": 7, "method": method, "params": params}
    event = SimpleNamespace(rpc_id=7, method=method, payload=payload, params=params)
    return Call(session, event, None, SimpleNamespace(name="alice"))  # type: ignore[arg-type]


@pytest.fixture
def forwarder() -> Forwarder:
    return Forwarder()


@pytest.fixture
def calls(forwarder: Forwarder) -> AddressedCalls:
    return AddressedCalls(Catalog(), forwarder)  # type: ignore[arg-type]


async def test_resources_read_goes_to_the_uris_backend_under_its_own_uri(calls: AddressedCalls, forwarder: Forwarder):
    await calls.uri_call(make_call("resources/read", {"uri": "files+file:///a", "_meta": {"k": 1}}))
    assert forwarder.sent == [("files", {"uri": "file:///a", "_meta": {"k": 1}})]


async def test_completion_of_a_prompt_names_the_backends_prompt(calls: AddressedCalls, forwarder: Forwarder):
    ref = {"type": "ref/prompt", "name": "prompts_greet"}
    await calls.complete(make_call("completion/complete", {"ref": ref, "argument": {"name": "x", "value": "y"}}))
    assert forwarder.sent == [
        ("prompts", {"ref": {"type": "ref/prompt", "name": "greet"}, "argument": {"name": "x", "value": "y"}})
    ]


async def test_completion_of_a_resource_template_names_the_backends_uri(calls: AddressedCalls, forwarder: Forwarder):
    await calls.complete(make_call("completion/complete", {"ref": {"type": "ref/resource", "uri": "files+db://{t}"}}))
    assert forwarder.sent == [("files", {"ref": {"type": "ref/resource", "uri": "db://{t}"}})]


@pytest.mark.parametrize("ref", [None, "prompt", {"type": "ref/tool", "name": "x"}])
async def test_completion_with_a_bad_ref_is_invalid_params(calls: AddressedCalls, forwarder: Forwarder, ref: Any):
    with pytest.raises(jsonrpc.RpcError) as raised:
        await calls.complete(make_call("completion/complete", {"ref": ref}))
    assert raised.value.code == jsonrpc.INVALID_PARAMS
    assert forwarder.sent == []


async def test_a_virtual_servers_guard_holds_a_prompts_completion(calls: AddressedCalls, forwarder: Forwarder):
    denial = SimpleNamespace(code=-32003, reason="no", outcome="denied", data=None)
    guard = SimpleNamespace(reaches=lambda principal, method, backend, name: denial if name == "greet" else None)
    call = make_call("completion/complete", {"ref": {"type": "ref/prompt", "name": "prompts_greet"}}, guard=guard)
    with pytest.raises(PolicyDenied) as raised:
        await calls.complete(call)
    assert raised.value.backend == "prompts"
    assert forwarder.sent == []


async def test_an_uninterpreted_method_goes_untouched_to_the_one_backend(calls: AddressedCalls, forwarder: Forwarder):
    await calls.passthrough(make_call("vendor/thing", {"a": [1, 2]}))
    assert forwarder.sent == [("only", {"a": [1, 2]})]


@pytest.mark.parametrize(
    ("method", "view", "words"),
    [
        ("vendor/thing", {"curated": True}, "Method not found: vendor/thing"),
        ("mgp/permissions/grant", {}, "Method not found: mgp/permissions/grant"),
        ("vendor/thing", {"backends": ["a", "b"]}, "not routable across 2 backends"),
    ],
)
async def test_passthrough_refusals(calls: AddressedCalls, forwarder: Forwarder, method: str, view: Any, words: str):
    with pytest.raises(jsonrpc.RpcError) as raised:
        await calls.passthrough(make_call(method, {}, **view))
    assert raised.value.code == jsonrpc.METHOD_NOT_FOUND
    assert words in raised.value.message
    assert forwarder.sent == []
