"""A round-robin HTTP balancer for tests of many replicas: every request goes to the next upstream,
with no stickiness at all (keep-alive connections included), as the harshest ordinary balancer does.

Run: ``python -m tests.replicas.balancer --port P --upstream http://127.0.0.1:A --upstream ...``.
Responses are streamed as they come (SSE passes through unbuffered); a client that leaves ends its
upstream request. An upstream that refuses the connection is skipped for that request (the next one
is tried), so a killed replica takes no requests; one that fails mid-response fails that response.
``GET /_balancer`` answers which upstream served each request so far (for tests).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
from typing import Any

import httpx
import uvicorn

_HOP = {b"host", b"connection", b"keep-alive", b"transfer-encoding", b"te", b"upgrade", b"content-length"}


class Balancer:
    def __init__(self, upstreams: list[str]) -> None:
        self.upstreams = upstreams
        self._next = itertools.cycle(range(len(upstreams)))
        self.served: list[int] = []
        self._client = httpx.AsyncClient(timeout=httpx.Timeout(10.0, read=None), follow_redirects=False)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                event = (await receive())["type"]
                if event == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif event == "lifespan.shutdown":
                    await self._client.aclose()
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        if scope["path"] == "/_balancer":
            body = json.dumps({"served": self.served, "upstreams": self.upstreams}).encode()
            await send(
                {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]}
            )
            await send({"type": "http.response.body", "body": body})
            return
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"] if k.lower() not in _HOP]
        target = scope["path"] + (("?" + scope["query_string"].decode("latin-1")) if scope["query_string"] else "")
        for _ in range(len(self.upstreams)):
            index = next(self._next)
            request = self._client.build_request(
                scope["method"], self.upstreams[index] + target, headers=headers, content=b"".join(chunks)
            )
            try:
                response = await self._client.send(request, stream=True)
            except httpx.ConnectError:
                continue
            self.served.append(index)
            await self._relay(response, receive, send)
            return
        await send({"type": "http.response.start", "status": 502, "headers": []})
        await send({"type": "http.response.body", "body": b"no upstream"})

    async def _relay(self, response: httpx.Response, receive: Any, send: Any) -> None:
        async def pump() -> None:
            headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in response.headers.items()]
            headers = [(k, v) for k, v in headers if k.lower() not in _HOP]
            await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
            async for chunk in response.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})

        async def gone() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass

        tasks = [asyncio.ensure_future(pump()), asyncio.ensure_future(gone())]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(BaseException):
                    await task
            await response.aclose()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", action="append", required=True)
    args = parser.parse_args()
    uvicorn.run(Balancer(args.upstream), host="127.0.0.1", port=args.port, log_level="warning", lifespan="on")


if __name__ == "__main__":
    main()
