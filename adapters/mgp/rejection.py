"""The Tool Rejection Envelope (draft 0.6.1+, MGP_COMMUNICATION.md §14.7).

A refusal on policy or logic grounds of a ``tools/call`` that was delivered is *not* a JSON-RPC
error: it is a ``CallToolResult`` with ``isError: true`` whose first parsable text content is a JSON
object ``{status, reason, retryable?, remediation_hint?, code?, ...}`` (§14.7.2). ``status`` is the
case-sensitive sentinel ``"rejected"`` or ``"denied"``; ``retryable`` defaults to true; the alias
``remediation`` is accepted for ``remediation_hint``; other keys (``violations``, ``chain``) are kept
for audit. Anything else on an ``isError`` result stays a generic runtime error (§14.7.4), and an
``isError: false`` result is never promoted to a rejection whatever its text says.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

STATUSES = ("rejected", "denied")
# §14.7.3 registry (codes from elsewhere are forwarded as they are; absent may be stamped UNKNOWN).
CODES = (
    "YOLO_REQUIRED",
    "ACCESS_DENIED",
    "SEAL_UNSIGNED",
    "RISK_UNAPPROVED",
    "CODE_UNSAFE",
    "DELEGATION_CYCLE",
    "DELEGATION_DEPTH",
    "SELF_DELEGATION",
    "UNKNOWN",
)
_KNOWN = ("status", "code", "reason", "remediation_hint", "retryable")
_ERROR_ONLY = ("error_code", "_mgp")  # a refusal's data fields that belong to the JSON-RPC error form


@dataclass(frozen=True, slots=True)
class Rejection:
    reason: str
    status: str = "rejected"
    code: str | None = None
    retryable: bool = True
    remediation_hint: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def body(self) -> dict[str, Any]:
        out: dict[str, Any] = {"status": self.status}
        if self.code is not None:
            out["code"] = self.code
        out["reason"] = self.reason
        if self.remediation_hint is not None:
            out["remediation_hint"] = self.remediation_hint
        out["retryable"] = self.retryable
        out.update({key: value for key, value in self.extra.items() if key not in out})
        return out


def result(rejection: Rejection) -> dict[str, Any]:
    """The ``tools/call`` result carrying ``rejection`` (§14.7.2 wire example)."""
    if rejection.status not in STATUSES:
        raise ValueError(f"rejection status must be one of {STATUSES}, not {rejection.status!r}")
    text = json.dumps(rejection.body(), ensure_ascii=False, separators=(",", ":"))
    return {"isError": True, "content": [{"type": "text", "text": text}]}


def code_safety(violations: list[str], hints: Mapping[str, Any] | None = None) -> Rejection:
    """The §7.4 code-safety rejection (``violations``, ``hints``) as an envelope, code ``CODE_UNSAFE``."""
    extra: dict[str, Any] = {"violations": list(violations)}
    if hints:
        extra["hints"] = dict(hints)
    return Rejection(
        reason="Code validation failed: " + "; ".join(violations) if violations else "Code validation failed",
        code="CODE_UNSAFE",
        retryable=True,
        remediation_hint="Change the code to avoid the listed violations.",
        extra=extra,
    )


def from_refusal(data: object) -> dict[str, Any] | None:
    """The rejection body a policy refusal carries in its ``data`` (``data["rejection"]``, or the
    data itself when it is one), without the error-only fields; None when it carries none."""
    if not isinstance(data, Mapping):
        return None
    body = data.get("rejection", data)
    if not isinstance(body, Mapping) or body.get("status") not in STATUSES or not isinstance(body.get("reason"), str):
        return None
    return {key: value for key, value in body.items() if key not in _ERROR_ONLY}


def envelope_result(body: Mapping[str, Any]) -> dict[str, Any]:
    """A ``tools/call`` result whose text is ``body`` (§14.7.2)."""
    text = json.dumps(dict(body), ensure_ascii=False, separators=(",", ":"))
    return {"isError": True, "content": [{"type": "text", "text": text}]}


def parse(call_result: object) -> Rejection | None:
    """The rejection a ``tools/call`` result carries, or None (not an error, or a generic one)."""
    if not isinstance(call_result, dict) or call_result.get("isError") is not True:
        return None
    content = call_result.get("content")
    if not isinstance(content, list):
        return None
    for item in content:
        if isinstance(item, dict) and item.get("type") == "text" and isinstance(item.get("text"), str):
            found = _body(item["text"])
            if found is not None:
                return found
    return None


def _body(text: str) -> Rejection | None:
    try:
        body = json.loads(text)
    except ValueError:
        return None
    if not isinstance(body, dict) or body.get("status") not in STATUSES or not isinstance(body.get("reason"), str):
        return None
    retryable = body.get("retryable", True)
    hint = body.get("remediation_hint", body.get("remediation"))
    code = body.get("code")
    if not isinstance(retryable, bool) or not isinstance(hint, str | None) or not isinstance(code, str | None):
        return None
    extra = {key: value for key, value in body.items() if key not in _KNOWN and key != "remediation"}
    return Rejection(
        reason=body["reason"], status=body["status"], code=code, retryable=retryable, remediation_hint=hint, extra=extra
    )
