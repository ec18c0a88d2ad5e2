"""MGP's kernel-side validators (MGP 0.3 §4.5 and §7; draft 0.8 MGP_SECURITY §4.5, §4.6, §7), as pure functions.

One entry: :func:`validate` ``(validator_name, tool_arguments, options) -> Rejection | None``.

- ``sandbox``: dangerous shell patterns, shell metacharacters, recursive delete (§4.5), and what goes
  with them: fork bombs, privilege escalation, writes to or reads of raw devices, reverse shells,
  power-off, disk formatting (POSIX and Windows forms), line breaks (injection), variable, brace and
  wildcard expansion, quoting tricks (``r''m``, ``$'\\x72m'``) and Unicode look-alikes (NFKC).
- ``readonly``: arguments that imply a write (§4.5 "block any write operations"): write commands,
  redirections, SQL that changes data or schema, HTTP methods that change state, write file modes
  and write flags.
- ``network_restricted``: URLs and hosts pointing at localhost, private, CGNAT, link-local,
  unique-local or metadata addresses, after every encoding trick (``policies/netguard.py``; no DNS).
- ``code_safety``: the §7 framework at the declared level (``unrestricted``, ``standard``,
  ``strict``, ``readonly``), with blocked imports, blocked patterns, the import allowlist and the
  size limit; the rejection carries the §7.4 ``violations`` and ``hints``.
- ``none``: no kernel-side validation.

Invariants:

- **Every value is checked**: strings anywhere in the arguments, through nested objects and arrays,
  object keys included; for ``sandbox`` and ``readonly``, also each array of scalars and each
  object's scalar values read as one command line (``["rm", "-rf", "/"]``).
- **Fail closed**: an unknown validator name, arguments nested deeper than :data:`MAX_DEPTH` or
  with more than :data:`MAX_NODES` values are refused, never skipped: a protection someone asked for
  is never silently absent.
- **Pure and bounded**: no I/O, no DNS; patterns start only at word boundaries, use bounded or
  possessive quantifiers and no backreference scans, so a check stays about linear in the size of
  the arguments (tested with adversarial inputs of 100 KB).
- The spec names no concrete pattern list for ``sandbox`` or ``readonly``; the lists here are the
  gateway's reading of "dangerous shell patterns", "metacharacters", "recursive delete" and "write
  operations", tuned so that prose (``"rm"`` in a sentence, ``"format"`` as a word) passes.
"""

from collections.abc import Mapping, Sequence
from typing import Any

from policies import netguard
from policies.mgp_code_safety import (
    DEFAULT_BLOCKED_IMPORTS as DEFAULT_BLOCKED_IMPORTS,
    DEFAULT_BLOCKED_PATTERNS as DEFAULT_BLOCKED_PATTERNS,
    READONLY_WRITE_PATTERNS as READONLY_WRITE_PATTERNS,
    CodeSafety as CodeSafety,
    _code_safety,
    check_code as check_code,
)
from policies.mgp_shell_rules import _readonly, _sandbox
from policies.mgp_validator_core import (
    CODE_SAFETY_LEVELS as CODE_SAFETY_LEVELS,
    CODE_UNSAFE as CODE_UNSAFE,
    DEFAULT_MAX_CODE_SIZE_BYTES as DEFAULT_MAX_CODE_SIZE_BYTES,
    ECHO_LIMIT as ECHO_LIMIT,
    MAX_DEPTH as MAX_DEPTH,
    MAX_NODES as MAX_NODES,
    VALIDATION_BLOCKED as VALIDATION_BLOCKED,
    VALIDATORS as VALIDATORS,
    Rejection as Rejection,
    _key_words,
    _Leaf,
    _names,
    _TooDeep,
    _walk,
)

# ---- network_restricted ------------------------------------------------------------------------

_HOST_KEYS = frozenset(
    "host hostname url uri urls uris endpoint address addr ip ipv4 ipv6 server domain proxy href link origin "
    "webhook callback redirect target remote upstream destination dest".split()
)
# Keys under which even a bare number is an address ({"ip": 2130706433}); under the others
# ("target": 3) a bare number stays a number.
_ADDRESS_KEYS = frozenset("host hostname address addr ip ipv4 ipv6 server".split())


def _network(leaves: Sequence[_Leaf], options: Mapping[str, Any]) -> Rejection | None:
    allowed = _names(options.get("allowed_hosts"))
    blocked = _names(options.get("blocked_hosts"))
    violations: list[str] = []
    first: str | None = None
    for leaf in leaves:
        words = _key_words(leaf.key)
        # the key names a host when its last word does (``target_host``, ``callback_url``; not ``ip_count``)
        host_position = bool(words) and words[-1] in _HOST_KEYS and not leaf.path.endswith("#key")
        verdicts: list[netguard.HostVerdict] = []
        if isinstance(leaf.value, str):
            verdicts = netguard.refused_hosts(
                leaf.value,
                host_position=host_position,
                short_forms=bool(words) and words[-1] in _ADDRESS_KEYS,
                allowed=allowed,
                blocked=blocked,
            )
        elif host_position and words[-1] in _ADDRESS_KEYS and isinstance(leaf.value, int | float):
            # a number where a host goes is read as one: {"ip": 2130706433}, {"host": 127.1}
            verdict = netguard.check_host(repr(leaf.value), allowed=allowed, blocked=blocked)
            verdicts = [verdict] if verdict is not None else []
        for verdict in verdicts:
            message = f"Blocked destination: {verdict.reason}"
            if message not in violations:
                violations.append(message)
            first = first or leaf.path
    if not violations:
        return None
    return Rejection(
        "network_restricted",
        f"The network_restricted validator refused the arguments: {violations[0]}.",
        tuple(violations),
        remediation_hint=(
            "Use a public host name or address; local, private and metadata destinations are not reachable."
        ),
        path=first,
    )


# ---- the entry ---------------------------------------------------------------------------------


def validate(validator_name: str, tool_arguments: Any, options: Mapping[str, Any] | None = None) -> Rejection | None:
    """Apply one MGP validator to a tool call's arguments: a :class:`Rejection`, or None to pass.

    ``options`` are the validator's settings: for ``code_safety`` the §7.3 declaration (either the
    declaration itself or ``{"code_safety": {...}}``, plus ``code_fields`` to name the arguments that
    hold code, default every string); for ``network_restricted`` ``allowed_hosts``/``blocked_hosts``;
    for ``sandbox`` ``allow_newlines``.
    """
    options = options or {}
    name = validator_name.strip().lower() if isinstance(validator_name, str) else ""
    if name == "none":
        return None
    if name not in VALIDATORS:
        return Rejection(
            name or "?",
            f"The tool declares the validator {validator_name!r}, which this gateway does not know; "
            "the call is refused rather than forwarded unchecked.",
            (f"Unknown validator: {validator_name!r}",),
            remediation_hint="The operator must configure one of: " + ", ".join(VALIDATORS) + ".",
            retryable=False,
        )
    try:
        leaves, groups = _walk(tool_arguments)
    except _TooDeep:
        return Rejection(
            name,
            f"The arguments are nested deeper than {MAX_DEPTH} levels or hold more than {MAX_NODES} values; "
            "they cannot be validated.",
            ("Arguments too deep or too large to validate",),
            code=CODE_UNSAFE if name == "code_safety" else VALIDATION_BLOCKED,
            remediation_hint="Send flatter, smaller arguments.",
        )
    if name == "sandbox":
        return _sandbox(leaves, groups, options)
    if name == "readonly":
        return _readonly(leaves, groups, options)
    if name == "network_restricted":
        return _network(leaves, options)
    return _code_safety(leaves, options)
