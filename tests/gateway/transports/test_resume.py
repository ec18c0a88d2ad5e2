"""Where a GET resumes a session's stream (gateway/transports/resume.py), on real sessions and channels."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.config import Limits
from gateway.federation import View
from gateway.replicas.shared_sessions import LocalSessions
from gateway.sessions import ClientSession, SessionStore
from gateway.transports.resume import resume_point
from policies.principal import ANONYMOUS_ALL

VIEW = View("all", ("a",), None)  # type: ignore[arg-type]  # the namer is never used here


def _session() -> ClientSession:
    return ClientSession("sid-resume", "streamable-http", VIEW, ANONYMOUS_ALL, Limits(sse_replay_events=4))


def _local() -> LocalSessions:
    """One replica's sessions (a memory bus): no history beyond each stream's own window."""
    return LocalSessions(SessionStore(Limits(), lambda session: None))


def _note(n: int) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": "notifications/message", "params": {"n": n}}


class _History:
    """One replica's view of a shared history: it holds what the session's stream sent after ``seen``."""

    keeps_history = True

    def __init__(self, held: list[dict[str, Any]] | None) -> None:
        self.held = held
        self.asked: list[int] = []

    async def missed(self, session: ClientSession, last_seen: int) -> list[dict[str, Any]] | None:
        self.asked.append(last_seen)
        return self.held


async def test_no_last_event_id_reads_the_session_stream_from_now() -> None:
    session = _session()
    session.standalone.push(_note(1))
    point = await resume_point(session, None, _local())
    assert point == (session.standalone, session.standalone.last_seq, [])


async def test_a_stream_resumes_after_the_last_event_its_client_saw() -> None:
    session = _session()
    stream = session.standalone
    for n in range(3):
        stream.push(_note(n))
    point = await resume_point(session, f"{stream.id}-1", _local())
    assert point == (stream, 1, [])


@pytest.mark.parametrize("suffix", ["", "x", "²", "-1", "1.0", " 1"])
async def test_an_id_the_gateway_never_minted_cannot_resume(suffix: str) -> None:
    session = _session()
    stream = session.standalone
    stream.push(_note(0))
    assert await resume_point(session, f"{stream.id}-{suffix}", _local()) is None
    assert await resume_point(session, f"nosuchstream-1{suffix}", _local()) is None


async def test_a_stream_that_no_longer_holds_what_came_after_cannot_resume() -> None:
    session = _session()
    stream = session.standalone
    for n in range(10):  # the replay window holds 4
        stream.push(_note(n))
    assert await resume_point(session, f"{stream.id}-1", _local()) is None
    assert await resume_point(session, f"{stream.id}-8", _local()) == (stream, 8, [])


async def test_with_many_replicas_the_session_stream_resumes_from_the_shared_history() -> None:
    session = _session()
    stream = session.standalone
    history = _History([_note(7), _note(8)])
    point = await resume_point(session, f"{stream.id}-6", history)  # type: ignore[arg-type]
    assert point == (stream, stream.last_seq, [_note(7), _note(8)])
    assert history.asked == [6]
    gone = _History(None)  # the history no longer reaches back that far
    assert await resume_point(session, f"{stream.id}-6", gone) is None  # type: ignore[arg-type]
