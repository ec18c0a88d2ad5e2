"""An ``asyncio.Event`` whose state is also a plain attribute, read on every call without a method call.

``Event.is_set()`` is a Python method: on the backend client's hot path (a connection ready, a carrier
not closed, checked for every call) the attribute read ``flag.on`` saves a call each time.
Invariant: ``on == is_set()`` at all times (both change only in :meth:`set` and :meth:`clear`).
"""

from __future__ import annotations

import asyncio


class Flag(asyncio.Event):
    on = False

    def set(self) -> None:
        self.on = True
        super().set()

    def clear(self) -> None:
        self.on = False
        super().clear()
