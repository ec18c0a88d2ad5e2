"""Legacy SSE: ``GET /sse`` and ``POST /messages``."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest
from hypothesis import given, strategies as st

from tests.security.fuzz.clients import SseSession
from tests.security.fuzz.support import (
    JSON_HEADERS,
    NASTY_BODIES,
    VERSION,
    assert_door_answer,
    echo_call,
    exchange,
    first_sse_event,
    fuzz,
    initialize,
    rpc_messages,
)
from tests.support import RunningGateway

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def sse(plain: RunningGateway) -> Iterator[SseSession]:
    session = SseSession(plain)
    try:
        yield session
    finally:
        session.close()


def test_sse_stream_opens_and_closes_repeatedly(plain: RunningGateway, client: httpx.Client) -> None:
    for headers in ({"accept": "text/event-stream"}, {}, {"accept": "*/*", "last-event-id": "garbage"}):
        status, first = first_sse_event(client, f"{plain.url}/sse", headers)
        assert status == 200 and b"event: endpoint" in first
    for method in ("POST", "PUT", "DELETE"):
        assert_door_answer(exchange(client, method, f"{plain.url}/sse", JSON_HEADERS, b"{}"), method)
    status, _ = first_sse_event(client, f"{plain.url}/sse", {"accept": "text/html"})
    assert status == 406


SESSION_QUERIES = [
    "",
    "?",
    "?session_id=",
    "?session_id=nope",
    "?sessionId=nope",
    "?session_id=%ff%fe%00",
    "?session_id=%zz",
    "?session_id=a&session_id=b",
    "?session_id=" + "x" * 10_000,
    "?session_id[]=x",
    "?%00=%00",
]


@pytest.mark.parametrize("query", SESSION_QUERIES)
def test_messages_with_missing_or_unknown_session(plain: RunningGateway, client: httpx.Client, query: str) -> None:
    for path in ("/messages", "/messages/", "/message"):
        for body in (json.dumps(echo_call(1, "x")).encode(), b"\xff", b""):
            answer = exchange(client, "POST", f"{plain.url}{path}{query}", JSON_HEADERS, body)
            assert answer.status in (400, 404), (path, query, answer.status)
            assert_door_answer(answer, (path, query))
        assert_door_answer(exchange(client, "GET", f"{plain.url}{path}{query}"), (path, query))


@pytest.mark.parametrize("name", list(NASTY_BODIES))
def test_messages_nasty_bodies_on_a_live_session(sse: SseSession, client: httpx.Client, name: str) -> None:
    answer = exchange(client, "POST", sse.endpoint, JSON_HEADERS, NASTY_BODIES[name])
    assert answer.status < 500, (name, answer.status, answer.raw[:300])
    if answer.status >= 400:
        assert_door_answer(answer, name)
    # The stream still carries the answer to a real request.
    exchange(
        client,
        "POST",
        sse.endpoint,
        JSON_HEADERS,
        json.dumps({"jsonrpc": "2.0", "id": "alive", "method": "ping"}).encode(),
    )
    assert sse.until(lambda m: m.get("id") == "alive") == {"jsonrpc": "2.0", "id": "alive", "result": {}}


@fuzz(80)
@given(body=st.binary(max_size=300) | rpc_messages().map(lambda m: json.dumps(m).encode()))
def test_messages_fuzzed_bodies_on_a_live_session(sse: SseSession, client: httpx.Client, body: bytes) -> None:
    answer = exchange(client, "POST", sse.endpoint, {"content-type": "application/json"}, body)
    assert answer.status < 500, (body[:200], answer.status, answer.raw[:300])
    if answer.status >= 400:
        assert_door_answer(answer, body)


def test_messages_session_survives_and_answers_echo(sse: SseSession, client: httpx.Client) -> None:
    for body in (b"{", b"[]", b"\xff", json.dumps(initialize("init")).encode()):
        exchange(client, "POST", sse.endpoint, JSON_HEADERS, body)
    assert sse.until(lambda m: m.get("id") == "init")["result"]["protocolVersion"] == VERSION
    exchange(
        client,
        "POST",
        sse.endpoint,
        JSON_HEADERS,
        json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode(),
    )
    exchange(client, "POST", sse.endpoint, JSON_HEADERS, json.dumps(echo_call("e", "over sse")).encode())
    assert sse.until(lambda m: m.get("id") == "e")["result"]["content"] == [{"type": "text", "text": "over sse"}]
