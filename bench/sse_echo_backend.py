"""The benchmark's echo backend (bench/echo_backend.py) answering every request with an SSE stream.

The official SDK servers (and ``@modelcontextprotocol/server-everything``) answer a POST with
``text/event-stream`` by default: the response headers, one ``message`` event with the response,
then the end of the (chunked) stream, each its own write. This does the same, with the echo
backend's raw-ASGI cost, so that a gateway's CPU per call for SSE answers can be measured without
the SDK's own slowness (issue 15). ``initialize`` and the 202s stay as echo_backend answers them.

Run: ``.venv/bin/python bench/sse_echo_backend.py --port 8766``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.echo_backend import EchoApp, Receive, Scope, Send, handle_message, read_body

_SSE_HEADERS = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]


class SseEchoApp(EchoApp):
    #: seconds each call waits (asyncio.sleep) and spins (busy loop) before answering: a slower server's
    #: idle time and its CPU time, to tell apart what each costs a gateway in front of it at c=1
    sleep_s = 0.0
    spin_s = 0.0

    async def _post(self, scope: Scope, receive: Receive, send: Send, session_id: bytes | None) -> None:
        body = await read_body(receive)
        try:
            msg: Any = orjson.loads(body)
        except orjson.JSONDecodeError:
            msg = None
        if not isinstance(msg, dict) or msg.get("method") == "initialize" or "id" not in msg:
            await super()._post(scope, _replay(body), send, session_id)
            return
        if session_id is not None and session_id not in self.sessions:
            await self._respond(send, 404, b"")
            return
        reply = handle_message(msg)
        if self.sleep_s:
            await asyncio.sleep(self.sleep_s)
        if self.spin_s:
            end = time.perf_counter() + self.spin_s
            while time.perf_counter() < end:
                pass
        await send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})
        await send(
            {
                "type": "http.response.body",
                "body": b"event: message\ndata: %s\n\n" % orjson.dumps(reply),
                "more_body": True,
            }
        )
        await send({"type": "http.response.body", "body": b""})


def _replay(body: bytes) -> Receive:
    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    return receive


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8766)
    parser.add_argument("--path", default="/mcp")
    parser.add_argument("--sleep-ms", type=float, default=0.0, help="wait this long before each answer")
    parser.add_argument("--spin-ms", type=float, default=0.0, help="busy this long (CPU) before each answer")
    args = parser.parse_args()
    import uvicorn

    SseEchoApp.sleep_s = args.sleep_ms / 1000
    SseEchoApp.spin_s = args.spin_ms / 1000

    uvicorn.run(
        SseEchoApp(args.path),
        host=args.host,
        port=args.port,
        loop="uvloop",
        http="httptools",
        workers=1,
        access_log=False,
        log_level="warning",
        lifespan="off",
        server_header=False,
        date_header=False,
    )


if __name__ == "__main__":
    main()
