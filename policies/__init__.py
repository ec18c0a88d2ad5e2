"""Every allow/deny/transform decision, as small policies in one ordered chain."""

from policies.capabilities import CapabilityPolicy
from policies.chain import ALLOW, Decision, Policy, PolicyChain, Target
from policies.patterns import CapabilitySet, matches
from policies.principal import ANONYMOUS_ALL, Principal


def default_chain() -> PolicyChain:
    return PolicyChain([CapabilityPolicy()])


__all__ = [
    "ALLOW",
    "ANONYMOUS_ALL",
    "CapabilityPolicy",
    "CapabilitySet",
    "Decision",
    "Policy",
    "PolicyChain",
    "Principal",
    "Target",
    "default_chain",
    "matches",
]
