"""MGP: the gateway as kernel toward backends and one MGP server toward clients (issue 12).

Modules:

- :mod:`gateway.mgp.discovery` — the tool-discovery index of MGP §16.4/§16.5: every federated tool,
  ranked by BM25F, answering ``mgp/tools/discover`` (0.3) and the ``mgp.tools.discover`` kernel tool
  (0.5+), with visibility applied before ranking.
- :mod:`gateway.mgp.ranking` — tokenisation and the BM25F field weights and constants the index ranks with.
- :mod:`gateway.mgp.discover_wire` — the discovery wire shapes: the indexed tool, risk levels (§4.4), the
  ``mgp/tools/discover`` params (``parse_discover_params``) and the §16.5 result.
- :mod:`gateway.mgp.tool_session` — the per-session tool cache of MGP §16.6-§16.8 (``mgp/tools/request``,
  ``mgp/tools/session``, ``mgp/tools/session/evict``): a context budget, LRU eviction, pinned tools.

All are pure (no I/O, no gateway state); the gateway wires them to backends and sessions.
"""
