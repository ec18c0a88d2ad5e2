"""MCPL through the gateway: scopes, channels and MCPL hosts over HTTP.

A real MCPL host in front (WebSocket, Streamable HTTP or legacy HTTP+SSE), the shared six-backend gateway
of mcpl_support.py behind it: every scope/elevate branch and scoped tool calls against operator and host
rules, the channel round trip (register, publish, open/close, observe, incoming), and the push and
scope/elevate round trips for hosts on HTTP transports. Every test checks both ends: what the host saw
and what the backend recorded (its ``stats`` tool).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.mcpl_host import McplHost
from tests.e2e.mcpl_support import enable, eventually, shared_gateway_config, stats, ws_url
from tests.support import JSON_HEADERS, RunningGateway, initialize_params, initialize_request, run_gateway


@pytest.fixture(scope="module")
def gateway() -> Iterator[RunningGateway]:
    """The shared six-backend gateway (one per test module that uses it)."""
    with run_gateway(shared_gateway_config()) as gw:
        yield gw


# ---- scopes ------------------------------------------------------------------------------------


async def test_every_scope_elevate_branch(gateway: RunningGateway) -> None:
    async with McplHost.connect(ws_url(gateway, "files")) as host:

        def elevate(label: str) -> dict[str, Any]:
            scope = {"label": label, "payload": {"path": label}}
            return {"method": "scope/elevate", "params": {"featureSet": "files.edit", "scope": scope}}

        disabled = await host.call_tool("ask", elevate("/project/a"))
        assert disabled["error"]["code"] == -32001
        scopes = {"files.edit": {"whitelist": ["/project/**", "/etc/hosts"], "blacklist": ["**/.env"]}}
        await enable(host, "stats", ["files.*"], scopes=scopes)
        operator = await host.call_tool("ask", elevate("/etc/hosts"))
        assert operator["result"]["approved"] is False and "operator" in operator["result"]["reason"]
        host_black = await host.call_tool("ask", elevate("/project/.env"))
        assert host_black["result"]["approved"] is False and "**/.env" in host_black["result"]["reason"]
        white = await host.call_tool("ask", elevate("/project/src/main.ts"))
        assert white == {"result": {"approved": True, "payload": {"path": "/project/src/main.ts"}}}
        operator_white = await host.call_tool("ask", elevate("/srv/data"))
        assert operator_white["result"]["approved"] is True
        assert not [r for r in host.requests if r["method"] == "scope/elevate"], "decided without asking the host"

        async def approve(message: dict[str, Any]) -> dict[str, Any]:
            label = message["params"]["scope"]["label"]
            if label == "/home/y":
                return {"approved": False, "reason": "user declined"}
            return {"approved": True, "payload": {**message["params"]["scope"]["payload"], "resolved": True}}

        host.handlers["scope/elevate"] = approve
        asked = await host.call_tool("ask", elevate("/home/x"))
        assert asked == {"result": {"approved": True, "payload": {"path": "/home/x", "resolved": True}}}
        forwarded = await host.wait_request("scope/elevate")
        assert forwarded["params"]["featureSet"] == "files.edit"
        cached = await host.call_tool("ask", elevate("/home/x"))
        assert cached["result"]["approved"] is True
        assert len([r for r in host.requests if r["method"] == "scope/elevate"]) == 1, "the approval was cached"
        declined = await host.call_tool("ask", elevate("/home/y"))
        assert declined == {"result": {"approved": False, "reason": "user declined"}}


async def test_scoped_tool_call_is_checked_before_forwarding(gateway: RunningGateway) -> None:
    async with McplHost.connect(ws_url(gateway, "files")) as host:
        await enable(host, "stats", ["files.edit"], scopes={"files.edit": {"blacklist": ["**/secrets/**"]}})
        ok = await host.request(
            "tools/call", {"name": "edit_file", "arguments": {"path": "/p/a"}, "scope": {"label": "/p/a"}}
        )
        assert "result" in ok
        edits = [c for c in (await stats(host, "stats"))["toolCalls"] if c["name"] == "edit_file"]
        assert edits[-1]["scope"] == {"label": "/p/a"}
        for label in ("/etc/passwd", "/p/secrets/key"):
            denied = await host.request(
                "tools/call", {"name": "edit_file", "arguments": {"path": label}, "scope": {"label": label}}
            )
            assert denied["error"]["code"] == -32093 and denied["error"]["data"]["scope"] == label
        calls = (await stats(host, "stats"))["toolCalls"]
        assert not [c for c in calls if (c.get("arguments") or {}).get("path") in ("/etc/passwd", "/p/secrets/key")]


# ---- channels ----------------------------------------------------------------------------------


async def test_channel_round_trip(gateway: RunningGateway) -> None:
    async with McplHost.connect(ws_url(gateway)) as host:

        async def listed() -> Any:
            channels = (await host.request("channels/list"))["result"]["channels"]
            return channels if len(channels) >= 2 else None

        ids = {c["id"] for c in await eventually(listed)}
        assert {"chan.discord:#general", "chan.discord:#random"} <= ids
        await enable(
            host,
            "chan__stats",
            ["chan.channels.*"],
            scopes={"chan.channels.publish": {"blacklist": ["chan.discord:#random"]}},
        )
        content = [{"type": "text", "text": "Hello team"}]
        sent = await host.request(
            "channels/publish", {"conversationId": "conv_1", "channelId": "chan.discord:#general", "content": content}
        )
        assert sent["result"]["delivered"] is True and sent["result"]["messageId"].startswith("msg_")
        published = (await stats(host, "chan__stats"))["published"][-1]
        assert published["channelId"] == "discord:#general" and published["content"] == content
        refused = await host.request("channels/publish", {"channelId": "chan.discord:#random", "content": content})
        assert refused["error"]["code"] == -32017
        unknown = await host.request("channels/publish", {"channelId": "chan.discord:#nope", "content": content})
        assert unknown["error"]["code"] == -32023

        opened = await host.request(
            "channels/open", {"type": "discord", "address": {"guild": "acme", "channel": "#dev"}}
        )
        assert opened["result"]["channel"]["id"] == "chan.discord:#dev"
        changed = await host.wait_notification(
            "channels/changed", lambda m: any(c["id"] == "chan.discord:#dev" for c in m["params"].get("added", []))
        )
        assert changed["params"]["added"][0]["type"] == "discord"
        broken = await host.request("channels/open", {"type": "discord", "address": {"channel": "#broken"}})
        assert broken["error"]["code"] == -32024

        await host.notify(
            "channels/outgoing/chunk",
            {
                "inferenceId": "i",
                "conversationId": "c",
                "channelId": "chan.discord:#general",
                "index": 0,
                "delta": "Hi",
            },
        )

        async def observed() -> Any:
            return (await stats(host, "chan__stats"))["observed"]

        seen = (await eventually(observed))[-1]
        assert seen["method"] == "channels/outgoing/chunk" and seen["params"]["channelId"] == "discord:#general"

        incoming = await host.call_tool("chan__incoming", {"channelId": "discord:#general", "texts": ["What's up?"]})
        assert incoming["result"]["results"][0]["accepted"] is True
        assert incoming["result"]["results"][0]["conversationId"] == "conv_ch"
        delivered = await host.wait_request("channels/incoming")
        assert delivered["params"]["messages"][0]["channelId"] == "chan.discord:#general"
        stray = await host.call_tool("chan__incoming", {"channelId": "discord:#nope", "texts": ["?"]})
        assert stray["result"]["results"][0] == {"messageId": "dmsg_2", "accepted": False, "reason": "Unknown channel"}

        tagged = {"featureSet": "channels.observe", "messages": [{"channelId": "discord:#general", "messageId": "t1"}]}
        passed = await host.call_tool("chan__ask", {"method": "channels/incoming", "params": tagged})
        assert passed["result"]["results"][0]["accepted"] is True, "a tag that is enabled passes"
        wrong_tag = {**tagged, "featureSet": "channels.nope"}
        unknown_tag = await host.call_tool("chan__ask", {"method": "channels/incoming", "params": wrong_tag})
        assert unknown_tag["error"]["code"] == -32003, "a channel message that carries a tag is held to it"

        asked = await host.call_tool("chan__ask", {"method": "channels/list", "params": {}})
        assert {c["id"] for c in asked["result"]["channels"]} >= {"discord:#general", "discord:#random"}
        closed = await host.request("channels/close", {"channelId": "chan.discord:#dev"})
        assert closed["result"] == {"closed": True}


# ================================================================= an MCPL host over Streamable HTTP


async def test_http_host_is_asked_on_the_stream_of_its_own_call(gateway: RunningGateway) -> None:
    """A host on Streamable HTTP with no GET stream open: the backend's scope/elevate, made while
    the host's tool call runs, arrives on that call's SSE stream, and the answer goes back by POST."""
    import httpx

    from gateway.sse import iter_sse

    headers = dict(JSON_HEADERS)
    init = initialize_request(
        0, capabilities={"experimental": {"mcpl": {"version": "0.4", "featureSets": True}}}, client="http-host"
    )
    url = gateway.server("files")
    async with httpx.AsyncClient(timeout=15) as http:
        opened = await http.post(url, json=init, headers=headers)
        assert opened.json()["result"]["capabilities"]["experimental"]["mcpl"]["featureSets"]["files.edit"]
        headers["mcp-session-id"] = opened.headers["mcp-session-id"]
        await http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers)
        update = {"jsonrpc": "2.0", "method": "featureSets/update", "params": {"enabled": ["files.edit"]}}
        assert (await http.post(url, json=update, headers=headers)).status_code == 202
        scope = {"label": "/http/only", "payload": {"path": "/http/only"}}
        call = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {
                "name": "ask",
                "arguments": {"method": "scope/elevate", "params": {"featureSet": "files.edit", "scope": scope}},
            },
        }
        async with http.stream("POST", url, json=call, headers=headers) as stream:
            assert stream.headers["content-type"].startswith("text/event-stream")
            async for event in iter_sse(stream.aiter_bytes()):
                if not event.data:
                    continue  # the priming event (resumability)
                message = json.loads(event.data)
                if message.get("method") == "scope/elevate":
                    assert message["params"]["scope"]["label"] == "/http/only"
                    answer = {
                        "jsonrpc": "2.0",
                        "id": message["id"],
                        "result": {"approved": True, "payload": scope["payload"]},
                    }
                    assert (await http.post(url, json=answer, headers=headers)).status_code == 202
                elif message.get("id") == 1:
                    result = json.loads(message["result"]["content"][0]["text"])
                    assert result == {"result": {"approved": True, "payload": {"path": "/http/only"}}}
                    break
            else:
                raise AssertionError("the call's stream ended without its result")


# ================================================================= scoped calls naming their feature set


async def test_scoped_call_naming_its_feature_set_federated_with_pattern_keyed_scopes(gateway: RunningGateway) -> None:
    async with McplHost.connect(ws_url(gateway)) as host:
        await enable(host, "files__stats", ["files.files.*"], scopes={"files.files.*": {"blacklist": ["/tmp/**"]}})
        call = {"name": "files__edit_file", "arguments": {"path": "/p/b"}, "scope": {"label": "/p/b"}}
        ok = await host.request("tools/call", {**call, "featureSet": "files.files.edit"})
        assert "result" in ok
        sent = [c for c in (await stats(host, "files__stats"))["toolCalls"] if c["name"] == "edit_file"][-1]
        assert sent["featureSet"] == "files.edit", "the backend hears its own feature-set name"
        denied = await host.request("tools/call", {**call, "scope": {"label": "/tmp/x"}})
        assert denied["error"]["code"] == -32093, "a scope key may be a feature-set pattern"
        unknown = await host.request("tools/call", {**call, "featureSet": "files.nope"})
        assert unknown["error"]["code"] == -32003


# ================================================================= an MCPL host over legacy HTTP+SSE


async def test_mcpl_host_over_legacy_http_sse(gateway: RunningGateway) -> None:
    """The same push round trip for a host on the legacy HTTP+SSE transport (GET /sse + POST)."""
    import httpx

    from gateway.sse import iter_sse

    async with httpx.AsyncClient(timeout=15) as http, http.stream("GET", f"{gateway.url}/sse") as stream:
        events = iter_sse(stream.aiter_bytes())
        endpoint = (await anext(events)).data
        post_url = f"{gateway.url}{endpoint}"

        async def post(message: dict[str, Any]) -> None:
            assert (await http.post(post_url, json=message)).status_code == 202

        async def next_message() -> dict[str, Any]:
            while True:
                event = await asyncio.wait_for(anext(events), 10)
                if event.data:
                    return json.loads(event.data)

        caps = {"experimental": {"mcpl": {"version": "0.4", "pushEvents": True, "featureSets": True}}}
        init = initialize_params(capabilities=caps, client="sse-host")
        await post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": init})
        assert "mcpl" in (await next_message())["result"]["capabilities"]["experimental"]
        await post({"jsonrpc": "2.0", "method": "notifications/initialized"})
        await post({"jsonrpc": "2.0", "method": "featureSets/update", "params": {"enabled": ["mem2.memory.proactive"]}})
        for attempt in range(100):  # the update is a notification: wait until the backend has it
            await post(
                {"jsonrpc": "2.0", "id": 100 + attempt, "method": "tools/call", "params": {"name": "mem2__stats"}}
            )
            record = json.loads((await next_message())["result"]["content"][0]["text"])
            if "memory.proactive" in record["featureSetUpdates"][-1]["enabled"]:
                break
            await asyncio.sleep(0.05)
        arguments = {"eventId": "sse-1", "text": "over SSE"}
        await post(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {"name": "mem2__push", "arguments": arguments},
            }
        )
        pushed = await next_message()
        assert pushed["method"] == "push/event" and pushed["params"]["featureSet"] == "mem2.memory.proactive"
        await post({"jsonrpc": "2.0", "id": pushed["id"], "result": {"accepted": True, "inferenceId": "inf_sse"}})
        done = await next_message()
        assert done["id"] == 1
        assert json.loads(done["result"]["content"][0]["text"]) == {
            "result": {"accepted": True, "inferenceId": "inf_sse"}
        }
