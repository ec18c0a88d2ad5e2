"""Who, what, which names: the MCPL relay's questions about its hosts, backends and operator rules.

Everything here is read from the relay's shared state, the live session store and the live principal
registry; the two caches it fills (operator rules per principal, effective feature sets per session
and backend) live in that state and are dropped by whoever changes their inputs (``RelayState.forget``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gateway.federation import View
from gateway.mcpl.state import RelayState, exposed, resolve
from gateway.sessions import ClientSession
from policies.auth import PrincipalRegistry
from policies.feature_sets import OperatorRules
from policies.globs import is_literal
from policies.scopes import ScopeRules, for_feature_set


class McplDirectory:
    def __init__(self, state: RelayState, sessions: Iterable[ClientSession], principals: PrincipalRegistry) -> None:
        self._state = state
        self._sessions = sessions
        self._principals = principals

    def sessions_of(self, backend: str) -> list[ClientSession]:
        """MCPL host sessions whose view includes ``backend``."""
        return [s for s in self._sessions if not s.closed and s.mcpl is not None and backend in s.view.backends]

    def host_sessions(self) -> list[ClientSession]:
        """Every open MCPL host session."""
        return [s for s in self._sessions if not s.closed and s.mcpl is not None]

    def operator_rules(self, principal: str | None) -> OperatorRules:
        """What the operator lets ``principal``'s hosts enable (None: the default for any principal)."""
        cache = self._state.operator_cache
        rules = cache.get(principal)
        if rules is None:
            own = self._principals.get(principal) if principal is not None else None  # the live registry
            chosen = own.mcpl.feature_sets if own is not None and own.mcpl.feature_sets is not None else None
            chosen = chosen or self._state.config.feature_sets
            rules = cache[principal] = OperatorRules(chosen.allow, chosen.deny)
        return rules

    def operator_scopes(self, principal: str, backend: str, feature_set: str) -> ScopeRules:
        own = self._principals.get(principal)
        table = own.mcpl.scopes if own is not None and own.mcpl.scopes is not None else self._state.config.scopes
        return for_feature_set(table.items(), f"{backend}.{feature_set}", feature_set)

    def host_scopes(self, session: ClientSession, backend: str, feature_set: str) -> ScopeRules:
        if session.mcpl is None:
            return ScopeRules()  # a plain MCP client has no host patterns; the operator's still apply
        name = exposed(session.view, backend, feature_set)
        found = session.mcpl.scopes.get(name)
        if found is not None:
            return found
        # Keys may also be feature-set patterns ("files.*"): their patterns add up.
        return for_feature_set(((k, r) for k, r in session.mcpl.scopes.items() if not is_literal(k)), name)

    def effective(self, session: ClientSession, backend: str) -> frozenset[str]:
        """The feature sets of ``backend`` enabled for ``session``: host enabled ∩ operator allows."""
        if session.mcpl is None:
            return frozenset()
        key = (session.id, backend)
        cache = self._state.effective_cache
        found = cache.get(key)
        if found is None:
            # Read on every message a backend initiates and every hook, for every session; written
            # only when a host, the operator or a backend changes something (RelayState.forget).
            rules = self.operator_rules(session.principal.name)
            selection = session.mcpl.selection
            found = cache[key] = frozenset(
                name
                for name in self._state.backend(backend).feature_sets
                if selection.is_enabled(exposed(session.view, backend, name)) and rules.allows(backend, name)
            )
        return found

    def gateway_enabled(self, session: ClientSession, backend: str) -> frozenset[str]:
        """The feature sets the gateway declares for ``backend`` (``RelayState.gateway_sets``) that
        ``session`` enabled and the operator allows its principal: the same two questions as
        ``effective`` asks of the backend's own sets, kept apart so that the backend never hears of them."""
        declared = self._state.gateway_declared(backend)
        if session.mcpl is None or not declared:
            return frozenset()
        rules = self.operator_rules(session.principal.name)
        selection = session.mcpl.selection
        return frozenset(
            name
            for name in declared
            if selection.is_enabled(exposed(session.view, backend, name)) and rules.allows(backend, name)
        )

    def can_enable(self, backend: str, feature_set: str, sessions: list[ClientSession] | None = None) -> bool:
        """Whether some host of ``backend`` (``sessions``, default: all of them) could enable it: the
        operator allows it that host's principal, or any principal when there is no host."""
        if sessions is None:
            sessions = self.sessions_of(backend)
        if not sessions:
            return self.operator_rules(None).allows(backend, feature_set)
        return any(self.operator_rules(s.principal.name).allows(backend, feature_set) for s in sessions)

    def declared_for(self, view: View) -> dict[str, dict[str, Any]]:
        """Every feature set of the view's backends under the names its hosts see: those the MCPL
        backends declared, then those the gateway declares for a backend (a backend's own wins a name)."""
        out: dict[str, dict[str, Any]] = {}
        for name in view.backends:
            for fs, decl in self._state.backend(name).feature_sets.items():
                out.setdefault(exposed(view, name, fs), decl)
        for name in view.backends:
            for fs, decl in self._state.gateway_declared(name).items():
                out.setdefault(exposed(view, name, fs), decl)
        return out

    def resolve_feature_set(self, view: View, name: str) -> list[tuple[str, str]]:
        return resolve(view, name, {b: self._state.backend(b).feature_sets for b in view.backends})

    def order(self, view: View) -> list[str]:
        """Backends in hook order: ``mcpl.hook_order`` first, then configuration order (stable)."""
        first = [b for b in self._state.config.hook_order if b in view.backends]
        return first + [b for b in view.backends if b not in first]

    def mcpl_backends(self, view: View) -> list[str]:
        """The view's backends that speak MCPL."""
        return [b for b in view.backends if self._state.is_mcpl(b)]
