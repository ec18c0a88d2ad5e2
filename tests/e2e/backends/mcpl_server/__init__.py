"""A configurable MCPL 0.4 server for the gateway's e2e tests (raw JSON-RPC, no SDK, fully asyncio).

The gateway sits between MCPL hosts and MCPL servers; to test it we need a server that exercises every
server-side lane of the spec (push events, context hooks, server-initiated inference with streaming,
scopes, checkpoints/rollback, channels) and that records everything it receives, so a test can check
what the gateway forwarded. One process plays one role (``--role memory|compliance|notes|files|channels``).

Run as ``python -m tests.e2e.backends.mcpl_server --role ROLE [--http PORT] [options]`` with cwd at the
project root. Without ``--http`` it speaks newline-delimited JSON-RPC on stdin/stdout; with it, legacy
Streamable HTTP at ``http://127.0.0.1:PORT/mcp`` (sessions, JSON answers, a standalone GET SSE stream that
carries every server-initiated message). Only JSON-RPC ever goes to stdout; logs go to stderr.

Messages are handled concurrently: a tool call waiting for the host's answer to a server→host request
(ids ``s-1``, ``s-2``...) does not stop the other incoming messages, that answer included. Every such
wait has a timeout (``--ask-timeout``, 10 s) that yields an error object instead of hanging.

The package: ``catalog`` (the roles' tools, capabilities and feature sets), ``server`` (the protocol
logic and the records, independent of the transport), ``transports`` (stdio and Streamable HTTP) and
``cli`` (the command line; ``__main__`` runs it).
"""
