"""gateway/mrtr.py: signed request state, parked backend calls, wrapped backend state."""

from __future__ import annotations

import asyncio
import base64
import time
from typing import Any

import orjson
import pytest

from gateway import jsonrpc
from gateway.mrtr import Parked, Parking, StateError, StateSigner, is_gateway_state

KEY = b"k" * 32


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def body(token: str) -> dict[str, Any]:
    payload = token.split(".")[1]
    return orjson.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


def assert_state_error(exc: BaseException) -> None:
    assert isinstance(exc, StateError)
    assert isinstance(exc, jsonrpc.RpcError)
    assert exc.code == -32602
    assert exc.to_error()["code"] == -32602


def verify_fails(signer: StateSigner, token: Any, principal: str = "alice") -> StateError:
    with pytest.raises(StateError) as excinfo:
        signer.verify(token, principal)
    assert_state_error(excinfo.value)
    return excinfo.value


def sleeper() -> asyncio.Task[Any]:
    return asyncio.create_task(asyncio.sleep(10))


async def settle(task: asyncio.Task[Any]) -> None:
    """Let a cancelled task finish unwinding."""
    try:
        await asyncio.wait_for(task, 1)
    except asyncio.CancelledError:
        pass


def park(parking: Parking, task: asyncio.Task[Any], **overrides: Any) -> str:
    kwargs: dict[str, Any] = {
        "backend": "weather",
        "method": "tools/call",
        "principal": "alice",
        "task": task,
        "session": object(),
        "sink": object(),
        "keys": {"k1": "g1"},
        "requests": {"k1": {"method": "elicitation/create", "params": {"message": "city?"}}},
    }
    kwargs.update(overrides)
    return parking.park(**kwargs)


# ---- StateSigner -------------------------------------------------------------------------------


def signed(signer: StateSigner, kind: str = "sb1", **extra: Any) -> str:
    return signer.sign(kind, {"p": "x", "u": "alice", "e": time.time() + 60, **extra})


def test_sign_verify_round_trip() -> None:
    signer = StateSigner(KEY)
    payload = {"p": "abc", "u": "alice", "e": time.time() + 60, "extra": [1, "two"]}
    token = signer.sign("sb1", payload)
    assert token.count(".") == 2
    assert token.startswith("sb1.")
    kind, got = signer.verify(token, "alice")
    assert kind == "sb1"
    assert got == payload


def test_same_key_verifies_across_signers_random_keys_do_not() -> None:
    token = signed(StateSigner(KEY))
    assert StateSigner(KEY).verify(token, "alice")[0] == "sb1"
    verify_fails(StateSigner(), token)
    verify_fails(StateSigner(b"other" * 8), token)


def test_tampered_kind_is_refused() -> None:
    signer = StateSigner(KEY)
    token = signed(signer)
    _, payload, mac = token.split(".")
    verify_fails(signer, f"sb2.{payload}.{mac}")


def test_tampered_payload_is_refused() -> None:
    signer = StateSigner(KEY)
    token = signed(signer)
    kind, _, mac = token.split(".")
    forged = b64(orjson.dumps({"p": "x", "u": "mallory", "e": time.time() + 60}))
    verify_fails(signer, f"{kind}.{forged}.{mac}", "mallory")
    # A payload with one character changed.
    _, payload, _ = token.split(".")
    flipped = payload[:-1] + ("A" if payload[-1] != "A" else "B")
    verify_fails(signer, f"{kind}.{flipped}.{mac}")


def test_tampered_mac_is_refused() -> None:
    signer = StateSigner(KEY)
    token = signed(signer)
    kind, payload, mac = token.split(".")
    for bad in ["", "AAAA", mac[:-1], mac[::-1], mac[:-1] + ("A" if mac[-1] != "A" else "B")]:
        verify_fails(signer, f"{kind}.{payload}.{bad}")


@pytest.mark.parametrize("suffix", ["-TAMPERED", "=", "==", "A", "!", " "])
def test_appended_text_is_refused(suffix: str) -> None:
    signer = StateSigner(KEY)
    token = signed(signer)
    verify_fails(signer, token + suffix)


def test_non_canonical_mac_encoding_is_refused() -> None:
    # 32 bytes are 43 base64 characters whose last one has two unused low bits; a different
    # last character that decodes to the same bytes must still be refused.
    signer = StateSigner(KEY)
    token = signed(signer)
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    last = alphabet.index(token[-1])
    assert last % 4 == 0
    variant = token[:-1] + alphabet[last + 1]
    assert base64.urlsafe_b64decode(variant.split(".")[2] + "=") == base64.urlsafe_b64decode(token.split(".")[2] + "=")
    verify_fails(signer, variant)


@pytest.mark.parametrize(
    "token",
    [None, 5, b"sb1.a.b", "", "nodots", "a.b", "a.b.c.d", "sb1..", "sb1.%%%.###", "sb1.\ud800.x", "sb1.é.é"],
)
def test_garbage_is_refused(token: Any) -> None:
    verify_fails(StateSigner(KEY), token)


def test_validly_signed_non_object_is_refused() -> None:
    signer = StateSigner(KEY)
    token = signer.sign("sb1", [1, 2])  # type: ignore[arg-type]
    verify_fails(signer, token)


def test_another_principal_is_refused() -> None:
    signer = StateSigner(KEY)
    token = signed(signer)
    exc = verify_fails(signer, token, "bob")
    assert "principal" in exc.message


def test_expired_is_refused() -> None:
    signer = StateSigner(KEY)
    exc = verify_fails(signer, signer.sign("sb1", {"u": "alice", "e": time.time() - 1}))
    assert "expired" in exc.message
    verify_fails(signer, signer.sign("sb1", {"u": "alice"}))
    verify_fails(signer, signer.sign("sb1", {"u": "alice", "e": "never"}))


async def test_expiry_with_a_short_ttl() -> None:
    parking = Parking(0.05, KEY)
    token = parking.wrap("backend-state", "alice", "weather")
    assert parking.unwrap(token, "alice", "weather") == "backend-state"
    await asyncio.sleep(0.1)
    with pytest.raises(StateError) as excinfo:
        parking.unwrap(token, "alice", "weather")
    assert_state_error(excinfo.value)
    assert "expired" in excinfo.value.message


def test_is_gateway_state() -> None:
    signer = StateSigner(KEY)
    assert is_gateway_state(signed(signer, "sb1"))
    assert is_gateway_state(signed(signer, "sb2"))
    assert not is_gateway_state(signed(signer, "sb3"))
    assert not is_gateway_state("opaque-backend-state")
    assert not is_gateway_state(None)


# ---- Parking: park / resume --------------------------------------------------------------------


async def test_park_and_resume_returns_the_parked_call() -> None:
    parking = Parking(30, KEY)
    task = sleeper()
    session, sink = object(), object()
    keys = {"k1": "g1", "k2": "g2"}
    requests = {"k1": {"method": "elicitation/create"}, "k2": {"method": "sampling/createMessage"}}
    token = park(parking, task, session=session, sink=sink, keys=keys, requests=requests)
    assert is_gateway_state(token)
    assert token.startswith("sb1.")
    assert len(parking) == 1

    parked = parking.resume(token, "alice", "weather", "tools/call")
    assert isinstance(parked, Parked)
    assert parked.task is task
    assert parked.session is session
    assert parked.sink is sink
    assert parked.keys == keys
    assert parked.requests == requests
    assert (parked.backend, parked.method, parked.principal) == ("weather", "tools/call", "alice")
    assert len(parking) == 0
    assert not task.cancelled()
    assert parked.expiry is not None
    assert parked.expiry.cancelled()  # resuming stops the expiry timer
    task.cancel()
    await settle(task)


async def test_parked_ids_are_distinct() -> None:
    parking = Parking(30, KEY)
    tasks = [sleeper(), sleeper()]
    tokens = [park(parking, t) for t in tasks]
    assert body(tokens[0])["p"] != body(tokens[1])["p"]
    assert len(parking) == 2
    assert parking.resume(tokens[1], "alice", "weather", "tools/call").task is tasks[1]
    assert parking.resume(tokens[0], "alice", "weather", "tools/call").task is tasks[0]
    parking.close()
    for t in tasks:
        t.cancel()
        await settle(t)


async def test_resume_twice_fails() -> None:
    parking = Parking(30, KEY)
    task = sleeper()
    token = park(parking, task)
    parking.resume(token, "alice", "weather", "tools/call")
    with pytest.raises(StateError) as excinfo:
        parking.resume(token, "alice", "weather", "tools/call")
    assert_state_error(excinfo.value)
    assert not task.cancelled()  # the first resumer owns it
    task.cancel()
    await settle(task)


@pytest.mark.parametrize(("backend", "method"), [("other", "tools/call"), ("weather", "prompts/get")])
async def test_resume_for_another_request_fails_and_cancels(backend: str, method: str) -> None:
    parking = Parking(30, KEY)
    task = sleeper()
    token = park(parking, task)
    with pytest.raises(StateError) as excinfo:
        parking.resume(token, "alice", backend, method)
    assert_state_error(excinfo.value)
    await settle(task)
    assert task.cancelled()
    assert len(parking) == 0
    # And it is gone: the right request cannot resume it any more.
    with pytest.raises(StateError):
        parking.resume(token, "alice", "weather", "tools/call")


async def test_resume_by_another_principal_fails_and_leaves_it_parked() -> None:
    parking = Parking(30, KEY)
    task = sleeper()
    token = park(parking, task)
    with pytest.raises(StateError) as excinfo:
        parking.resume(token, "bob", "weather", "tools/call")
    assert_state_error(excinfo.value)
    assert len(parking) == 1
    await asyncio.sleep(0)
    assert not task.done()
    assert parking.resume(token, "alice", "weather", "tools/call").task is task
    task.cancel()
    await settle(task)


async def test_resume_with_tampered_token_fails_and_leaves_it_parked() -> None:
    parking = Parking(30, KEY)
    task = sleeper()
    token = park(parking, task)
    for bad in [token + "-TAMPERED", "sb2" + token[3:], token[:-2]]:
        with pytest.raises(StateError):
            parking.resume(bad, "alice", "weather", "tools/call")
    assert len(parking) == 1
    assert not task.done()
    parking.close()
    await settle(task)
    assert task.cancelled()


async def test_resume_with_a_wrapped_state_fails() -> None:
    parking = Parking(30, KEY)
    wrapped = parking.wrap("s", "alice", "weather")
    with pytest.raises(StateError) as excinfo:
        parking.resume(wrapped, "alice", "weather", "tools/call")
    assert_state_error(excinfo.value)


async def test_resume_of_an_unknown_parked_id_fails() -> None:
    parking = Parking(30, KEY)
    forged = StateSigner(KEY).sign("sb1", {"p": "nope", "u": "alice", "e": time.time() + 60})
    with pytest.raises(StateError):
        parking.resume(forged, "alice", "weather", "tools/call")


async def test_another_gateways_token_is_refused() -> None:
    ours, theirs = Parking(30, KEY), Parking(30, b"x" * 32)
    task = sleeper()
    token = park(theirs, task)
    with pytest.raises(StateError):
        ours.resume(token, "alice", "weather", "tools/call")
    theirs.close()
    await settle(task)


# ---- Parking: expiry and close -----------------------------------------------------------------


async def test_expiry_cancels_the_parked_task_and_forgets_it() -> None:
    parking = Parking(0.05, KEY)
    task = sleeper()
    token = park(parking, task)
    assert len(parking) == 1
    await asyncio.sleep(0.15)
    assert len(parking) == 0
    await settle(task)
    assert task.cancelled()
    with pytest.raises(StateError):
        parking.resume(token, "alice", "weather", "tools/call")


async def test_resumed_call_is_not_cancelled_by_the_expiry_timer() -> None:
    parking = Parking(0.05, KEY)
    task = sleeper()
    token = park(parking, task)
    parking.resume(token, "alice", "weather", "tools/call")
    await asyncio.sleep(0.15)
    assert not task.done()
    task.cancel()
    await settle(task)


async def test_expiry_of_a_finished_task_is_harmless() -> None:
    parking = Parking(0.05, KEY)
    task = asyncio.create_task(asyncio.sleep(0, result={"content": []}))
    park(parking, task)
    await task
    await asyncio.sleep(0.15)
    assert len(parking) == 0
    assert task.result() == {"content": []}


async def test_close_cancels_everything() -> None:
    parking = Parking(30, KEY)
    tasks = [sleeper() for _ in range(3)]
    tokens = [park(parking, t, backend=f"b{i}") for i, t in enumerate(tasks)]
    assert len(parking) == 3
    parking.close()
    assert len(parking) == 0
    for task in tasks:
        await settle(task)
        assert task.cancelled()
    for i, token in enumerate(tokens):
        with pytest.raises(StateError):
            parking.resume(token, "alice", f"b{i}", "tools/call")


async def test_close_stops_expiry_timers() -> None:
    parking = Parking(0.05, KEY)
    task = sleeper()
    park(parking, task)
    parking.close()
    await asyncio.sleep(0.1)  # the timer, had it fired, would find nothing; no error either way
    await settle(task)
    assert task.cancelled()
    assert len(parking) == 0


# ---- wrap / unwrap -----------------------------------------------------------------------------


def test_wrap_unwrap_round_trip() -> None:
    parking = Parking(30, KEY)
    token = parking.wrap("opaque.backend=state", "alice", "weather")
    assert token.startswith("sb2.")
    assert is_gateway_state(token)
    assert "opaque" not in token.split(".")[0]
    assert parking.unwrap(token, "alice", "weather") == "opaque.backend=state"
    # Not single-use: a client may retry with the same state.
    assert parking.unwrap(token, "alice", "weather") == "opaque.backend=state"


def test_cross_backend_unwrap_is_refused() -> None:
    parking = Parking(30, KEY)
    token = parking.wrap("s", "alice", "weather")
    with pytest.raises(StateError) as excinfo:
        parking.unwrap(token, "alice", "calendar")
    assert_state_error(excinfo.value)


def test_unwrap_by_another_principal_or_tampered_is_refused() -> None:
    parking = Parking(30, KEY)
    token = parking.wrap("s", "alice", "weather")
    for args in [(token, "bob", "weather"), (token + "-TAMPERED", "alice", "weather")]:
        with pytest.raises(StateError) as excinfo:
            parking.unwrap(*args)
        assert_state_error(excinfo.value)


async def test_unwrap_of_a_parked_token_is_refused() -> None:
    parking = Parking(30, KEY)
    task = sleeper()
    token = park(parking, task)
    with pytest.raises(StateError):
        parking.unwrap(token, "alice", "weather")
    assert len(parking) == 1  # unwrap never touches parked calls
    parking.close()
    await settle(task)


def test_unwrap_requires_a_string_state() -> None:
    signer = StateSigner(KEY)
    token = signer.sign("sb2", {"s": 5, "b": "weather", "u": "alice", "e": time.time() + 60})
    with pytest.raises(StateError):
        Parking(30, KEY).unwrap(token, "alice", "weather")
