"""The task table (gateway/mcpc/tasks.py): which backend messages reach a task's owner, how a task
ends (exactly once, on its last message, its timer, its backend going away or its owner leaving),
what is counted, and that a failing owner or a denied caller never breaks the table.

The table is the real one on a real ``Metrics`` registry; owners are small recorders.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from adapters.mcpc.message import COMPLETE, CREATED, FAILED, UPDATE, McpcMessage
from adapters.mcpc.translate import task_message
from gateway.mcpc.tasks import Task, TaskTable, new_id
from gateway.metrics import Metrics
from policies.patterns import CapabilitySet
from policies.principal import Principal

pytestmark = pytest.mark.timeout(30)

ALICE = Principal("alice", CapabilitySet(["*"]))
LONG_S = 60.0


class Heard:
    """An owner that writes down every message it is told."""

    def __init__(self) -> None:
        self.messages: list[McpcMessage] = []
        self.changed = asyncio.Event()

    def on_message(self, task: Task, message: McpcMessage) -> None:
        self.messages.append(message)
        self.changed.set()

    def events(self) -> list[str]:
        return [m.event for m in self.messages]


class Explodes:
    def __init__(self) -> None:
        self.calls = 0

    def on_message(self, task: Task, message: McpcMessage) -> None:
        self.calls += 1
        raise RuntimeError("owner bug")


class Table:
    """A table with its metrics, a switch for the visibility check and what ``observe`` saw."""

    def __init__(self) -> None:
        self.metrics = Metrics()
        self.allowed = True
        self.observed: list[tuple[str, str]] = []
        self.table = TaskTable(self.metrics, lambda task, message: self.allowed, self._observe)

    def _observe(self, task: Task, message: McpcMessage) -> None:
        self.observed.append((task.id, message.event))

    def open(
        self,
        owner: Any,
        *,
        backend: str = "lib",
        session_key: str = "s1",
        gateway_run: bool = False,
        timeout_s: float = LONG_S,
        created: bool = True,
    ) -> Task:
        task = Task(
            id=new_id("sb-task-"),
            session_id=new_id("sb-session-"),
            backend=backend,
            tool="slow_task",
            exposed="lib__slow_task",
            session_key=session_key,
            principal=ALICE,
            owner=owner,
            gateway_run=gateway_run,
        )
        self.table.open(task, timeout_s)
        if created:  # its call answered created: it is a task (counted), not an ordinary call
            self.table.started(task, task_message("created", task.session_id, task.id, task.tool, None))
            self.observed.clear()  # the tests look at what comes after
        return task

    def sample(self, name: str, **labels: str) -> float:
        value = self.metrics.registry.get_sample_value(name, labels)
        return 0.0 if value is None else value


def msg(task: Task, event: str, result: Any = None, **override: Any) -> McpcMessage:
    fields = {"session_id": task.session_id, "task_id": task.id, "tool": task.tool, **override}
    return task_message(event, fields["session_id"], fields["task_id"], fields["tool"], result)


def test_ids_are_unguessable_and_prefixed() -> None:
    ids = {new_id("sb-task-") for _ in range(100)}
    assert len(ids) == 100
    assert all(i.startswith("sb-task-") and len(i) == len("sb-task-") + 24 for i in ids)


async def test_an_update_before_created_reaches_the_owner_in_order() -> None:
    t = Table()
    owner = Heard()
    task = t.open(owner, created=False)
    assert t.table.deliver("lib", msg(task, UPDATE, {"step": 1}))
    assert t.table.deliver("lib", msg(task, CREATED, "started"))
    assert t.table.deliver("lib", msg(task, UPDATE, {"step": 2}))
    assert owner.events() == [UPDATE, CREATED, UPDATE]
    assert [m.result for m in owner.messages] == [{"step": 1}, "started", {"step": 2}]
    assert task.updates == 2
    assert t.observed == [(task.id, UPDATE), (task.id, CREATED), (task.id, UPDATE)]
    assert t.table.get(task.id) is task and task.ended is None


async def test_messages_that_do_not_name_a_running_task_of_that_backend_are_ignored() -> None:
    t = Table()
    owner, run_owner = Heard(), Heard()
    task = t.open(owner)
    gateway_run = t.open(run_owner, gateway_run=True)
    assert not t.table.deliver("other", msg(task, UPDATE)), "another backend cannot speak for it"
    assert not t.table.deliver("lib", msg(task, UPDATE, session_id="sb-session-forged"))
    assert not t.table.deliver("lib", msg(task, UPDATE, session_id=None))
    assert not t.table.deliver("lib", msg(task, COMPLETE, task_id="sb-task-unknown"))
    assert not t.table.deliver("lib", msg(task, COMPLETE, task_id=None))
    assert not t.table.deliver("lib", msg(gateway_run, COMPLETE)), "a gateway-run task hears only the gateway"
    assert owner.messages == [] and run_owner.messages == []
    assert task.ended is None and gateway_run.ended is None
    assert len(t.table) == 2 and t.observed == []


async def test_the_last_message_ends_the_task_once_and_nothing_after_it_is_told() -> None:
    t = Table()
    owner = Heard()
    task = t.open(owner, backend="lib", session_key="s1")
    assert t.table.running("s1", "lib") == (1, 1)
    assert t.table.deliver("lib", msg(task, COMPLETE, {"steps": 3}))
    assert task.ended == "completed" and task.timer is None
    assert owner.events() == [COMPLETE]
    # Whatever comes later is for no running task.
    assert not t.table.deliver("lib", msg(task, UPDATE))
    assert not t.table.deliver("lib", msg(task, FAILED, "late"))
    t.table.relay(task, msg(task, FAILED, "made by the gateway, late"))
    t.table.fail(task, "too late")
    t.table.fail_backend("lib", "gone")
    assert owner.events() == [COMPLETE]
    assert t.table.get(task.id) is None and len(t.table) == 0
    assert t.table.running("s1", "lib") == (0, 0)
    assert t.sample("switchboard_mcpc_tasks_finished_total", backend="lib", outcome="completed") == 1
    assert t.sample("switchboard_mcpc_tasks_finished_total", backend="lib", outcome="failed") == 0


async def test_a_failed_message_ends_the_task_as_failed() -> None:
    t = Table()
    owner = Heard()
    task = t.open(owner)
    assert t.table.deliver("lib", msg(task, FAILED, "boom"))
    assert task.ended == "failed" and owner.messages[-1].result == "boom"
    assert t.sample("switchboard_mcpc_tasks_finished_total", backend="lib", outcome="failed") == 1


async def test_a_task_that_runs_out_of_time_fails_saying_so() -> None:
    t = Table()
    owner = Heard()
    task = t.open(owner, timeout_s=0.05)
    async with asyncio.timeout(5):
        await owner.changed.wait()
    [failed] = owner.messages
    assert failed.event == FAILED and failed.final
    assert failed.result == "task of lib__slow_task did not complete within 0.05s"
    assert (failed.session_id, failed.task_id, failed.tool_name) == (task.session_id, task.id, task.tool)
    assert task.ended == "expired" and task.timer is None and len(t.table) == 0
    assert t.sample("switchboard_mcpc_tasks_finished_total", backend="lib", outcome="expired") == 1
    assert not t.table.deliver("lib", msg(task, COMPLETE)), "a late answer finds nothing"
    assert owner.events() == [FAILED]


async def test_an_ended_task_never_expires_later() -> None:
    t = Table()
    owner = Heard()
    task = t.open(owner, timeout_s=0.05)
    t.table.deliver("lib", msg(task, COMPLETE, "done"))
    await asyncio.sleep(0.15)
    assert owner.events() == [COMPLETE]
    assert t.sample("switchboard_mcpc_tasks_finished_total", backend="lib", outcome="expired") == 0


async def test_a_backend_going_away_fails_only_its_own_backend_run_tasks() -> None:
    t = Table()
    lib, lib2, other, run = Heard(), Heard(), Heard(), Heard()
    tasks = [
        t.open(lib, backend="lib"),
        t.open(lib2, backend="lib", session_key="s2"),
        t.open(other, backend="old"),
        t.open(run, backend="lib", gateway_run=True),
    ]
    t.table.fail_backend("lib", "exited with code 1")
    for owner in (lib, lib2):
        [failed] = owner.messages
        assert failed.event == FAILED
        assert failed.result == "backend lib went away while the task ran: exited with code 1"
    assert tasks[0].ended == tasks[1].ended == "lost"
    assert other.messages == [] and tasks[2].ended is None
    assert run.messages == [] and tasks[3].ended is None, "a gateway-run call ends with its own call"
    assert t.table.running("s1", "lib") == (2, 1) and t.table.running("s2", "old") == (0, 1)
    assert t.sample("switchboard_mcpc_tasks_finished_total", backend="lib", outcome="lost") == 2
    assert t.sample("switchboard_mcpc_tasks_running", backend="lib") == 1


async def test_a_session_that_leaves_forgets_its_tasks_silently() -> None:
    t = Table()
    mine, theirs = Heard(), Heard()
    gone = [t.open(mine, session_key="s1"), t.open(mine, session_key="s1", backend="old")]
    kept = t.open(theirs, session_key="s2")
    assert t.table.running("s1", "lib") == (2, 2)
    t.table.drop_session("s1")
    assert mine.messages == [] and t.observed == []
    assert all(task.ended == "dropped" and task.timer is None for task in gone)
    assert t.table.running("s1", "lib") == (0, 1) and t.table.running("s2", "old") == (1, 0)
    assert not t.table.deliver("lib", msg(gone[0], COMPLETE))
    assert t.table.deliver("lib", msg(kept, COMPLETE)) and theirs.events() == [COMPLETE]
    assert t.sample("switchboard_mcpc_tasks_finished_total", backend="lib", outcome="dropped") == 1
    assert t.sample("switchboard_mcpc_tasks_finished_total", backend="old", outcome="dropped") == 1


async def test_counts_and_gauges_return_to_zero() -> None:
    t = Table()
    owner = Heard()
    tasks = [t.open(owner, session_key=f"s{i % 2}") for i in range(4)]
    assert t.table.running("s0", "lib") == (2, 4) and t.table.running("s1", "lib") == (2, 4)
    assert t.sample("switchboard_mcpc_tasks_started_total", backend="lib") == 4
    assert t.sample("switchboard_mcpc_tasks_running", backend="lib") == 4
    t.table.deliver("lib", msg(tasks[0], COMPLETE))
    t.table.fail(tasks[1], "given up")
    t.table.discard(tasks[2])
    t.table.close_all("the gateway stops")
    assert len(t.table) == 0
    assert t.table.running("s0", "lib") == (0, 0) and t.table.running("s1", "lib") == (0, 0)
    assert t.sample("switchboard_mcpc_tasks_running", backend="lib") == 0
    finished = {
        outcome: t.sample("switchboard_mcpc_tasks_finished_total", backend="lib", outcome=outcome)
        for outcome in ("completed", "failed", "dropped", "lost")
    }
    assert finished == {"completed": 1, "failed": 1, "dropped": 1, "lost": 1}
    assert sum(finished.values()) == t.sample("switchboard_mcpc_tasks_started_total", backend="lib")
    assert owner.messages[-1].result == "the gateway stops"


async def test_discard_tells_nobody() -> None:
    t = Table()
    owner = Heard()
    task = t.open(owner)
    t.table.discard(task, "not_a_task")
    assert owner.messages == [] and task.ended == "not_a_task"
    t.table.discard(task)
    assert t.sample("switchboard_mcpc_tasks_finished_total", backend="lib", outcome="not_a_task") == 1
    assert t.sample("switchboard_mcpc_tasks_finished_total", backend="lib", outcome="dropped") == 0


async def test_a_caller_that_may_no_longer_call_the_tool_gets_a_failed_task() -> None:
    t = Table()
    owner = Heard()
    task = t.open(owner)
    t.table.deliver("lib", msg(task, UPDATE, {"step": 1}))
    t.allowed = False
    assert t.table.deliver("lib", msg(task, UPDATE, {"secret": "not for alice"}))
    [update, failed] = owner.messages
    assert update.result == {"step": 1}
    assert failed.event == FAILED and failed.result == "the caller may no longer call lib__slow_task"
    assert "secret" not in failed.to_json()
    assert task.ended == "denied" and len(t.table) == 0
    assert t.sample("switchboard_mcpc_tasks_finished_total", backend="lib", outcome="denied") == 1
    t.allowed = True
    assert not t.table.deliver("lib", msg(task, COMPLETE))
    assert owner.events() == [UPDATE, FAILED]


async def test_an_owner_that_raises_does_not_break_the_table() -> None:
    t = Table()
    bad, good = Explodes(), Heard()
    broken = t.open(bad)
    fine = t.open(good)
    assert t.table.deliver("lib", msg(broken, UPDATE))
    assert t.table.deliver("lib", msg(broken, COMPLETE))
    assert bad.calls == 2 and broken.ended == "completed"
    assert t.table.deliver("lib", msg(fine, COMPLETE, "ok")) and good.events() == [COMPLETE]
    assert len(t.table) == 0
    assert t.sample("switchboard_mcpc_tasks_running", backend="lib") == 0


async def test_gateway_made_messages_reach_a_gateway_run_task() -> None:
    t = Table()
    owner = Heard()
    task = t.open(owner, gateway_run=True)
    t.table.relay(task, msg(task, CREATED))
    t.table.relay(task, msg(task, UPDATE, {"progress": 1}))
    t.table.relay(task, msg(task, COMPLETE, "42"))
    assert owner.events() == [CREATED, UPDATE, COMPLETE] and task.updates == 1
    assert task.ended == "completed" and len(t.table) == 0


async def test_an_ordinary_tool_of_an_mcpc_backend_is_a_call_not_a_task() -> None:
    t = Table()
    call = t.open(Heard(), created=False)  # filed before its call is sent, in case it is a task
    assert t.table.running("s1", "lib") == (0, 0), "not in the limits"
    t.table.discard(call)  # it answered like any tool
    assert t.sample("switchboard_mcpc_tasks_started_total", backend="lib") == 0
    assert t.sample("switchboard_mcpc_tasks_finished_total", backend="lib", outcome="dropped") == 0
    assert len(t.table) == 0
