"""Any client era with any backend era: the official SDK client in ``mode="auto"`` (2026-07-28) and
``mode="legacy"`` against modern-only, legacy-only and dual-era backends, all through one gateway.

Every cell runs an elicitation round trip and a sampling round trip, which exercises the whole
translation table: MRTR pass-through (modern/modern), MRTR from real server requests (modern client,
legacy backend), real requests from input_required (legacy client, modern backend), and plain relay.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import mcp_types as types
import pytest
from mcp.client import Client, ClientRequestContext

from tests.support import RunningGateway, modern_headers, modern_meta, run_gateway

pytestmark = [pytest.mark.timeout(120)]

BACKENDS = ["modern", "legacy", "dual"]
MODES = {"auto": "2026-07-28", "legacy": "2025-11-25"}


@pytest.fixture(scope="module")
def gateway(modern_fixture_url: str, legacy_fixture_url: str, fixture_backend_url: str) -> Iterator[RunningGateway]:
    urls = {"modern": modern_fixture_url, "legacy": legacy_fixture_url, "dual": fixture_backend_url}
    config = {"backends": {name: {"transport": "http", "url": url, "required": True} for name, url in urls.items()}}
    with run_gateway(config) as gw:
        yield gw


def test_each_backend_era_is_detected(gateway: RunningGateway) -> None:
    backends = httpx.get(f"{gateway.url}/readyz", timeout=5).json()["backends"]
    assert {name: b["era"] for name, b in backends.items()} == {
        "modern": "modern",
        "legacy": "legacy",
        "dual": "modern",
    }


class Answers:
    def __init__(self) -> None:
        self.elicited: list[str] = []
        self.sampled = 0

    async def elicitation(self, ctx: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        self.elicited.append(params.message)
        # Answer the form that was asked: every requested field gets a known value.
        wanted = list(getattr(params, "requested_schema", {}).get("properties", {}))
        known = {"username": "ada", "email": "ada@example.com", "name": "Alice", "color": "blue"}
        return types.ElicitResult(action="accept", content={k: known.get(k, "x") for k in wanted})

    async def sampling(
        self, ctx: ClientRequestContext, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult:
        self.sampled += 1
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(text="sampled by the client"), model="m", stop_reason="endTurn"
        )


def _text(result: types.CallToolResult) -> str:
    return " ".join(c.text for c in result.content if isinstance(c, types.TextContent))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", list(MODES))
async def test_cell(gateway: RunningGateway, mode: str, backend: str) -> None:
    answers = Answers()
    async with Client(
        gateway.mcp,
        mode=mode,
        elicitation_callback=answers.elicitation,
        sampling_callback=answers.sampling,
        read_timeout_seconds=30,
    ) as client:
        assert client.session.protocol_version == MODES[mode]
        tools = {t.name for t in (await client.list_tools()).tools}
        assert f"{backend}__test_elicitation" in tools

        plain = await client.call_tool(f"{backend}__test_simple_text", {})
        assert _text(plain) == "This is a simple text response for testing."

        elicited = await client.call_tool(
            f"{backend}__test_elicitation", {"message": f"who are you ({mode}/{backend})?"}
        )
        assert 'action=accept, content={"username": "ada", "email": "ada@example.com"}' in _text(elicited)
        assert answers.elicited == [f"who are you ({mode}/{backend})?"]

        sampled = await client.call_tool(f"{backend}__test_sampling", {"prompt": "hi"})
        assert _text(sampled) == "LLM response: sampled by the client"
        assert answers.sampled == 1

        multi = await client.call_tool(f"{backend}__test_input_required_result_multi_round", {})
        assert _text(multi) == "Alice's favorite color is blue", "two rounds of input, whatever the eras"
        assert len(answers.elicited) == 3


async def test_a_modern_client_that_cannot_be_asked_gets_32021_from_a_legacy_backend_that_asks(
    gateway: RunningGateway,
) -> None:
    """A 2026-07-28 client that declared no elicitation capability calls a legacy backend's tool that
    elicits: the backend's request is refused and the client is told what its request needs (-32021),
    and the gateway goes on serving it."""
    tool = "legacy__test_elicitation"
    body = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": tool, "arguments": {"message": "who?"}, "_meta": modern_meta()},
    }
    async with httpx.AsyncClient(timeout=30) as http:
        answer = await http.post(gateway.mcp, json=body, headers=modern_headers("tools/call", tool))
        error = answer.json()["error"]
        assert error["code"] == -32021, answer.text
        assert "elicitation" in error["data"]["requiredCapabilities"]
        body["id"], body["params"] = 8, {"name": "legacy__test_simple_text", "arguments": {}, "_meta": modern_meta()}
        plain = await http.post(
            gateway.mcp, json=body, headers=modern_headers("tools/call", "legacy__test_simple_text")
        )
        assert plain.json()["result"]["content"][0]["text"] == "This is a simple text response for testing."
