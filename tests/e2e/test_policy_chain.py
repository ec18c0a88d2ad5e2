"""The one policy chain, seen from clients: identity, capabilities, runtime changes, limits, pinning, audit.

Real gateway processes, the official SDK client and raw HTTP. Tokens in these configs are test
values; JWTs are minted here with the configured HS256 secret.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import httpx2
import mcp_types as types
import pytest
import yaml
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from tests.support import (
    JSON_HEADERS,
    RunningGateway,
    dynamic_backend,
    hs256_jwt,
    http_server,
    initialize_request,
    modern_headers,
    modern_meta,
    run_gateway,
)

pytestmark = [pytest.mark.timeout(90)]

SECRET = "jwt-test-secret"
ADMIN = "admin-test-token"
INIT = initialize_request(1)


def mint(claims: dict[str, Any], secret: str = SECRET) -> str:
    return hs256_jwt({"alg": "HS256", "typ": "JWT"}, claims, secret)


def claims(sub: str, **extra: Any) -> dict[str, Any]:
    return {"sub": sub, "iss": "test-issuer", "aud": "switchboard", "exp": time.time() + 600, **extra}


def base_config(**extra: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "backends": {"demo": {"transport": "builtin", "required": True}},
        "auth": {
            "jwt": {"hs256_secret": SECRET, "issuer": "test-issuer", "audience": "switchboard"},
            "authorization_servers": ["https://auth.example.test"],
            "admin_token": ADMIN,
        },
        "principals": {
            "alice": {"tokens": ["alice-token"], "capabilities": ["mcp/*"]},
            "reader": {
                "tokens": ["reader-token"],
                "capabilities": ["mcp/request:initialize", "mcp/request:tools/list", "mcp/request:tools/call:echo"],
            },
            "lister": {"tokens": ["lister-token"], "capabilities": ["mcp/request:initialize", "mcp/request:*/list"]},
        },
    }
    config.update(extra)
    return config


@pytest.fixture(scope="module")
def gateway() -> Iterator[RunningGateway]:
    with run_gateway(base_config()) as gw:
        yield gw


@asynccontextmanager
async def client_for(gw: RunningGateway, token: str) -> AsyncIterator[Client]:
    http = httpx2.AsyncClient(headers={"authorization": f"Bearer {token}"}, timeout=20)
    async with http, Client(streamable_http_client(gw.mcp, http_client=http), mode="legacy") as client:
        yield client


def text(result: types.CallToolResult) -> str:
    return " ".join(c.text for c in result.content if isinstance(c, types.TextContent))


# ---- identity ---------------------------------------------------------------------------------


async def test_no_token_is_401_with_rfc9728_metadata(gateway: RunningGateway) -> None:
    async with httpx.AsyncClient(timeout=10) as http:
        response = await http.post(gateway.mcp, json=INIT, headers=JSON_HEADERS)
        assert response.status_code == 401
        challenge = response.headers["www-authenticate"]
        assert challenge.startswith("Bearer ")
        assert f'resource_metadata="{gateway.url}/.well-known/oauth-protected-resource"' in challenge
        assert "error=" not in challenge, "no token was sent, so there is no token error"
        metadata = (await http.get(f"{gateway.url}/.well-known/oauth-protected-resource")).json()
        assert metadata["authorization_servers"] == ["https://auth.example.test"]
        assert metadata["resource"] == f"{gateway.url}/mcp"
        assert metadata["bearer_methods_supported"] == ["header"]

        bad = await http.post(gateway.mcp, json=INIT, headers={**JSON_HEADERS, "authorization": "Bearer nope"})
        assert bad.status_code == 401 and 'error="invalid_token"' in bad.headers["www-authenticate"]


@pytest.mark.parametrize(
    ("label", "token"),
    [
        ("bad signature", mint(claims("alice"), secret="wrong-secret")),
        ("expired", mint(claims("alice", exp=time.time() - 3600))),
        ("wrong audience", mint(claims("alice", aud="someone-else"))),
        ("wrong issuer", mint(claims("alice", iss="evil"))),
        ("not yet valid", mint(claims("alice", nbf=time.time() + 3600))),
        ("no subject", mint({"aud": "switchboard", "iss": "test-issuer", "exp": time.time() + 60})),
    ],
)
async def test_bad_jwts_are_refused(gateway: RunningGateway, label: str, token: str) -> None:
    async with httpx.AsyncClient(timeout=10) as http:
        response = await http.post(gateway.mcp, json=INIT, headers={**JSON_HEADERS, "authorization": f"Bearer {token}"})
    assert response.status_code == 401, label
    assert 'error="invalid_token"' in response.headers["www-authenticate"]


async def test_a_valid_jwt_and_a_session_bound_to_its_principal(gateway: RunningGateway) -> None:
    async with client_for(gateway, mint(claims("alice"))) as client:
        assert text(await client.call_tool("echo", {"text": "jwt ok"})) == "jwt ok"
    async with httpx.AsyncClient(timeout=10) as http:
        init = await http.post(gateway.mcp, json=INIT, headers={**JSON_HEADERS, "authorization": "Bearer alice-token"})
        sid = init.headers["mcp-session-id"]
        hijack = await http.post(
            gateway.mcp,
            json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
            headers={**JSON_HEADERS, "authorization": "Bearer reader-token", "mcp-session-id": sid},
        )
        assert hijack.status_code == 401, "another principal's token cannot use this session"


async def test_jwt_capabilities_only_narrow(gateway: RunningGateway) -> None:
    narrow = mint(claims("alice", capabilities=["mcp/request:initialize", "mcp/request:tools/list"]))
    async with client_for(gateway, narrow) as client:
        assert {t.name for t in (await client.list_tools()).tools} == set(), "no tool may be called, none is shown"
        with pytest.raises(MCPError) as denied:
            await client.call_tool("echo", {"text": "x"})
        assert denied.value.error.code == -32093
    widen = mint(claims("reader", capabilities=["*"]))
    async with client_for(gateway, widen) as client:
        with pytest.raises(MCPError):
            await client.call_tool("add", {"a": 1, "b": 2})  # the claim cannot add what config lacks
    # A principal not listed gets its claim, capped by max_capabilities (default everything).
    async with client_for(
        gateway, mint(claims("bob", capabilities=["mcp/request:initialize", "mcp/request:tools/*"]))
    ) as client:
        assert text(await client.call_tool("echo", {"text": "bob"})) == "bob"
        with pytest.raises(MCPError):
            await client.list_prompts()


# ---- capabilities -----------------------------------------------------------------------------


async def test_denial_names_the_capability_and_lists_are_filtered(gateway: RunningGateway) -> None:
    async with client_for(gateway, "reader-token") as client:
        assert {t.name for t in (await client.list_tools()).tools} == {"echo"}
        assert text(await client.call_tool("echo", {"text": "allowed"})) == "allowed"
        with pytest.raises(MCPError) as denied:
            await client.call_tool("add", {"a": 1, "b": 2})
        assert denied.value.error.code == -32093
        assert "mcp/request:tools/call:add" in denied.value.error.message
        assert "reader" in denied.value.error.message


async def test_mid_pattern_wildcards(gateway: RunningGateway) -> None:
    async with client_for(gateway, "lister-token") as client:
        await client.list_tools()
        await client.list_prompts()
        await client.list_resources()
        with pytest.raises(MCPError):
            await client.call_tool("echo", {"text": "x"})
        with pytest.raises(MCPError):
            await client.read_resource("demo://readme")


async def test_admin_api_changes_a_live_session_at_once(gateway: RunningGateway) -> None:
    admin = {"authorization": f"Bearer {ADMIN}"}
    async with httpx.AsyncClient(timeout=10) as http:
        assert (await http.get(f"{gateway.url}/admin/principals")).status_code == 401
        async with client_for(gateway, "reader-token") as client:
            with pytest.raises(MCPError):
                await client.call_tool("add", {"a": 2, "b": 3})
            promoted = await http.post(
                f"{gateway.url}/admin/principals/reader/capabilities",
                json={"add": ["mcp/request:tools/call:add"]},
                headers=admin,
            )
            assert promoted.status_code == 200
            assert (await client.call_tool("add", {"a": 2, "b": 3})).structured_content == {"sum": 5}
            assert {t.name for t in (await client.list_tools()).tools} == {"echo", "add"}
            demoted = await http.post(
                f"{gateway.url}/admin/principals/reader/capabilities",
                json={"remove": ["mcp/request:tools/call:add"]},
                headers=admin,
            )
            assert demoted.status_code == 200
            with pytest.raises(MCPError):
                await client.call_tool("add", {"a": 2, "b": 3})
        listing = (await http.get(f"{gateway.url}/admin/principals", headers=admin)).json()
        assert "reader" in listing["principals"]


async def test_config_reload_applies_to_live_sessions() -> None:
    with run_gateway(base_config()) as gw:
        async with client_for(gw, "reader-token") as client:
            with pytest.raises(MCPError):
                await client.call_tool("add", {"a": 1, "b": 1})
            config = yaml.safe_load(gw.config_path.read_text())
            config["principals"]["reader"]["capabilities"].append("mcp/request:tools/call:add")
            gw.config_path.write_text(yaml.safe_dump(config))
            gw.proc.send_signal(signal.SIGHUP)
            for _ in range(50):
                try:
                    result = await client.call_tool("add", {"a": 1, "b": 1})
                    break
                except MCPError:
                    await asyncio.sleep(0.1)
            else:
                raise AssertionError(f"the reload never applied\n{gw.log()}")
            assert result.structured_content == {"sum": 2}


# ---- guards -----------------------------------------------------------------------------------


async def test_rate_limit_per_tool_with_retry_hint() -> None:
    config = base_config(rate_limits={"per_tool": {"echo": {"per_s": 0.5, "burst": 2}}})
    with run_gateway(config) as gw:
        async with client_for(gw, "alice-token") as client:
            for n in range(2):
                assert text(await client.call_tool("echo", {"text": str(n)})) == str(n)
            with pytest.raises(MCPError) as limited:
                await client.call_tool("echo", {"text": "too many"})
            assert limited.value.error.code == -32029
            assert isinstance(limited.value.error.data, dict) and limited.value.error.data["retryAfterMs"] > 0
            assert (await client.call_tool("add", {"a": 1, "b": 1})).structured_content == {"sum": 2}
        async with httpx.AsyncClient(timeout=10) as http:
            headers = {**JSON_HEADERS, "authorization": "Bearer alice-token"}
            sid = (await http.post(gw.mcp, json=INIT, headers=headers)).headers["mcp-session-id"]
            call = {
                "jsonrpc": "2.0",
                "id": 9,
                "method": "tools/call",
                "params": {"name": "echo", "arguments": {"text": "x"}},
            }
            raw = await http.post(gw.mcp, json=call, headers={**headers, "mcp-session-id": sid})
            assert raw.status_code == 429
            assert int(raw.headers["retry-after"]) >= 1
            assert raw.json()["error"]["code"] == -32029


async def test_client_token_is_never_forwarded_upstream() -> None:
    with http_server(lambda port: [sys.executable, "-m", "tests.e2e.backends.header_echo", str(port)]) as url:
        config = base_config(
            backends={
                "echoed": {
                    "transport": "http",
                    "url": url,
                    "headers": {"Authorization": "Bearer backend-own-credential"},
                    "required": True,
                }
            }
        )
        with run_gateway(config) as gw:
            async with client_for(gw, "alice-token") as client:
                assert text(await client.call_tool("whoami", {})) == "Bearer backend-own-credential"


async def test_argument_validation_against_the_input_schema() -> None:
    config = base_config(backends={"demo": {"transport": "builtin", "required": True, "validate_arguments": True}})
    with run_gateway(config) as gw:
        async with client_for(gw, "alice-token") as client:
            assert (await client.call_tool("add", {"a": 1, "b": 2})).structured_content == {"sum": 3}
            with pytest.raises(MCPError) as invalid:
                await client.call_tool("add", {"a": "one", "b": 2})
            assert invalid.value.error.code == -32602


async def test_a_changed_tool_definition_is_flagged_hidden_and_approved(tmp_path: Path) -> None:
    audit_file = tmp_path / "audit.jsonl"
    config = base_config(
        backends={"dyn": dynamic_backend()}, pinning={"mode": "enforce"}, audit={"file": str(audit_file)}
    )
    with run_gateway(config) as gw:
        async with client_for(gw, "alice-token") as client:
            await client.call_tool("grow", {"name": "sprout"})
            await asyncio.sleep(0.3)
            assert "sprout" in {t.name for t in (await client.list_tools()).tools}
            await client.call_tool("redescribe", {"name": "sprout", "description": "now does something else"})
            await asyncio.sleep(0.3)
            assert "sprout" not in {t.name for t in (await client.list_tools()).tools}
            with pytest.raises(MCPError) as pinned:
                await client.call_tool("sprout", {})
            assert pinned.value.error.code == -32097
            async with httpx.AsyncClient(timeout=10) as http:
                admin = {"authorization": f"Bearer {ADMIN}"}
                pending = (await http.get(f"{gw.url}/admin/pins", headers=admin)).json()["pending"]
                assert [(p["backend"], p["tool"]) for p in pending] == [("dyn", "sprout")]
                approved = await http.post(f"{gw.url}/admin/pins/dyn/sprout/approve", headers=admin)
                assert approved.status_code == 200
                metrics = (await http.get(f"{gw.url}/metrics")).text
            assert "sprout" in {t.name for t in (await client.list_tools()).tools}
            assert text(await client.call_tool("sprout", {})) == "I am sprout"
        assert 'switchboard_tool_definition_changes_total{backend="dyn"} 1.0' in metrics
        await asyncio.sleep(0.5)
    records = [json.loads(line) for line in audit_file.read_text().splitlines()]
    outcomes = {r["outcome"] for r in records}
    assert {"allowed", "pin_changed", "pin_approved", "pinned"} <= outcomes
    allowed = next(r for r in records if r["outcome"] == "allowed" and r.get("method") == "tools/call")
    for field in ("principal", "dialect", "action", "backend", "trace_id", "latency_ms", "ts"):
        assert field in allowed, field
    assert allowed["principal"] == "alice" and allowed["action"].startswith("mcp/request:tools/call:")


async def test_audit_records_denials_and_rate_limits(tmp_path: Path) -> None:
    audit_file = tmp_path / "audit.jsonl"
    config = base_config(audit={"file": str(audit_file)}, rate_limits={"per_tool": {"*": {"per_s": 0.1, "burst": 1}}})
    with run_gateway(config) as gw:
        async with client_for(gw, "reader-token") as client:
            await client.call_tool("echo", {"text": "1"})
            with pytest.raises(MCPError):
                await client.call_tool("echo", {"text": "2"})
            with pytest.raises(MCPError):
                await client.call_tool("add", {"a": 1, "b": 1})
        async with httpx.AsyncClient(timeout=5) as http:
            metrics = (await http.get(f"{gw.url}/metrics")).text
    for _ in range(50):  # the writer thread flushed on shutdown; allow it a moment on a slow machine
        if audit_file.stat().st_size:
            break
        await asyncio.sleep(0.1)
    records = [json.loads(line) for line in audit_file.read_text().splitlines()]
    by_outcome = {r["outcome"]: r for r in records}
    assert by_outcome["rate_limited"]["principal"] == "reader"
    assert by_outcome["denied"]["action"] == "mcp/request:tools/call:add"
    assert 'switchboard_audit_records_total{outcome="denied"}' in metrics


async def test_every_front_door_authenticates(gateway: RunningGateway) -> None:
    import websockets

    ws_url = gateway.ws()
    with pytest.raises(websockets.InvalidStatus) as refused:
        async with websockets.connect(ws_url, subprotocols=["mcp"]):  # type: ignore[list-item]
            pass
    assert refused.value.response.status_code == 401
    async with websockets.connect(
        ws_url,
        subprotocols=["mcp"],
        additional_headers={"authorization": "Bearer reader-token"},  # type: ignore[list-item]
    ) as ws:
        await ws.send(json.dumps(INIT))
        assert json.loads(await ws.recv())["result"]["serverInfo"]["name"] == "switchboard"
    async with httpx.AsyncClient(timeout=5) as http:
        sse = await http.get(f"{gateway.url}/sse", headers={"accept": "text/event-stream"})
        assert sse.status_code == 401 and "resource_metadata=" in sse.headers["www-authenticate"]
        modern = await http.post(
            gateway.mcp,
            json={
                "jsonrpc": "2.0",
                "id": 3,
                "method": "tools/list",
                "params": {"_meta": modern_meta()},
            },
            headers=modern_headers("tools/list"),
        )
        assert modern.status_code == 401
