"""Robustness toward backends: crashes, hangs, dead URLs, shutdown and noisy stdout.

Each test runs a real gateway process in front of a real backend process (tests/e2e/backends/crashy.py,
a plain-Python stdio MCP server that can die, hang, flood and misbehave on request).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import signal
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support import (
    JSON_HEADERS as BASE_HEADERS,
    LEGACY_VERSION as VERSION,
    RunningGateway,
    crashy_backend as crashy,
    free_port,
    initialize_request,
    run_gateway,
)

pytestmark = pytest.mark.timeout(60)


BACKEND_UNAVAILABLE = -32090
BACKEND_TIMEOUT = -32091


# ---------------------------------------------------------------------------------------------- helpers


class Client:
    """A minimal Streamable HTTP client over httpx: one session, JSON or SSE answers."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.http = httpx.Client(timeout=httpx.Timeout(15.0))
        self._ids = iter(range(1, 1_000_000))
        response = self.http.post(
            url,
            headers=BASE_HEADERS,
            json=initialize_request(0, client="robust"),
        )
        assert response.status_code == 200, response.text
        self.session_id = response.headers["mcp-session-id"]
        note = self.http.post(url, headers=self.headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
        assert note.status_code == 202

    @property
    def headers(self) -> dict[str, str]:
        return {**BASE_HEADERS, "mcp-session-id": self.session_id, "mcp-protocol-version": VERSION}

    def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        rpc_id = next(self._ids)
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": rpc_id, "method": method}
        if params is not None:
            message["params"] = params
        with self.http.stream("POST", self.url, headers=self.headers, json=message) as response:
            assert response.status_code == 200, response.read()
            if response.headers["content-type"].startswith("application/json"):
                answer = json.loads(response.read())
            else:
                answer = _response_from_sse(response, rpc_id)
        assert answer["id"] == rpc_id
        return answer

    def call_tool(self, name: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
        return self.request("tools/call", {"name": name, "arguments": arguments or {}})

    def close(self) -> None:
        self.http.close()


def _response_from_sse(response: httpx.Response, rpc_id: int) -> dict[str, Any]:
    buffer = ""
    for text in response.iter_text():
        buffer += text.replace("\r\n", "\n")
        while "\n\n" in buffer:
            block, buffer = buffer.split("\n\n", 1)
            data = "\n".join(line[5:].lstrip() for line in block.split("\n") if line.startswith("data:"))
            if data:
                message = json.loads(data)
                if message.get("id") == rpc_id and "method" not in message:
                    return message
    raise AssertionError("the stream ended without the response")


@pytest.fixture
def clients() -> Iterator[Callable[[str], Client]]:
    made: list[Client] = []

    def make(url: str) -> Client:
        c = Client(url)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


def readyz(gw: RunningGateway) -> httpx.Response:
    return httpx.get(f"{gw.url}/readyz", timeout=5)


def wait_for(predicate: Callable[[], bool], timeout_s: float, interval_s: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval_s)
    return predicate()


def metric(gw: RunningGateway, name: str, labels: str) -> float:
    text = httpx.get(f"{gw.url}/metrics", timeout=5).text
    for line in text.splitlines():
        if line.startswith(f"{name}{{{labels}}} "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def text_of(answer: dict[str, Any]) -> str:
    assert "result" in answer, answer
    return str(answer["result"]["content"][0]["text"])


def process_gone(pid: int) -> bool:
    """True once the pid is gone or a zombie (an orphaned zombie may wait for a reaper we do not control)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def read_pid(path: Path, timeout_s: float = 10.0) -> int:
    assert wait_for(lambda: path.exists() and path.read_text().strip().isdigit(), timeout_s), f"no pid in {path}"
    return int(path.read_text().strip())


def received(log_file: Path) -> list[dict[str, Any]]:
    if not log_file.exists():
        return []
    return [json.loads(line) for line in log_file.read_text().splitlines() if line.strip()]


# ---------------------------------------------------------------------------------------------- crash


def test_backend_crash_mid_call_fails_the_call_fast_then_recovers(
    tmp_path: Path, clients: Callable[[str], Client]
) -> None:
    config = {
        "backends": {"crashy": crashy(required=True, restart={"initial_backoff_s": 1.0, "max_backoff_s": 2.0})},
    }
    with run_gateway(config) as gw:
        client = clients(gw.mcp)
        first_pid = text_of(client.call_tool("ok")).rsplit(" ", 1)[1]
        assert readyz(gw).status_code == 200

        started = time.monotonic()
        answer = client.call_tool("die")
        elapsed = time.monotonic() - started
        assert elapsed < 2.0, f"the in-flight call took {elapsed:.2f}s to fail"
        assert "result" not in answer
        assert answer["error"]["code"] == BACKEND_UNAVAILABLE, answer
        assert "crashy" in answer["error"]["message"]

        # Required and down: not ready, and the reason is shown.
        not_ready = readyz(gw)
        assert not_ready.status_code == 503, not_ready.text
        details = not_ready.json()["backends"]["crashy"]
        assert details["state"] != "ready"
        assert "exit" in (details["error"] or ""), details

        # Restarted after the backoff: ready again, and calls work on the same client session.
        assert wait_for(lambda: readyz(gw).status_code == 200, 15), readyz(gw).text
        second_pid = text_of(client.call_tool("ok")).rsplit(" ", 1)[1]
        assert second_pid != first_pid, "a new process answers"
        assert metric(gw, "switchboard_backend_restarts_total", 'backend="crashy"') >= 1
        assert metric(gw, "switchboard_backend_up", 'backend="crashy"') == 1
        assert "backend crashy down" in gw.log()


def test_backend_crash_fails_every_inflight_call_of_every_client(
    tmp_path: Path, clients: Callable[[str], Client]
) -> None:
    """Calls that were merely waiting (hang) on the crashing backend fail too, not only the one that crashed it."""
    config = {"backends": {"crashy": crashy(restart={"initial_backoff_s": 0.2})}}
    with run_gateway(config) as gw:
        waiting = clients(gw.mcp)
        killer = clients(gw.mcp)
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
            hung = pool.submit(waiting.call_tool, "hang")
            time.sleep(0.3)
            started = time.monotonic()
            assert killer.call_tool("die")["error"]["code"] == BACKEND_UNAVAILABLE
            answer = hung.result(timeout=5)
            assert time.monotonic() - started < 2.0
        assert answer["error"]["code"] == BACKEND_UNAVAILABLE, answer
        assert wait_for(lambda: "result" in waiting.call_tool("ok"), 10)


# ---------------------------------------------------------------------------------------------- hang


def test_backend_that_never_answers_times_out_and_is_told_to_cancel(
    tmp_path: Path, clients: Callable[[str], Client]
) -> None:
    log_file = tmp_path / "received.jsonl"
    config = {"backends": {"crashy": crashy(timeout_s=1, env={"CRASHY_METHOD_LOG": str(log_file)})}}
    with run_gateway(config) as gw:
        client = clients(gw.mcp)
        started = time.monotonic()
        answer = client.call_tool("hang")
        elapsed = time.monotonic() - started
        assert 0.9 <= elapsed < 3.0, elapsed
        assert answer["error"]["code"] == BACKEND_TIMEOUT, answer
        assert "crashy" in answer["error"]["message"]

        hang_calls = [m for m in received(log_file) if m["method"] == "tools/call" and m["params"]["name"] == "hang"]
        assert len(hang_calls) == 1
        upstream_id = hang_calls[0]["id"]

        def cancelled() -> list[dict[str, Any]]:
            return [m for m in received(log_file) if m["method"] == "notifications/cancelled"]

        assert wait_for(lambda: bool(cancelled()), 3), received(log_file)
        assert cancelled()[0]["params"]["requestId"] == upstream_id
        # The backend is still healthy for others.
        assert text_of(client.call_tool("ok")).startswith("ok")


def _hang_call_in_background(client: Client, pool: Any, log_file: Path, rpc_id: str) -> tuple[Any, Any]:
    """Starts tools/call hang on a raw POST in a thread; returns (future of the raw answer, upstream id)."""
    message = {"jsonrpc": "2.0", "id": rpc_id, "method": "tools/call", "params": {"name": "hang", "arguments": {}}}

    def post() -> tuple[int, bytes]:
        with httpx.Client(timeout=httpx.Timeout(30.0)) as http:
            response = http.post(client.url, headers=client.headers, json=message)
            return response.status_code, response.content

    future = pool.submit(post)

    def hang_calls() -> list[dict[str, Any]]:
        return [m for m in received(log_file) if m["method"] == "tools/call" and m["params"]["name"] == "hang"]

    assert wait_for(lambda: bool(hang_calls()), 5), "the backend never received the call"
    return future, hang_calls()[-1]["id"]


def _cancelled_ids(log_file: Path) -> list[Any]:
    return [m["params"]["requestId"] for m in received(log_file) if m["method"] == "notifications/cancelled"]


@contextlib.contextmanager
def _a_hanging_call(
    tmp_path: Path, clients: Callable[[str], Client], rpc_id: str
) -> Iterator[tuple[RunningGateway, Client, Callable[[], None]]]:
    """A gateway and a client whose tools/call `rpc_id` hangs at the backend. Yields (gateway, client, ended):
    `ended()` asserts that the backend was told to cancel it and that the client's POST got its answer."""
    log_file = tmp_path / "received.jsonl"
    config = {"backends": {"crashy": crashy(timeout_s=30, env={"CRASHY_METHOD_LOG": str(log_file)})}}
    with run_gateway(config) as gw, concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        client = clients(gw.mcp)
        future, upstream_id = _hang_call_in_background(client, pool, log_file, rpc_id)

        def ended() -> None:
            assert wait_for(lambda: upstream_id in _cancelled_ids(log_file), 3), received(log_file)
            status, _body = future.result(timeout=3)  # the client's POST is not left hanging
            assert status == 200

        yield gw, client, ended


def test_client_cancel_reaches_the_backend_and_ends_the_call(tmp_path: Path, clients: Callable[[str], Client]) -> None:
    with _a_hanging_call(tmp_path, clients, "to-cancel") as (_gw, client, ended):
        note = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "to-cancel"}}
        assert client.http.post(client.url, headers=client.headers, json=note).status_code == 202
        ended()
        assert text_of(client.call_tool("ok")).startswith("ok")


def test_deleting_a_session_cancels_its_calls_at_the_backend(tmp_path: Path, clients: Callable[[str], Client]) -> None:
    with _a_hanging_call(tmp_path, clients, "doomed") as (gw, client, ended):
        assert client.http.delete(client.url, headers=client.headers).status_code in (200, 204)
        ended()
        # Another client is unaffected.
        assert text_of(clients(gw.mcp).call_tool("ok")).startswith("ok")


# ---------------------------------------------------------------------------------------------- dead URL


@pytest.fixture(scope="module")
def dead_gw() -> Iterator[RunningGateway]:
    dead_url = f"http://127.0.0.1:{free_port()}/mcp"  # nothing listens there
    config = {
        "backends": {
            "dead": {"transport": "http", "url": dead_url, "required": True, "connect_timeout_s": 2},
            "demo": {"transport": "builtin"},
        }
    }
    with run_gateway(config, wait_ready=False) as gw:
        assert wait_for(lambda: readyz(gw).json()["backends"]["dead"]["state"] == "down", 10), readyz(gw).text
        yield gw


def test_dead_http_backend_is_not_ready_and_hidden_from_lists(
    dead_gw: RunningGateway, clients: Callable[[str], Client]
) -> None:
    response = readyz(dead_gw)
    assert response.status_code == 503
    details = response.json()
    assert details["ready"] is False
    assert details["backends"]["dead"]["error"], details
    assert details["backends"]["demo"]["state"] == "ready"

    client = clients(dead_gw.mcp)
    names = {t["name"] for t in client.request("tools/list")["result"]["tools"]}
    assert names, "the live backend's tools are listed"
    assert all(n.startswith("demo__") for n in names), names
    assert {"demo__echo", "demo__add"} <= names
    assert text_of(client.call_tool("demo__echo", {"text": "alive"})) == "alive"


@pytest.fixture(scope="module")
def dead_call(dead_gw: RunningGateway) -> tuple[float, dict[str, Any]]:
    """One call to a tool of the dead backend: (seconds it took, the answer). Made once, it is slow (see below)."""
    client = Client(dead_gw.mcp)
    try:
        started = time.monotonic()
        answer = client.call_tool("dead__echo", {"text": "x"})
        return time.monotonic() - started, answer
    finally:
        client.close()


def test_calls_to_a_dead_backend_fail_with_its_name(
    dead_gw: RunningGateway, dead_call: tuple[float, dict[str, Any]], clients: Callable[[str], Client]
) -> None:
    _elapsed, answer = dead_call
    assert "result" not in answer, answer
    assert answer["error"]["code"] == BACKEND_UNAVAILABLE, answer
    assert "backend dead" in answer["error"]["message"], answer
    # The other backend is unaffected.
    assert text_of(clients(dead_gw.mcp).call_tool("demo__add", {"a": 2, "b": 3})) == "5"


def test_calls_to_a_dead_backend_fail_fast(dead_call: tuple[float, dict[str, Any]]) -> None:
    elapsed, answer = dead_call
    assert answer["error"]["code"] == BACKEND_UNAVAILABLE
    assert elapsed < 1.0, f"a call to a backend known to be down took {elapsed:.2f}s to fail"


@pytest.fixture(scope="module")
def mute_gw() -> Iterator[tuple[RunningGateway, socket.socket]]:
    """A gateway whose 'mute' backend accepts TCP connections and never answers (a hung server)."""
    mute = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    mute.bind(("127.0.0.1", 0))
    mute.listen(64)  # connections complete in the kernel backlog; nobody ever reads them
    config = {
        "backends": {
            "mute": {
                "transport": "http",
                "url": f"http://127.0.0.1:{mute.getsockname()[1]}/mcp",
                "connect_timeout_s": 2,
                "restart": {"initial_backoff_s": 0.05, "max_backoff_s": 0.05},
            },
            "demo": {"transport": "builtin", "required": True},
        }
    }
    try:
        with run_gateway(config) as gw:
            assert wait_for(lambda: readyz(gw).json()["backends"]["mute"]["error"] is not None, 10), readyz(gw).text
            yield gw, mute
    finally:
        mute.close()


def test_hung_backend_does_not_stall_initialize_after_its_first_failure(
    mute_gw: tuple[RunningGateway, socket.socket],
) -> None:
    gw, _mute = mute_gw
    started = time.monotonic()
    client = Client(gw.mcp)
    try:
        names = {t["name"] for t in client.request("tools/list")["result"]["tools"]}
    finally:
        client.close()
    elapsed = time.monotonic() - started
    assert "demo__echo" in names
    assert elapsed < 1.0, f"initialize + tools/list took {elapsed:.2f}s while a backend known to be hung reconnects"


@pytest.fixture(scope="module")
def oversized_message_call() -> Iterator[tuple[float, dict[str, Any], RunningGateway]]:
    """A backend writes one stdout line over limits.max_message_bytes during a call: (seconds, answer, gateway)."""
    config = {
        "backends": {"crashy": crashy(required=True, restart={"initial_backoff_s": 0.2})},
        "limits": {"max_message_bytes": 2048},
    }
    with run_gateway(config) as gw:
        client = Client(gw.mcp)
        try:
            params = {"name": "flood", "arguments": {"count": 1, "size": 5000}, "_meta": {"progressToken": 1}}
            started = time.monotonic()
            answer = client.request("tools/call", params)
            yield time.monotonic() - started, answer, gw
        finally:
            client.close()


def test_backend_message_over_the_limit_fails_the_call_and_restarts_the_backend(
    oversized_message_call: tuple[float, dict[str, Any], RunningGateway], clients: Callable[[str], Client]
) -> None:
    _elapsed, answer, gw = oversized_message_call
    assert answer["error"]["code"] == BACKEND_UNAVAILABLE, answer
    assert "2048" in answer["error"]["message"]
    client = clients(gw.mcp)
    assert wait_for(lambda: readyz(gw).status_code == 200, 10)
    assert text_of(client.call_tool("ok")).startswith("ok")


def test_backend_message_over_the_limit_fails_the_call_promptly(
    oversized_message_call: tuple[float, dict[str, Any], RunningGateway],
) -> None:
    elapsed, answer, _gw = oversized_message_call
    assert answer["error"]["code"] == BACKEND_UNAVAILABLE
    assert elapsed < 2.0, f"the call took {elapsed:.2f}s to fail"


# ---------------------------------------------------------------------------------------------- shutdown


@pytest.mark.parametrize("stubborn", [False, True], ids=["polite", "ignores-sigterm-and-eof"])
def test_stdio_backend_and_its_children_die_with_the_gateway(tmp_path: Path, stubborn: bool) -> None:
    pid_file = tmp_path / "backend.pid"
    grandchild_file = tmp_path / "grandchild.pid"
    env = {"CRASHY_PID_FILE": str(pid_file), "CRASHY_GRANDCHILD_PID_FILE": str(grandchild_file)}
    if stubborn:
        env["CRASHY_STUBBORN"] = "1"
    config = {"backends": {"crashy": crashy(required=True, env=env)}}
    with run_gateway(config) as gw:
        backend_pid = read_pid(pid_file)
        grandchild_pid = read_pid(grandchild_file)
        assert not process_gone(backend_pid) and not process_gone(grandchild_pid)
        with httpx.Client(timeout=5) as http:
            assert http.get(f"{gw.url}/readyz").status_code == 200
        gw.proc.send_signal(signal.SIGTERM)
        started = time.monotonic()
        assert wait_for(lambda: process_gone(backend_pid), 10), f"backend pid {backend_pid} outlived the gateway"
        assert wait_for(lambda: process_gone(grandchild_pid), 10 - (time.monotonic() - started)), (
            f"the backend's child {grandchild_pid} outlived the gateway"
        )
        gw.proc.wait(timeout=max(0.1, 10 - (time.monotonic() - started)))
        assert gw.proc.returncode is not None


# ---------------------------------------------------------------------------------------------- noise


def test_non_json_lines_on_backend_stdout_are_skipped(tmp_path: Path, clients: Callable[[str], Client]) -> None:
    config = {"backends": {"crashy": crashy(required=True, env={"CRASHY_JUNK": "1"})}}
    with run_gateway(config) as gw:
        client = clients(gw.mcp)
        names = {t["name"] for t in client.request("tools/list")["result"]["tools"]}
        assert {"ok", "die", "hang"} <= names
        for _ in range(3):
            assert text_of(client.call_tool("ok")).startswith("ok")
        assert "non-JSON line" in gw.log_with("non-JSON line")
        assert readyz(gw).status_code == 200
