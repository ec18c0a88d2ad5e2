"""MCPL through the gateway: feature sets and scopes enforced centrally, hooks fanned out (ADR 0009)."""

from gateway.mcpl.relay import McplRelay

__all__ = ["McplRelay"]
