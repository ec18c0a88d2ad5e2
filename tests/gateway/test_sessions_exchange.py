"""The per-exchange session of the 2026-07-28 era (``ClientSession.exchange``) and ``InputSignal``."""

from __future__ import annotations

import asyncio
import os

from adapters import codecs
from gateway.config import Limits
from gateway.federation import View
from gateway.sessions import ClientSession, InputSignal
from policies.auth import Credentials
from policies.principal import ANONYMOUS_ALL

VIEW = View("all", ("a",), None)  # type: ignore[arg-type]  # the namer is never used here
CREDENTIALS = Credentials("static", "alice")


def _exchange() -> ClientSession:
    return ClientSession.exchange(
        "modern",
        VIEW,
        ANONYMOUS_ALL,
        Limits(),
        CREDENTIALS,
        "2026-07-28",
        {"x": {}},
        {"name": "c"},
        "debug",
        codecs.MODERN,
    )


def test_an_exchange_session_sets_every_attribute_a_session_has() -> None:
    """``exchange`` sets the slots itself: one left out would be an AttributeError far away."""
    session = _exchange()
    plain = ClientSession("id", "modern", VIEW, ANONYMOUS_ALL, Limits())
    for name in ClientSession.__slots__:
        assert hasattr(plain, name), name
        assert hasattr(session, name), f"exchange() does not set {name}"
        if name not in {"id", "_short", "_stream_seq", "_out_ids", "_standalone", "created", "last_seen", "streams"}:
            mutable = not isinstance(getattr(plain, name), (str, int, float, bool, frozenset, type(None)))
            if mutable and name not in {"view", "principal", "limits", "codec", "credentials", "client_info"}:
                assert getattr(session, name) is not getattr(plain, name), name  # never shared between sessions
    # Everything else as initialize would leave it.
    assert (session.protocol_version, session.client_capabilities, session.client_info, session.log_level) == (
        "2026-07-28",
        {"x": {}},
        {"name": "c"},
        "debug",
    )
    assert session.initialized and session.codec is codecs.MODERN and session.credentials is CREDENTIALS
    assert session.dialects == plain.dialects and session.created_here and not session.closed
    assert (session.mcpl, session.mgp, session.mcpc, session.input_ready) == (None, None, None, None)
    assert session.inflight == {} and session.outgoing == {} and session.input_requests == []
    assert session.standalone.id == f"{session.id[:8]}-0" and session.standalone is session.standalone
    assert session.find_stream(f"{session.id[:8]}-0") is session.standalone
    assert session.new_stream(resumable=False).id == f"{session.id[:8]}-1"
    assert session.next_outgoing_id().endswith(f"{session.id[:8]}-1")


def test_exchange_sessions_get_distinct_random_ids() -> None:
    ids = {_exchange().id for _ in range(1000)}
    assert len(ids) == 1000
    assert all(len(i) == 24 and int(i, 16) >= 0 for i in ids)  # 96 bits, as hex


def test_exchange_ids_differ_per_exchange_and_per_process() -> None:
    """The ids come from the process's own generator (no syscall per request), reseeded in a forked
    child: a fork copies the generator, and the child's ids would otherwise repeat its parent's."""
    assert len({_exchange().id[:8] for _ in range(100)}) == 100  # the stream ids a client sees differ too
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its first id, then out at once (no pytest teardown in a copy of the process)
        try:
            os.write(write, _exchange().id.encode())
        finally:
            os._exit(0)
    os.close(write)
    try:
        child = os.read(read, 64).decode()
    finally:
        os.close(read)
        os.waitpid(pid, 0)
    assert len(child) == 24 and child != _exchange().id  # (without the reseed: the parent's next id)


def test_exchange_sessions_share_no_mutable_state() -> None:
    one, two = _exchange(), _exchange()
    one.input_requests.append(("g", "m", None))
    one.missing_capabilities.append("sampling")
    one.outgoing["g"] = None  # type: ignore[assignment]
    assert two.input_requests == [] and two.missing_capabilities == [] and two.outgoing == {}
    assert one.standalone is not two.standalone and one.streams is not two.streams


async def test_an_input_signal_wakes_its_waiters() -> None:
    signal = InputSignal()
    waiter = signal.waiter()
    signal.set()
    async with asyncio.timeout(1):
        await waiter
    assert not signal.interrupted


def test_an_input_signal_with_an_interrupt_calls_it_once() -> None:
    calls: list[int] = []
    signal = InputSignal(lambda: calls.append(1))
    assert not signal.interrupted
    signal.set()
    signal.set()
    assert calls == [1] and signal.interrupted
