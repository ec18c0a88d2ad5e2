"""Egress settings in the config (gateway/config_egress.py): what `switchboard check` and `run` say about a
proxy or a TLS file that cannot be used, and what they warn about."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.cli import main
from gateway.config import ConfigError, load_config
from tests.support import PROJECT_ROOT
from tests.support_tls import Pki, make_pki

PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy")


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    directory = tmp_path / "pki"
    directory.mkdir()
    return make_pki(directory)


def _write(tmp_path: Path, backend: dict[str, Any], **top: Any) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"backends": {"b": {"transport": "http", **backend}}, **top}))
    return path


def _issues(path: Path) -> str:
    with pytest.raises(ConfigError) as caught:
        load_config(str(path))
    return "\n".join(str(issue) for issue in caught.value.issues)


def test_a_missing_tls_file_is_a_config_error_naming_it(tmp_path: Path) -> None:
    path = _write(tmp_path, {"url": "https://x.test/mcp", "tls": {"ca_file": "/nowhere/ca.pem"}})
    issues = _issues(path)
    assert "tls.ca_file '/nowhere/ca.pem' does not exist" in issues and "backends.b.tls.ca_file" in issues


def test_a_key_without_its_certificate(tmp_path: Path, pki: Pki) -> None:
    path = _write(tmp_path, {"url": "https://x.test/mcp", "tls": {"key_file": str(pki.client_key)}})
    assert "tls.key_file needs tls.cert_file" in _issues(path)


@pytest.mark.parametrize(
    ("proxy", "reason"),
    [
        ("socks5://p:1080", "scheme 'socks5' is not supported"),
        ("http://p:3128/path", "host[:port] only"),
        (True, "must be a URL"),
    ],
)
def test_a_proxy_that_cannot_be_used(tmp_path: Path, proxy: object, reason: str) -> None:
    assert reason in _issues(_write(tmp_path, {"url": "https://x.test/mcp", "proxy": proxy}))


def test_proxy_spellings(tmp_path: Path) -> None:
    for given, kept in (
        (False, "none"),
        ("none", "none"),
        ("DIRECT", "none"),
        (None, None),
        ("u:pw@p:3128", "http://u:pw@p:3128"),
    ):
        config = load_config(str(_write(tmp_path, {"url": "https://x.test/mcp", "proxy": given})))
        assert config.backends["b"].proxy == kept


def test_check_reports_a_tls_file_that_is_no_pem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    path = _write(tmp_path, {"url": "https://x.test/mcp", "tls": {"ca_file": str(junk)}})
    assert main(["check", "-c", str(path)]) == 1
    err = capsys.readouterr().err
    assert f"backend b: tls.ca_file '{junk}' is not a PEM CA bundle" in err


def test_check_reports_a_client_key_that_does_not_fit(
    tmp_path: Path, pki: Pki, capsys: pytest.CaptureFixture[str]
) -> None:
    tls = {"cert_file": str(pki.client_cert), "key_file": str(pki.server_key)}  # another certificate's key
    path = _write(tmp_path, {"url": "https://x.test/mcp", "tls": tls})
    assert main(["check", "-c", str(path)]) == 1
    assert "backend b: tls.cert_file/key_file" in capsys.readouterr().err


def test_check_warns_about_verify_false_and_tls_on_plain_http(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "config.yaml"
    backends = {
        "lab": {"transport": "http", "url": "https://lab.test/mcp", "tls": {"verify": False}},
        "plain": {"transport": "http", "url": "http://plain.test/mcp", "tls": {"server_name": "x"}},
        "local": {"transport": "stdio", "command": "true", "proxy": "none"},
    }
    path.write_text(yaml.safe_dump({"backends": backends, "egress": {"tls": {"verify": False}}}))
    assert main(["check", "-c", str(path)]) == 0
    err = capsys.readouterr().err
    assert "backend lab: tls.verify is false" in err
    assert "egress: tls.verify is false" in err
    assert "backends.plain.tls is ignored: its url is not https or wss" in err
    assert "backends.local.proxy is ignored for transport 'stdio'" in err


def test_check_reports_a_proxy_variable_it_cannot_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "socks5://user:hunter2@proxy:1080")
    path = _write(tmp_path, {"url": "https://x.test/mcp"})
    assert main(["check", "-c", str(path)]) == 1
    err = capsys.readouterr().err
    assert "environment variable HTTPS_PROXY: proxy scheme 'socks5' is not supported" in err
    assert "hunter2" not in err


def test_run_refuses_to_start_with_a_tls_file_that_is_no_pem(tmp_path: Path) -> None:
    junk = tmp_path / "junk.pem"
    junk.write_text("-----BEGIN CERTIFICATE-----\nnope\n-----END CERTIFICATE-----\n")
    path = _write(tmp_path, {"url": "https://x.test/mcp", "tls": {"ca_file": str(junk)}})
    done = subprocess.run(
        [sys.executable, "-m", "gateway", "run", "-c", str(path), "--port", "0"],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 1
    assert "is not a PEM CA bundle" in done.stderr and "Traceback" not in done.stderr


def test_an_encrypted_client_key_is_refused_not_prompted_for(
    tmp_path: Path, pki: Pki, capsys: pytest.CaptureFixture[str]
) -> None:
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(pki.client_key.read_bytes(), None)
    locked = tmp_path / "locked.key"
    locked.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"passphrase"),
        )
    )
    path = _write(
        tmp_path, {"url": "https://x.test/mcp", "tls": {"cert_file": str(pki.client_cert), "key_file": str(locked)}}
    )
    assert main(["check", "-c", str(path)]) == 1  # and no prompt on the terminal: stdin is not read
    assert "encrypted keys are not supported" in capsys.readouterr().err


def test_proxy_credentials_are_redacted_in_the_admin_view(tmp_path: Path) -> None:
    from gateway.admin import redacted

    path = _write(
        tmp_path,
        {"url": "https://x.test/mcp", "proxy": "gw:hunter2@proxy.corp:3128"},
        egress={"proxy": "http://gw:hunter3@p:1"},
    )
    shown = str(redacted(load_config(str(path)).model_dump(mode="json")))
    assert "hunter2" not in shown and "hunter3" not in shown and "proxy.corp:3128" in shown
