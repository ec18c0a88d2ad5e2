"""Every front door's framing, fuzzed with arbitrary and malformed bytes against real gateway processes.

What these tests prove, for every input they send (hand-written nasty cases plus hypothesis-generated ones):

1. the gateway never answers a 5xx: a 4xx carries a JSON-RPC error body, a 2xx is something legitimately fine;
2. the process survives every batch (checked after each test) and still answers ``tools/call echo`` at the end;
3. no Python traceback appears in the gateway's log (checked per test and at package end);
4. every exchange is bounded: each wait uses a client timeout of a few seconds, and a timeout is a failure.

Doors, one module each: Streamable HTTP (``POST``/``GET``/``DELETE /mcp`` and ``/servers/NAME/mcp``, both eras;
``test_streamable_http``), legacy SSE (``GET /sse`` + ``POST /messages``; ``test_legacy_sse``), WebSocket
(``/mcp/ws``: frames, framing violations, handshakes; ``test_websocket``), the MCPx topic socket (``/ws?topic=``,
also with a bridged backend; ``test_mcpx_socket``), raw HTTP on a plain socket (``test_raw_http``), the admin and
topic APIs and credentials on each door (against a gateway with an ``auth`` section; ``test_credentials``), and
``switchboard stdio`` (``test_stdio``). ``test_zz_regressions`` pins the bugs this fuzzer found and, last of all,
checks that every gateway survived.

Two package-scoped gateways (``conftest.py``) serve every test: the embedded default (no config: loopback, no auth,
the demo backend) and one with ``auth`` (HS256 secret and a JWKS file), a static principal and small size limits.
Hypothesis runs derandomized and without a database, so a run is reproducible and leaves no files behind.
"""
