"""MGP peers written from the spec (seed 0.3, draft 0.8), independent of the gateway's code.

``server`` is an MGP backend (stdio or legacy Streamable HTTP); ``client`` is an MGP client of the
gateway's ``/mcp`` (legacy and 2026-07-28 eras). Both exist to prove issue 12 end to end.
"""
