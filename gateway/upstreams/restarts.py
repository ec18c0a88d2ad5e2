"""How many times a backend may be restarted (MGP §11.6 ``max_restarts`` within ``window``).

The connection's supervisor asks :meth:`RestartBudget.allow` before each restart; once the limit is
reached within the window the budget is spent for good (:attr:`gave_up`) and the supervisor ends:
the backend stays down (MGP lifecycle state ``error``). Without ``max_restarts`` every restart is
allowed, as before the limit existed; the backoff between restarts is the supervisor's.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

from gateway.config import Restart


class RestartBudget:
    __slots__ = ("_clock", "_config", "_times", "gave_up")

    def __init__(self, config: Restart, clock: Callable[[], float] = time.monotonic) -> None:
        self._config = config
        self._clock = clock
        self._times: deque[float] = deque()
        self.gave_up = False

    def allow(self) -> bool:
        """One more restart, unless ``max_restarts`` were already made within ``window_s``."""
        limit = self._config.max_restarts
        if limit is None:
            return True
        now = self._clock()
        while self._times and now - self._times[0] > self._config.window_s:
            self._times.popleft()
        if len(self._times) >= limit:
            self.gave_up = True
            return False
        self._times.append(now)
        return True

    def note(self) -> str:
        """What a loss's reason says once the budget is spent (empty before)."""
        if not self.gave_up:
            return ""
        return f" (restart_limit_exceeded: {self._config.max_restarts} restarts within {self._config.window_s:g}s)"
