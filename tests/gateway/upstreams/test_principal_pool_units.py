"""The per-principal pool without a gateway process: real stdio children, its bounds, its config (issue 17)."""

from __future__ import annotations

import asyncio
import sys
from functools import partial
from pathlib import Path

import pytest
import yaml
from hypothesis import given, strategies as st
from pydantic import ValidationError

from gateway.admin import REDACTED, redacted
from gateway.cli import main as cli_main
from gateway.config import Backend, Config, Limits
from gateway.upstreams import make_carrier
from gateway.upstreams.connection import BackendConnection
from gateway.upstreams.principal_pool import PoolHead, PoolRefused, PrincipalPool, spawn_problem
from policies.patterns import CapabilitySet
from policies.principal import ANONYMOUS_ALL, Principal
from policies.principal_pool import PoolAdmission
from tests.support import QuietHandler, alive, gone, stdio_backend

pytestmark = [pytest.mark.timeout(60)]

ALICE = Principal("alice", CapabilitySet(["*"]))
BOB = Principal("bob", CapabilitySet(["*"]))
CAROL = Principal("carol", CapabilitySet(["*"]))


def backend(**extra: object) -> Backend:
    fields = {"sharing": "per-principal", "principal_env": {"alice": {"API_KEY": "a"}, "bob": {"API_KEY": "b"}}}
    return Backend.model_validate(stdio_backend("tests.gateway.upstreams.env_backend", **{**fields, **extra}))


def make_pool(cfg: Backend) -> PrincipalPool:
    info = {"name": "switchboard", "version": "0"}
    head = PoolHead("envs", cfg, partial(make_carrier, "envs", cfg, Limits()), QuietHandler(), info)

    def connect(name: str, child_cfg: Backend, principal: str) -> BackendConnection:
        carrier = partial(make_carrier, name, child_cfg, Limits())
        return BackendConnection(name, child_cfg, carrier, QuietHandler(), info, offer_mcpl=False)

    admission = PoolAdmission("envs", cfg.principal_env, cfg.default_env, cfg.principal_env_var)
    return PrincipalPool(head, admission, connect, list_cache_s=60.0)


def pid_of(conn: BackendConnection) -> int:
    carrier = conn._carrier
    pid = getattr(carrier, "pid", None)
    assert isinstance(pid, int), carrier
    return pid


# ---- the pool ---------------------------------------------------------------------------------


async def test_concurrent_calls_of_one_principal_spawn_one_child_and_stop_closes_it() -> None:
    pool = make_pool(backend())
    await pool.start()
    try:
        assert pool.head.state == "ready"
        children = await asyncio.gather(*(pool.child(ALICE) for _ in range(5)))
        assert len({id(c) for c in children}) == 1 and pool.spawned == 1
        conn = children[0].conn
        assert conn.state == "ready"
        answer = await conn.request("tools/call", {"name": "whoami", "arguments": {}}, timeout=10)
        assert '"api_key": "a"' in answer["result"]["content"][0]["text"]
        pid = pid_of(conn)
    finally:
        await pool.stop()
    assert await gone(pid)
    assert pool.counts()["ready"] == 0 and pool.counts()["stopping"] == 0


async def test_a_full_pool_of_busy_children_refuses_and_an_idle_one_makes_room() -> None:
    pool = make_pool(backend(max_children=1))
    await pool.start()
    try:
        alice = await pool.child(ALICE)
        alice.waiters += 1  # as if a call were waiting on it: busy
        with pytest.raises(PoolRefused) as refused:
            await pool.child(BOB)
        assert refused.value.decision.code == -32094 and pool.spawned == 1
        alice.waiters -= 1
        pid = pid_of(alice.conn)
        bob = await pool.child(BOB)
        assert bob.conn.state == "ready" and pool.existing(ALICE) is None
        assert not alive(pid)  # stopped before bob's child was spawned: never two at once
    finally:
        await pool.stop()


async def test_refused_principals_spawn_nothing() -> None:
    pool = make_pool(backend())
    await pool.start()
    try:
        for who in (CAROL, ANONYMOUS_ALL):
            with pytest.raises(PoolRefused) as refused:
                await pool.child(who)
            assert refused.value.decision.code == -32093
        assert pool.spawned == 0
    finally:
        await pool.stop()


async def test_the_reaper_stops_idle_children_and_is_cancelled_on_stop() -> None:
    pool = make_pool(backend(idle_s=0.2))
    await pool.start()
    try:
        pid = pid_of((await pool.child(ALICE)).conn)
        assert await gone(pid, timeout_s=5)
        assert pool.existing(ALICE) is None
    finally:
        await pool.stop()
    assert pool._reaper is not None and pool._reaper.done()


async def test_a_command_that_cannot_be_spawned_leaves_the_head_down() -> None:
    cfg = Backend(transport="stdio", command="surely-not-a-command-here", sharing="per-principal")
    assert spawn_problem(cfg) == "command 'surely-not-a-command-here' is not found on PATH"
    pool = make_pool(cfg)
    await pool.start()
    try:
        assert pool.head.state == "down" and pool.head.last_error is not None
    finally:
        await pool.stop()


async def test_the_head_carries_no_call() -> None:
    pool = make_pool(backend())
    await pool.start()
    try:
        with pytest.raises(Exception, match="one process per principal"):
            await pool.head.request("tools/list", None)
        assert pool.spawned == 0
    finally:
        await pool.stop()


# ---- the policy -------------------------------------------------------------------------------


def test_admission_never_lends_one_principals_environment_to_another() -> None:
    admission = PoolAdmission("envs", {"alice": {"API_KEY": "a"}}, None, "SWITCHBOARD_PRINCIPAL")
    assert admission.admit(ALICE).allowed
    assert admission.env_of(ALICE) == {"API_KEY": "a", "SWITCHBOARD_PRINCIPAL": "alice"}
    assert not admission.admit(BOB).allowed
    assert not admission.admit(Principal("alice", CapabilitySet(["*"]), anonymous=True)).allowed
    nul = PoolAdmission("envs", {}, {"K": "v"}, "SWITCHBOARD_PRINCIPAL")
    assert not nul.admit(Principal("eve\0x", CapabilitySet(["*"]))).allowed  # no name a process cannot hold
    lenient = PoolAdmission("envs", {"alice": {"API_KEY": "a"}}, {"API_KEY": "low"}, None)
    assert lenient.admit(BOB).allowed and lenient.env_of(BOB) == {"API_KEY": "low"}
    assert lenient.env_of(ALICE) == {"API_KEY": "a"}
    assert not lenient.admit(ANONYMOUS_ALL).allowed
    full = admission.full(3)
    assert not full.allowed and full.code == -32094 and "a" not in str(full.data.get("max_children"))


# ---- the config -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"transport": "http", "url": "http://127.0.0.1:1/mcp", "sharing": "per-principal"}, "needs transport 'stdio'"),
        ({"transport": "stdio", "command": "x", "principal_env": {"a": {"K": "v"}}}, "principal_env only apply"),
        ({"transport": "stdio", "command": "x", "idle_s": 5}, "idle_s only apply"),
        ({"transport": "stdio", "command": "x", "sharing": "per-principal", "default_env": {"A=B": "v"}}, "'A=B'"),
        ({"transport": "stdio", "command": "x", "sharing": "per-principal", "max_children": 0}, "greater than"),
        (
            {"transport": "stdio", "command": "x", "sharing": "per-principal", "principal_env": {"a": {"K": "v\0"}}},
            "must not contain NUL",
        ),
    ],
)
def test_config_errors(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        Backend.model_validate(fields)


def test_a_per_principal_backend_cannot_sit_in_an_mcpx_topic() -> None:
    envs = {"transport": "stdio", "command": "x", "sharing": "per-principal"}
    with pytest.raises(ValidationError, match="runs one process per principal"):
        Config.model_validate({"backends": {"envs": envs}, "mcpx": {"topics": {"t": {"participants": ["envs"]}}}})


def test_check_explains_a_per_principal_backend_over_http(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "pool.yaml"
    path.write_text(
        "backends:\n  gh:\n    transport: http\n    url: http://127.0.0.1:1/mcp\n    sharing: per-principal\n"
    )
    assert cli_main(["check", "-c", str(path)]) == 1
    err = capsys.readouterr().err
    assert f"error: {path}:5: backends.gh.sharing: sharing 'per-principal' needs transport 'stdio'" in err


def test_principal_env_is_redacted_in_the_admin_config() -> None:
    config = Config.model_validate({"backends": {"envs": stdio_backend("m", **backend_fields())}})
    shown = redacted(config.model_dump(mode="json"))
    envs = shown["backends"]["envs"]
    assert envs["principal_env"] == {"alice": {"API_KEY": REDACTED}}
    assert envs["default_env"] == {"API_KEY": REDACTED}


def backend_fields() -> dict[str, object]:
    return {"sharing": "per-principal", "principal_env": {"alice": {"API_KEY": "a"}}, "default_env": {"API_KEY": "d"}}


def test_probe_checks_the_command_and_spawns_no_child(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "probe.yaml"
    found = {"transport": "stdio", "command": "true", "sharing": "per-principal", "required": True}
    missing = {**found, "command": "surely-not-a-command-here"}
    path.write_text(yaml.safe_dump({"backends": {"found": found, "missing": missing}}))
    assert cli_main(["check", "-c", str(path), "--probe", "--timeout", "5"]) == 1
    out = capsys.readouterr().out
    assert "backend found (stdio, required): command found; one child per principal" in out
    assert "backend missing (stdio, required): UNREACHABLE: command 'surely-not-a-command-here' is not found" in out


async def test_a_child_that_dies_at_start_fails_its_call_with_the_reason_and_is_reaped() -> None:
    cfg = Backend.model_validate(
        {
            "transport": "stdio",
            "command": sys.executable,
            "args": ["-c", "import sys; sys.exit(3)"],
            "sharing": "per-principal",
            "principal_env": {"alice": {"API_KEY": "a"}},
            "idle_s": 0.3,
        }
    )
    pool = make_pool(cfg)
    await pool.start()
    try:
        child = await pool.child(ALICE)
        # The reason is the exit code or the closed stdin, whichever the gateway noticed first.
        error = child.conn.last_error or ""
        assert child.conn.state != "ready" and ("code 3" in error or "stdin closed" in error), error
        assert "API_KEY" not in error
        async with asyncio.timeout(5):
            while pool.existing(ALICE) is not None:  # noqa: ASYNC110 - the reaper has no event to wait on
                await asyncio.sleep(0.05)
    finally:
        await pool.stop()


_NAMES = st.text(alphabet="abcdefgh.-_@", min_size=1, max_size=6)


@given(
    envs=st.dictionaries(_NAMES, st.dictionaries(st.sampled_from(["K", "L"]), _NAMES, max_size=2), max_size=4),
    default=st.none() | st.dictionaries(st.sampled_from(["K", "L"]), st.just("default"), max_size=2),
    who=_NAMES,
)
def test_admission_gives_a_principal_its_own_entry_the_default_or_nothing(
    envs: dict[str, dict[str, str]], default: dict[str, str] | None, who: str
) -> None:
    admission = PoolAdmission("envs", envs, default, None)
    principal = Principal(who, CapabilitySet(["*"]))
    decision = admission.admit(principal)
    if who in envs:
        assert decision.allowed and admission.env_of(principal) == envs[who]
    elif default is not None:
        assert decision.allowed and admission.env_of(principal) == default
    else:
        assert not decision.allowed
    assert not admission.admit(Principal(who, CapabilitySet(["*"]), anonymous=True)).allowed


def test_check_warns_about_principal_env_entries_no_principal_can_use(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "typo.yaml"
    envs = {"transport": "stdio", "command": "true", "sharing": "per-principal", "principal_env": {"alcie": {"K": "v"}}}
    path.write_text(yaml.safe_dump({"backends": {"envs": envs}, "principals": {"alice": {"tokens": ["t"]}}}))
    assert cli_main(["check", "-c", str(path)]) == 0, "warnings do not fail the check"
    assert "backends.envs.principal_env.alcie names no principal of this config" in capsys.readouterr().err
    path.write_text(yaml.safe_dump({"backends": {"envs": envs}}))
    assert cli_main(["check", "-c", str(path)]) == 0
    assert "only anonymous callers (who never get one) can reach it" in capsys.readouterr().err


async def test_no_child_is_spawned_once_the_pool_stops() -> None:
    pool = make_pool(backend())
    await pool.start()
    await pool.stop()
    with pytest.raises(Exception, match="stopping"):
        await pool.child(ALICE)
    assert pool.spawned == 0
