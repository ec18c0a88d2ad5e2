"""backends.NAME.auth in the config (gateway/config_upstream_auth.py): what is accepted, and how `switchboard check`
explains what is not (issue 17)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.cli import main as cli_main
from gateway.config import Config, parse_config

EXCHANGE = {
    "type": "token_exchange",
    "token_endpoint": "https://as.example/token",
    "client_id": "gw",
    "client_secret": "s",
}


def backend(transport: str = "http", **extra: Any) -> dict[str, Any]:
    url = {"http": "http://127.0.0.1:1/mcp", "sse": "http://127.0.0.1:1/sse", "ws": "ws://127.0.0.1:1/ws"}
    base: dict[str, Any] = {"transport": transport}
    if transport in url:
        base["url"] = url[transport]
    if transport == "stdio":
        base["command"] = "true"
    return {**base, **extra}


def check(tmp_path: Path, capsys: pytest.CaptureFixture[str], backends: dict[str, Any]) -> tuple[int, str]:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"backends": backends}))
    code = cli_main(["check", "-c", str(path)])
    captured = capsys.readouterr()
    return code, captured.err + captured.out


def test_every_kind_is_accepted_over_http() -> None:
    config = Config.model_validate(
        {
            "backends": {
                "a": backend(auth={"type": "static", "headers": {"Authorization": "Bearer x"}}),
                "b": backend(auth={**EXCHANGE, "type": "client_credentials", "scope": "s"}),
                "c": backend(auth={**EXCHANGE, "audience": "c", "connection": "none"}),
                "d": backend(
                    headers={"X-Trace": "1"},
                    auth={"type": "principal_headers", "principals": {"alice": {"X-Api-Key": "k"}}, "default": "deny"},
                ),
                "e": backend("ws", auth={"type": "static", "headers": {"Authorization": "Bearer x"}}),
            }
        }
    )
    assert [b.auth.type for b in config.backends.values() if b.auth] == [
        "static",
        "client_credentials",
        "token_exchange",
        "principal_headers",
        "static",
    ]


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        (backend("ws", auth=EXCHANGE), "needs transport 'http' (on 'ws', one connection serves every user"),
        (backend("sse", auth={"type": "principal_headers"}), "needs transport 'http' (on 'sse'"),
        (backend("stdio", auth={**EXCHANGE, "type": "client_credentials"}), "needs transport 'http'"),
        (backend("stdio", auth={"type": "static"}), "transport 'stdio' has none"),
        (backend(headers={"authorization": "x"}, auth=EXCHANGE), "headers ['authorization'] are set by auth"),
        (backend(auth={**EXCHANGE, "client_secret": None}), "exactly one of client_secret or client_assertion"),
        (backend(auth={**EXCHANGE, "token_endpoint": "as.example/token"}), "token_endpoint must be an https:// URL"),
        (backend(auth={**EXCHANGE, "token_endpoint": "http://as.example/token"}), "http:// only to a loopback"),
        (backend(auth={**EXCHANGE, "type": "password"}), "does not match any of the expected tags"),
        (
            backend(auth={"type": "principal_headers", "principals": {"a": {"Bad Name": "v"}}}),
            "is not a valid header name",
        ),
    ],
)
def test_check_explains_what_cannot_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], entry: dict[str, Any], says: str
) -> None:
    code, output = check(tmp_path, capsys, {"b": entry})
    assert code == 1
    assert "backends.b" in output and says in output, output


def test_env_expansion_fills_per_principal_secrets() -> None:
    text = yaml.safe_dump(
        {"backends": {"b": backend(auth={"type": "principal_headers", "principals": {"alice": {"X-Api-Key": "${K}"}}})}}
    )
    config = parse_config(text, environ={"K": "from-env"})
    auth = config.backends["b"].auth
    assert auth is not None and auth.type == "principal_headers" and auth.principals["alice"]["X-Api-Key"] == "from-env"


def test_the_admin_view_hides_every_upstream_credential() -> None:
    from gateway.admin import redacted

    config = Config.model_validate(
        {
            "backends": {
                "s": backend(auth={"type": "static", "headers": {"X-A": "static-1"}}),
                "x": backend(auth={**EXCHANGE, "client_secret": "secret-2", "audience": "aud-x"}),
                "p": backend(
                    auth={
                        "type": "principal_headers",
                        "principals": {"alice": {"X-Api-Key": "alice-3"}},
                        "default": {"X-Api-Key": "default-4"},
                        "connection": {"X-Api-Key": "conn-5"},
                    }
                ),
            }
        }
    )
    shown = redacted(config.model_dump(mode="json"))
    text = repr(shown)
    for secret in ("static-1", "secret-2", "alice-3", "default-4", "conn-5"):
        assert secret not in text
    assert shown["backends"]["x"]["auth"]["audience"] == "aud-x", "what is no secret stays readable"
    assert shown["backends"]["p"]["auth"]["principals"] == {"alice": {"X-Api-Key": "***"}}


def test_the_shipped_example_checks(capsys: pytest.CaptureFixture[str]) -> None:
    from tests.support import PROJECT_ROOT

    assert cli_main(["check", "-c", str(PROJECT_ROOT / "deploy/examples/calling-backends-as-the-user.yaml")]) == 0
    assert "ok (3 backend(s)" in capsys.readouterr().out


def test_check_reads_the_private_key_jwt_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    pem = tmp_path / "k.pem"
    pem.write_bytes(
        ec.generate_private_key(ec.SECP256R1()).private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    keyed = {**EXCHANGE, "type": "client_credentials", "client_secret": None}
    good = backend(auth={**keyed, "client_assertion": {"private_key_file": str(pem), "alg": "ES256"}})
    assert check(tmp_path, capsys, {"b": good})[0] == 0
    wrong_alg = backend(auth={**keyed, "client_assertion": {"private_key_file": str(pem), "alg": "RS256"}})
    code, output = check(tmp_path, capsys, {"b": wrong_alg})
    assert code == 1 and "backends.b.auth.client_assertion.private_key_file" in output
    missing = backend(auth={**keyed, "client_assertion": {"private_key_file": str(tmp_path / "none.pem")}})
    code, output = check(tmp_path, capsys, {"b": missing})
    assert code == 1 and "none.pem" in output and "No such file" in output
