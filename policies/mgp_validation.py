"""MGP kernel-side validators as a member of the chain (MGP 0.3 §4.5, §7, §14; draft 0.8 §4.5, §14.7).

:class:`MgpValidatorPolicy` is a dispatch-stage policy fed only through ``Target.facts[POLICY]``:
routing resolves which validators apply to the called tool (from the backend's ``security``
metadata in ``tools/list``, or the operator's ``mgp.tools.BACKEND.TOOL`` config) and hands them over
as :class:`ValidatorFacts`; the chain skips this member for targets without those facts.

Invariants:

- Validators run before the call is forwarded (§4.5: "applied by the client/kernel before
  forwarding"); a refused call never reaches the backend.
- Every validator named applies, in order; the first refusal decides. Facts built from several
  sources (:meth:`ValidatorFacts.from_security`) are a union: a backend's metadata can add a
  validator to the operator's, never take one away (``none`` only means "nothing from this source").
- A validator name the gateway does not know refuses the call (fail closed), as do arguments too
  deep or too large to check (``policies/mgp_validators.py``).
- The decision is typed ``Outcome.INVALID`` (the arguments are what is refused, not the principal),
  its ``code`` is the §14.3 error code (1010 ``VALIDATION_BLOCKED``, 1011 ``CODE_SAFETY_VIOLATION``
  for ``code_safety``), and its ``data`` is the §14.7.2 tool rejection body ``{status, reason,
  retryable, remediation_hint, code}`` with the extra keys §14.7.2 allows (``validator``,
  ``violations``, §7.4 ``hints``, ``path``), plus ``error_code`` (the §14.3 number) and ``_mgp``
  (the §14.4 recovery object) for a door that answers with a JSON-RPC error instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gateway.errors import MgpCode
from gateway.events import Event, Kind
from policies.chain import Decision, Outcome, Stage, Target
from policies.mgp_validators import Rejection, validate
from policies.principal import Principal

POLICY = "mgp.validators"

# MGP §14.3 error codes used here (the one error table).
MGP_VALIDATION_BLOCKED = int(MgpCode.VALIDATION_BLOCKED)
MGP_CODE_SAFETY_VIOLATION = int(MgpCode.CODE_SAFETY_VIOLATION)


def _validator_names(value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list | tuple):
        return tuple(v for v in value if isinstance(v, str))
    return ()


@dataclass(frozen=True, slots=True)
class ValidatorFacts:
    """The validators that apply to the called tool, and each one's options (``Target.facts[POLICY]``).

    ``options`` is keyed by validator name: ``{"code_safety": {<§7.3 declaration>}, "network_restricted":
    {"allowed_hosts": [...]}}``. ``source`` says where they came from, for audit.
    """

    validators: tuple[str, ...]
    options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    source: str = ""

    @staticmethod
    def from_security(*securities: Mapping[str, Any] | None, source: str = "") -> ValidatorFacts:
        """Facts from one or more §4.2 ``security`` objects (operator config first, then the
        backend's metadata): the union of their validators; for options, the first source wins."""
        names: list[str] = []
        options: dict[str, Mapping[str, Any]] = {}
        for security in securities:
            if not isinstance(security, Mapping):
                continue
            for name in _validator_names(security.get("validator")) + _validator_names(security.get("validators")):
                name = name.strip().lower()
                if name and name != "none" and name not in names:
                    names.append(name)
            for key in ("code_safety", "network_restricted", "sandbox", "readonly"):
                value = security.get(key)
                if isinstance(value, Mapping) and key not in options:
                    options[key] = value
        return ValidatorFacts(tuple(names), options, source)

    @staticmethod
    def coerce(value: object) -> ValidatorFacts | None:
        """Facts as given: a :class:`ValidatorFacts`, or a mapping shaped like one or like a
        ``security`` object. None when there is nothing to apply."""
        if isinstance(value, ValidatorFacts):
            return value
        if isinstance(value, Mapping):
            facts = ValidatorFacts.from_security(value, source=str(value.get("source") or ""))
            extra = value.get("options")
            if isinstance(extra, Mapping):
                merged = {str(k): v for k, v in extra.items() if isinstance(v, Mapping)}
                merged.update(facts.options)
                facts = ValidatorFacts(facts.validators, merged, facts.source)
            return facts
        if isinstance(value, str | list | tuple):
            return ValidatorFacts(tuple(n.strip().lower() for n in _validator_names(value) if n.strip()))
        return None


def error_code(rejection: Rejection) -> int:
    """The §14.3 code of a validator's refusal."""
    return MGP_CODE_SAFETY_VIOLATION if rejection.validator == "code_safety" else MGP_VALIDATION_BLOCKED


def rejection_data(rejection: Rejection) -> dict[str, object]:
    """The decision's ``data``: the §14.7.2 rejection body plus ``error_code`` and the §14.4 ``_mgp``."""
    data: dict[str, object] = rejection.envelope()
    data["error_code"] = error_code(rejection)
    data["_mgp"] = {"category": "security", "retryable": rejection.retryable}
    return data


class MgpValidatorPolicy:
    """The chain's MGP validators (dispatch stage): a ``tools/call`` whose arguments a declared
    validator refuses is answered by the gateway and never forwarded."""

    name = POLICY
    stage: Stage = "dispatch"
    facts_key = POLICY  # fed only through Target.facts: the chain skips it without them

    async def check(self, event: Event, principal: Principal, target: Target | None) -> Decision | None:
        if target is None or not target.facts or event.kind is not Kind.REQUEST or event.method != "tools/call":
            return None
        facts = ValidatorFacts.coerce(target.facts.get(POLICY))
        if facts is None or not facts.validators:
            return None
        arguments = event.params.get("arguments")
        if arguments is None:
            arguments = {}
        for validator in facts.validators:
            rejection = validate(validator, arguments, facts.options.get(validator) or {})
            if rejection is not None:
                return Decision(
                    False,
                    POLICY,
                    error_code(rejection),
                    rejection.reason,
                    rejection_data(rejection),
                    outcome=Outcome.INVALID,
                )
        return None
