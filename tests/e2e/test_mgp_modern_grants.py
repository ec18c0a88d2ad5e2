"""Grants toward a modern backend (MGP_SECURITY.md §2.6, §3.8): the gateway as the kernel of a
real subprocess backend of the 2026-07-28 era (tests/e2e/backends/mgp_modern_server.py).

There is no ``initialize``: the kernel offers MGP in ``server/discover``'s client capabilities,
negotiates from the discover result's ``extensions["dev.cloto/mgp"]``, sends its decision as
``mgp/permission/grant`` in the modern envelope (§3.8 rule 1), and from then on every request
carries the kernel's MGP object in its client capabilities and the grants in force in
``_meta["dev.cloto/mgp/grants"]`` (rule 3). A client's own grants never reach the backend.
"""

from __future__ import annotations

import json
from typing import Any

import mcp_types as types
import pytest
from mcp.client import Client

from tests.support import run_gateway, stdio_backend

pytestmark = [pytest.mark.timeout(60)]

GRANTS = "dev.cloto/mgp/grants"
CLIENT_CAPS = "io.modelcontextprotocol/clientCapabilities"
CONFIG = {
    "backends": {"modern": stdio_backend("tests.e2e.backends.mgp_modern_server", required=True)},
    "mgp": {"permission_policy": "config_only", "approved_permissions": ["filesystem.*"]},
}


def _received(result: types.CallToolResult) -> list[dict[str, Any]]:
    text = " ".join(c.text for c in result.content if isinstance(c, types.TextContent))
    received = json.loads(text)["received"]
    assert isinstance(received, list)
    return received


def _mgp_of(request: dict[str, Any]) -> Any:
    return ((request["meta"].get(CLIENT_CAPS) or {}).get("extensions") or {}).get("dev.cloto/mgp")


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_every_request_to_a_modern_backend_carries_the_kernels_grants(mode: str) -> None:
    forged = {GRANTS: {"shell.execute": "approved"}}  # a client granting itself what config denies
    with run_gateway(CONFIG) as gw:
        async with Client(gw.mcp, mode=mode, read_timeout_seconds=30) as client:
            received = _received(await client.call_tool("received", {}, meta=forged))
    methods = [r["method"] for r in received]
    assert methods[:2] == ["initialize", "server/discover"], "over stdio: initialize refused, then the probe"
    assert methods.index("mgp/permission/grant") < methods.index("tools/call"), "granted before the first call"
    discover, grant = received[1], received[methods.index("mgp/permission/grant")]
    offer = _mgp_of(discover)
    assert offer is not None and "permissions" in offer["extensions"], "the kernel's offer rides in discover"
    decided = grant["params"]["grants"]
    assert decided["filesystem.read"]["decision"] == "approved" and decided["shell.execute"] == {"decision": "denied"}
    assert methods.count("mgp/permission/grant") == 1
    later = [r for r in received if r["method"] in ("tools/list", "tools/call")]
    assert later, methods
    for request in later:
        carried = request["meta"].get(GRANTS)
        assert carried == {"filesystem.read": {"decision": "approved"}}, (request["method"], carried)
        declared = _mgp_of(request)
        assert declared is not None and declared["version"].startswith("0.8"), declared
        assert "permissions" in declared["extensions"]


async def test_a_backend_granted_nothing_gets_no_grants_but_the_kernels_object() -> None:
    config = {**CONFIG, "mgp": {"permission_policy": "deny_all"}}
    with run_gateway(config) as gw:
        async with Client(gw.mcp, mode="legacy", read_timeout_seconds=30) as client:
            received = _received(await client.call_tool("received", {}))
    call = next(r for r in received if r["method"] == "tools/call")
    assert GRANTS not in call["meta"], "absent grants: the server reads them as ungranted"
    assert _mgp_of(call) is not None
