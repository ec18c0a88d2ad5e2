"""The restart budget of a backend (MGP §11.6 ``max_restarts`` within ``window_s``)."""

from __future__ import annotations

from gateway.config import Restart
from gateway.upstreams.restarts import RestartBudget


def test_without_a_limit_every_restart_is_allowed() -> None:
    budget = RestartBudget(Restart())
    assert all(budget.allow() for _ in range(1000)) and not budget.gave_up and budget.note() == ""


def test_the_limit_counts_within_the_window_only_and_is_final_once_spent() -> None:
    now = [0.0]
    budget = RestartBudget(Restart(max_restarts=2, window_s=10), clock=lambda: now[0])
    assert budget.allow() and budget.allow()
    now[0] = 11.0  # both fell out of the window
    assert budget.allow() and budget.allow()
    assert not budget.allow() and budget.gave_up
    assert budget.note() == " (restart_limit_exceeded: 2 restarts within 10s)"


def test_zero_means_never_restart() -> None:
    budget = RestartBudget(Restart(max_restarts=0))
    assert not budget.allow() and budget.gave_up
