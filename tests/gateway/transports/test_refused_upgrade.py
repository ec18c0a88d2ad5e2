"""An upgrade the gateway does not take (h2c) is served as HTTP/1.1, its body included (refused_upgrade.py).

Real clients first: ``curl --http2`` and the JDK's ``HttpClient`` (its default version is HTTP/2, so on a
plain-HTTP URL every request offers ``Upgrade: h2c``), then the byte patterns they and others send, against
a real ``switchboard run``.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.transports.refused_upgrade import AfterRefusedUpgrade, body_framing, framing_head
from tests.gateway.transports.test_lean_cycle import read_response
from tests.support import RunningGateway, initialize_request, run_gateway

pytestmark = pytest.mark.timeout(120)

_H2C = ("Connection: Upgrade, HTTP2-Settings", "Upgrade: h2c", "HTTP2-Settings: AAMAAABkAAQAAP__")
_MCP = ("Content-Type: application/json", "Accept: application/json, text/event-stream")
_INITIALIZE = json.dumps(initialize_request(1)).encode()


@pytest.fixture(scope="module")
def gateway() -> Iterator[RunningGateway]:
    with run_gateway({"backends": {}}) as running:
        yield running


def _port(gw: RunningGateway) -> int:
    return int(gw.url.rsplit(":", 1)[1])


def _head(method: str, path: str, *headers: str) -> bytes:
    return ("\r\n".join([f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", *headers]) + "\r\n\r\n").encode()


def _upgrade_post(body: bytes) -> bytes:
    return _head("POST", "/mcp", *_MCP, *_H2C, f"Content-Length: {len(body)}") + body


async def _exchange(gw: RunningGateway, *writes: bytes, answers: int = 1) -> list[tuple[int, dict[str, str], bytes]]:
    """Send ``writes`` (each its own write, a moment apart), then read ``answers`` responses."""
    reader, writer = await asyncio.open_connection("127.0.0.1", _port(gw))
    try:
        for piece in writes:
            writer.write(piece)
            await writer.drain()
            await asyncio.sleep(0.05)
        return [await read_response(reader) for _ in range(answers)]
    finally:
        writer.close()


def _initialized(answer: tuple[int, dict[str, str], bytes]) -> None:
    status, headers, body = answer
    assert status == 200, body
    assert headers.get("mcp-session-id")
    assert json.loads(body)["result"]["protocolVersion"]


# ---- the pieces ----------------------------------------------------------------------------------


def test_the_framing_is_the_requests_own() -> None:
    assert body_framing([(b"host", b"x"), (b"content-length", b"12")]) == b"content-length: 12"
    assert body_framing([(b"transfer-encoding", b"chunked")]) == b"transfer-encoding: chunked"
    assert body_framing([(b"content-length", b"0")]) is None
    assert body_framing([(b"host", b"x")]) is None
    assert framing_head(b"content-length: 3") == b"POST / HTTP/1.1\r\ncontent-length: 3\r\n\r\n"


class _Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[bytes, ...]]] = []

    def on_message_begin(self) -> None:
        self.calls.append(("begin", ()))

    def on_url(self, url: bytes) -> None:
        self.calls.append(("url", (url,)))

    def on_header(self, name: bytes, value: bytes) -> None:
        self.calls.append(("header", (name, value)))

    def on_headers_complete(self) -> None:
        self.calls.append(("headers", ()))

    def on_body(self, body: bytes) -> None:
        self.calls.append(("body", (body,)))

    def on_message_complete(self) -> None:
        self.calls.append(("end", ()))


def test_the_made_up_head_is_dropped_and_everything_after_it_handed_on() -> None:
    recorder = _Recorder()
    target = AfterRefusedUpgrade(recorder, replaying=True)
    target.on_message_begin()
    target.on_url(b"/")
    target.on_header(b"content-length", b"2")
    target.on_headers_complete()
    target.on_body(b"{}")
    target.on_message_complete()
    assert recorder.calls == [("body", (b"{}",)), ("end", ())]
    target.on_message_begin()  # the next request's
    target.on_url(b"/mcp")
    target.on_headers_complete()
    assert recorder.calls[2:] == [("begin", ()), ("url", (b"/mcp",)), ("headers", ())]


# ---- real clients --------------------------------------------------------------------------------


def _curl_speaks_http2() -> bool:
    curl = shutil.which("curl")
    if curl is None:
        return False
    return "HTTP2" in subprocess.run([curl, "-V"], capture_output=True, text=True, timeout=10).stdout


@pytest.mark.skipif(not _curl_speaks_http2(), reason="no curl with HTTP/2 here")
def test_curl_http2_post_is_served(gateway: RunningGateway) -> None:
    """``curl --http2`` on a plain-HTTP URL offers h2c on its POST; the gateway answers it as HTTP/1.1."""
    headers = [x for h in _MCP for x in ("-H", h)]
    run = subprocess.run(
        ["curl", "-sS", "--http2", "-D", "-", *headers, "--data-binary", _INITIALIZE.decode(), f"{gateway.url}/mcp"],
        capture_output=True,
        timeout=30,
    )
    assert run.returncode == 0, run.stderr
    head, _, body = run.stdout.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), run.stdout
    assert json.loads(body)["result"]["protocolVersion"]


_JAVA_CLIENT = textwrap.dedent(
    """
    import java.net.URI;
    import java.net.http.HttpClient;
    import java.net.http.HttpRequest;
    import java.net.http.HttpResponse;
    import java.time.Duration;

    public class Client {
        public static void main(String[] args) throws Exception {
            HttpClient client = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(10)).build();
            for (int i = 0; i < 2; i++) {  // the first offers h2c on a new connection, the second reuses it
                HttpRequest request = HttpRequest.newBuilder(URI.create(args[0]))
                    .timeout(Duration.ofSeconds(20))
                    .header("Content-Type", "application/json")
                    .header("Accept", "application/json, text/event-stream")
                    .POST(HttpRequest.BodyPublishers.ofString(args[1]))
                    .build();
                HttpResponse<String> response = client.send(request, HttpResponse.BodyHandlers.ofString());
                System.out.println(response.version() + " " + response.statusCode() + " " + response.body());
            }
        }
    }
    """
)


@pytest.mark.skipif(shutil.which("java") is None, reason="no JDK here")
def test_a_jdk_http_client_is_served(gateway: RunningGateway, tmp_path: Path) -> None:
    """The JDK's HttpClient, as built by default (HTTP/2 preferred): two initialize POSTs, both answered."""
    source = tmp_path / "Client.java"
    source.write_text(_JAVA_CLIENT)
    run = subprocess.run(
        ["java", str(source), f"{gateway.url}/mcp", _INITIALIZE.decode()],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert len(lines) == 2, run.stdout
    for line in lines:
        version, status, body = line.split(" ", 2)
        assert (version, status) == ("HTTP_1_1", "200"), line
        assert json.loads(body)["result"]["protocolVersion"]


# ---- the byte patterns ---------------------------------------------------------------------------


async def test_a_post_offering_h2c_is_served_with_its_body(gateway: RunningGateway) -> None:
    [answer] = await _exchange(gateway, _upgrade_post(_INITIALIZE))
    _initialized(answer)


async def test_a_body_in_a_later_write_is_the_requests(gateway: RunningGateway) -> None:
    """Head and body as separate writes (Ktor's pattern): the body was parsed as a request of its own (400)."""
    whole = _upgrade_post(_INITIALIZE)
    split = whole.index(b"\r\n\r\n") + 4
    [answer] = await _exchange(gateway, whole[:split], whole[split : split + 10], whole[split + 10 :])
    _initialized(answer)


async def test_a_chunked_body_in_pieces(gateway: RunningGateway) -> None:
    head = _head("POST", "/mcp", *_MCP, *_H2C, "Transfer-Encoding: chunked")
    first, second = _INITIALIZE[:20], _INITIALIZE[20:]
    chunks = b"%x\r\n%s\r\n" % (len(first), first), b"%x\r\n%s\r\n0\r\n\r\n" % (len(second), second)
    [answer] = await _exchange(gateway, head + chunks[0], chunks[1])
    _initialized(answer)


async def test_a_request_pipelined_behind_it_is_answered(gateway: RunningGateway) -> None:
    plain = _head("POST", "/mcp", *_MCP, f"Content-Length: {len(_INITIALIZE)}") + _INITIALIZE
    answers = await _exchange(gateway, _upgrade_post(_INITIALIZE) + plain, answers=2)
    for answer in answers:
        _initialized(answer)


async def test_the_connection_serves_on_after_it(gateway: RunningGateway) -> None:
    """The parser that read the body parses the connection's next requests: a lean POST, then another upgrade."""
    [first] = await _exchange(gateway, _upgrade_post(_INITIALIZE))
    session = first[1]["mcp-session-id"]
    ping = json.dumps({"jsonrpc": "2.0", "id": 2, "method": "ping"}).encode()
    on_session = (*_MCP, f"Mcp-Session-Id: {session}", "MCP-Protocol-Version: 2025-11-25")
    plain = _head("POST", "/mcp", *on_session, f"Content-Length: {len(ping)}") + ping
    again = _head("POST", "/mcp", *on_session, *_H2C, f"Content-Length: {len(ping)}") + ping
    answers = await _exchange(gateway, _upgrade_post(_INITIALIZE), plain, again, answers=3)
    _initialized(answers[0])
    assert [json.loads(body).get("result") for _status, _headers, body in answers[1:]] == [{}, {}]


async def test_many_pipelined_upgrades_in_one_write(gateway: RunningGateway) -> None:
    """Each one replaces the parser in a loop, not a recursion: 1,500 in one write are all answered."""
    count = 1500
    request = _head("GET", "/healthz", *_H2C)
    answers = await _exchange(gateway, request * count, answers=count)
    assert {status for status, _headers, _body in answers} == {200}


async def test_a_malformed_body_after_it_gets_a_400(gateway: RunningGateway) -> None:
    head = _head("POST", "/mcp", *_MCP, *_H2C, "Transfer-Encoding: chunked")
    [answer] = await _exchange(gateway, head + b"zz\r\n{}\r\n0\r\n\r\n")
    assert answer[0] == 400
    assert json.loads(answer[2])["error"]["message"].startswith("Request could not be parsed")
