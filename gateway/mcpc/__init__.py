"""MCPC through the gateway (issue 13): asynchronous task callbacks relayed, and translated for every
dialect. The wire is ``adapters/mcpc``; the parts are described in ``assembly``."""

from gateway.mcpc.assembly import Mcpc as Mcpc

__all__ = ["Mcpc"]
