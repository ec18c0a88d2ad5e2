"""The policy chain every request passes, in order (ADR 0007): MCPx sender rules first, then who may call
what (capabilities, rate limits, arguments, pins, MGP access and permissions, validators, lifecycle), then
MCPL's feature sets, scopes, channels and hooks, and the MCPx envelope rate. Order matters: the first
refusal answers, and cheap rules that refuse most go before costly ones.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from policies import CapabilityPolicy, PolicyChain
from policies.arguments import ArgumentValidationPolicy
from policies.channel_access import ChannelPolicy
from policies.envelope_rate import EnvelopeRatePolicy
from policies.feature_sets import FeatureSetPolicy
from policies.hook_answers import HookAnswerPolicy
from policies.hook_inference import InferenceInHookPolicy
from policies.mcpx_envelope import McpxReservedKindPolicy, McpxSenderPolicy
from policies.mgp_access import AccessTable, MgpAccessAdminPolicy, MgpAccessPolicy
from policies.mgp_lifecycle import MgpLifecyclePolicy
from policies.mgp_permissions import MgpPermissionPolicy
from policies.mgp_reserved import MgpReservedNamePolicy
from policies.mgp_validation import MgpValidatorPolicy
from policies.pinning import PinningPolicy, PinStore
from policies.ratelimit import RateLimitPolicy
from policies.scope_elevation import ScopeElevationPolicy
from policies.scopes import ScopePolicy

if TYPE_CHECKING:
    from gateway.bus import Bus
    from gateway.config import Config
    from gateway.mgp.lifecycle import Lifecycle


def policy_chain(config: Config, bus: Bus, pins: PinStore, access: AccessTable, lifecycle: Lifecycle) -> PolicyChain:
    return PolicyChain(
        [
            McpxSenderPolicy(),  # MCPx: from = the authenticated participant
            McpxReservedKindPolicy(),  # MCPx: system/* is the gateway's
            CapabilityPolicy(),
            RateLimitPolicy(config.rate_limits, bus),
            ArgumentValidationPolicy(name for name, b in config.backends.items() if b.validate_arguments),
            PinningPolicy(pins),
            MgpAccessAdminPolicy(),  # MGP §5.4: who may change the access table
            MgpAccessPolicy(access),  # MGP §5: which agent may call which tool (also hides it)
            MgpReservedNamePolicy(),  # MGP §1.6.3: a backend's mgp.* tool is withheld (4003)
            MgpPermissionPolicy(),  # MGP §3: a tool whose required permissions were not granted
            MgpValidatorPolicy(),  # MGP §4.5, §7: the tool's validators, before the call is forwarded
            MgpLifecyclePolicy(lifecycle),  # MGP §11.4: no new calls to a draining backend (2001)
            ScopePolicy(),  # MCPL: scoped tools/call (facts from gateway/mcpl)
            FeatureSetPolicy(),  # MCPL: messages a backend initiates, held to their feature set
            ScopeElevationPolicy(),  # MCPL: a backend's scope/elevate, where the patterns decide
            ChannelPolicy(),  # MCPL: channel publish / observe, by feature set and scope patterns
            HookAnswerPolicy(),  # MCPL: hook answers, held to the session's enabled feature sets
            InferenceInHookPolicy(),  # MCPL §10.7: no inference/request from inside a context hook
            EnvelopeRatePolicy(
                config.mcpx.rate_per_participant.messages_per_s, config.mcpx.rate_per_participant.burst, bus
            ),
        ]
    )
