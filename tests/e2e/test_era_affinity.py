"""Era affinity (gateway/upstreams/affinity.py): a dual-era backend serves each client in its own era.

The backend (tests/e2e/backends/era_split.py, the official Python SDK) asks for sampling only on its
legacy path, like the official conformance fixture; a legacy client reaches that path only if the
gateway opens a legacy session toward the backend for it. A modern-only backend refuses that
session once, and its legacy clients are translated instead.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import httpx
import mcp_types as types
import pytest
from mcp.client import Client, ClientRequestContext

from tests.e2e.backends.era_split import NO_SAMPLING_HERE
from tests.support import RunningGateway, http_server, run_gateway

pytestmark = [pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def era_split_url() -> Iterator[str]:
    with http_server(lambda port: [sys.executable, "-m", "tests.e2e.backends.era_split", str(port)]) as url:
        yield url


def _config(split_url: str, modern_url: str, affinity: bool = True) -> dict[str, object]:
    return {
        "backends": {
            "split": {"transport": "http", "url": split_url, "required": True, "era_affinity": affinity},
            "modern": {"transport": "http", "url": modern_url, "required": True},
        }
    }


@pytest.fixture(scope="module")
def gateway(era_split_url: str, modern_fixture_url: str) -> Iterator[RunningGateway]:
    with run_gateway(_config(era_split_url, modern_fixture_url)) as gw:
        yield gw


class Model:
    def __init__(self) -> None:
        self.asked: list[str] = []

    async def sampling(
        self, ctx: ClientRequestContext, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult:
        content = params.messages[0].content
        self.asked.append(content.text if isinstance(content, types.TextContent) else "")
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(text="Paris"), model="m", stop_reason="endTurn"
        )


def _text(result: types.CallToolResult) -> str:
    return " ".join(c.text for c in result.content if isinstance(c, types.TextContent))


def _backends(gw: RunningGateway) -> dict[str, dict[str, object]]:
    backends: dict[str, dict[str, object]] = httpx.get(f"{gw.url}/readyz", timeout=5).json()["backends"]
    return backends


async def test_a_legacy_client_reaches_the_legacy_path_of_a_dual_era_backend(gateway: RunningGateway) -> None:
    assert _backends(gateway)["split"]["era"] == "modern", "the probe finds the backend modern"
    model = Model()
    async with Client(gateway.mcp, mode="legacy", sampling_callback=model.sampling, read_timeout_seconds=30) as client:
        assert _text(await client.call_tool("split__which_era", {})) == "legacy"
        answer = await client.call_tool("split__ask_model", {})
        assert not answer.is_error, _text(answer)
        assert _text(answer) == "the model said: Paris"
    assert model.asked == ["What is the capital of France?"]
    assert _backends(gateway)["split"]["legacy_path"] == "ready"


async def test_a_modern_client_stays_on_the_modern_path(gateway: RunningGateway) -> None:
    async with Client(gateway.mcp, mode="auto", read_timeout_seconds=30) as client:
        assert client.session.protocol_version == "2026-07-28"
        assert _text(await client.call_tool("split__which_era", {})) == "modern"
        refused = await client.call_tool("split__ask_model", {})
        assert refused.is_error and _text(refused) == NO_SAMPLING_HERE


async def test_a_modern_only_backend_refuses_once_and_legacy_clients_are_translated(gateway: RunningGateway) -> None:
    model = Model()
    async with Client(gateway.mcp, mode="legacy", sampling_callback=model.sampling, read_timeout_seconds=30) as client:
        for _ in range(2):  # the refusal is remembered: the second call does not ask again
            sampled = await client.call_tool("modern__test_sampling", {"prompt": "hi"})
            assert _text(sampled) == "LLM response: Paris"
    assert len(model.asked) == 2
    assert _backends(gateway)["modern"]["legacy_path"] == "refused"


async def test_without_affinity_a_legacy_client_is_translated(era_split_url: str, modern_fixture_url: str) -> None:
    with run_gateway(_config(era_split_url, modern_fixture_url, affinity=False)) as gw:
        async with Client(gw.mcp, mode="legacy", read_timeout_seconds=30) as client:
            assert _text(await client.call_tool("split__which_era", {})) == "modern"
            refused = await client.call_tool("split__ask_model", {})
            assert refused.is_error and _text(refused) == NO_SAMPLING_HERE
        assert "legacy_path" not in _backends(gw)["split"]
