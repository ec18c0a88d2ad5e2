"""Check ``tools/call`` arguments against the tool's ``inputSchema`` before the call is forwarded.

Only for backends configured with ``validate_arguments: true``. Schemas are compiled with
fastjsonschema and cached by a hash of their canonical JSON, so a tool's schema is compiled once
however often its catalog is refreshed.

A schema the gateway cannot compile (invalid, a remote ``$ref``, beyond fastjsonschema) is logged
once and the call is allowed: the backend remains the authority on its own arguments, and a schema
the gateway does not understand must never make a tool uncallable.

How the schema is compiled, and why:

- ``use_default=False``: fastjsonschema otherwise writes ``default`` values into the data it
  validates, which would alter the arguments forwarded to the backend.
- ``use_formats=False``: ``format`` is an annotation by default since JSON Schema 2019-09 (MCP's
  default dialect is 2020-12), and fastjsonschema's format regexes need not agree with the backend.
- remote ``$ref`` are refused: resolving them would let a backend make the gateway fetch any URL.
- the schema is deep-copied first: fastjsonschema rewrites ``$ref`` values in place, and the
  catalog item is what clients are shown.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any

import fastjsonschema
import orjson

from gateway.errors import INVALID_PARAMS
from gateway.events import Event, Kind
from policies.chain import Decision, Outcome, Stage, Target
from policies.principal import Principal

log = logging.getLogger(__name__)

INVALID_ARGUMENTS = INVALID_PARAMS

Validator = Callable[[Any], Any]


class _NoRemoteRefs(dict[str, Callable[[str], Any]]):
    """A handler for every URI scheme that refuses: fastjsonschema fetches unknown schemes with urllib."""

    def __contains__(self, scheme: object) -> bool:
        return True

    def __getitem__(self, scheme: str) -> Callable[[str], Any]:
        return _refuse_remote


def _refuse_remote(uri: str) -> Any:
    raise fastjsonschema.JsonSchemaDefinitionException(f"remote $ref {uri!r} is not resolved by the gateway")


_NO_REMOTE = _NoRemoteRefs()


def _canonical(schema: dict[str, Any]) -> bytes:
    try:
        return orjson.dumps(schema, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # integers beyond 64 bits and the like: slower, but as canonical
        return json.dumps(schema, sort_keys=True, separators=(",", ":"), default=repr).encode()


def _message(exc: fastjsonschema.JsonSchemaValueException) -> str:
    # fastjsonschema names the validated value "data"; the client knows it as the arguments.
    message = str(exc.message)
    if message == "data" or message.startswith(("data.", "data[", "data ")):
        return "arguments" + message[4:]
    return message


_REQUEST = Kind.REQUEST  # a module constant: an enum member read costs ~0.1 µs per call


class ArgumentValidationPolicy:
    name = "arguments"
    stage: Stage = "dispatch"

    def __init__(self, backends: Iterable[str], cache_size: int = 1024) -> None:
        self.backends = frozenset(backends)
        # No backend validates arguments (backends are fixed for the process: changing them takes a
        # restart): the chain leaves the member out (policies/chain.py).
        self.idle_for_good = not self.backends
        self._cache_size = cache_size
        # schema hash -> compiled validator, or None for a schema that does not compile
        self._validators: OrderedDict[bytes, Validator | None] = OrderedDict()
        self.compiled = 0  # how many schemas were compiled (cache misses), for tests and metrics

    def idle(self) -> bool:
        """No backend validates arguments: the chain skips this member (policies/chain.py)."""
        return not self.backends

    def validator(self, schema: dict[str, Any], tool: str = "?") -> Validator | None:
        """The compiled validator of ``schema`` (cached), or None when it does not compile."""
        canonical = _canonical(schema)
        key = hashlib.blake2b(canonical, digest_size=16).digest()
        try:
            self._validators.move_to_end(key)
            return self._validators[key]
        except KeyError:
            pass
        validator: Validator | None
        self.compiled += 1
        try:
            # Compile a deep copy (json.loads of the canonical text): fastjsonschema rewrites $ref in place.
            validator = fastjsonschema.compile(
                json.loads(canonical),
                handlers=_NO_REMOTE,
                use_default=False,
                use_formats=False,
            )
        except Exception as exc:  # every way a schema can be broken; never block on one
            log.warning(
                "inputSchema of tool %s not enforced (it does not compile: %s: %s); calls are forwarded unchecked",
                tool,
                type(exc).__name__,
                exc,
            )
            validator = None
        self._validators[key] = validator
        if len(self._validators) > self._cache_size:
            self._validators.popitem(last=False)
        return validator

    async def check(self, event: Event, principal: Principal, target: Target | None) -> Decision | None:
        if (
            target is None
            or event.kind is not _REQUEST
            or event.method != "tools/call"
            or target.backend not in self.backends
            or not isinstance(target.item, dict)
        ):
            return None
        schema = target.item.get("inputSchema")
        if not isinstance(schema, dict):
            return None
        tool = event.context or target.name or ""
        validate = self.validator(schema, tool)
        if validate is None:
            return None
        arguments = event.params.get("arguments") or {}
        try:
            validate(arguments)
        except fastjsonschema.JsonSchemaValueException as exc:
            # fastjsonschema's path starts at its own name for the value ("data"): drop it.
            path = [str(part) for part in exc.path[1:]] if exc.path else None
            return Decision(
                False,
                self.name,
                INVALID_ARGUMENTS,
                f"Invalid arguments for tool {tool}: {_message(exc)}",
                {"tool": tool, "path": path},
                outcome=Outcome.INVALID,
            )
        except Exception as exc:  # a validator that crashes on odd data is the schema's problem, not the call's
            log.warning("inputSchema check of tool %s failed (%s: %s); forwarded", tool, type(exc).__name__, exc)
        return None
