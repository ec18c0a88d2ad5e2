"""What the last config reload did, for the log's readers, ``/metrics`` and ``GET /admin/config``.

One :class:`ReloadStatus` per gateway (``gateway.reload_status``). The reload watcher
(``gateway/cli.py``) reports every attempt here: a refused file (it does not validate, or it cannot
be applied) keeps the running config and records why; an applied one records what changed.

Invariants: ``ok`` is None until the first attempt; ``applied_at`` only moves on success, so after
a refused reload it still says when the running config was last applied; the metrics
``switchboard_config_reloads_total{outcome}`` and ``switchboard_config_last_reload_success`` move
in the same step as the fields (the gauge is 1 from the start: the config loaded at start-up is a
good one). Change lists name key paths only, never values: they are shown to operators and may
concern secrets.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gateway.config import Config, ConfigIssue
    from gateway.metrics import Metrics

# A reload that rewrites the whole file would list every key; past this, the list says how many more.
MAX_CHANGES = 50


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


@dataclass(slots=True)
class ReloadStatus:
    metrics: Metrics | None = None
    source: str | None = None  # the file reloads read (None: the embedded default, never reloaded)
    last_attempt: str | None = None  # RFC 3339, UTC
    ok: bool | None = None
    error: str | None = None
    changes: list[str] = field(default_factory=list)
    applied_at: str | None = None

    def __post_init__(self) -> None:
        if self.metrics is not None:
            self.metrics.config_last_reload_success.set(1)
            for outcome in ("ok", "failed"):  # both series exist from the start: rate() and alerts see 0
                self.metrics.config_reloads.labels(outcome)

    def failed(self, error: str) -> None:
        """A reload was refused: the running config stays, ``error`` says why."""
        self.last_attempt = _now()
        self.ok = False
        self.error = error
        self.changes = []
        if self.metrics is not None:
            self.metrics.config_reloads.labels("failed").inc()
            self.metrics.config_last_reload_success.set(0)

    def applied(self, changes: list[str]) -> None:
        self.last_attempt = self.applied_at = _now()
        self.ok = True
        self.error = None
        self.changes = changes
        if self.metrics is not None:
            self.metrics.config_reloads.labels("ok").inc()
            self.metrics.config_last_reload_success.set(1)

    def to_json(self) -> dict[str, Any]:
        """The ``reload`` object of ``GET /admin/config``."""
        return {
            "last_attempt": self.last_attempt,
            "ok": self.ok,
            "error": self.error,
            "changes": list(self.changes),
            "applied_at": self.applied_at,
        }


def describe_issues(file: str, issues: Iterable[ConfigIssue]) -> str:
    """A refused file's errors on one line: the file, then each key path with its line and reason."""
    parts = []
    for issue in issues:
        where = f"{issue.path or '<root>'}" + (f" (line {issue.line})" if issue.line else "")
        parts.append(f"{where}: {' '.join(issue.reason.split())}")  # one line, whatever the reason holds
    return f"{file}: {len(parts)} error(s): {'; '.join(parts)}"


def config_changes(old: Config, new: Config, running: Config) -> list[str]:
    """Key paths that differ between the config before a reload and the file read (``principals.bob:
    added``, ``listen.port: changed``). ``running`` is the gateway's config after the reload: a change
    under a top-level key where it still differs from the file was not applied live, and is marked
    ``(needs a restart)`` (so the list is right whatever ``Gateway.reload`` learns to apply)."""
    fresh = new.model_dump(mode="json")
    live = running.model_dump(mode="json")
    found: list[str] = []
    _diff(old.model_dump(mode="json"), fresh, "", found)
    marked = []
    for change in found:
        top = change.split(":", 1)[0].split(".", 1)[0]
        marked.append(f"{change} (needs a restart)" if live.get(top) != fresh.get(top) else change)
    if len(marked) > MAX_CHANGES:
        marked = [*marked[:MAX_CHANGES], f"... and {len(marked) - MAX_CHANGES} more"]
    return marked


def _diff(old: Any, new: Any, path: str, found: list[str]) -> None:
    if old == new:
        return
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        for key in [*old, *(k for k in new if k not in old)]:
            where = f"{path}.{key}" if path else str(key)
            if key not in new:
                found.append(f"{where}: removed")
            elif key not in old:
                found.append(f"{where}: added")
            else:
                _diff(old[key], new[key], where, found)
        return
    found.append(f"{path}: changed")
