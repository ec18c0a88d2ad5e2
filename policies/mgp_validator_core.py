"""Shared pieces of MGP's kernel-side validators (``policies/mgp_validators.py``): the
:class:`Rejection`, the rejection codes and bounds, and the walk over a tool call's arguments.

Split out of ``policies/mgp_validators.py`` so the per-validator modules
(``policies/mgp_shell_rules.py``, ``policies/mgp_code_safety.py``) can share it without an import
cycle; every public name here is re-exported from ``policies.mgp_validators``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

VALIDATORS = ("sandbox", "readonly", "network_restricted", "code_safety", "none")
CODE_SAFETY_LEVELS = ("unrestricted", "standard", "strict", "readonly")

MAX_DEPTH = 64
MAX_NODES = 100_000
DEFAULT_MAX_CODE_SIZE_BYTES = 10_000  # the §7.3 example; strict and readonly need a limit

# §14.7.3 rejection codes: CODE_UNSAFE is the registry's; the registry has none for the other
# validators, so they carry the §14.3 name of their error code (1010).
CODE_UNSAFE = "CODE_UNSAFE"
VALIDATION_BLOCKED = "VALIDATION_BLOCKED"


@dataclass(frozen=True, slots=True)
class Rejection:
    """A validator's "no": enough for the §14.7 rejection envelope and, for ``code_safety``, §7.4."""

    validator: str
    reason: str
    violations: tuple[str, ...]
    code: str = VALIDATION_BLOCKED
    remediation_hint: str = ""
    retryable: bool = True  # a different call may pass (§14.7.2: false only when nothing can)
    hints: Mapping[str, Any] | None = None
    path: str | None = None  # where in the arguments the first violation is (``$.args[2]``)

    def envelope(self) -> dict[str, Any]:
        """The §14.7.2 rejection body, with the §7.4 ``violations``/``hints`` as extra keys."""
        body: dict[str, Any] = {
            "status": "rejected",
            "reason": self.reason,
            "retryable": self.retryable,
            "remediation_hint": self.remediation_hint,
            "code": self.code,
            "validator": self.validator,
            "violations": list(self.violations),
        }
        if self.hints is not None:
            body["hints"] = dict(self.hints)
        if self.path is not None:
            body["path"] = self.path
        return body


# ---- walking the arguments ---------------------------------------------------------------------

ECHO_LIMIT = 64


def _quote(text: str) -> str:
    """``text`` quoted for a violation, cut to :data:`ECHO_LIMIT` characters: a rejection's reason
    enters an LLM's context and an operator's screen (§14.7.6), so what a caller wrote is echoed
    only briefly."""
    return repr(text if len(text) <= ECHO_LIMIT else text[:ECHO_LIMIT] + "...")


# Keys that name the program of a command line: their value is read first when an object's values
# are joined into one command line ({"args": ["-rf", "/"], "command": "rm"} is "rm -rf /").
_COMMAND_KEYS = frozenset("command cmd program executable exe binary bin tool run shell".split())


class _TooDeep(Exception):
    pass


@dataclass(slots=True)
class _Leaf:
    path: str
    key: str  # the nearest object key above the value ("" at the top or in a bare array)
    value: str | int | float | bool | None


def _walk(arguments: Any) -> tuple[list[_Leaf], list[tuple[str, list[str]]]]:
    """(every scalar leaf and object key, every group of scalars read as one command line)."""
    leaves: list[_Leaf] = []
    groups: list[tuple[str, list[str]]] = []
    stack: list[tuple[str, str, Any, int]] = [("$", "", arguments, 0)]
    nodes = 0
    while stack:
        path, key, value, depth = stack.pop()
        nodes += 1
        if depth > MAX_DEPTH or nodes > MAX_NODES:
            raise _TooDeep
        if isinstance(value, Mapping):
            scalars: list[str] = []
            heads: list[str] = []
            for k, v in value.items():
                k = str(k)
                leaves.append(_Leaf(f"{path}.{k}#key", k, k))
                stack.append((f"{path}.{k}", k, v, depth + 1))
                into = heads if k.lower() in _COMMAND_KEYS else scalars
                if isinstance(v, str | int | float) and not isinstance(v, bool):
                    into.append(str(v))
                elif isinstance(v, list) and all(isinstance(i, str | int | float) for i in v):
                    into.extend(str(i) for i in v)
            scalars = heads + scalars
            if len(scalars) > 1:
                groups.append((path, scalars))
        elif isinstance(value, list | tuple):
            if len(value) > 1 and all(isinstance(i, str | int | float) for i in value):
                groups.append((path, [str(i) for i in value]))
            for index in range(len(value) - 1, -1, -1):
                stack.append((f"{path}[{index}]", key, value[index], depth + 1))
        elif value is None or isinstance(value, str | int | float | bool):
            leaves.append(_Leaf(path, key, value))
        else:
            leaves.append(_Leaf(path, key, str(value)))
    return leaves, groups


def _strings(leaves: Sequence[_Leaf]) -> Iterator[tuple[str, str]]:
    for leaf in leaves:
        if isinstance(leaf.value, str):
            yield leaf.path, leaf.value


@dataclass(slots=True)
class _Findings:
    """The violations a validator collects, each once, and the path of the first one."""

    violations: list[str] = field(default_factory=list)
    first: str | None = None

    def add(self, path: str, message: str) -> None:
        if message not in self.violations:
            self.violations.append(message)
        self.first = self.first or path


def _names(value: object) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list | tuple) else []


def _key_words(key: str) -> list[str]:
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", key)
    return [w for w in re.split(r"[^a-z0-9]+", spaced.lower()) if w]


# ``open(..., "w")``: a write file mode, for the readonly validator and code_safety's readonly level.
_OPEN_WRITE = re.compile(r"""\bopen\s*\([^)]*['"][rbt]*[wax+][rwaxbt+]*['"]""")
