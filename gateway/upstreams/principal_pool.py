"""A stdio backend run as one child per principal (``sharing: per-principal``, issue 17).

Each child is its own :class:`~gateway.upstreams.connection.BackendConnection` (handshake, restarts,
the stdio carrier's process group and clean close), keyed by (backend, principal name), spawned with
the backend's ``env`` overlaid by what ``policies/principal_pool.py`` gives that principal. The
backend's entry in the gateway's ``connections`` is the pool's *head*: a connection that is never
started and spawns nothing; it carries the shared metadata (serverInfo, capabilities, instructions:
those of the first child that connected) and the readiness of the backend as a whole (ready when its
command can be spawned). Calls and lists go to the caller's own child (gateway/routing/forwarding.py,
gateway/routing/catalog.py); what a child sends on its own goes to its principal's sessions only
(gateway/routing/pool_events.py).

Invariants:

- a child is spawned only through :meth:`PrincipalPool.child`, which its callers reach only after the
  policy chain admitted the call or the list, and which asks :class:`PoolAdmission` first (anonymous
  callers and principals without an environment get none);
- never more than ``max_children`` processes, counting those still stopping: beyond it the least
  recently used child with no call in flight is stopped first; when every child is busy the caller is
  refused at once (never queued);
- a child with no call in flight for ``idle_s`` is stopped by the pool's one reaper task (its
  carrier's close: stdin closed, SIGTERM, SIGKILL of its process group), cancelled on :meth:`stop`;
- spawning is serialized per pool, so two calls of one principal never spawn two children.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gateway import jsonrpc
from gateway.config import Backend as BackendConfig
from gateway.federation import BackendCatalog
from gateway.upstreams.connection import BackendConnection, CallOwner
from gateway.upstreams.pending import Pending
from policies.chain import Decision
from policies.principal import Principal
from policies.principal_pool import PoolAdmission

log = logging.getLogger(__name__)

# Spawns a child connection: (backend name, its config with the child's env, principal name).
Connect = Callable[[str, BackendConfig, str], BackendConnection]
# Reports the pool's children by state (for metrics): (backend name, {state: count}).
Report = Callable[[str, dict[str, int]], None]
# The log level a principal's sessions want from this backend (the most verbose they asked), or None.
LevelOf = Callable[[str], str | None]
# One audit record (AuditLog.record): an outcome, then fields.
Audit = Callable[..., None]

_STATES = ("connecting", "ready", "down")
# What a head announces before any child connected (the children then answer with what they have).
_UNKNOWN_CAPABILITIES: dict[str, Any] = {
    "tools": {"listChanged": True},
    "prompts": {"listChanged": True},
    "resources": {"listChanged": True},
    "logging": {},
}


class PoolRefused(Exception):
    """The pool's policy said no (no environment for this principal, anonymous, or the pool is full)."""

    def __init__(self, decision: Decision) -> None:
        super().__init__(decision.reason)
        self.decision = decision


@dataclass(slots=True)
class PoolChild:
    principal: str
    conn: BackendConnection
    catalog: BackendCatalog  # this child's own lists (tools may differ per principal)
    last_used: float
    waiters: int = 0  # calls waiting for this child's first connection: it is not idle
    level: str | None = None  # the log level it was last told
    missed: bool = False  # a list was answered without it (still connecting): announce it when it connects

    def busy(self) -> bool:
        return self.waiters > 0 or self.conn.inflight > 0


class PoolHead(BackendConnection):
    """The entry of a per-principal backend in the gateway's ``connections``: never started, it spawns
    nothing and carries no call. Its state is the pool's (ready when the command can be spawned), its
    metadata the first child's (before any child connected: every list capability, so that a client of
    ``/servers/NAME/mcp`` lists, and its own child answers). A log level set on it is passed on: each
    child is told the most verbose level its own principal's sessions asked for."""

    pool: PrincipalPool | None = None

    @property
    def capabilities(self) -> dict[str, Any]:
        caps = self.init_result.get("capabilities")
        return caps if isinstance(caps, dict) else _UNKNOWN_CAPABILITIES

    def child_of(self, principal: Principal) -> BackendConnection | None:
        """``principal``'s running child (None: it has none; nothing is spawned here)."""
        child = self.pool.existing(principal) if self.pool is not None else None
        return child.conn if child is not None else None

    async def request(
        self,
        method: str,
        params: dict[str, Any] | None,
        owner: CallOwner | None = None,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        if method == "logging/setLevel" and self.pool is not None:
            await self.pool.sync_levels()
            return jsonrpc.result(None, {})
        raise self._no_shared(method)

    async def call(self, pending: Pending, timeout: float | None = None) -> dict[str, Any]:
        self._pending.drop(pending)  # begun, never sent: forgotten
        raise self._no_shared(str(pending.message.get("method")))

    def _no_shared(self, method: str) -> jsonrpc.RpcError:
        return jsonrpc.RpcError(
            jsonrpc.BACKEND_UNAVAILABLE,
            f"backend {self.name} runs one process per principal: {method} has no shared connection to go to",
        )


class PrincipalPool:
    def __init__(
        self,
        head: PoolHead,
        admission: PoolAdmission,
        connect: Connect,
        list_cache_s: float,
        report: Report | None = None,
        level_of: LevelOf | None = None,
        audit: Audit | None = None,
    ) -> None:
        self.head = head
        self.name = head.name
        self.config = head.config
        self.admission = admission
        self._connect = connect
        self._list_cache_s = list_cache_s
        self._report = report
        self._children: OrderedDict[str, PoolChild] = OrderedDict()  # least recently used first
        self._closing: dict[BackendConnection, asyncio.Task[None]] = {}
        self._lock = asyncio.Lock()
        self._reaper: asyncio.Task[None] | None = None
        self.spawned = 0  # children started since the gateway started (for tests and logs)
        self._level_of = level_of
        self._audit = audit  # who got a process (with its credentials) and when it went: security-relevant
        self._stopped = False  # no child is spawned once stop() began (a call still in flight at shutdown)
        self._era: str | None = None  # the first child's, for /readyz
        head.pool = self

    # ---- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        """The head is ready when the command can be spawned (a pool with no child yet is still
        ready: its children are spawned on demand); the reaper starts."""
        problem = spawn_problem(self.config)
        self.head.state = "ready" if problem is None else "down"
        self.head.last_error = problem
        self._reaper = asyncio.create_task(self._reap(), name=f"pool-reaper-{self.name}")
        self._publish()

    async def stop(self) -> None:
        self._stopped = True
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
        for child in list(self._children.values()):
            self._retire(child, "the gateway is stopping")
        if self._closing:
            await asyncio.gather(*self._closing.values(), return_exceptions=True)
        await self.head.close()

    # ---- children ------------------------------------------------------------------------------

    def admit(self, principal: Principal) -> Decision:
        return self.admission.admit(principal)

    def existing(self, principal: Principal) -> PoolChild | None:
        return self._children.get(principal.name)

    async def child(self, principal: Principal, wait_s: float | None = None) -> PoolChild:
        """``principal``'s child, spawned if needed (raises :class:`PoolRefused`). A fresh child is
        waited for up to ``wait_s`` (default its ``connect_timeout_s``); the caller then checks its
        state as for any backend."""
        decision = self.admission.admit(principal)
        if not decision.allowed:
            raise PoolRefused(decision)
        found = self._children.get(principal.name)
        if found is None or found.conn.gave_up:
            async with self._lock:
                if self._stopped:
                    raise jsonrpc.RpcError(jsonrpc.BACKEND_UNAVAILABLE, f"backend {self.name}: the gateway is stopping")
                found = self._children.get(principal.name)
                if found is not None and found.conn.gave_up:
                    self._retire(found, "its restart budget is spent")
                    found = None
                if found is None:
                    await self._make_room()
                    found = await self._spawn(principal)
        self._children.move_to_end(principal.name)
        found.last_used = time.monotonic()
        if found.conn.first_attempt_pending:
            found.waiters += 1
            try:
                await found.conn.wait_settled(self.config.connect_timeout_s if wait_s is None else wait_s)
                if found.conn.state == "ready":
                    # Its principal's log level before its first call (on_connected's telling may come
                    # after this waiter resumes; whichever runs first tells it, once).
                    await self._tell_level(found)
            finally:
                found.waiters -= 1
                found.last_used = time.monotonic()
        return found

    async def _spawn(self, principal: Principal) -> PoolChild:
        env = {**self.config.env, **self.admission.env_of(principal)}
        config = self.config.model_copy(update={"env": env, "principal_env": {}, "default_env": None})
        conn = self._connect(self.name, config, principal.name)
        child = PoolChild(principal.name, conn, BackendCatalog(self.name, self._list_cache_s), time.monotonic())
        self._children[principal.name] = child
        self.spawned += 1
        await conn.start()  # creates the supervisor task (the spawn happens there)
        log.info("backend %s: spawning a child for principal %s", self.name, principal.name)
        if self._audit is not None:
            self._audit("child_spawned", principal=principal.name, backend=self.name)
        self._publish()
        return child

    async def _make_room(self) -> None:
        """Under the lock: stop children until one more fits, or refuse (every child busy)."""
        limit = self.config.max_children
        while len(self._children) + len(self._closing) >= limit:
            if self._closing:
                # Still stopping (bounded by the carrier's close): they count until they are gone.
                await asyncio.wait(list(self._closing.values()))
                continue
            victim = next((c for c in self._children.values() if not c.busy()), None)
            if victim is None:
                raise PoolRefused(self.admission.full(limit))
            self._retire(victim, f"max_children ({limit}) reached")

    def _retire(self, child: PoolChild, reason: str) -> None:
        """Take ``child`` out of the pool now and stop its process in the background (tracked)."""
        if self._children.get(child.principal) is child:
            del self._children[child.principal]
        conn = child.conn
        if conn in self._closing:
            return
        log.info("backend %s: stopping the child of principal %s: %s", self.name, child.principal, reason)
        if self._audit is not None:
            self._audit("child_stopped", principal=child.principal, backend=self.name, reason=reason)
        task = asyncio.create_task(self._close(conn), name=f"pool-close-{self.name}")
        self._closing[conn] = task
        self._publish()

    async def _close(self, conn: BackendConnection) -> None:
        try:
            await conn.close()
        except Exception:  # a failed close must not keep the slot forever
            log.exception("backend %s: closing a child failed", self.name)
        finally:
            self._closing.pop(conn, None)
            self._publish()

    async def _reap(self) -> None:
        idle = self.config.idle_s
        tick = min(max(idle / 4, 0.05), 5.0)
        while True:
            await asyncio.sleep(tick)
            now = time.monotonic()
            for child in list(self._children.values()):
                if child.busy():
                    child.last_used = now  # idle counts from the end of its last call
                elif now - child.last_used >= idle:
                    self._retire(child, f"idle for {idle:g}s")
            self._publish()

    # ---- what the pool reports ----------------------------------------------------------------

    def child_connected(self, conn: BackendConnection) -> bool:
        """A child (re)connected: its lists are fetched again; the head shows the first child's
        metadata. True when its principal's sessions should be told to list again (it restarted, or a
        list was answered without it)."""
        announce = conn.restarts > 0
        for child in self._children.values():
            if child.conn is conn:
                child.catalog.invalidate()
                child.level = None  # a respawned child forgot it
                conn.spawn(self._tell_level(child))
                announce = announce or child.missed
                child.missed = False
        if not self.head.init_result:
            self.head.init_result = conn.init_result
            self.head.connected_at = conn.connected_at
            self._era = conn.era  # shown, not adopted: the head speaks to no one
        self._publish()
        return announce

    async def sync_levels(self) -> None:
        """Tell each ready child the level its principal's sessions want now (when it changed)."""
        ready = [c for c in self._children.values() if c.conn.state == "ready"]
        await asyncio.gather(*(self._tell_level(c) for c in ready))

    async def _tell_level(self, child: PoolChild) -> None:
        conn = child.conn
        if self._level_of is None or "logging" not in conn.capabilities or conn.era == "modern":
            return  # a modern child gets each call's level in its _meta instead
        wanted = self._level_of(child.principal)
        if wanted is None or wanted == child.level:
            return
        child.level = wanted
        try:
            await conn.request("logging/setLevel", {"level": wanted}, timeout=10.0)
        except jsonrpc.RpcError as exc:
            log.info("backend %s: logging/setLevel toward a child failed: %s", self.name, exc)

    def catalog_of(self, conn: BackendConnection) -> BackendCatalog | None:
        for child in self._children.values():
            if child.conn is conn:
                return child.catalog
        return None

    def counts(self) -> dict[str, int]:
        counts = dict.fromkeys(_STATES, 0)
        for child in self._children.values():
            state = child.conn.state if child.conn.state in counts else "down"
            counts[state] += 1
        counts["stopping"] = len(self._closing)
        return counts

    def describe(self) -> dict[str, Any]:
        """For /readyz and the admin view: counts only (principal names are not shown there)."""
        return {
            "era": self._era,  # the first child's (None before any): the head itself speaks no era
            "sharing": "per-principal",
            "children": self.counts(),
            "max_children": self.config.max_children,
            "idle_s": self.config.idle_s,
        }

    def detail(self) -> dict[str, dict[str, Any]]:
        """Each child by principal name, for the admin API only (least recently used first)."""
        now = time.monotonic()
        return {
            child.principal: {
                "state": child.conn.state,
                "inflight": child.conn.inflight,
                "idle_s": 0.0 if child.busy() else round(now - child.last_used, 3),
                "restarts": child.conn.restarts,
                "error": child.conn.last_error,
            }
            for child in self._children.values()
        }

    def _publish(self) -> None:
        if self._report is not None:
            self._report(self.name, self.counts())


def spawn_problem(config: BackendConfig) -> str | None:
    """Why ``config.command`` could not be spawned now (None: it can), as the OS would resolve it."""
    command = config.command or ""
    if os.sep in command:
        path = command if os.path.isabs(command) or not config.cwd else os.path.join(config.cwd, command)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return None
        return f"command {command!r} is not an executable file"
    search = config.env.get("PATH", os.environ.get("PATH"))
    if shutil.which(command, path=search) is not None:
        return None
    return f"command {command!r} is not found on PATH"
