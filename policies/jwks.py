"""The signing keys of a JWKS (RFC 7517), as PyJWT keys bound to the algorithms each may verify.

Invariants:

- A key verifies only algorithms of its own family (RFC 7518 §3.1 and RFC 8037): RSA keys RS*/PS*,
  EC keys the ES* of their curve (P-256 ES256, P-384 ES384, P-521 ES512, secp256k1 ES256K), OKP
  keys EdDSA. A JWK's own ``alg`` narrows that to exactly one (RFC 7517 §4.4); a ``use`` other than
  ``sig`` (§4.2) or ``key_ops`` without ``verify`` (§4.3) drops the key. Symmetric (``oct``) keys
  are never taken from a JWKS: an HMAC secret is configured, not published.
- The set of algorithms a key may verify is fixed when the document is loaded, from the key alone;
  the token's ``alg`` only picks among them (RFC 8725 §2.1, §3.1: no algorithm confusion).
- RSA keys shorter than 2048 bits are dropped (RFC 7518 §3.3; NIST SP 800-131A).
- At most :data:`MAX_KEYS` keys are kept; a malformed key is skipped with a warning, never an error,
  so one bad entry cannot take the whole issuer down.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from jwt import PyJWK
from jwt.exceptions import PyJWTError

log = logging.getLogger(__name__)

MAX_KEYS = 64
MIN_RSA_BITS = 2048

RSA_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512")
EC_ALGORITHMS = {"P-256": "ES256", "P-384": "ES384", "P-521": "ES512", "secp256k1": "ES256K"}
OKP_CURVES = ("Ed25519", "Ed448")
HMAC_ALGORITHMS = ("HS256", "HS384", "HS512")
# Every algorithm this gateway accepts when configured to; never "none" (RFC 8725 §3.1).
SAFE_ALGORITHMS = (*HMAC_ALGORITHMS, *RSA_ALGORITHMS, "ES256", "ES384", "ES512", "ES256K", "EdDSA")
ASYMMETRIC_ALGORITHMS = tuple(a for a in SAFE_ALGORITHMS if a not in HMAC_ALGORITHMS)


@dataclass(frozen=True, slots=True)
class SigningKey:
    """One JWK, ready to verify: one PyJWK per algorithm it may verify (PyJWK binds a single one)."""

    kid: str | None
    by_algorithm: Mapping[str, PyJWK]

    @property
    def algorithms(self) -> list[str]:
        return sorted(self.by_algorithm)


def _family(jwk: Mapping[str, Any]) -> tuple[str, ...]:
    """The algorithms a JWK's type and curve allow, before its own ``alg`` narrows them."""
    kty, crv = jwk.get("kty"), jwk.get("crv")
    if kty == "RSA":
        return RSA_ALGORITHMS
    if kty == "EC" and isinstance(crv, str) and crv in EC_ALGORITHMS:
        return (EC_ALGORITHMS[crv],)
    if kty == "OKP" and crv in OKP_CURVES:
        return ("EdDSA",)
    return ()


def signing_key(jwk: Any, allowed: Iterable[str]) -> SigningKey | None:
    """The key for ``jwk`` bound to the algorithms it may verify among ``allowed``, or None (skipped)."""
    if not isinstance(jwk, dict):
        return None
    kid = jwk.get("kid")
    if kid is not None and not isinstance(kid, str):
        return None
    if jwk.get("use", "sig") != "sig":
        return None
    ops = jwk.get("key_ops")
    if ops is not None and (not isinstance(ops, list) or "verify" not in ops):
        return None
    own = jwk.get("alg")
    if own is not None and not isinstance(own, str):
        return None
    family = _family(jwk)
    algorithms = [a for a in family if a in allowed and (own is None or own == a)]
    if not algorithms:
        return None
    bound: dict[str, PyJWK] = {}
    for algorithm in algorithms:
        try:
            key = PyJWK(jwk, algorithm)
        except (PyJWTError, KeyError, TypeError, ValueError) as exc:
            log.warning("JWKS key %r skipped: %s", kid, type(exc).__name__)
            return None
        size = getattr(key.key, "key_size", None)
        if jwk.get("kty") == "RSA" and isinstance(size, int) and size < MIN_RSA_BITS:
            log.warning("JWKS key %r skipped: RSA key of %d bits (at least %d)", kid, size, MIN_RSA_BITS)
            return None
        bound[algorithm] = key
    return SigningKey(kid, bound)


def load_keys(document: Any, allowed: Iterable[str]) -> dict[str | None, SigningKey]:
    """The usable signing keys of a JWKS document, by ``kid`` (a key without one under None)."""
    permitted = frozenset(allowed)
    keys: dict[str | None, SigningKey] = {}
    entries = document.get("keys") if isinstance(document, dict) else None
    for jwk in entries if isinstance(entries, list) else []:
        if len(keys) >= MAX_KEYS:
            log.warning("JWKS has more than %d keys; the rest are ignored", MAX_KEYS)
            break
        key = signing_key(jwk, permitted)
        if key is not None and key.kid not in keys:  # the first of two keys with one kid wins
            keys[key.kid] = key
    return keys
