"""A legacy session's shared record (gateway/replicas/records.py): what one replica writes, another
restores exactly; junk never restores half; the fingerprint moves with every recorded change."""

from __future__ import annotations

import orjson
from hypothesis import given, strategies as st

from adapters import codecs
from gateway.config import Limits
from gateway.federation import Namer, View
from gateway.mcpc.client import McpcClient
from gateway.mcpl.state import McplSession
from gateway.replicas.records import apply, credentials_of, fingerprint, record_of
from gateway.sessions import ClientSession
from policies.auth import Credentials
from policies.patterns import CapabilitySet
from policies.principal import Principal
from policies.scopes import ScopeRules

VIEW = View("*", ("a", "b"), Namer("always", "__", ("a", "b")))
ALICE = Principal("alice", CapabilitySet(["*"]))


def session(session_id: str = "s-1") -> ClientSession:
    return ClientSession(session_id, "streamable-http", VIEW, ALICE, Limits())


def full() -> ClientSession:
    s = session()
    s.credentials = Credentials("jwt", "alice", ("mcp/request:*",), 2_000_000_000.0, None)
    s.protocol_version = "2025-06-18"
    s.codec = codecs.DRAFT
    s.client_info = {"name": "host", "version": "1"}
    s.client_capabilities = {"experimental": {"mcpl": {"version": "0.4"}}, "sampling": {}}
    s.initialized = True
    s.log_level = "debug"
    s.subscriptions = {("a", "file:///x"), ("b", "demo://y")}
    s.mcpc = McpcClient("0.2.6", "client", "_mcpc_init", "peer-session")
    s.mcpl = McplSession({"pushEvents": True})
    s.mcpl.selection.apply(["a.*"], ["a.secret"])
    s.mcpl.scopes["a.files"] = ScopeRules(("read:*",), ("write:*",))
    s.mcpl.approve("a", "files", "read:/etc/hosts")
    return s


def test_what_one_replica_writes_another_restores() -> None:
    original = full()
    record = orjson.loads(orjson.dumps(record_of(original, "replica-1")))  # through JSON, as in the bus
    copy = session()
    copy.mcpl = McplSession({"pushEvents": True})  # derived again from initialize on the restoring replica
    apply(copy, record)
    assert credentials_of(record) == original.credentials
    for field in ("protocol_version", "client_info", "client_capabilities", "initialized", "log_level"):
        assert getattr(copy, field) == getattr(original, field), field
    assert copy.codec is codecs.DRAFT and copy.subscriptions == original.subscriptions
    assert copy.mcpc == original.mcpc
    assert copy.mcpl.selection.snapshot() == original.mcpl.selection.snapshot()
    assert copy.mcpl.selection.is_enabled("a.tools") and not copy.mcpl.selection.is_enabled("a.secret")
    assert copy.mcpl.scopes == original.mcpl.scopes
    assert copy.mcpl.approved("a", "files") == ["read:/etc/hosts"]
    assert fingerprint(copy) == fingerprint(original)
    assert record["holder"] == "replica-1"
    # Who, never how: the credentials' kind, name and claims, no token.
    assert set(record["credentials"]) == {"kind", "name", "token_capabilities", "expires", "topic"}


def test_the_fingerprint_moves_with_every_recorded_change() -> None:
    s = full()
    seen = {fingerprint(s)}
    s.log_level = "info"
    seen.add(fingerprint(s))
    s.subscriptions.add(("a", "file:///z"))
    seen.add(fingerprint(s))
    assert s.mcpl is not None
    s.mcpl.selection.apply([], ["a.*"])
    seen.add(fingerprint(s))
    assert s.mcpc is not None
    s.mcpc.session_id = "another"
    seen.add(fingerprint(s))
    s.mcpl.approve("b", "net", "host:example.org")
    seen.add(fingerprint(s))
    assert len(seen) == 6


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(), lambda c: st.lists(c) | st.dictionaries(st.text(), c)
    )
)
def test_junk_never_raises(junk: object) -> None:
    s = session()
    record = junk if isinstance(junk, dict) else {"format": 1, "credentials": junk, "mcpc": junk, "mcpl": junk}
    assert credentials_of(record) is None or isinstance(credentials_of(record), Credentials)
    apply(s, record)
