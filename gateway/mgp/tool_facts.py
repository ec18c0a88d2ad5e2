"""What the MGP members of the chain need to decide one ``tools/call`` (MGP §3, §4).

The called tool's effective security metadata is the backend's own ``security`` block (from its
``tools/list``) under the operator's ``mgp.tools.BACKEND.TOOL`` (config is the kernel's authority,
field by field, §4.3); a plain MCP backend's tools get theirs from config alone. The grants are the
ones the backend received in its handshake when it speaks MGP (gateway/mgp/kernel.py); for a plain
MCP backend the kernel applies ``mgp.permission_policy`` to the configured permissions itself, so
operators can hold plain tools to permissions too.

Invariant: a tool with no required permissions yields no facts, so the permission member of the
chain is skipped without being awaited (``facts_key``); the fast path costs two dict lookups.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from adapters.mgp import security
from gateway.config import Mgp as MgpConfig
from gateway.mgp.kernel import Kernel
from policies.mgp_permissions import POLICY as PERMISSIONS, PermissionDecider, PermissionFacts
from policies.mgp_validation import POLICY as VALIDATORS, ValidatorFacts


class ToolFacts:
    def __init__(self, config: MgpConfig, kernel: Kernel, decider: PermissionDecider | None = None) -> None:
        self._configured = {
            backend: {tool: meta.model_dump(exclude_none=True) for tool, meta in tools.items()}
            for backend, tools in config.tools.items()
        }
        self._kernel = kernel
        self._decider = decider or PermissionDecider(
            config.permission_policy, config.approved_permissions, config.grant_ttl_s
        )

    def effective(self, backend: str, tool: str, item: Mapping[str, Any] | None) -> security.SecurityMeta | None:
        """The tool's security metadata: the backend's declaration under the operator's."""
        declared = item.get("security") if item is not None else None
        configured = self._configured_of(backend, tool)
        if declared is None and configured is None:
            return None
        return security.merge(security.parse_security(declared), security.parse_security(configured))

    def _configured_of(self, backend: str, tool: str) -> dict[str, Any] | None:
        by_tool = self._configured.get(backend)
        return by_tool.get(tool) if by_tool is not None else None

    def listed(self, backend: str, tool: str, item: Mapping[str, Any], trust_level: str | None) -> dict[str, Any]:
        """``item`` (a listed tool) as an MGP client sees it: ``security`` is the backend's declaration
        under the operator's, assessed with the backend's trust level (§4.6 effective_risk_level)."""
        configured = self._configured_of(backend, tool)
        return security.secure_tool(item, trust_level, security.parse_security(configured))

    def for_call(self, backend: str, tool: str, item: Mapping[str, Any] | None) -> dict[str, Any] | None:
        """``Target.facts`` entries for a call of ``tool`` (the backend's own name) on ``backend``:
        the permission gate's when the tool requires permissions, the validators' when it names one."""
        # ``effective``, inlined for the common case (no declaration, nothing configured): this runs
        # on every tools/call.
        declared = item.get("security") if item is not None else None
        by_tool = self._configured.get(backend)
        configured = by_tool.get(tool) if by_tool is not None else None
        if declared is None and configured is None:
            return None
        meta = security.merge(security.parse_security(declared), security.parse_security(configured))
        if meta is None:
            return None
        facts: dict[str, Any] = {}
        wire = meta.to_wire()
        if meta.permissions_required:
            if self._kernel.backend(backend) is not None:
                grants = self._kernel.grants_of(backend)
            else:
                grants = self._decider.decide(meta.permissions_required).grants
            facts[PERMISSIONS] = PermissionFacts(wire, grants)
        validators = ValidatorFacts.from_security(wire, source=f"{backend}.{tool}")
        if validators.validators:
            facts[VALIDATORS] = validators
        return facts or None
