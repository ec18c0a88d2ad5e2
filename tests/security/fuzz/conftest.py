"""The door fuzz tests' fixtures: three gateways started once for the whole package (the embedded default, one
with ``auth`` and small limits, and ``switchboard stdio``), the per-test guard, and an HTTP client."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import yaml

from tests.security.fuzz.clients import StdioGateway
from tests.security.fuzz.support import (
    ADMIN,
    ALICE,
    AUDIENCE,
    BRIDGED_TOPIC,
    ENVELOPE_LIMIT,
    SECRET,
    SMALL_LIMIT,
    STDIO_LIMIT,
    STEP_S,
    TRACEBACK,
    VERSION,
    _final_checks,
    b64,
    echo_call,
    initialize,
)
from tests.support import RunningGateway, run_gateway


@pytest.fixture(scope="package")
def jwks_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A JWKS with one P-256 key, so that RS256/ES256 tokens (and their ``kid``) reach the key lookup."""
    from cryptography.hazmat.primitives.asymmetric import ec

    numbers = ec.generate_private_key(ec.SECP256R1()).public_key().public_numbers()
    jwk = {
        "kty": "EC",
        "crv": "P-256",
        "kid": "k1",
        "x": b64(numbers.x.to_bytes(32, "big")),
        "y": b64(numbers.y.to_bytes(32, "big")),
    }
    path = tmp_path_factory.mktemp("jwks") / "jwks.json"
    path.write_text(json.dumps({"keys": [jwk]}))
    return path


@pytest.fixture(scope="package")
def plain() -> Iterator[RunningGateway]:
    """The embedded default: loopback, no auth, the demo backend."""
    with run_gateway(None) as running:
        yield running
        _final_checks(running)


@pytest.fixture(scope="package")
def authed(jwks_file: Path) -> Iterator[RunningGateway]:
    """Auth required (static token, HS256 JWTs, a JWKS), small size limits."""
    config = {
        "backends": {"demo": {"transport": "builtin", "required": True}},
        "auth": {
            "jwt": {"hs256_secret": SECRET, "audience": AUDIENCE, "jwks_file": str(jwks_file)},
            "admin_token": ADMIN,
        },
        "principals": {"alice": {"tokens": [ALICE], "capabilities": ["mcp/*", "chat"]}},
        "limits": {"max_body_bytes": SMALL_LIMIT, "max_message_bytes": SMALL_LIMIT},
        "mcpx": {
            "max_envelope_bytes": ENVELOPE_LIMIT,
            "dev_tokens": True,
            "topics": {BRIDGED_TOPIC: {"participants": ["demo"]}},
        },
    }
    with run_gateway(config) as running:
        yield running
        _final_checks(running, ALICE)


@dataclass
class _Watch:
    gw: RunningGateway
    offset: int


@pytest.fixture(autouse=True)
def _door_guard(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each test: every gateway it used is alive, healthy, and logged no traceback meanwhile."""
    watches = [
        _Watch(gw, gw.log_path.stat().st_size)
        for gw in (request.getfixturevalue(name) for name in ("plain", "authed") if name in request.fixturenames)
    ]
    yield
    for watch in watches:
        gw = watch.gw
        assert gw.proc.poll() is None, f"the gateway died (exit {gw.proc.returncode})\n{gw.log()[-3000:]}"
        assert httpx.get(f"{gw.url}/healthz", timeout=STEP_S, trust_env=False).status_code == 200
        with gw.log_path.open("rb") as log:
            log.seek(watch.offset)
            new = log.read().decode(errors="replace")
        assert TRACEBACK not in new, new[max(0, new.index(TRACEBACK) - 300) :][:4000]


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=STEP_S, trust_env=False) as c:
        yield c


@pytest.fixture(scope="package")
def stdio_gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StdioGateway]:
    workdir = tmp_path_factory.mktemp("stdio")
    config = workdir / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "backends": {"demo": {"transport": "builtin", "required": True}},
                "limits": {"max_message_bytes": STDIO_LIMIT},
            }
        )
    )
    gw = StdioGateway(config, workdir / "stderr.log")
    try:
        gw.write(json.dumps(initialize("init")).encode() + b"\n")
        assert gw.until_id("init")[0]["result"]["protocolVersion"] == VERSION
        gw.write(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
        yield gw
        # The session still works: a valid initialize (a new one is refused or answered, never ignored) and echo.
        assert gw.proc.poll() is None, gw.stderr()[-3000:]
        gw.write(json.dumps(initialize("again")).encode() + b"\n")
        gw.until_id("again")
        gw.write(json.dumps(echo_call("final", "still here")).encode() + b"\n")
        answer, _ = gw.until_id("final")
        assert answer["result"]["content"] == [{"type": "text", "text": "still here"}], answer
    finally:
        gw.close()
    assert TRACEBACK not in gw.stderr(), gw.stderr()[-4000:]
