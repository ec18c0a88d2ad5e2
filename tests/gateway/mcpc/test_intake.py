"""What MCPC backends send on their own (gateway/mcpc/intake.py, gateway/mcpc/server_events.py):
task messages to the task table, server events to the sessions that may see them, oversized
messages dropped (a task's last one failing the task), everything counted by kind and outcome.

The parts are the real ones: ``TaskTable`` and ``Metrics``, ``ServerEvents`` over real
``ClientSession`` objects with a real ``PolicyChain`` (``CapabilityPolicy``) and ``AuditLog``.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest

from adapters.mcpc.callback import MCPC_CALLBACK, callback_envelope, callback_messages
from adapters.mcpc.message import COMPLETE, FAILED, SERVER_EVENT, UPDATE, McpcMessage
from adapters.mcpc.translate import task_message
from gateway.audit import AuditLog
from gateway.config import AuditConfig, Limits
from gateway.federation import Namer, View
from gateway.mcpc.client import McpcClient
from gateway.mcpc.intake import McpcIntake
from gateway.mcpc.server_events import ACTION, ServerEvents
from gateway.mcpc.tasks import Task, TaskTable, new_id
from gateway.mcpl.state import McplSession
from gateway.metrics import Metrics
from gateway.sessions import ClientSession
from policies.capabilities import CapabilityPolicy
from policies.chain import PolicyChain
from policies.patterns import CapabilitySet
from policies.principal import Principal

pytestmark = pytest.mark.timeout(30)

BACKENDS = ("lib", "plain")
BOTH = View("*", BACKENDS, Namer("conditional", "__", BACKENDS))
ONLY_PLAIN = View("plain", ("plain",), Namer("never", "__", ("plain",)))
EVERYTHING = Principal("alice", CapabilitySet(["*"]))
TOOLS_ONLY = Principal("bob", CapabilitySet(["mcp/request:tools/*"]))
EVENTS = Principal("carol", CapabilitySet([ACTION]))
_ids = itertools.count(1)


class Heard:
    def __init__(self) -> None:
        self.messages: list[McpcMessage] = []

    def on_message(self, task: Task, message: McpcMessage) -> None:
        self.messages.append(message)


class Intake:
    """The intake with what it is built from in gateway/mcpc/assembly.py."""

    def __init__(self, max_bytes: int = 1 << 20) -> None:
        self.metrics = Metrics()
        self.sessions: list[ClientSession] = []
        self.records: list[dict[str, Any]] = []
        self.pushed: list[tuple[str, McpcMessage, list[ClientSession]]] = []
        audit = AuditLog(AuditConfig(), self.metrics)
        audit.add_listener(lambda rec: self.records.append(dict(rec)))
        self.tasks = TaskTable(self.metrics, lambda task, message: True, lambda task, message: None)
        chain = PolicyChain([CapabilityPolicy()])
        events = ServerEvents(self.sessions, chain, audit, lambda b, m, hosts: self.pushed.append((b, m, hosts)))
        self.intake = McpcIntake(self.tasks, events, self.metrics, max_bytes)

    def task(self, owner: Heard, backend: str = "lib", gateway_run: bool = False) -> Task:
        task = Task(
            id=new_id("sb-task-"),
            session_id=new_id("sb-session-"),
            backend=backend,
            tool="slow_task",
            exposed="lib__slow_task",
            session_key="s1",
            principal=EVERYTHING,
            owner=owner,
            gateway_run=gateway_run,
        )
        self.tasks.open(task, 60)
        self.tasks.started(task, task_message("created", task.session_id, task.id, task.tool, None))
        return task

    def session(self, principal: Principal = EVERYTHING, view: View = BOTH, initialized: bool = True) -> ClientSession:
        session = ClientSession(f"session-{next(_ids):04d}-xxxx", "http", view, principal, Limits())
        session.initialized = initialized
        self.sessions.append(session)
        return session

    def count(self, kind: str, outcome: str) -> float:
        value = self.metrics.registry.get_sample_value(
            "switchboard_mcpc_messages_total", {"kind": kind, "outcome": outcome}
        )
        return 0.0 if value is None else value


def msg(task: Task, event: str, result: Any = None) -> McpcMessage:
    return task_message(event, task.session_id, task.id, task.tool, result)


def server_event(event: str = "reindexed", result: Any = None, session_id: str | None = "sb-x") -> McpcMessage:
    return McpcMessage(type=SERVER_EVENT, event=event, session_id=session_id, result=result)


async def read_all(session: ClientSession) -> list[dict[str, Any]]:
    if session.standalone.last_seq == 0:
        return []
    async with asyncio.timeout(5):
        return [message for _, message in await session.standalone.read(0)]


async def test_a_callback_reaches_its_task_and_is_counted_relayed() -> None:
    rig, owner = Intake(), Heard()
    task = rig.task(owner)
    rig.intake.on_callback("lib", callback_envelope(msg(task, UPDATE, {"step": 1})))
    rig.intake.on_callback("lib", callback_envelope(msg(task, COMPLETE, "done")))
    assert [(m.event, m.result) for m in owner.messages] == [(UPDATE, {"step": 1}), (COMPLETE, "done")]
    assert rig.count("task", "relayed") == 2 and rig.count("task", "unknown") == 0
    assert len(rig.tasks) == 0


async def test_a_callback_with_several_messages_delivers_each_and_junk_is_nothing() -> None:
    rig, owner = Intake(), Heard()
    task = rig.task(owner)
    envelope = callback_envelope(msg(task, UPDATE, 1))
    envelope["result"]["content"].append(msg(task, UPDATE, 2).text_block())
    envelope["result"]["content"].append({"type": "text", "text": "not mcpc"})
    rig.intake.on_callback("lib", envelope)
    assert [m.result for m in owner.messages] == [1, 2]
    for junk in ({"id": MCPC_CALLBACK}, {"id": MCPC_CALLBACK, "result": "x"}, {"id": 1, "result": envelope["result"]}):
        rig.intake.on_callback("lib", junk)
    assert len(owner.messages) == 2 and rig.count("task", "relayed") == 2


async def test_messages_for_no_running_task_of_that_backend_are_counted_unknown() -> None:
    rig, owner, run_owner = Intake(), Heard(), Heard()
    task = rig.task(owner)
    run = rig.task(run_owner, gateway_run=True)
    rig.intake.take("plain", msg(task, UPDATE))  # another backend
    rig.intake.take("lib", task_message(UPDATE, task.session_id, "sb-task-nope", "slow_task", None))
    rig.intake.take("lib", task_message(UPDATE, "sb-session-forged", task.id, "slow_task", None))
    rig.intake.take("lib", msg(run, COMPLETE, "forged end of a gateway-run call"))
    assert rig.count("task", "unknown") == 4 and rig.count("task", "relayed") == 0
    assert owner.messages == [] and run_owner.messages == []
    assert task.ended is None and run.ended is None


async def test_an_update_over_the_size_bound_is_dropped_and_the_task_runs_on() -> None:
    rig, owner = Intake(max_bytes=200), Heard()
    task = rig.task(owner)
    rig.intake.take("lib", msg(task, UPDATE, "x" * 300))
    assert owner.messages == [] and task.ended is None
    assert rig.count("task", "too_large") == 1
    rig.intake.take("lib", msg(task, UPDATE, "small"))
    assert [m.result for m in owner.messages] == ["small"]


async def test_a_last_message_over_the_bound_fails_its_task_saying_why() -> None:
    rig, owner = Intake(max_bytes=200), Heard()
    task = rig.task(owner)
    rig.intake.take("lib", msg(task, COMPLETE, {"blob": "y" * 500}))
    [failed] = owner.messages
    assert failed.event == FAILED and failed.result == "the task's last message is over 200 bytes"
    assert "yyy" not in failed.to_json()
    assert task.ended == "too_large" and len(rig.tasks) == 0
    assert rig.count("task", "too_large") == 1
    value = rig.metrics.registry.get_sample_value(
        "switchboard_mcpc_tasks_finished_total", {"backend": "lib", "outcome": "too_large"}
    )
    assert value == 1


async def test_an_oversized_last_message_of_another_backend_fails_nothing() -> None:
    rig, owner, run_owner = Intake(max_bytes=200), Heard(), Heard()
    task = rig.task(owner)
    run = rig.task(run_owner, gateway_run=True)
    rig.intake.take("plain", msg(task, FAILED, "z" * 500))
    rig.intake.take("lib", msg(run, FAILED, "z" * 500))
    assert owner.messages == [] and run_owner.messages == []
    assert task.ended is None and run.ended is None
    assert rig.count("task", "too_large") == 2


async def test_the_size_bound_counts_bytes_not_characters() -> None:
    rig, owner = Intake(max_bytes=1024), Heard()
    task = rig.task(owner)
    rig.intake.take("lib", msg(task, UPDATE, "\u20ac" * 400))  # 400 characters, 1,200 bytes of UTF-8
    assert owner.messages == [] and rig.count("task", "too_large") == 1


async def test_an_oversized_last_message_under_another_session_id_fails_nothing() -> None:
    rig, owner = Intake(max_bytes=200), Heard()
    task = rig.task(owner)
    forged = task_message(COMPLETE, "sb-session-forged", task.id, "slow_task", "z" * 500)
    rig.intake.take("lib", forged)
    assert owner.messages == [] and task.ended is None


async def test_a_server_event_reaches_the_sessions_that_may_see_it_each_in_its_own_shape() -> None:
    rig = Intake()
    plain = rig.session()
    plain.log_level = "debug"
    quiet = rig.session()
    quiet.log_level = "error"  # info is below what it asked for
    client = rig.session(EVENTS)
    client.mcpc = McpcClient("0.2.6", "lib-client", "_mcpc_init", session_id="client-own-session")
    host = rig.session()
    host.mcpl = McplSession({"version": "0.4", "pushEvents": True})
    denied = rig.session(TOOLS_ONLY)
    elsewhere = rig.session(view=ONLY_PLAIN)
    early = rig.session(initialized=False)
    closed = rig.session()
    closed.close()

    event = server_event("reindexed", {"docs": 3})
    rig.intake.on_callback("lib", callback_envelope(event))
    assert rig.count("server_event", "relayed") == 1

    [log_line] = await read_all(plain)
    assert log_line == {
        "jsonrpc": "2.0",
        "method": "notifications/message",
        "params": {
            "level": "info",
            "logger": "lib",
            "data": {"mcpc": "server_event", "event": "reindexed", "result": {"docs": 3}},
        },
    }
    [callback] = await read_all(client)
    [own] = callback_messages(callback)
    assert own.session_id == "client-own-session", "an MCPC client sees its own session id, never the gateway's"
    assert (own.type, own.event, own.result) == (SERVER_EVENT, "reindexed", {"docs": 3})
    for nobody in (quiet, denied, elsewhere, early):
        assert await read_all(nobody) == [], nobody.principal.name
    assert closed.standalone.last_seq == 0

    [(backend, pushed, hosts)] = rig.pushed
    assert backend == "lib" and pushed == event and hosts == [host]
    [record] = [r for r in rig.records if r.get("dialect") == "mcpc"]
    assert record["outcome"] == "delivered" and record["action"] == "mcpc/server_event:reindexed"
    assert record["backend"] == "lib" and record["sessions"] == 4  # plain, quiet, client, host


async def test_a_server_event_nobody_may_see_reaches_nobody_and_is_still_audited() -> None:
    rig = Intake()
    denied = rig.session(TOOLS_ONLY)
    rig.intake.take("plain", server_event("ping"))
    assert await read_all(denied) == [] and rig.pushed == []
    assert rig.count("server_event", "relayed") == 1
    [record] = [r for r in rig.records if r.get("dialect") == "mcpc"]
    assert record["sessions"] == 0 and record["action"] == "mcpc/server_event:ping"


async def test_an_oversized_server_event_is_dropped() -> None:
    rig = Intake(max_bytes=100)
    session = rig.session()
    rig.intake.take("lib", server_event("big", "e" * 200))
    assert await read_all(session) == [] and rig.records == []
    assert rig.count("server_event", "too_large") == 1 and rig.count("server_event", "relayed") == 0
