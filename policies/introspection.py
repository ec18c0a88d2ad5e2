"""OAuth 2.0 token introspection (RFC 7662) for opaque bearer tokens, with a bounded cache.

A token that is neither a static token nor a JWT is asked about at the authorization server. The
answer decides; this module only keeps the exchange safe and cheap. Invariants:

- The request is RFC 7662 §2.1: ``POST`` of ``token`` (and ``token_type_hint=access_token``) as a
  form, the gateway authenticated with ``client_secret_basic`` (RFC 6749 §2.3.1: id and secret
  form-encoded, then Base64). The token never appears in a log line, an error or a metric; cache
  keys are its SHA-256.
- Only ``"active": true`` (a JSON boolean, §2.2) admits a token; anything else is inactive. A
  ``refresh_token`` is not a bearer credential and is refused. ``exp``/``nbf``/``iat`` are typed as
  for a JWT and honoured (no leeway: the server's clock decided a moment ago); ``iss`` is checked
  when ``issuer`` is set; ``aud`` is kept for the caller, which knows the resource (policies/auth.py).
- Answers are cached by token hash: active ones for ``min(cache_s, exp - now)``, inactive ones for
  ``negative_cache_s`` so a flood of bad tokens does not flood the server. The cache is bounded
  (``max_entries``, oldest first out); concurrent requests with one token share one exchange, and
  at most :data:`MAX_CONCURRENT` exchanges run at once.
- A token that is not RFC 6750 §2.1 ``b64token`` syntax, or longer than :data:`MAX_TOKEN_BYTES`,
  is refused without asking anyone.
- A server that cannot be reached, times out, refuses the gateway's own credentials or answers
  garbage raises :class:`IntrospectionUnavailable` (the doors answer 503): the client's token may be
  fine, so a 401 would send it to re-authenticate in a loop while the server is down.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import re
import time
from collections import OrderedDict
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

import orjson

from policies.jwt import Fetch, Observe, TokenError, default_fetch, typed_claims

if TYPE_CHECKING:
    from gateway.config import Introspection

log = logging.getLogger(__name__)

MAX_TOKEN_BYTES = 8192
MAX_CONCURRENT = 32
_B64TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]+=*")  # RFC 6750 §2.1
_KEPT = ("sub", "username", "capabilities", "topic", "exp", "aud")  # what policies/auth.py reads


class IntrospectionUnavailable(Exception):
    """The authorization server could not say (down, slow, misconfigured): answer 503, not 401."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(slots=True)
class _Answer:
    claims: dict[str, Any] | None  # None: inactive
    reason: str  # why inactive (a fixed sentence)
    until: float  # monotonic time the answer may be reused until


def token_key(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def basic_credentials(client_id: str, client_secret: str) -> str:
    """``client_secret_basic`` (RFC 6749 §2.3.1): each part form-encoded, then joined and Base64."""
    pair = f"{quote(client_id, safe='')}:{quote(client_secret, safe='')}"
    return "Basic " + base64.b64encode(pair.encode()).decode()


class Introspector:
    def __init__(self, config: Introspection, fetch: Fetch | None = None, observe: Observe | None = None) -> None:
        self.config = config
        self._fetch = fetch
        self._observe = observe
        self._authorization = basic_credentials(config.client_id, config.client_secret)
        self._answers: OrderedDict[bytes, _Answer] = OrderedDict()
        self._inflight: dict[bytes, asyncio.Task[None]] = {}
        self._slots = asyncio.Semaphore(MAX_CONCURRENT)
        self.exchanges = 0  # how many requests went to the server (tests and metrics read it)

    # ---- the synchronous side (doors, on every request) -------------------------------------

    def claims(self, token: str) -> dict[str, Any] | None:
        """The cached answer's claims: a dict when active, None when not asked yet (or expired).
        Raises TokenError when the token is refused (malformed, or inactive)."""
        if len(token) > MAX_TOKEN_BYTES or not _B64TOKEN.fullmatch(token):
            raise TokenError("malformed token")
        answer = self._answers.get(token_key(token))
        if answer is None:
            return None
        exp = answer.claims.get("exp") if answer.claims is not None else None
        if exp is not None and exp <= time.time():
            raise TokenError("token expired")  # whatever the cache says: no answer outlives its token
        if answer.until <= time.monotonic():
            return None
        if answer.claims is None:
            raise TokenError(answer.reason)
        return answer.claims

    def pending(self, token: str) -> Awaitable[None] | None:
        """The exchange to await before :meth:`claims` can decide; None when it already can."""
        try:
            if self.claims(token) is not None:
                return None
        except TokenError:
            return None
        key = token_key(token)
        task = self._inflight.get(key)
        if task is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # a synchronous caller: authenticate() then says "not checked yet"
                return None
            task = loop.create_task(self._introspect(key, token))
            self._inflight[key] = task
            task.add_done_callback(lambda _t: self._inflight.pop(key, None))
        return asyncio.shield(task)  # one caller giving up does not cancel the others' exchange

    def close(self) -> None:
        """Cancel the exchanges in progress (the gateway stops, or a reload replaced this introspector)."""
        for task in list(self._inflight.values()):
            task.cancel()

    # ---- the exchange ------------------------------------------------------------------------

    async def _introspect(self, key: bytes, token: str) -> None:
        try:
            async with self._slots:
                document = await self._ask(token)
        except IntrospectionUnavailable:
            self._note("unavailable")
            raise
        answer = self._answer(document)
        self._note("inactive" if answer.claims is None else "active")
        self._remember(key, answer)

    def _note(self, outcome: str) -> None:
        if self._observe is not None:
            self._observe("introspection", outcome)

    async def _ask(self, token: str) -> dict[str, Any]:
        from gateway.upstreams.httpclient import HttpError

        fetch = self._fetch or default_fetch()
        where = self._where()
        self.exchanges += 1
        try:
            answer = await fetch(
                "POST",
                self.config.endpoint,
                headers={
                    "authorization": self._authorization,
                    "content-type": "application/x-www-form-urlencoded",
                    "accept": "application/json",
                },
                body=urlencode({"token": token, "token_type_hint": "access_token"}).encode(),
                timeout_s=self.config.timeout_s,
                max_bytes=64 * 1024,
            )
        except HttpError as exc:
            log.error("token introspection at %s failed: %s", where, exc)
            raise IntrospectionUnavailable("the authorization server is unavailable") from None
        if answer.status in (401, 403):
            log.error(
                "token introspection at %s refused the gateway's client credentials (HTTP %d)", where, answer.status
            )
            raise IntrospectionUnavailable("the authorization server refused the gateway")
        if answer.status != 200:
            log.error("token introspection at %s answered HTTP %d", where, answer.status)
            raise IntrospectionUnavailable("the authorization server is unavailable")
        try:
            document = orjson.loads(answer.body)
        except orjson.JSONDecodeError:
            document = None
        if not isinstance(document, dict):
            log.error("token introspection at %s answered something that is not a JSON object", where)
            raise IntrospectionUnavailable("the authorization server answered garbage")
        return document

    def _where(self) -> str:
        scheme, sep, rest = self.config.endpoint.partition("://")
        return f"{scheme}{sep}{rest.split('/', 1)[0].rpartition('@')[2]}"

    def _answer(self, document: dict[str, Any]) -> _Answer:
        now = time.monotonic()
        inactive = now + self.config.negative_cache_s
        if document.get("active") is not True:
            return _Answer(None, "token is not active", inactive)
        try:
            typed_claims(document)
        except TokenError as exc:
            return _Answer(None, exc.reason, inactive)
        if document.get("token_type") == "refresh_token":
            return _Answer(None, "a refresh token is not an access token", inactive)
        wall = time.time()
        exp, nbf = document.get("exp"), document.get("nbf")
        if exp is not None and exp <= wall:
            return _Answer(None, "token expired", inactive)
        if nbf is not None and nbf > wall:
            return _Answer(None, "token not valid yet", now + min(self.config.negative_cache_s, nbf - wall))
        if self.config.issuer is not None and document.get("iss") != self.config.issuer:
            return _Answer(None, "token issuer is not accepted", inactive)
        lifetime = self.config.cache_s if exp is None else min(self.config.cache_s, exp - wall)
        # Only what a decision reads is kept: an answer may be up to 64 KiB, the cache holds thousands.
        kept = {k: document[k] for k in (self.config.principal_claim, *_KEPT) if k in document}
        return _Answer(kept, "", now + lifetime)

    def _remember(self, key: bytes, answer: _Answer) -> None:
        self._answers.pop(key, None)
        while len(self._answers) >= self.config.max_entries:
            self._answers.popitem(last=False)
        self._answers[key] = answer
