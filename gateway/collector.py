"""The cyclic garbage collector, tuned for a proxy (issue 15, ADR 0017).

A proxied ``tools/call`` allocates a few hundred short-lived containers (parsed JSON, scopes, events)
that reference counting frees at once; nearly none of them form cycles. With CPython's default
generation-0 threshold (700 allocations) the collector still ran every few calls and walked the
young objects each time: about 10 % of the gateway's CPU per call in ``make bench``'s profile.

Two changes, both made once at start-up:
- ``gc.freeze()`` after the app is built moves everything alive then (modules, config, the policy
  chain, compiled schemas) to the permanent generation, so full collections never walk it again;
- a generation-0 threshold of ``GEN0_THRESHOLD`` lets a collection run after ten thousand net
  allocations instead of hundreds. Cycles are still collected (the older generations keep their
  default ratios); garbage in cycles lives a little longer, bounded by the threshold. 10,000, 20,000
  and 50,000 measured the same CPU per call (138-141 µs, wrk c=64); the lowest bounds best how much
  cyclic garbage (an error path's traceback holding a request body, say) waits for a collection.

``SWITCHBOARD_GC_GEN0`` overrides the threshold (0 keeps CPython's defaults).
"""

from __future__ import annotations

import gc
import os

GEN0_THRESHOLD = 10_000


def tune_collector() -> None:
    raw = os.environ.get("SWITCHBOARD_GC_GEN0", "")
    threshold = int(raw) if raw.strip().isdigit() else GEN0_THRESHOLD
    if threshold == 0:
        return
    gc.collect()
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(threshold, gen1, gen2)
