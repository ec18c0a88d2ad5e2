"""The Tool Rejection Envelope (§14.7) built from a policy refusal's data."""

from __future__ import annotations

from adapters.mgp import rejection


def test_a_refusals_body_is_found_in_either_place_and_loses_the_error_only_fields() -> None:
    body = {"status": "denied", "code": "ACCESS_DENIED", "reason": "no", "retryable": False}
    assert rejection.from_refusal({"rejection": body, "_mgp": {"category": "security"}}) == body
    validator = {**body, "status": "rejected", "error_code": 1010, "_mgp": {"retryable": False}}
    assert rejection.from_refusal(validator) == {**body, "status": "rejected"}
    assert rejection.from_refusal({"reason": "no status"}) is None
    assert rejection.from_refusal(None) is None
    result = rejection.envelope_result(body)
    assert result["isError"] is True
    parsed = rejection.parse(result)
    assert parsed is not None and parsed.code == "ACCESS_DENIED" and parsed.retryable is False
