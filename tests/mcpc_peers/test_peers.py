"""The MCPC peers against each other, without the gateway (issue 13's proof starts here).

- the real library's client (``client.py``) against the real library's server (``server.py``) and
  against our older server (``old_server.py``: the 0.2.6 client only knows ``_mcpc_init``, so it
  falls back to plain calls, where the whole run comes back in the result);
- a raw JSON-lines driver using ``adapters.mcpc`` against both servers: the handshake names of
  each version, both metadata forms, and the library's callback lines compared byte for byte with
  what the adapter writes;
- the adapter's message text compared with the library's ``model_dump_json`` for generated messages.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from adapters import mcpc
from adapters.mcpc.message import message_from_dict
from tests.mcpc_peers.raw import RawPeer

pytestmark = pytest.mark.timeout(60)  # the first run may build .cache/peers/mcpc (the fixture has its own bound)

HERE = Path(__file__).resolve().parent
SERVER = HERE / "server.py"
CLIENT = HERE / "client.py"
OLD_SERVER = HERE / "old_server.py"


def run_client(python: Path, *args: str, timeout_s: float = 8.0) -> list[dict[str, Any]]:
    proc = subprocess.run(
        [str(python), str(CLIENT), *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    assert lines and lines[-1] == {"kind": "done"}, proc.stdout + proc.stderr[-3000:]
    return lines


def messages(lines: list[dict[str, Any]]) -> list[mcpc.McpcMessage]:
    out = [message_from_dict(line["message"]) for line in lines if line["kind"] == "mcpc"]
    assert None not in out
    return [message for message in out if message is not None]


def results(lines: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {line["tool"]: line["result"] for line in lines if line["kind"] == "result"}


def task_ids(lines: list[dict[str, Any]]) -> dict[str, str]:
    return {
        line["tool"]: line["arguments"]["mcpc_params"]["task_id"]
        for line in lines
        if line["kind"] == "call" and "mcpc_params" in line["arguments"]
    }


@pytest.mark.timeout(600)  # builds the virtualenv on a clean machine
def test_venv_imports_the_library(mcpc_python: Path) -> None:
    proc = subprocess.run(
        [
            str(mcpc_python),
            "-c",
            "import mcp, mcpc, importlib.metadata as m; print(m.version('mcp'), m.version('mcpc'))",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.stdout.split() == ["1.6.0", "0.2.6"], proc.stderr


def test_library_client_with_library_server(mcpc_python: Path) -> None:
    lines = run_client(
        mcpc_python,
        "--stdio",
        str(mcpc_python),
        str(SERVER),
        "--show-plumbing",
        "--list",
        "--call",
        "slow_task",
        '{"steps": 3, "delay_s": 0.02}',
        "--call",
        "fails",
        '{"delay_s": 0.02}',
        "--call",
        "sync_echo",
        '{"text": "hi"}',
        "--call",
        "emit_event",
        '{"event": "ping", "result": {"n": 1}}',
        "--session",
        "sess-1",
    )
    assert lines[0] == {"kind": "handshake", "supported": True, "version": "0.2.6"}
    assert "_mcpc_init" in lines[1]["tools"]
    ids = task_ids(lines)
    got = messages(lines)
    slow = [m for m in got if m.task_id == ids["slow_task"]]
    assert sorted(m.event for m in slow) == sorted(["created", "update", "update", "update", "complete"])
    assert slow[-1].event == "complete" and slow[-1].result == {"steps": 3}
    assert all(m.session_id == "sess-1" and m.tool_name == "slow_task" and m.routable for m in slow)
    failing = [m for m in got if m.task_id == ids["fails"]]
    assert failing[-1].event == "failed" and failing[-1].result == "boom"
    assert not [m for m in got if m.task_id == ids["sync_echo"]]
    assert results(lines)["sync_echo"]["content"][0]["text"] == "hi"
    events = [m for m in got if m.type == "server_event"]
    assert [(m.event, m.session_id, m.result) for m in events] == [("ping", "sess-1", {"n": 1})]
    # The created result is an ordinary result holding one MCPC message.
    created = mcpc.messages_in_result(results(lines)["slow_task"])
    assert [(m.event, m.task_id) for m in created] == [("created", ids["slow_task"])]


def test_library_client_with_old_server_falls_back(mcpc_python: Path) -> None:
    lines = run_client(
        mcpc_python,
        "--stdio",
        sys.executable,
        str(OLD_SERVER),
        "--version",
        "0.2.4",
        "--call",
        "slow_task",
        '{"steps": 2, "delay_s": 0.01}',
        "--call",
        "fails",
        '{"delay_s": 0.01}',
    )
    assert lines[0]["kind"] == "handshake" and lines[0]["supported"] is False  # 0.2.6 only tries _mcpc_init
    assert task_ids(lines) == {}  # no handshake, no metadata
    slow = mcpc.messages_in_result(results(lines)["slow_task"])
    assert [m.event for m in slow] == ["created", "update", "update", "complete"]
    assert [m.event for m in mcpc.messages_in_result(results(lines)["fails"])] == ["created", "update", "failed"]
    # the library's listener delivered every message of the fallback result
    assert [m.event for m in messages(lines)] == [
        "created",
        "update",
        "update",
        "complete",
        "created",
        "update",
        "failed",
    ]


@pytest.fixture
def library_server(mcpc_python: Path) -> Iterator[RawPeer]:
    peer = RawPeer([str(mcpc_python), str(SERVER), "--name", "lib-peer", "--show-plumbing"])
    try:
        peer.initialize()
        yield peer
    finally:
        peer.close()


def call(peer: RawPeer, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    response = peer.request("tools/call", {"name": tool, "arguments": arguments})
    assert "result" in response, response
    return dict(response["result"])


def final_seen(task_id: str) -> Any:
    def done(lines: list[str]) -> bool:
        return any(m.final and m.task_id == task_id for line in lines for m in mcpc.callback_messages(json.loads(line)))

    return done


def test_library_server_wire_is_the_adapters(library_server: RawPeer) -> None:
    listed = library_server.request("tools/list")["result"]["tools"]
    hidden = mcpc.hide(listed)
    assert {tool["name"] for tool in listed} - {tool["name"] for tool in hidden} == {"_mcpc_init"}
    assert all("mcpc_params" not in tool["inputSchema"]["properties"] for tool in hidden)
    assert all("mcpc_params" not in tool["inputSchema"].get("required", []) for tool in hidden)

    tool, arguments = mcpc.handshake_attempts("raw-tester")[0]
    reply = call(library_server, tool, arguments)
    assert mcpc.info_from_result(reply) == mcpc.McpcInfo(True, "0.2.6", "lib-peer")
    assert reply["content"][0]["text"] == mcpc.reply_text("lib-peer")

    args = mcpc.with_metadata({"steps": 2, "delay_s": 0.01}, "s-raw", "t-raw", "0.2.6")
    created_result = call(library_server, "slow_task", args)
    (created,) = mcpc.messages_in_result(created_result)
    assert (created.event, created.session_id, created.task_id) == ("created", "s-raw", "t-raw")
    assert created_result["content"][0]["text"] == created.to_json()

    call(library_server, "emit_event", mcpc.with_metadata({"event": "ev", "result": [1.5, "é"]}, "s-raw", "x"))
    raw_lines = library_server.wait_unsolicited(final_seen("t-raw"))
    callbacks = [line for line in raw_lines if mcpc.is_callback(json.loads(line))]
    assert len(callbacks) == len(raw_lines) == 4  # 2 updates, complete, the server event
    for line in callbacks:
        (message,) = mcpc.callback_messages(json.loads(line))
        assert mcpc.callback_line(message) == line  # byte for byte as the library writes it
    kinds = [mcpc.callback_messages(json.loads(line))[0] for line in callbacks]
    assert [(m.type, m.event) for m in kinds if m.task_id == "t-raw"] == [
        ("task", "update"),
        ("task", "update"),
        ("task", "complete"),
    ]
    assert [(m.event, m.result) for m in kinds if m.type == "server_event"] == [("ev", [1.5, "é"])]


@pytest.mark.parametrize("version", ["0.2.4", "0.2.2"])
def test_old_server_speaks_the_older_wire(version: str) -> None:
    peer = RawPeer([sys.executable, str(OLD_SERVER), "--version", version, "--name", "old"])
    try:
        peer.initialize()
        listed = peer.request("tools/list")["result"]["tools"]
        tool = mcpc.handshake_tool(version)
        assert tool in {t["name"] for t in listed}
        hidden = mcpc.hide(listed)
        assert tool not in {t["name"] for t in hidden}
        assert all("_metadata" not in t["inputSchema"]["properties"] for t in hidden)

        # The newest name is an unknown tool there; the version's own name answers.
        assert mcpc.info_from_result(call(peer, "_mcpc_init", mcpc.handshake_arguments("_mcpc_init", "t"))) is None
        reply = call(peer, tool, mcpc.handshake_arguments(tool, "tester"))
        assert mcpc.info_from_result(reply) == mcpc.McpcInfo(True, version, "old")

        args = mcpc.with_metadata({"steps": 2, "delay_s": 0.01}, "s-old", "t-old", version)
        assert "_metadata" in args
        (created,) = mcpc.messages_in_result(call(peer, "slow_task", args))
        assert (created.event, created.session_id, created.task_id) == ("created", "s-old", "t-old")
        lines = peer.wait_unsolicited(final_seen("t-old"))
        got = [m for line in lines for m in mcpc.callback_messages(json.loads(line))]
        assert [m.event for m in got] == ["update", "update", "complete"]
        assert all((m.session_id, m.task_id, m.tool_name) == ("s-old", "t-old", "slow_task") for m in got)
    finally:
        peer.close()


def test_old_server_without_handshake_returns_the_whole_run() -> None:
    peer = RawPeer([sys.executable, str(OLD_SERVER)])
    try:
        peer.initialize()
        result = call(peer, "fails", {"delay_s": 0.01})
        assert [m.event for m in mcpc.messages_in_result(result)] == ["created", "update", "failed"]
        assert peer.unsolicited == []
    finally:
        peer.close()


# ---- the adapter's message text against the library's model_dump_json ----------------------------

_SERIALISER = """
import json, sys
from mcpc import MCPCMessage
for line in sys.stdin:
    print(MCPCMessage(**json.loads(line)).model_dump_json(), flush=True)
"""

texts = st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=10)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | texts,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(texts, children, max_size=3),
    max_leaves=12,
)


@pytest.fixture(scope="module")
def library_serialiser(mcpc_python: Path) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(
        [str(mcpc_python), "-c", _SERIALISER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        encoding="utf-8",
        env={"PYTHONIOENCODING": "utf-8"},
    )
    yield proc
    assert proc.stdin is not None
    proc.stdin.close()
    proc.wait(timeout=5)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.builds(
        mcpc.McpcMessage,
        type=st.sampled_from(["task", "server_event"]),
        event=texts,
        session_id=st.none() | texts,
        task_id=st.none() | texts,
        tool_name=st.none() | texts,
        result=st.floats() | st.lists(st.floats(), max_size=4) | json_values,
    )
)
def test_message_text_matches_the_library(library_serialiser: subprocess.Popen[str], message: mcpc.McpcMessage) -> None:
    assert library_serialiser.stdin is not None and library_serialiser.stdout is not None
    library_serialiser.stdin.write(json.dumps(message.to_dict()) + "\n")
    library_serialiser.stdin.flush()
    assert message.to_json() == library_serialiser.stdout.readline().rstrip("\n")
