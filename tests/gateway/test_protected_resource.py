"""Which protected resource a path belongs to (RFC 9728): ids, metadata URLs, the audience a token may name."""

from __future__ import annotations

import re

from hypothesis import given, strategies as st

from gateway.config import Auth
from gateway.protected_resource import (
    bound_resource,
    gateway_resource,
    metadata_url,
    server_of,
    server_of_metadata,
    server_resource,
)
from gateway.transports.http_common import bearer_challenge

BASE = "http://127.0.0.1:9000"


def test_a_backends_own_doors_belong_to_it() -> None:
    for path in (
        "/servers/a/mcp",
        "/servers/a/mcp/ws",
        "/servers/a/sse",
        "/servers/a/messages",
        "/servers/a/messages/",
    ):
        assert server_of(path) == "a", path
    for path in ("/mcp", "/sse", "/servers/a", "/servers/A/mcp", "/servers/a/mcp/x", "/servers//mcp", "/ws"):
        assert server_of(path) is None, path
    assert server_of("/gw/servers/a/mcp", "/gw") == "a", "behind a root path"


def test_metadata_urls_insert_the_well_known_path() -> None:
    assert metadata_url(BASE, None) == f"{BASE}/.well-known/oauth-protected-resource"
    assert metadata_url(BASE, "a") == f"{BASE}/.well-known/oauth-protected-resource/servers/a/mcp"
    assert server_of_metadata("servers/a/mcp") == "a"
    assert server_of_metadata("mcp") is None and server_of_metadata("servers/a/sse") is None


def test_resource_ids_and_what_may_bind_a_token() -> None:
    resources = {"a": None, "b": "https://b.example/mcp"}
    assert gateway_resource(None, BASE) == f"{BASE}/mcp"
    assert server_resource("a", None, resources, BASE) == f"{BASE}/servers/a/mcp"
    assert server_resource("b", None, resources, BASE) == "https://b.example/mcp"
    assert bound_resource("a", None, resources) is None, "no configured base: the Host never binds a token"
    assert bound_resource("b", None, resources) == "https://b.example/mcp"
    auth = Auth(resource="https://gw.example/mcp")
    assert bound_resource("a", auth, resources) == "https://gw.example/servers/a/mcp"
    assert server_resource("a", auth, resources, BASE) == "https://gw.example/servers/a/mcp"
    assert bound_resource("ghost", auth, resources) is None and bound_resource(None, auth, resources) is None
    assert bound_resource("a", Auth(resource="https://gw.example/"), resources) is None


@given(st.text(max_size=80))
def test_no_path_can_inject_into_the_challenge(path: str) -> None:
    scope = {"type": "http", "path": "/servers/" + path, "headers": [(b"host", b"127.0.0.1:9000")], "scheme": "http"}
    challenge = bearer_challenge(scope, 'bad "reason"\r\n', "invalid_token")
    assert re.fullmatch(
        r'Bearer realm="switchboard", resource_metadata="[^"]+", error="[^"]+", error_description="[^"]*"', challenge
    )
    assert "\r" not in challenge and "\n" not in challenge
    name = server_of("/servers/" + path)
    assert name is None or re.fullmatch(r"[a-z0-9-]{1,63}", name)


def test_check_warns_about_weak_auth_settings() -> None:
    from gateway.config import Introspection, Jwt
    from gateway.config_auth import auth_warnings

    weak = Auth(
        jwt=Jwt(hs256_secret="short", jwks_url="http://idp.example/jwks"),
        introspection=Introspection(endpoint="http://as.example/i", client_id="a", client_secret="b"),
    )
    text = "\n".join(auth_warnings(weak))
    for expected in ("shorter than 32 bytes", "jwt.audience is not set", "jwks_url is plain http", "endpoint is plain"):
        assert expected in text
    strong = Auth(
        jwt=Jwt(jwks_url="https://idp.example/jwks", audience="gw"),
        introspection=Introspection(endpoint="http://127.0.0.1:9/i", client_id="a", client_secret="b", audience="gw"),
    )
    assert auth_warnings(strong) == [] and auth_warnings(None) == []
