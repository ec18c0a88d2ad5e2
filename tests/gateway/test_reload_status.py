"""Config reload feedback: ``ReloadStatus`` and its metrics, the change list, the one-line WARNING of a
refused file, and the whole story against a running gateway process (SIGHUP with a broken file, then
a good one: ``GET /admin/config``, ``/metrics`` and the log)."""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

import httpx
import pytest
import yaml

from gateway.cli import reload_config
from gateway.config import Config, ConfigError, parse_config
from gateway.core import Gateway
from gateway.metrics import Metrics
from gateway.reload_status import MAX_CHANGES, ReloadStatus, config_changes, describe_issues
from tests.support import RunningGateway, crashy_backend, run_gateway

ADMIN = "admin-token-3f9a1c"
SECRETS = {
    "admin": ADMIN,
    "jwt": "jwt-secret-77b2e0",
    "alice": "alice-token-0d41aa",
    "bob": "bob-token-9c3e57",
    "header": "header-secret-5521fe",
    "env": "env-secret-a81b0c",
    "userinfo": "userinfo-pw-e3d9",
}


def _metric(metrics: Metrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_status_and_metrics_follow_each_attempt() -> None:
    metrics = Metrics()
    status = ReloadStatus(metrics, source="/etc/switchboard.yaml")
    assert status.to_json() == {"last_attempt": None, "ok": None, "error": None, "changes": [], "applied_at": None}
    assert _metric(metrics, "switchboard_config_last_reload_success") == 1  # the start-up config is a good one
    assert _metric(metrics, "switchboard_config_reloads_total", outcome="failed") == 0

    status.failed("x.yaml: 1 error(s): listen.port (line 2): too big")
    assert status.ok is False and status.error is not None and status.applied_at is None
    assert _metric(metrics, "switchboard_config_last_reload_success") == 0
    assert _metric(metrics, "switchboard_config_reloads_total", outcome="failed") == 1

    status.applied(["principals.bob: added"])
    shown = status.to_json()
    assert shown["ok"] is True and shown["error"] is None and shown["changes"] == ["principals.bob: added"]
    assert shown["applied_at"] == shown["last_attempt"] and shown["applied_at"].endswith("Z")
    datetime.fromisoformat(shown["applied_at"])  # RFC 3339
    assert _metric(metrics, "switchboard_config_last_reload_success") == 1
    assert _metric(metrics, "switchboard_config_reloads_total", outcome="ok") == 1

    status.failed("again")
    assert status.applied_at == shown["applied_at"], "a refused reload leaves when the running config was applied"


def test_a_refused_file_is_described_on_one_line() -> None:
    text = "listen:\n  port: 99999\nbackends:\n  demo: {transport: pigeon}\n"
    with pytest.raises(ConfigError) as caught:
        parse_config(text, "/etc/sb.yaml", environ={})
    line = describe_issues("/etc/sb.yaml", caught.value.issues)
    assert "\n" not in line and line.startswith("/etc/sb.yaml: 2 error(s): ")
    assert "listen.port (line 2): " in line and "backends.demo.transport (line 4): " in line


def _gateway(**extra: Any) -> Gateway:
    return Gateway(Config.model_validate({"backends": {"demo": {"transport": "builtin"}}, **extra}))


def test_reload_config_records_changes_and_what_needs_a_restart() -> None:
    gateway = _gateway(principals={"alice": {"tokens": [SECRETS["alice"]]}})
    new = Config.model_validate(
        {
            "backends": {"demo": {"transport": "builtin"}, "more": {"transport": "builtin"}},
            "principals": {"alice": {"tokens": [SECRETS["alice"]]}, "bob": {"tokens": [SECRETS["bob"]]}},
            "limits": {"session_queue": 2048},
        }
    )
    assert reload_config(gateway, new, "sb.yaml")
    status = gateway.reload_status
    assert status.ok is True and gateway.principals.get("bob") is not None
    assert status.changes == [
        "principals.bob: added",
        "backends.more: added (needs a restart)",
        "limits.session_queue: changed (needs a restart)",
    ]
    assert not any(SECRETS["bob"] in change for change in status.changes), "change lists name keys, not values"
    # Nothing changed since: an empty list, still a success.
    assert reload_config(gateway, new, "sb.yaml") and status.changes == [
        "backends.more: added (needs a restart)",
        "limits.session_queue: changed (needs a restart)",
    ]


def test_a_change_list_is_bounded() -> None:
    old = Config()
    new = Config.model_validate({"principals": {f"p{i}": {} for i in range(MAX_CHANGES + 7)}})
    changes = config_changes(old, new, new)
    assert len(changes) == MAX_CHANGES + 1 and changes[-1] == "... and 7 more"


def test_a_reload_that_would_open_a_public_port_to_anonymous_callers_is_refused(
    caplog: pytest.LogCaptureFixture,
) -> None:
    gateway = _gateway(listen={"host": "0.0.0.0"}, auth={"admin_token": ADMIN})
    caplog.set_level(logging.WARNING, "switchboard.reload")
    assert not reload_config(gateway, Config.model_validate({"listen": {"host": "0.0.0.0"}}), "sb.yaml")
    assert gateway.config.auth is not None, "the running config stays"
    assert gateway.reload_status.ok is False and "no auth section" in (gateway.reload_status.error or "")
    [record] = caplog.records
    assert record.levelno == logging.WARNING and record.getMessage().startswith(
        "config reload refused, keeping the running config: sb.yaml: "
    )


# ---- against a running gateway process ------------------------------------------------------------


def _config(port: int | None = None, **extra: Any) -> dict[str, Any]:
    """The gateway's config; ``port`` for a rewrite (run_gateway adds the first one's listen)."""
    return {
        **({"listen": {"host": "127.0.0.1", "port": port}} if port is not None else {}),
        "auth": {"admin_token": SECRETS["admin"], "jwt": {"hs256_secret": SECRETS["jwt"]}},
        "principals": {"alice": {"tokens": [SECRETS["alice"]], "capabilities": ["*"]}},
        "backends": {
            "demo": {"transport": "builtin", "required": True},
            "upstream": {
                "transport": "http",
                "url": f"http://svc:{SECRETS['userinfo']}@127.0.0.1:9/mcp",
                "headers": {"Authorization": f"Bearer {SECRETS['header']}"},
                "connect_timeout_s": 1,
            },
            "local": crashy_backend(env={"API_KEY": SECRETS["env"]}),
        },
        **extra,
    }


def _until(what: str, check: Callable[[], Any], gw: RunningGateway, timeout_s: float = 20) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"{what} never happened\n{gw.log()}")


def _metrics(gw: RunningGateway) -> dict[str, float]:
    text = httpx.get(f"{gw.url}/metrics", timeout=10).text
    wanted = ("switchboard_config_reloads_total", "switchboard_config_last_reload_success")
    return {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(wanted)
    }


def test_a_broken_file_keeps_the_running_config_and_says_why_everywhere() -> None:
    with run_gateway(_config()) as gw:
        port = int(gw.url.rsplit(":", 1)[1])
        admin = {"authorization": f"Bearer {SECRETS['admin']}"}

        def shown() -> dict[str, Any]:
            response = httpx.get(f"{gw.url}/admin/config", headers=admin, timeout=10)
            assert response.status_code == 200, response.text
            for name, secret in SECRETS.items():
                assert secret not in response.text, f"the {name} secret appears in /admin/config"
            body: dict[str, Any] = response.json()
            return body

        assert httpx.get(f"{gw.url}/admin/config", timeout=10).status_code == 401
        first = shown()
        assert first["source"] == str(gw.config_path)
        assert first["reload"] == {"last_attempt": None, "ok": None, "error": None, "changes": [], "applied_at": None}
        assert first["config"]["auth"]["admin_token"] == "***"
        assert first["config"]["backends"]["upstream"]["headers"] == {"Authorization": "***"}
        assert first["config"]["backends"]["upstream"]["url"] == "http://***@127.0.0.1:9/mcp"
        assert first["config"]["backends"]["local"]["env"] == {"API_KEY": "***"}
        assert first["config"]["principals"]["alice"] == {
            "tokens": ["***"],
            "capabilities": ["*"],
            "mcpl": {"feature_sets": None, "scopes": None},
        }
        assert _metrics(gw)["switchboard_config_last_reload_success"] == 1

        # A broken file: an unknown transport and an unknown key. The gateway keeps serving the old one.
        broken = _config(port, principals={"bob": {"tokens": [SECRETS["bob"]]}})
        broken["backends"]["demo"]["transport"] = "pigeon"
        broken["limits"] = {"sesion_queue": 5}
        gw.config_path.write_text(yaml.safe_dump(broken))
        gw.proc.send_signal(signal.SIGHUP)
        refused = _until("the refused reload", lambda: (body := shown())["reload"]["ok"] is False and body, gw)
        error = refused["reload"]["error"]
        assert error.startswith(f"{gw.config_path}: 2 error(s): ") and "backends.demo.transport (line " in error
        assert "limits.sesion_queue (line " in error and "unknown key" in error
        assert refused["reload"]["applied_at"] is None and "bob" not in refused["config"]["principals"]
        metrics = _metrics(gw)
        assert metrics["switchboard_config_last_reload_success"] == 0
        assert metrics['switchboard_config_reloads_total{outcome="failed"}'] >= 1
        assert metrics['switchboard_config_reloads_total{outcome="ok"}'] == 0
        log = gw.log_with("config reload refused")
        warnings = [line for line in log.splitlines() if "config reload refused" in line]
        assert warnings and all(" WARNING " in line and str(gw.config_path) in line for line in warnings), warnings
        assert "backends.demo.transport" in warnings[0]
        assert httpx.get(f"{gw.url}/readyz", timeout=10).status_code == 200

        # Fixed: bob is added live; a limit is reported as needing a restart.
        fixed = _config(port, limits={"session_queue": 2048})
        fixed["principals"]["bob"] = {"tokens": [SECRETS["bob"]], "capabilities": ["*"]}
        gw.config_path.write_text(yaml.safe_dump(fixed))
        gw.proc.send_signal(signal.SIGHUP)
        applied = _until("the applied reload", lambda: (body := shown())["reload"]["ok"] is True and body, gw)
        assert applied["reload"]["error"] is None and applied["reload"]["applied_at"]
        assert "principals.bob: added" in applied["reload"]["changes"]
        assert "limits.session_queue: changed (needs a restart)" in applied["reload"]["changes"]
        assert applied["config"]["principals"]["bob"]["tokens"] == ["***"]
        metrics = _metrics(gw)
        assert metrics["switchboard_config_last_reload_success"] == 1
        assert metrics['switchboard_config_reloads_total{outcome="ok"}'] >= 1
        listed = httpx.get(f"{gw.url}/admin/principals", headers=admin, timeout=10).json()
        assert "bob" in listed["principals"]
