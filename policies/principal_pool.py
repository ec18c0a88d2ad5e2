"""Who gets a child of a per-principal stdio backend, with which environment, and when the pool is full.

A ``sharing: per-principal`` backend (issue 17) runs one child process per principal, each with its
own environment (credentials). Handing out a child is a decision like any other, so it lives here:

- an anonymous principal never gets a child: the point of the pool is to act *as someone*, and an
  anonymous caller is no one in particular (two anonymous clients would share one child and its
  secrets);
- a principal named in ``principal_env`` gets ``env`` overlaid with its own entry; one that is not
  named gets ``default_env`` when the operator set one, else is refused. A principal never receives
  another principal's values, whatever the names (no prefix or pattern matching: exact names only);
- ``principal_env_var`` (default ``SWITCHBOARD_PRINCIPAL``) tells the child whose it is: a name, not
  a secret, useful to the server's own logs and state (a name no process environment can hold, empty
  or with a NUL, as a JWT's claim might be, gets no child);
- a pool at ``max_children`` with every child busy refuses the caller (``Outcome.OVERLOADED``), never
  queues it and never grows past the bound.

This module decides; it spawns nothing (gateway/upstreams/principal_pool.py asks it first, and is
itself only reached after the policy chain admitted the call or the list).
"""

from __future__ import annotations

from collections.abc import Mapping

from gateway import errors
from policies.chain import ALLOW, Decision, Outcome
from policies.principal import Principal


class PoolAdmission:
    """The decisions of one per-principal backend's pool."""

    name = "principal_pool"

    def __init__(
        self,
        backend: str,
        principal_env: Mapping[str, Mapping[str, str]],
        default_env: Mapping[str, str] | None,
        principal_env_var: str | None,
    ) -> None:
        self.backend = backend
        self._principal_env = {name: dict(env) for name, env in principal_env.items()}
        self._default_env = dict(default_env) if default_env is not None else None
        self._var = principal_env_var

    def admit(self, principal: Principal) -> Decision:
        """Whether ``principal`` may have a child of this backend (spawned, or reused)."""
        if principal.anonymous:
            return self._refused(principal, "anonymous callers get no child of a per-principal backend")
        if not principal.name or "\0" in principal.name:
            return self._refused(principal, "this principal's name cannot be given to a process")
        if principal.name in self._principal_env or self._default_env is not None:
            return ALLOW
        return self._refused(principal, f"no environment is configured for principal {principal.name!r}")

    def env_of(self, principal: Principal) -> dict[str, str]:
        """The environment a child of an admitted ``principal`` gets on top of the backend's ``env``."""
        own = self._principal_env.get(principal.name)
        env = dict(own if own is not None else self._default_env or {})
        if self._var:
            env[self._var] = principal.name
        return env

    def full(self, max_children: int) -> Decision:
        """The pool holds ``max_children`` children and every one has a call in flight."""
        return Decision(
            False,
            self.name,
            errors.SESSION_OVERLOADED,
            f"backend {self.backend} runs its limit of {max_children} per-principal children, all busy; retry later",
            {"backend": self.backend, "max_children": max_children},
            outcome=Outcome.OVERLOADED,
        )

    def _refused(self, principal: Principal, why: str) -> Decision:
        return Decision(
            False,
            self.name,
            errors.CAPABILITY_DENIED,
            f"backend {self.backend} runs one process per principal: {why}",
            {"backend": self.backend, "principal": principal.name},
            outcome=Outcome.DENIED,
        )
