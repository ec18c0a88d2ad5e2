"""``GET /admin/config`` (gateway/admin.py): the effective config with every secret redacted, its source
and the last reload's result. The route against a running process is in test_reload_status.py."""

from __future__ import annotations

import json
from typing import Any

import httpx
from starlette.applications import Starlette

from gateway.admin import AdminApi, redacted
from gateway.config import Config
from gateway.core import Gateway
from gateway.reload_status import ReloadStatus

SECRETS = [
    "redis-pw-1",
    "jwt-secret-2",
    "admin-3",
    "alice-token-4",
    "header-5",
    "env-6",
    "arg-token-7",
    "arg-key-8",
    "jwks-pw-9",
    "otlp-pw-10",
    "routing-key-11",
    "query-token-12",
]
CONFIG: dict[str, Any] = {
    "bus": {"kind": "redis", "url": "redis://sb:redis-pw-1@10.0.0.5:6379/0"},
    "auth": {
        "admin_token": "admin-3",
        "jwt": {"hs256_secret": "jwt-secret-2", "jwks_url": "https://k:jwks-pw-9@idp.example/jwks.json"},
    },
    "principals": {"alice": {"tokens": ["alice-token-4"], "capabilities": ["mcp/*"]}},
    "backends": {
        "web": {
            "transport": "http",
            "url": "https://mcp.example/mcp?token=query-token-12&region=eu",
            "headers": {"X-Whatever": "header-5"},
        },
        "cli": {
            "transport": "stdio",
            "command": "server",
            "args": ["--token", "arg-token-7", "--api-key=arg-key-8", "--port", "9"],
            "env": {"HOME_DIR": "env-6"},
        },
    },
    "mcpl": {"routing": {"web": {"memory.*": {"apiKey": "routing-key-11", "model": "small"}}}},
    "telemetry": {"otlp_endpoint": "http://otel:otlp-pw-10@collector:4318"},
}


def test_no_secret_survives_redaction_and_everything_else_does() -> None:
    dump = Config.model_validate(CONFIG).model_dump(mode="json")
    shown = redacted(dump)
    text = json.dumps(shown)
    for secret in SECRETS:
        assert secret not in text, secret
    assert shown["bus"]["url"] == "redis://***@10.0.0.5:6379/0"
    assert shown["auth"]["jwt"]["jwks_url"] == "https://***@idp.example/jwks.json"
    assert shown["auth"]["jwt"]["max_token_bytes"] == 8192, "a number under a secret-sounding name is no secret"
    assert shown["auth"]["jwt"]["hs256_secret"] == shown["auth"]["admin_token"] == "***"
    assert shown["principals"]["alice"]["tokens"] == ["***"]
    assert shown["principals"]["alice"]["capabilities"] == ["mcp/*"]
    assert shown["backends"]["web"]["url"] == "https://mcp.example/mcp?token=***&region=eu"
    assert shown["backends"]["web"]["headers"] == {"X-Whatever": "***"}, "every header value, whatever its name"
    assert shown["backends"]["cli"]["env"] == {"HOME_DIR": "***"}, "every env value, whatever its name"
    assert shown["backends"]["cli"]["args"] == ["--token", "***", "--api-key=***", "--port", "9"]
    assert shown["mcpl"]["routing"]["web"]["memory.*"] == {"apiKey": "***", "model": "small"}
    assert shown["telemetry"]["otlp_endpoint"] == "http://***@collector:4318"
    assert shown["auth"]["jwt"]["require_exp"] is False and shown["bus"]["password_file"] is None
    assert redacted(dump) == shown and dump["auth"]["admin_token"] == "admin-3", "the dump itself is untouched"


async def test_the_route_shows_the_config_and_the_reload_state_it_is_given() -> None:
    gateway = Gateway(Config.model_validate({**CONFIG, "bus": {"kind": "memory"}}))
    shown_config = Config.model_validate({**CONFIG, "bus": {"kind": "memory"}, "log_level": "debug"})
    status = ReloadStatus(source="/etc/switchboard/config.yaml")
    status.failed("/etc/switchboard/config.yaml: 1 error(s): listen.port (line 2): too big")
    admin = AdminApi(
        auth=lambda: gateway.config.auth,
        principals=gateway.principals,
        principals_changed=gateway.principals_changed,
        sessions=gateway.sessions,
        audit=gateway.audit,
        mcpl=gateway.mcpl,
        pins=gateway.pins,
        catalogs=gateway.catalogs,
        mgp=gateway.mgp.kernel,
        registry=gateway.mgp.registry,
        config=lambda: shown_config,
        reload_status=status,
    )
    app = Starlette(routes=admin.routes())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as client:
        refused = await client.get("/admin/config", headers={"authorization": "Bearer alice-token-4"})
        assert refused.status_code == 401
        response = await client.get("/admin/config", headers={"authorization": "Bearer admin-3"})
    assert response.status_code == 200
    for secret in SECRETS:
        assert secret not in response.text, secret
    body = response.json()
    assert body["config"]["log_level"] == "debug", "the config handed in, asked on every call"
    assert body["source"] == "/etc/switchboard/config.yaml"
    assert body["reload"]["ok"] is False and body["reload"]["error"].endswith("listen.port (line 2): too big")
    await gateway.audit.close()
