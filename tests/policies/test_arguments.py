"""policies/arguments.py: tools/call arguments checked against the tool's inputSchema."""

from __future__ import annotations

import copy
import logging
from typing import Any

import pytest

from gateway import jsonrpc
from gateway.events import Event, Kind
from policies import ANONYMOUS_ALL, Decision, PolicyChain, Target
from policies.arguments import INVALID_ARGUMENTS, ArgumentValidationPolicy
from policies.chain import Outcome

FORECAST = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "minLength": 1},
        "days": {"type": "integer", "minimum": 1, "maximum": 7, "default": 3},
        "where": {
            "type": "object",
            "properties": {"lat": {"type": "number"}, "lon": {"type": "number"}},
            "required": ["lat", "lon"],
        },
        "tags": {"type": "array", "items": {"type": "object", "properties": {"n": {"type": "integer"}}}},
    },
    "required": ["city"],
    "additionalProperties": False,
}


def call(arguments: Any = None, tool: str = "weather__forecast", *, omit: bool = False) -> Event:
    params: dict[str, Any] = {"name": tool}
    if not omit:
        params["arguments"] = arguments
    return Event(kind=Kind.REQUEST, method="tools/call", payload={"params": params}, context=tool)


def target(schema: Any = FORECAST, backend: str = "weather") -> Target:
    item = {"name": "forecast"} if schema is ... else {"name": "forecast", "inputSchema": schema}
    return Target(backend, "forecast", item)


async def check(policy: ArgumentValidationPolicy, ev: Event, where: Target | None = None) -> Decision | None:
    return await policy.check(ev, ANONYMOUS_ALL, target() if where is None else where)


def test_public_names() -> None:
    assert INVALID_ARGUMENTS == jsonrpc.INVALID_PARAMS == -32602
    assert ArgumentValidationPolicy.stage == "dispatch"
    assert ArgumentValidationPolicy.name == "arguments"


async def test_valid_arguments_pass() -> None:
    policy = ArgumentValidationPolicy({"weather"})
    assert await check(policy, call({"city": "Oslo"})) is None
    assert await check(policy, call({"city": "Oslo", "days": 7, "where": {"lat": 59.9, "lon": 10.7}})) is None


async def test_invalid_arguments_are_denied_with_message_and_path() -> None:
    policy = ArgumentValidationPolicy({"weather"})
    decision = await check(policy, call({"city": "Oslo", "days": "soon"}))
    assert decision is not None
    assert decision.allowed is False
    assert decision.policy == "arguments"
    assert decision.code == -32602
    assert decision.outcome is Outcome.INVALID
    assert decision.reason == "Invalid arguments for tool weather__forecast: arguments.days must be integer"
    assert decision.data == {"tool": "weather__forecast", "path": ["days"]}


async def test_missing_required_and_unknown_properties_are_denied() -> None:
    policy = ArgumentValidationPolicy({"weather"})
    missing = await check(policy, call({}))
    assert missing is not None and "must contain ['city'] properties" in missing.reason
    assert missing.data == {"tool": "weather__forecast", "path": []}
    extra = await check(policy, call({"city": "Oslo", "units": "metric"}))
    assert extra is not None and "must not contain {'units'} properties" in extra.reason


async def test_nested_errors_name_their_path() -> None:
    policy = ArgumentValidationPolicy({"weather"})
    decision = await check(policy, call({"city": "Oslo", "where": {"lat": 1}}))
    assert decision is not None
    assert decision.reason.endswith("arguments.where must contain ['lon'] properties")
    assert decision.data is not None and decision.data["path"] == ["where"]
    decision = await check(policy, call({"city": "Oslo", "tags": [{"n": 1}, {"n": "two"}]}))
    assert decision is not None
    assert decision.reason.endswith("arguments.tags[1].n must be integer")
    assert decision.data is not None and decision.data["path"] == ["tags", "1", "n"]


async def test_absent_or_null_arguments_are_checked_as_an_empty_object() -> None:
    policy = ArgumentValidationPolicy({"weather"})
    for ev in (call(omit=True), call(None)):
        decision = await check(policy, ev)
        assert decision is not None and "must contain ['city']" in decision.reason
    lenient = target({"type": "object", "properties": {"x": {"type": "string"}}})
    assert await check(policy, call(omit=True), lenient) is None


async def test_arguments_that_are_not_an_object_are_denied() -> None:
    policy = ArgumentValidationPolicy({"weather"})
    decision = await check(policy, call(["Oslo"]))
    assert decision is not None and decision.reason.endswith("arguments must be object")


async def test_validation_does_not_alter_the_arguments_or_the_schema() -> None:
    # fastjsonschema fills in defaults and rewrites $ref in place unless told otherwise.
    schema = {
        "type": "object",
        "$defs": {"n": {"type": "integer", "default": 5}},
        "properties": {"count": {"$ref": "#/$defs/n"}, "days": {"type": "integer", "default": 3}},
    }
    pristine = copy.deepcopy(schema)
    arguments: dict[str, Any] = {}
    policy = ArgumentValidationPolicy({"weather"})
    assert await check(policy, call(arguments), target(schema)) is None
    assert arguments == {}
    assert schema == pristine
    decision = await check(policy, call({"count": "x"}), target(schema))
    assert decision is not None and decision.data == {"tool": "weather__forecast", "path": ["count"]}


async def test_formats_are_annotations() -> None:
    schema = {"type": "object", "properties": {"at": {"type": "string", "format": "date-time"}}}
    assert await check(ArgumentValidationPolicy({"weather"}), call({"at": "tomorrow"}), target(schema)) is None


@pytest.mark.parametrize("schema", [..., None, "object", True, ["type", "object"]])
async def test_no_usable_schema_means_no_check(schema: Any) -> None:
    assert await check(ArgumentValidationPolicy({"weather"}), call({"anything": 1}), target(schema)) is None


async def test_a_target_without_catalog_item_is_not_checked() -> None:
    policy = ArgumentValidationPolicy({"weather"})
    assert await check(policy, call({"city": 1}), Target("weather", "forecast", None)) is None


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"a": {"type": "strin"}}},  # unknown type
        {"type": "object", "properties": {"a": {"type": "string", "pattern": "("}}},  # bad regex
        {"type": "object", "properties": {"a": {"$ref": "#/nowhere"}}},  # dangling $ref
        {"type": "object", "properties": {"a": {"$ref": "http://127.0.0.1:9/schema.json"}}},  # remote $ref
        {"type": "object", "properties": {"a": {"$ref": "file:///etc/passwd"}}},
    ],
)
async def test_a_broken_schema_allows_and_is_logged_once(
    schema: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    policy = ArgumentValidationPolicy({"weather"})
    with caplog.at_level(logging.WARNING, logger="policies.arguments"):
        for _ in range(3):
            assert await check(policy, call({"a": 1}), target(schema)) is None
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1
    assert "inputSchema of tool weather__forecast not enforced" in warnings[0]
    assert policy.compiled == 1


async def test_remote_refs_are_never_fetched(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_network(*args: object, **kwargs: object) -> None:
        raise AssertionError("the gateway must not fetch a schema's $ref")

    monkeypatch.setattr("urllib.request.urlopen", no_network)
    schema = {"type": "object", "properties": {"a": {"$ref": "https://example.com/s.json"}}}
    assert await check(ArgumentValidationPolicy({"weather"}), call({"a": 1}), target(schema)) is None


async def test_backends_not_opted_in_are_not_checked() -> None:
    policy = ArgumentValidationPolicy({"other"})
    assert await check(policy, call({"city": 1})) is None
    assert policy.compiled == 0
    assert await check(ArgumentValidationPolicy(set()), call({})) is None


async def test_only_tools_call_requests_are_checked() -> None:
    policy = ArgumentValidationPolicy({"weather"})
    ev = call({})
    ev.method = "prompts/get"
    assert await check(policy, ev) is None
    notification = call({})
    notification.kind = Kind.NOTIFICATION
    assert await check(policy, notification) is None
    assert await policy.check(call({}), ANONYMOUS_ALL, None) is None


async def test_compiled_validators_are_reused_by_schema_content() -> None:
    policy = ArgumentValidationPolicy({"weather"})
    for _ in range(5):
        await check(policy, call({"city": "Oslo"}))
    assert policy.compiled == 1
    # An equal schema in another dict (a refreshed catalog), keys in another order: the same entry.
    reordered = dict(reversed(list(copy.deepcopy(FORECAST).items())))
    assert await check(policy, call({"city": 3}), target(reordered)) is not None
    assert policy.compiled == 1
    other = {"type": "object", "required": ["q"]}
    assert await check(policy, call({}), target(other)) is not None
    assert policy.compiled == 2


async def test_the_cache_is_bounded_and_least_recently_used() -> None:
    policy = ArgumentValidationPolicy({"weather"}, cache_size=2)
    schemas = [{"type": "object", "required": [f"p{i}"]} for i in range(3)]
    await check(policy, call({}), target(schemas[0]))
    await check(policy, call({}), target(schemas[1]))
    await check(policy, call({}), target(schemas[0]))  # 0 is now the most recent
    await check(policy, call({}), target(schemas[2]))  # evicts 1
    assert policy.compiled == 3
    await check(policy, call({}), target(schemas[0]))
    assert policy.compiled == 3
    await check(policy, call({}), target(schemas[1]))
    assert policy.compiled == 4
    assert len(policy._validators) == 2


async def test_in_a_chain_it_runs_at_dispatch_only() -> None:
    chain = PolicyChain([ArgumentValidationPolicy({"weather"})])
    assert (await chain.admit(call({}), ANONYMOUS_ALL)).allowed
    denial = await chain.dispatch(call({}), ANONYMOUS_ALL, target())
    assert denial.code == -32602 and denial.outcome is Outcome.INVALID


async def test_the_tool_name_falls_back_to_the_backend_name() -> None:
    ev = call({"city": 5})
    ev.context = None
    decision = await check(ArgumentValidationPolicy({"weather"}), ev)
    assert decision is not None and decision.reason.startswith("Invalid arguments for tool forecast: ")
