"""Who hears a task (gateway/mcpc/owners.py): a plain client's held call, and an MCPC client's
callbacks under its own ids. Sessions are real ``ClientSession`` objects; a held call's sink is the
connection's own kind of call owner (tests/gateway/upstreams/fakes.py ``Owner``).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from adapters.mcpc.callback import MCPC_CALLBACK, callback_messages
from adapters.mcpc.message import COMPLETE, CREATED, FAILED, UPDATE, McpcMessage
from adapters.mcpc.translate import task_message
from gateway.config import Limits
from gateway.federation import Namer, View
from gateway.mcpc.owners import CANCELLED, Callbacks, HeldCall
from gateway.mcpc.tasks import Task, TaskTable, new_id
from gateway.metrics import Metrics
from gateway.sessions import ClientSession
from gateway.upstreams.pending import MISSING
from policies.patterns import CapabilitySet
from policies.principal import Principal
from tests.gateway.upstreams.fakes import Owner

pytestmark = pytest.mark.timeout(30)

VIEW = View("*", ("lib",), Namer("always", "__", ("lib",)))
ALICE = Principal("alice", CapabilitySet(["*"]))


def new_task(owner: Any, table: TaskTable) -> Task:
    task = Task(
        id=new_id("sb-task-"),
        session_id=new_id("sb-session-"),
        backend="lib",
        tool="slow_task",
        exposed="lib__slow_task",
        session_key="s1",
        principal=ALICE,
        owner=owner,
    )
    return table.open(task, 60)


def table() -> TaskTable:
    return TaskTable(Metrics(), lambda task, message: True, lambda task, message: None)


def msg(task: Task, event: str, result: Any = None) -> McpcMessage:
    return task_message(event, task.session_id, task.id, task.tool, result)


def methods(owner: Owner) -> list[str]:
    return [m["method"] for m in owner.delivered]


async def test_a_held_call_with_a_token_gets_progress_and_log_lines_then_its_result() -> None:
    tasks, sink = table(), Owner("s1")
    held = HeldCall(sink, "tok-1", "lib")
    task = new_task(held, tasks)
    assert tasks.deliver("lib", msg(task, CREATED, "started"))
    assert sink.delivered == [], "created is the call's own business"
    tasks.deliver("lib", msg(task, UPDATE, {"step": 1, "of": 2}))
    tasks.deliver("lib", msg(task, UPDATE, "half way"))
    assert methods(sink) == ["notifications/progress", "notifications/message"] * 2
    first, second = sink.delivered[0]["params"], sink.delivered[2]["params"]
    assert first == {"progressToken": "tok-1", "progress": 1, "message": '{"step":1,"of":2}'}
    assert second == {"progressToken": "tok-1", "progress": 2, "message": "half way"}
    log = sink.delivered[1]["params"]
    assert log == {
        "level": "info",
        "logger": "lib",
        "data": {"mcpc": "task", "event": "update", "result": {"step": 1, "of": 2}, "tool": "lib__slow_task"},
    }
    assert not held.future.done()
    tasks.deliver("lib", msg(task, COMPLETE, {"steps": 2}))
    async with asyncio.timeout(5):
        final = await held.future
    assert isinstance(final, McpcMessage) and final.event == COMPLETE and final.result == {"steps": 2}
    assert len(sink.delivered) == 4, "the last message is the call's answer, not a notification"


@pytest.mark.parametrize("token", [MISSING, None], ids=["missing", "null"])
async def test_a_held_call_without_a_token_gets_only_log_lines(token: Any) -> None:
    tasks, sink = table(), Owner("s1")
    held = HeldCall(sink, token, "lib")
    task = new_task(held, tasks)
    for step in range(3):
        tasks.deliver("lib", msg(task, UPDATE, {"step": step}))
    assert methods(sink) == ["notifications/message"] * 3
    assert [m["params"]["data"]["result"] for m in sink.delivered] == [{"step": 0}, {"step": 1}, {"step": 2}]
    tasks.deliver("lib", msg(task, FAILED, "boom"))
    final = await held.future
    assert isinstance(final, McpcMessage) and final.event == FAILED and final.result == "boom"


async def test_a_falsy_token_is_still_a_token() -> None:
    tasks = table()
    for token in (0, ""):
        sink = Owner("s1")
        task = new_task(HeldCall(sink, token, "lib"), tasks)
        tasks.deliver("lib", msg(task, UPDATE, 1))
        assert methods(sink) == ["notifications/progress", "notifications/message"]
        assert sink.delivered[0]["params"]["progressToken"] == token


async def test_a_held_call_without_a_sink_only_waits_and_cancel_ends_the_wait_once() -> None:
    tasks = table()
    held = HeldCall(None, "tok", "lib")
    task = new_task(held, tasks)
    tasks.deliver("lib", msg(task, UPDATE, "ignored"))
    assert not held.future.done()
    held.cancel()
    assert await held.future == CANCELLED
    held.cancel()
    tasks.deliver("lib", msg(task, COMPLETE, "too late"))  # must not raise on a done future
    assert held.future.result() == CANCELLED


async def test_the_first_final_message_settles_a_held_call() -> None:
    sink = Owner("s1")
    held = HeldCall(sink, MISSING, "lib")
    tasks = table()
    task = new_task(held, tasks)
    held.on_message(task, msg(task, COMPLETE, "one"))
    held.on_message(task, msg(task, FAILED, "two"))
    final = held.future.result()
    assert isinstance(final, McpcMessage) and final.result == "one"
    assert sink.delivered == []


def mcpc_session() -> ClientSession:
    session = ClientSession("session-0001-abcd", "http", VIEW, ALICE, Limits())
    session.initialized = True
    return session


async def pushed(session: ClientSession, after: int = 0) -> list[dict[str, Any]]:
    async with asyncio.timeout(5):
        return [message for _, message in await session.standalone.read(after)]


async def test_callbacks_name_the_clients_own_ids_and_tool() -> None:
    session, tasks = mcpc_session(), table()
    owner = Callbacks(session, "client-session", "client-task", "lib__slow_task")
    task = new_task(owner, tasks)
    tasks.deliver("lib", msg(task, UPDATE, {"step": 1}))
    tasks.deliver("lib", msg(task, COMPLETE, {"steps": 1}))
    envelopes = await pushed(session)
    assert [e["id"] for e in envelopes] == [MCPC_CALLBACK, MCPC_CALLBACK]
    assert all(e["jsonrpc"] == "2.0" and e["result"]["isError"] is False for e in envelopes)
    [update], [complete] = (callback_messages(e) for e in envelopes)
    for message in (update, complete):
        assert (message.session_id, message.task_id, message.tool_name) == (
            "client-session",
            "client-task",
            "lib__slow_task",
        )
    assert (update.event, update.result) == (UPDATE, {"step": 1})
    assert (complete.event, complete.result) == (COMPLETE, {"steps": 1})
    text = json.dumps(envelopes)
    assert task.id not in text and task.session_id not in text, "the gateway's ids never reach the client"


async def test_callbacks_keep_a_null_session_id_and_stop_when_the_session_closes() -> None:
    session, tasks = mcpc_session(), table()
    owner = Callbacks(session, None, "t-1", "slow_task")
    task = new_task(owner, tasks)
    message = msg(task, UPDATE, "x")
    assert owner.as_client(message).session_id is None
    assert message.session_id == task.session_id, "as_client makes a copy"
    session.close()
    owner.on_message(task, message)
    assert await pushed(session) == []


async def test_progress_and_log_shaped_updates_keep_their_shape_for_a_held_call() -> None:
    tasks, sink = table(), Owner("s1")
    task = new_task(HeldCall(sink, "tok", "lib"), tasks)
    tasks.deliver("lib", msg(task, UPDATE, {"progress": 5, "total": 10, "message": "half"}))
    tasks.deliver("lib", msg(task, UPDATE, {"level": "warning", "logger": "srv", "data": "careful"}))
    assert sink.delivered == [
        {
            "jsonrpc": "2.0",
            "method": "notifications/progress",
            "params": {"progressToken": "tok", "progress": 5, "total": 10, "message": "half"},
        },
        {
            "jsonrpc": "2.0",
            "method": "notifications/message",
            "params": {"level": "warning", "logger": "srv", "data": "careful"},
        },
    ]
