"""A ``tools/call`` that involves MCPC, from either side (issue 13): planned before it is forwarded,
settled when the backend answers.

Four cases, by who speaks MCPC:

==================  ===========================  ==================================================
client              backend                      what the gateway does
==================  ===========================  ==================================================
MCPC (handshake +   MCPC                         the backend gets the gateway's session/task ids in
metadata)                                        its version's form; ``created`` and every callback
                                                 reach the client under the client's own ids
MCPC                plain                        the gateway runs the call as a task: ``created`` at
                                                 once, progress and log lines as ``update``, the
                                                 result as ``complete`` (``failed`` for an error)
anyone else         MCPC                         the call is held until the task ends (updates as
                                                 progress/log lines, the last message as the result)
anyone else         plain                        nothing (the fast path: one dict lookup)
==================  ===========================  ==================================================

A client's own metadata never reaches a backend (it would name another client's task). A result
that holds the messages of the gateway's task (a backend that ran it to its end inside the call)
settles the task at once. Invariants: every task filed here ends (see gateway/mcpc/tasks.py); a
held call's wait is bounded by the task's timer; background runs are cancelled with their session
and at shutdown.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from adapters.mcpc import handshake as hs_wire, metadata as md_wire
from adapters.mcpc.message import CREATED, McpcMessage, messages_in_result
from adapters.mcpc.translate import (
    final_result,
    map_messages,
    outcome_of_error,
    outcome_of_result,
    task_message,
)
from gateway import jsonrpc
from gateway.events import Event
from gateway.mcpc.client import McpcClient
from gateway.mcpc.owners import CANCELLED, Callbacks, HeldCall
from gateway.mcpc.run_sink import RunSink
from gateway.mcpc.tasks import Task, TaskTable, new_id
from gateway.routing.call import Call, CallSink, PolicyDenied, Routed
from gateway.upstreams.pending import MISSING

if TYPE_CHECKING:
    from gateway.mcpc.backends import BackendInfo, McpcBackends
    from gateway.sessions import ClientSession
    from gateway.upstreams.connection import BackendConnection, CallOwner
    from policies.mcpc_tasks import McpcTaskLimits

log = logging.getLogger(__name__)

# Sends a call's params to its backend through the ordinary path, related messages to the sink.
Send = Callable[[Call, dict[str, Any], CallSink], Awaitable[dict[str, Any]]]


@dataclass(slots=True)
class Plan:
    task: Task
    held: HeldCall | None  # a client that waits for the end
    callbacks: Callbacks | None  # an MCPC client


class McpcCalls:
    def __init__(self, backends: McpcBackends, tasks: TaskTable, limits: McpcTaskLimits, provider: str) -> None:
        self._backends = backends
        self._tasks = tasks
        self._limits = limits
        self._provider = provider
        self._session_ids: dict[str, str] = {}  # client session -> the gateway's MCPC session id for it
        self._held: dict[tuple[str, Any], HeldCall] = {}  # (session, client request id): cancellable waits
        self._runs: dict[str, set[asyncio.Task[None]]] = {}  # session -> the gateway's runs of its calls

    # ---- the handshake toward clients ----------------------------------------------------------

    def handshake(self, call: Call, tool: str) -> Routed:
        """A client called a handshake tool: the gateway is its MCPC server (provider ``switchboard``,
        the client's version)."""
        arguments = call.params.get("arguments")
        version = hs_wire.client_version(tool, arguments)
        if not call.session.codec.asks_mid_request:
            # A 2026-07-28 client has no session stream to take callbacks: it is told "no", and its
            # calls are held until their tasks end like any plain client's.
            reply = hs_wire.McpcInfo(False, version, self._provider).to_text()
            return Routed(jsonrpc.result(call.rpc_id, {"content": [{"type": "text", "text": reply}], "isError": False}))
        info = hs_wire.info_from_arguments(arguments)
        call.session.mcpc = McpcClient(version, info.provider if info else None, tool)
        return Routed(jsonrpc.result(call.rpc_id, hs_wire.reply_result(self._provider, version)))

    # ---- before forwarding -------------------------------------------------------------------------

    def involved(self, call: Call, backend: str) -> bool:
        """Whether MCPC has a part in this call (the rest take the plain path untouched)."""
        return "mcpc" in call.event.facets or self._backends.speaks(backend) or self._backends.detecting(backend)

    async def plan(
        self, call: Call, backend: str, conn: BackendConnection, params: dict[str, Any], sink: CallOwner
    ) -> tuple[dict[str, Any], Plan | None]:
        """The params as the backend gets them, and the task when there is one."""
        session = call.session
        # The client's own ids (adapters/mcpc/facets.py read them; the router took them out of the arguments).
        ref = call.event.facets.get("mcpc")
        if ref is not None and ("task_id" not in ref or ref.get("handshake")):
            ref = None
        params, arguments = _without_client_metadata(params)
        info = await self._backends.settled(conn)
        mcpc_client = session.mcpc is not None and ref is not None
        if info is None and not mcpc_client:
            return params, None
        exposed = call.params.get("name")
        exposed = exposed if isinstance(exposed, str) else params["name"]
        decision = self._limits.start_task(*self._tasks.running(session.id, backend))
        if not decision.allowed:
            raise PolicyDenied(decision, backend)
        callbacks = held = None
        if mcpc_client:
            assert ref is not None and session.mcpc is not None
            session.mcpc.session_id = ref["session_id"]
            callbacks = Callbacks(session, ref["session_id"], ref["task_id"] or new_id("sb-task-"), exposed)
        else:
            held = HeldCall(sink, _progress_token(params), backend)
        owner = callbacks if callbacks is not None else held
        assert owner is not None
        task = Task(
            id=new_id("sb-task-"),
            session_id=self._session_id(session),
            backend=backend,
            tool=params["name"],
            exposed=exposed,
            session_key=session.id,
            principal=call.principal,
            owner=owner,
            gateway_run=info is None,
        )
        if info is None:
            self._tasks.open(task, conn.config.timeout_s)
            return params, Plan(task, held, callbacks)
        return self._file(task, conn, params, arguments, info), Plan(task, held, callbacks)

    def _file(
        self, task: Task, conn: BackendConnection, params: dict[str, Any], arguments: Any, info: BackendInfo
    ) -> dict[str, Any]:
        """File a task of an MCPC backend before its call is sent: the call's params then name it in
        the form the backend's version reads."""
        self._tasks.open(task, conn.config.timeout_s)
        return {**params, "arguments": md_wire.with_metadata(arguments, task.session_id, task.id, info.version)}

    def _session_id(self, session: ClientSession) -> str:
        sid = self._session_ids.get(session.id)
        if sid is None:
            sid = self._session_ids[session.id] = new_id("sb-session-")
        return sid

    def forget(self, plan: Plan) -> None:
        """The call goes on without MCPC after all."""
        self._tasks.discard(plan.task)

    # ---- the gateway runs an ordinary call as a task (an MCPC client, a plain backend) -----------

    def run(self, call: Call, plan: Plan, params: dict[str, Any], send: Send) -> Routed:
        """Answer ``created`` now; run the call in the background and report it as the task."""
        task, callbacks = plan.task, plan.callbacks
        assert callbacks is not None
        session = call.session
        meta = params.get("_meta")
        token = f"{task.id}-progress"
        params = {**params, "_meta": {**(meta if isinstance(meta, dict) else {}), "progressToken": token}}
        sink = RunSink(session, session.standalone, task, self._tasks)
        inner = Call(session, _with_id(call, ("mcpc", task.id)), session.standalone, call.principal)
        runs = self._runs.setdefault(session.id, set())
        job = asyncio.create_task(self._run(inner, task, params, sink, send), name=f"mcpc-{task.id}")
        runs.add(job)
        job.add_done_callback(lambda done: self._ran(session.id, done))
        created = task_message(CREATED, task.session_id, task.id, task.tool, f"{task.exposed} started")
        self._tasks.started(task, created)
        return Routed(jsonrpc.result(call.rpc_id, {"content": [callbacks.as_client(created).text_block()]}))

    async def _run(self, call: Call, task: Task, params: dict[str, Any], sink: RunSink, send: Send) -> None:
        try:
            response = await send(call, params, sink)
            if "error" in response:
                event, result = outcome_of_error(response["error"])
            else:
                event, result = outcome_of_result(response.get("result"))
        except jsonrpc.RpcError as exc:
            event, result = outcome_of_error({"message": exc.message})
        except asyncio.CancelledError:
            self._tasks.discard(task)
            raise
        except Exception:
            log.exception("MCPC: the gateway's run of %s failed", task.exposed)
            event, result = outcome_of_error({"message": "internal error in the gateway"})
        self._tasks.relay(task, task_message(event, task.session_id, task.id, task.tool, result))

    def _ran(self, session_key: str, done: asyncio.Task[None]) -> None:
        runs = self._runs.get(session_key)
        if runs is not None:
            runs.discard(done)
            if not runs:
                del self._runs[session_key]

    # ---- after the backend answered ----------------------------------------------------------------

    async def settle(self, call: Call, plan: Plan, response: dict[str, Any]) -> dict[str, Any]:
        """The client's answer, from the backend's answer to a call of an MCPC backend."""
        task = plan.task
        mine = self._task_messages(task, response)
        if not mine:
            return response
        if plan.callbacks is not None:
            return self._for_mcpc_client(plan.callbacks, task, response, mine)
        assert plan.held is not None
        return await self._hold((call.session.id, call.rpc_id), plan.held, task, mine)

    def _task_messages(self, task: Task, response: dict[str, Any]) -> list[McpcMessage]:
        """The task's messages in the backend's answer; none (an error, or an ordinary tool of an
        MCPC backend answering like any tool): the task is forgotten and the answer stands."""
        mine = [] if "error" in response else self._claim(task, response.get("result"))
        if not mine:
            self._tasks.discard(task)
        return mine

    def _claim(self, task: Task, result: Any) -> list[McpcMessage]:
        """The messages of ``task`` in a result. A backend that named the task by an id of its own
        (one task id in every task message of the result) gets that id as the task's alias."""
        messages = [m for m in messages_in_result(result) if m.type == "task"]
        mine = [m for m in messages if m.task_id == task.id]
        if mine or not messages:
            return mine
        ids = {m.task_id for m in messages}
        if len(ids) != 1 or None in ids:
            return []
        (server_id,) = ids
        assert server_id is not None
        self._tasks.alias(task, server_id)
        return messages

    def _for_mcpc_client(
        self, callbacks: Callbacks, task: Task, response: dict[str, Any], mine: list[McpcMessage]
    ) -> dict[str, Any]:
        for message in mine:
            if message.event == CREATED:
                self._tasks.started(task, message)
        if any(m.final for m in mine):
            self._tasks.discard(task, "completed")  # the whole run is in the result: nothing more comes
        ours = {task.id, task.alias}
        result = map_messages(response["result"], lambda m: callbacks.as_client(m) if m.task_id in ours else None)
        return {**response, "result": result}

    async def _hold(self, key: tuple[str, Any], held: HeldCall, task: Task, mine: list[McpcMessage]) -> dict[str, Any]:
        """Wait for the task's end; the answer to request ``key[1]`` is its last message as a result."""
        for message in mine:
            if message.event == CREATED:
                self._tasks.started(task, message)
            else:
                self._tasks.relay(task, message)  # a task the backend ran to its end inside the call
        self._held[key] = held
        try:
            ending = await held.future  # bounded: the task table fails the task at its deadline
        except asyncio.CancelledError:
            self._tasks.discard(task)
            raise
        finally:
            if self._held.get(key) is held:
                del self._held[key]
        if ending == CANCELLED:
            self._tasks.discard(task, "cancelled")
            return jsonrpc.error(key[1], jsonrpc.REQUEST_CANCELLED, "Request cancelled")
        assert isinstance(ending, McpcMessage)
        return jsonrpc.result(key[1], final_result(ending))

    # ---- a caller without a session (an MCPx participant, through gateway/mcpx/bridge.py) ----------

    async def request(
        self, conn: BackendConnection, params: dict[str, Any], sink: CallOwner | None, caller: str
    ) -> dict[str, Any]:
        """``tools/call`` to ``conn`` for ``caller``: an MCPC backend's task is held to its end, as for
        a plain client (the caller's admission was decided before); anything else is an ordinary call."""
        params, arguments = _without_client_metadata(params)
        info = await self._backends.settled(conn)
        if info is None or not isinstance(params.get("name"), str):
            return await conn.request("tools/call", params, sink)
        decision = self._limits.start_task(*self._tasks.running(caller, conn.name))
        if not decision.allowed:
            raise jsonrpc.RpcError(decision.code, decision.reason)
        held = HeldCall(sink, _progress_token(params), conn.name)
        tool = params["name"]
        task = Task(new_id("sb-task-"), new_id("sb-session-"), conn.name, tool, tool, caller, None, held)
        params = self._file(task, conn, params, arguments, info)
        try:
            response = await conn.request("tools/call", params, sink)
        except BaseException:
            self._tasks.discard(task)
            raise
        mine = self._task_messages(task, response)
        if not mine:
            return response
        return await self._hold((caller, response.get("id")), held, task, mine)

    # ---- clients ---------------------------------------------------------------------------------

    def cancel(self, session: ClientSession, rpc_id: Any) -> bool:
        """A client cancelled a held call (MCPC has no cancel on the wire: the wait ends, the task is
        forgotten)."""
        held = self._held.get((session.id, rpc_id))
        if held is None:
            return False
        held.cancel()
        return True

    def session_ended(self, session: ClientSession) -> None:
        for (session_key, _rpc_id), held in list(self._held.items()):
            if session_key == session.id:
                held.cancel()  # the wait ends; nobody is left to answer
        self._session_ids.pop(session.id, None)
        self._tasks.drop_session(session.id)
        for job in self._runs.pop(session.id, set()):
            job.cancel()

    async def stop(self) -> None:
        jobs = [job for runs in self._runs.values() for job in runs]
        self._runs.clear()
        for job in jobs:
            job.cancel()
        await asyncio.gather(*jobs, return_exceptions=True)
        self._tasks.close_all("the gateway is shutting down")


def _without_client_metadata(params: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    """``params`` without a client's MCPC metadata (it would name another client's task), and the
    arguments left."""
    arguments = md_wire.without_metadata(params.get("arguments"))
    if arguments is not params.get("arguments"):
        params = {**params, "arguments": arguments}
    return params, arguments


def _progress_token(params: dict[str, Any]) -> Any:
    meta = params.get("_meta")
    return meta.get("progressToken", MISSING) if isinstance(meta, dict) else MISSING


def _with_id(call: Call, rpc_id: Any) -> Event:
    return replace(call.event, rpc_id=rpc_id)
