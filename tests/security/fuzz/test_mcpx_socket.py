"""The MCPx topic socket ``/ws?topic=``, also with a backend bridged into the topic."""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import given, strategies as st
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from tests.security.fuzz.clients import open_ws
from tests.security.fuzz.support import (
    ABSENT,
    ADMIN,
    ALICE,
    BRIDGED_TOPIC,
    ENVELOPE_LIMIT,
    IDS,
    JSON,
    NASTY_BODIES,
    PARAMS,
    PROPER_CLOSE_CODES,
    STEP_S,
    fuzz,
    parse_like_the_gateway,
)
from tests.support import RunningGateway

pytestmark = pytest.mark.timeout(120)


class McpxPeer:
    """A participant on /ws?topic=...: the welcome is checked on joining."""

    def __init__(self, gw: RunningGateway, topic: str, headers: dict[str, str] | None = None) -> None:
        self.ws: ClientConnection = open_ws(gw, f"/ws?topic={topic}", headers, subprotocol=None).__enter__()
        welcome = self.recv()
        assert welcome["kind"] == "system/welcome", welcome
        self.id = welcome["payload"]["you"]["id"]

    def recv(self) -> dict[str, Any]:
        message = json.loads(self.ws.recv(timeout=STEP_S))
        assert isinstance(message, dict) and message.get("protocol") == "mcpx/v0.1", message
        return message

    def envelope(self, kind: str = "chat", **fields: Any) -> dict[str, Any]:
        env = {
            "protocol": "mcpx/v0.1",
            "id": str(uuid.uuid4()),
            "ts": "2025-08-26T14:00:00Z",
            "from": self.id,
            "kind": kind,
            "payload": {},
        }
        env.update(fields)
        return env

    def probe(self) -> list[dict[str, Any]] | int:
        """A deliberately invalid envelope with a known id; returns what came before its system/error, or the
        close code if the socket was closed."""
        probe_id = f"probe-{uuid.uuid4()}"
        try:
            self.ws.send(json.dumps({**self.envelope(), "id": probe_id, "protocol": "mcpx/v0"}))
            before: list[dict[str, Any]] = []
            while True:
                message = self.recv()
                if message.get("kind") == "system/error" and message.get("correlation_id") == probe_id:
                    return before
                before.append(message)
        except ConnectionClosed as closed:
            assert closed.rcvd is not None, "the gateway dropped the socket without a close frame"
            return closed.rcvd.code

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.ws.close()


def assert_mcpx_survived(peer: McpxPeer, frame: str | bytes) -> None:
    peer.ws.send(frame)
    result = peer.probe()
    if isinstance(result, int):
        assert result in PROPER_CLOSE_CODES, (frame[:200], result)
        return
    for message in result:
        assert message["from"] == "system:gateway" or message["kind"] != "system/error", message
    raw = frame.encode() if isinstance(frame, str) else frame
    if parse_like_the_gateway(raw) is ABSENT:
        errors = [m for m in result if m.get("kind") == "system/error"]
        assert errors, (frame[:200], result)
        assert errors[0]["payload"]["error"] in ("invalid_message", "envelope_too_large"), errors[0]


@pytest.fixture
def mcpx_peer(plain: RunningGateway) -> Iterator[McpxPeer]:
    peer = McpxPeer(plain, f"fuzz-{uuid.uuid4().hex[:8]}")
    try:
        yield peer
    finally:
        peer.close()


@pytest.mark.parametrize("name", [n for n, b in NASTY_BODIES.items() if len(b) < 200_000])
def test_mcpx_nasty_frames(mcpx_peer: McpxPeer, name: str) -> None:
    assert_mcpx_survived(mcpx_peer, NASTY_BODIES[name])


ENVELOPE_FIELDS = ["protocol", "id", "ts", "from", "kind", "payload", "to", "correlation_id"]


@fuzz(60)
@given(
    mutations=st.dictionaries(st.sampled_from(ENVELOPE_FIELDS), JSON, max_size=4),
    removals=st.lists(st.sampled_from(ENVELOPE_FIELDS), max_size=2),
    kind=st.sampled_from(
        [
            "chat",
            "mcp/request:tools/call:echo",
            "mcp/response:tools/call",
            "mcp/proposal:tools/call",
            "system/error",
            "x",
        ]
    ),
)
def test_mcpx_envelopes_with_wrong_types(
    mcpx_peer: McpxPeer, mutations: dict[str, Any], removals: list[str], kind: str
) -> None:
    envelope = mcpx_peer.envelope(kind)
    envelope.update(mutations)
    for field in removals:
        envelope.pop(field, None)
    assert_mcpx_survived(mcpx_peer, json.dumps(envelope))


@fuzz(50)
@given(frame=st.text(max_size=300) | st.binary(max_size=300))
def test_mcpx_arbitrary_frames(mcpx_peer: McpxPeer, frame: str | bytes) -> None:
    assert_mcpx_survived(mcpx_peer, frame)


def wait_for_bridged_demo(gw: RunningGateway) -> None:
    deadline = time.monotonic() + STEP_S
    url = f"{gw.url}/v0.1/topics/{BRIDGED_TOPIC}/participants"
    while True:
        response = httpx.get(url, headers={"authorization": f"Bearer {ADMIN}"}, timeout=STEP_S, trust_env=False)
        if response.status_code == 200 and any(p["id"] == "demo" for p in response.json()["participants"]):
            return
        assert time.monotonic() < deadline, f"the demo backend never joined {BRIDGED_TOPIC}: {response.text}"
        time.sleep(0.05)


@pytest.fixture
def bridged_peer(authed: RunningGateway) -> Iterator[McpxPeer]:
    wait_for_bridged_demo(authed)
    peer = McpxPeer(authed, BRIDGED_TOPIC, {"authorization": f"Bearer {ALICE}"})
    try:
        yield peer
    finally:
        peer.close()


@st.composite
def bridged_requests(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    """(kind, payload) of an ``mcp/request`` to the bridged backend, with the payload's fields up for grabs."""
    method = draw(
        st.sampled_from(["tools/call", "tools/list", "prompts/get", "resources/read", "ping", "initialize", "x/y"])
    )
    context = draw(st.sampled_from([None, "echo", "add", "greet", "demo://readme", ""]) | st.text(max_size=8))
    kind = f"mcp/request:{method}" + (f":{context}" if context is not None else "")
    payload: dict[str, Any] = {}
    if draw(st.booleans()):
        payload["jsonrpc"] = "2.0"
    rpc_id = draw(IDS)
    if rpc_id is not ABSENT:
        payload["id"] = rpc_id
    payload["method"] = draw(st.sampled_from([method, method, method]) | JSON)
    params = draw(PARAMS)
    if params is not None:
        payload["params"] = params
    return kind, payload


@fuzz(40)
@given(request=bridged_requests())
def test_mcpx_requests_to_a_bridged_backend(bridged_peer: McpxPeer, request: tuple[str, dict[str, Any]]) -> None:
    """An envelope addressed to a backend bridged into the topic becomes a real call: whatever its payload, it is
    answered (an ``mcp/response`` or a ``system/error`` naming it) unless it is a notification; never a crash."""
    kind, payload = request
    envelope = bridged_peer.envelope(kind, payload=payload, to=["demo"])
    bridged_peer.ws.send(json.dumps(envelope))
    if "id" in payload:
        deadline = time.monotonic() + STEP_S
        while True:
            assert time.monotonic() < deadline, f"no answer to {envelope}"
            message = bridged_peer.recv()
            if message.get("correlation_id") == envelope["id"]:
                assert message["kind"] in ("system/error", "mcp/response:" + kind.removeprefix("mcp/request:")), message
                if message["kind"] != "system/error":
                    body = message["payload"]
                    assert body["jsonrpc"] == "2.0" and ("result" in body or "error" in body), message
                break
    assert isinstance(bridged_peer.probe(), list)


def test_mcpx_oversize_envelope_is_a_system_error(authed: RunningGateway) -> None:
    peer = McpxPeer(authed, "big", {"authorization": f"Bearer {ALICE}"})
    try:
        for frame in ("x" * (ENVELOPE_LIMIT + 1), json.dumps(peer.envelope(payload={"t": "z" * ENVELOPE_LIMIT}))):
            peer.ws.send(frame)
            error = peer.recv()
            assert error["kind"] == "system/error" and error["payload"]["error"] == "envelope_too_large", error
        assert peer.probe() == []
    finally:
        peer.close()


MCPX_QUERIES = [
    "/ws",
    "/ws?topic=",
    "/ws?topic=%00",
    "/ws?topic=" + "t" * 500,
    "/ws?topic=a&mode=loud",
    "/ws?topic=a&mode=",
    "/ws?topic=%ff%fe",
    "/ws?topic=a&topic=b&token=&token=x",
    "/ws?topic=..%2F..",
]


@pytest.mark.parametrize("path", MCPX_QUERIES)
def test_mcpx_refused_joins_close_with_1008(plain: RunningGateway, path: str) -> None:
    with connect(plain.ws(path), open_timeout=STEP_S, close_timeout=2, proxy=None) as ws:
        try:
            message = json.loads(ws.recv(timeout=STEP_S))
        except ConnectionClosed as closed:
            assert closed.rcvd is not None and closed.rcvd.code in (1008, 1013), closed
            return
        # A name the gateway accepts is a real join: the first frame is the welcome.
        assert message["kind"] == "system/welcome", (path, message)
