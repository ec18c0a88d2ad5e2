"""The 2026-07-28 client envelope (``params._meta``) through a real gateway process over HTTP: every
field of the wrong type is refused with 400 and -32602 naming its key and the type it must have, and
the official SDK's client (``mode="auto"``), with a log level, capabilities and a full client info,
is served as before, up to a modern backend that checks the envelope it is sent in turn.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import mcp_types as types
import pytest
from mcp.client import Client, ClientRequestContext

from tests.support import RunningGateway, modern_headers, modern_meta, run_gateway

pytestmark = [
    pytest.mark.timeout(90),
    pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning"),
]

VERSION = "io.modelcontextprotocol/protocolVersion"
CAPS = "io.modelcontextprotocol/clientCapabilities"
INFO = "io.modelcontextprotocol/clientInfo"
LEVEL = "io.modelcontextprotocol/logLevel"


@pytest.fixture(scope="module")
def gateway(modern_fixture_url: str) -> Iterator[RunningGateway]:
    config = {
        "backends": {
            "modern": {"transport": "http", "url": modern_fixture_url, "required": True},
            "demo": {"transport": "builtin", "required": True},
        }
    }
    with run_gateway(config) as gw:
        yield gw


WRONG = [
    pytest.param(VERSION, 2026, "must be a string, not a number", id="version"),
    pytest.param(CAPS, "all", "must be an object, not a string", id="capabilities"),
    pytest.param(CAPS, {"extensions": ["dev.cloto/mgp"]}, ".extensions must be an object, not an array", id="ext"),
    pytest.param(CAPS, {"sampling": None}, ".sampling must be an object, not null", id="sampling"),
    pytest.param(INFO, "me", "must be an object with a name and a version, not a string", id="info"),
    pytest.param(INFO, None, "must be an object with a name and a version, not null", id="info-null"),
    pytest.param(INFO, {"name": "me", "version": 2}, ".version must be a string, not a number", id="info-version"),
    pytest.param(LEVEL, 3, "must be a string (one of debug, info, notice,", id="level"),
    pytest.param(LEVEL, None, "must be a string (one of debug,", id="level-null"),
    pytest.param(LEVEL, "verbose", "'verbose' is not a log level; one of debug,", id="level-unknown"),
]


@pytest.mark.parametrize(("key", "value", "said"), WRONG)
async def test_a_field_of_the_wrong_type_is_400_invalid_params_naming_it(
    gateway: RunningGateway, key: str, value: Any, said: str
) -> None:
    requests = [
        ("tools/call", "demo__echo", {"name": "demo__echo", "arguments": {"text": "x"}}),  # the door's one pass
        ("tools/call", "modern__test_simple_text", {"name": "modern__test_simple_text", "arguments": {}}),
        ("tools/list", None, {}),
        ("server/discover", None, {}),
    ]
    async with httpx.AsyncClient(timeout=10) as http:
        for rpc_id, (method, name, params) in enumerate(requests):
            body = {
                "jsonrpc": "2.0",
                "id": rpc_id,
                "method": method,
                "params": {**params, "_meta": {**modern_meta(), key: value}},
            }
            answer = await http.post(gateway.mcp, json=body, headers=modern_headers(method, name))
            assert answer.status_code == 400, (method, answer.text)
            error = answer.json()["error"]
            assert answer.json()["id"] == rpc_id
            assert error["code"] == -32602, (method, error)
            assert error["message"].startswith(f"Invalid params: _meta[{key!r}]"), (method, error)
            assert said in error["message"], (method, error)
        # The gateway goes on serving the same client.
        body = {"jsonrpc": "2.0", "id": "ok", "method": "tools/list", "params": {"_meta": modern_meta()}}
        assert (await http.post(gateway.mcp, json=body, headers=modern_headers("tools/list"))).status_code == 200


class Recorder:
    def __init__(self) -> None:
        self.logs: list[Any] = []
        self.sampled = 0

    async def logging(self, params: types.LoggingMessageNotificationParams) -> None:
        self.logs.append((params.level, params.data))

    async def sampling(
        self, ctx: ClientRequestContext, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult:
        self.sampled += 1
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(text="sampled"), model="m", stop_reason="endTurn"
        )


def _text(result: types.CallToolResult) -> str:
    return " ".join(c.text for c in result.content if isinstance(c, types.TextContent))


@pytest.mark.parametrize("level", ["debug", "warning", None])
async def test_the_official_sdk_client_is_served_with_its_envelope(gateway: RunningGateway, level: Any) -> None:
    """The SDK stamps protocol version, client info, capabilities (sampling: it has a callback) and,
    when set, the log level on every request; the gateway takes them, and forwards the client's
    capabilities and level to the modern backend, whose SDK checks that envelope too."""
    rec = Recorder()
    info = types.Implementation(
        name="envelope-test", version="1.2.3", title="Envelope test", website_url="https://x.test"
    )
    async with Client(
        gateway.mcp,
        mode="auto",
        client_info=info,
        log_level=level,
        logging_callback=rec.logging,
        sampling_callback=rec.sampling,
        read_timeout_seconds=30,
    ) as client:
        assert client.session.protocol_version == "2026-07-28"
        tools = {t.name for t in (await client.list_tools()).tools}
        assert {"demo__echo", "modern__test_logging_tool", "modern__test_sampling"} <= tools
        echoed = await client.call_tool("demo__echo", {"text": "hi"})
        assert "hi" in _text(echoed)
        logged = await client.call_tool("modern__test_logging_tool", {})
        assert _text(logged) == "Logged at debug, info, warning and error"
        sampled = await client.call_tool("modern__test_sampling", {"prompt": "hi"})
        assert _text(sampled) == "LLM response: sampled"
        assert rec.sampled == 1
    levels = [lvl for lvl, data in rec.logs if "test_logging_tool" in str(data)]
    expected = {"debug": ["debug", "info", "warning", "error"], "warning": ["warning", "error"], None: []}[level]
    assert levels == expected, rec.logs
