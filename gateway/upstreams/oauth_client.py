"""The gateway as an OAuth client of one token endpoint: client_credentials and token exchange requests.

One :class:`TokenClient` per backend ``auth`` section (gateway/config_upstream_auth.py). It builds the form of
RFC 6749 §4.4.2 (client_credentials) or RFC 8693 §2.1 (token exchange), authenticates the gateway as a client
(client_secret_basic, RFC 6749 §2.3.1 — id and secret form-urlencoded before base64; client_secret_post; or
private_key_jwt, RFC 7523 §2.2 with a fresh assertion per request), sends it with
:func:`gateway.upstreams.fetch.fetch` (bounded in time and size), and reads the answer (RFC 6749 §5.1/§5.2,
RFC 8693 §2.2).

Invariants:

- Every failure is a :class:`TokenError` whose ``reason`` is one of ``refused`` (the AS said no: §5.2 error),
  ``unavailable`` (not reached, timed out, or a 5xx/unexpected status) or ``malformed`` (an answer that is not a
  usable token response); its ``detail`` never holds a secret, a token or the AS's free text (an RFC 6749 error
  code is kept only when it is a plain word).
- An issued access token is used as a header value only if it is printable ASCII without CR/LF and at most
  ``MAX_TOKEN_CHARS`` long (no header injection from a hostile AS); its token_type must be Bearer.
- ``expires_at`` is on the monotonic clock, already shortened by ``refresh_margin_s``; a lifetime is taken as
  at most ``MAX_LIFETIME_S`` whatever the answer says.
"""

from __future__ import annotations

import base64
import math
import re
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote_plus, urlencode

import jwt
import orjson

from gateway.config_upstream_auth import ClientAssertion, ClientCredentialsAuth, TokenExchangeAuth
from gateway.upstreams.fetch import Fetched, fetch
from gateway.upstreams.httpclient import HttpError

GRANT_CLIENT_CREDENTIALS = "client_credentials"
GRANT_TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
TOKEN_TYPE_ACCESS = "urn:ietf:params:oauth:token-type:access_token"
TOKEN_TYPE_JWT = "urn:ietf:params:oauth:token-type:jwt"
ASSERTION_TYPE_JWT = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
MAX_TOKEN_CHARS = 16384
MAX_ANSWER_BYTES = 64 * 1024
MAX_LIFETIME_S = 86400.0
_ERROR_CODE = re.compile(r"[a-z_]{1,64}")
_TOKEN_CHARS = re.compile(r"[\x21-\x7e]+")

Fetch = Callable[..., Awaitable[Fetched]]


class TokenError(Exception):
    """A token request failed: ``reason`` refused | unavailable | malformed, ``detail`` safe to show and log."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True, slots=True)
class IssuedToken:
    headers: Mapping[str, str]  # what goes on the backend request: {"Authorization": "Bearer ..."}
    expires_at: float  # time.monotonic() after which it is not used (refresh margin already taken off)

    def fresh(self, now: float) -> bool:
        return now < self.expires_at


class TokenClient:
    """Requests tokens from one token endpoint, as one client; see the module docstring."""

    def __init__(self, config: ClientCredentialsAuth | TokenExchangeAuth, fetcher: Fetch = fetch) -> None:
        self._config = config
        self._fetch = fetcher
        self._key: Any = load_assertion_key(config.client_assertion) if config.client_assertion is not None else None

    @property
    def endpoint(self) -> str:
        return self._config.token_endpoint

    async def client_credentials(self) -> IssuedToken:
        """The gateway's own token for the configured target (RFC 6749 §4.4)."""
        return await self._request({"grant_type": GRANT_CLIENT_CREDENTIALS, **self._target()})

    async def exchange(self, subject_token: str, requested_token_type: str | None = None) -> IssuedToken:
        """``subject_token`` (the caller's access token) exchanged for one for the target (RFC 8693 §2.1)."""
        form = {
            "grant_type": GRANT_TOKEN_EXCHANGE,
            "subject_token": subject_token,
            "subject_token_type": TOKEN_TYPE_ACCESS,
            **self._target(),
        }
        if requested_token_type:
            form["requested_token_type"] = requested_token_type
        return await self._request(form)

    def _target(self) -> dict[str, str]:
        config = self._config
        pairs = (("audience", config.audience), ("resource", config.resource), ("scope", config.scope))
        return {name: value for name, value in pairs if value}

    def _authenticate(self, form: dict[str, str], headers: dict[str, str]) -> None:
        config = self._config
        if config.client_assertion is not None:
            form["client_id"] = config.client_id
            form["client_assertion_type"] = ASSERTION_TYPE_JWT
            form["client_assertion"] = self._assertion(config.client_assertion)
        elif config.client_auth == "client_secret_post":
            form["client_id"] = config.client_id
            form["client_secret"] = config.client_secret or ""
        else:
            pair = f"{quote_plus(config.client_id)}:{quote_plus(config.client_secret or '')}"
            headers["authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()

    def _assertion(self, assertion: ClientAssertion) -> str:
        """RFC 7523 §3: iss = sub = client_id, aud = the token endpoint, short-lived, unique jti."""
        now = int(time.time())
        claims = {
            "iss": self._config.client_id,
            "sub": self._config.client_id,
            "aud": assertion.audience or self._config.token_endpoint,
            "iat": now,
            "exp": now + assertion.lifetime_s,
            "jti": uuid.uuid4().hex,
        }
        headers = {"kid": assertion.kid} if assertion.kid else None
        return jwt.encode(claims, self._key, algorithm=assertion.alg, headers=headers)

    async def _request(self, form: dict[str, str]) -> IssuedToken:
        headers = {"content-type": "application/x-www-form-urlencoded", "accept": "application/json"}
        self._authenticate(form, headers)
        body = urlencode(form).encode()
        try:
            answer = await self._fetch(
                "POST",
                self._config.token_endpoint,
                headers=headers,
                body=body,
                timeout_s=self._config.timeout_s,
                max_bytes=MAX_ANSWER_BYTES,
            )
        except HttpError as exc:
            raise TokenError("unavailable", f"token endpoint unreachable: {exc}") from None
        return self._read(answer, time.monotonic())

    def _read(self, answer: Fetched, now: float) -> IssuedToken:
        status = answer.status
        try:
            document = orjson.loads(answer.body) if answer.body else None
        except orjson.JSONDecodeError:
            document = None
        if status in (400, 401, 403) and isinstance(document, dict):
            code = document.get("error")
            shown = code if isinstance(code, str) and _ERROR_CODE.fullmatch(code) else "unrecognised error"
            raise TokenError("refused", f"the authorization server refused the request ({shown})")
        if status != 200:
            raise TokenError("unavailable", f"token endpoint answered HTTP {status}")
        if not isinstance(document, dict):
            raise TokenError("malformed", "token endpoint answered something that is not a JSON object")
        token = document.get("access_token")
        if not isinstance(token, str) or len(token) > MAX_TOKEN_CHARS or not _TOKEN_CHARS.fullmatch(token):
            raise TokenError("malformed", "token endpoint answered without a usable access_token")
        token_type = document.get("token_type")
        if not isinstance(token_type, str) or token_type.lower() != "bearer":
            raise TokenError("malformed", "token endpoint answered a token_type other than Bearer")
        expires_in = document.get("expires_in", self._config.default_expires_in_s)
        if isinstance(expires_in, str) and expires_in.isdigit():
            expires_in = int(expires_in)  # some servers send it as a string
        if (
            not isinstance(expires_in, int | float)
            or isinstance(expires_in, bool)
            or not math.isfinite(expires_in)
            or expires_in < 0
        ):
            raise TokenError("malformed", "token endpoint answered an invalid expires_in")
        # Kept at most MAX_LIFETIME_S whatever the AS says: a revoked grant is not used for ever.
        lifetime = max(0.0, min(float(expires_in), MAX_LIFETIME_S) - self._config.refresh_margin_s)
        return IssuedToken({"Authorization": f"Bearer {token}"}, now + lifetime)


def load_assertion_key(assertion: ClientAssertion) -> Any:
    """The private key of private_key_jwt, read once at startup (a missing/bad file fails the start clearly)."""
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    try:
        key: Any = load_pem_private_key(Path(assertion.private_key_file).read_bytes(), password=None)
        jwt.encode({}, key, algorithm=assertion.alg)  # a key of another kind than alg says is refused here
        return key
    except (OSError, ValueError, TypeError, jwt.PyJWTError) as exc:
        raise ValueError(f"client_assertion.private_key_file {assertion.private_key_file!r}: {exc}") from None
