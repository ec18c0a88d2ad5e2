"""Multi-round-trip requests (MRTR) for modern clients: parked calls and signed request state.

A modern (2026-07-28) client cannot be asked anything while its request runs: a server that needs
input answers ``input_required`` and the client retries with ``inputResponses``. When the backend
is a legacy server that asks through a real server-to-client request, the gateway *parks* the
backend call, still running and holding the backend's request, and hands the client a
``requestState`` that names it. The retry resumes the call and answers the waiting backend.

Every state the gateway issues is HMAC-signed with the gateway key and bound to the principal and
an expiry, so a client can neither forge, alter nor replay another principal's state. A modern
backend's own state is wrapped the same way on its way through.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import itertools
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway import jsonrpc

log = logging.getLogger(__name__)

_PARKED = "sb1"  # a parked legacy-backend call
_WRAPPED = "sb2"  # a modern backend's own requestState, wrapped


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class StateError(jsonrpc.RpcError):
    def __init__(self, reason: str) -> None:
        super().__init__(jsonrpc.INVALID_PARAMS, f"Invalid requestState: {reason}")


class StateSigner:
    def __init__(self, key: bytes | None = None) -> None:
        # A random key per process is correct by default: a parked call lives in this process only.
        self._key = key or os.urandom(32)

    def _mac(self, kind: str, payload: str) -> str:
        signed = f"{kind}.{payload}".encode("utf-8", "surrogatepass")
        return _b64(hmac.new(self._key, signed, hashlib.sha256).digest())

    def sign(self, kind: str, body: dict[str, Any]) -> str:
        payload = _b64(orjson.dumps(body))
        return f"{kind}.{payload}.{self._mac(kind, payload)}"

    def verify(self, token: Any, principal: str) -> tuple[str, dict[str, Any]]:
        if not isinstance(token, str) or token.count(".") != 2:
            raise StateError("not a state this gateway issued")
        kind, payload, mac = token.split(".")
        # Compare the MAC's canonical text, not its decoded bytes: lenient base64 decoding would
        # accept altered tokens (an appended "=", changed unused low bits) as the same MAC.
        expected = self._mac(kind, payload).encode()
        if not hmac.compare_digest(expected, mac.encode("utf-8", "surrogatepass")):
            raise StateError("signature does not match (tampered or from another gateway)")
        try:
            body = orjson.loads(_unb64(payload))
        except (ValueError, orjson.JSONDecodeError):
            raise StateError("malformed") from None
        if not isinstance(body, dict):
            raise StateError("malformed")
        if body.get("u") != principal:
            raise StateError("issued to another principal")
        if not isinstance(body.get("e"), (int, float)) or body["e"] < time.time():
            raise StateError("expired")
        return kind, body


def is_gateway_state(token: Any) -> bool:
    return isinstance(token, str) and token.startswith((f"{_PARKED}.", f"{_WRAPPED}."))


@dataclass(eq=False)
class Parked:
    """A backend call waiting for a modern client's answers."""

    id: str
    backend: str
    method: str
    principal: str
    task: asyncio.Task[dict[str, Any]]
    session: Any  # the ClientSession whose outgoing map holds the backend's requests
    sink: Any  # the CallSink of the call, re-pointed at each retry's stream
    keys: dict[str, str] = field(default_factory=dict)  # input key -> outgoing gid
    requests: dict[str, Any] = field(default_factory=dict)  # input key -> {method, params}
    expiry: asyncio.TimerHandle | None = None


class Parking:
    def __init__(self, ttl_s: float, key: bytes | None = None, replica: str = "") -> None:
        self._ttl = ttl_s
        self._signer = StateSigner(key)
        self.replica = replica  # named in every parked state: the one replica that can resume it
        self._parked: dict[str, Parked] = {}
        self._ids = itertools.count(1)

    def __len__(self) -> int:
        return len(self._parked)

    def park(
        self,
        *,
        backend: str,
        method: str,
        principal: str,
        task: asyncio.Task[dict[str, Any]],
        session: Any,
        sink: Any,
        keys: dict[str, str],
        requests: dict[str, Any],
    ) -> str:
        parked = Parked(f"{os.urandom(6).hex()}-{next(self._ids)}", backend, method, principal, task, session, sink)
        parked.keys, parked.requests = keys, requests
        parked.expiry = asyncio.get_running_loop().call_later(self._ttl, self._expire, parked.id)
        self._parked[parked.id] = parked
        body = {"p": parked.id, "u": principal, "e": time.time() + self._ttl, "r": self.replica}
        return self._signer.sign(_PARKED, body)

    def use_key(self, key: bytes) -> None:
        """Sign and verify with the deployment's key (many replicas: gateway/replicas/state_key.py)."""
        self._signer = StateSigner(key)

    def owner_of(self, token: Any) -> str | None:
        """The replica a parked state names (read, not verified: the owner verifies it), or None."""
        if not isinstance(token, str) or not token.startswith(f"{_PARKED}.") or token.count(".") != 2:
            return None
        try:
            body = orjson.loads(_unb64(token.split(".")[1]))
        except (ValueError, orjson.JSONDecodeError):
            return None
        owner = body.get("r") if isinstance(body, dict) else None
        return owner if isinstance(owner, str) and owner else None

    def resume(self, token: Any, principal: str, backend: str, method: str) -> Parked:
        kind, body = self._signer.verify(token, principal)
        if kind != _PARKED:
            raise StateError("not a parked call")
        parked = self._parked.pop(str(body.get("p")), None)
        if parked is None:
            raise StateError("the call it names has ended or was already resumed")
        if parked.expiry is not None:
            parked.expiry.cancel()
        if parked.backend != backend or parked.method != method:
            parked.task.cancel()
            raise StateError("it belongs to a different request")
        return parked

    def wrap(self, backend_state: str, principal: str, backend: str) -> str:
        return self._signer.sign(
            _WRAPPED, {"s": backend_state, "b": backend, "u": principal, "e": time.time() + self._ttl}
        )

    def unwrap(self, token: Any, principal: str, backend: str) -> str:
        kind, body = self._signer.verify(token, principal)
        state = body.get("s")
        if kind != _WRAPPED or body.get("b") != backend or not isinstance(state, str):
            raise StateError("it belongs to a different request")
        return state

    def _expire(self, parked_id: str) -> None:
        parked = self._parked.pop(parked_id, None)
        if parked is not None:
            log.info("parked %s on backend %s expired without a retry", parked.method, parked.backend)
            parked.task.cancel()

    def close(self) -> None:
        for parked in self._parked.values():
            if parked.expiry is not None:
                parked.expiry.cancel()
            parked.task.cancel()
        self._parked.clear()
