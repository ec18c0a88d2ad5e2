"""In the modern era, closing the response stream is the cancellation; the gateway must pass it on."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest

from tests.support import modern_headers, modern_meta, run_gateway, stdio_backend

pytestmark = [pytest.mark.timeout(60)]
META = modern_meta()


async def test_closing_the_stream_cancels_the_call_at_a_legacy_backend(tmp_path: Path) -> None:
    method_log = tmp_path / "methods.jsonl"
    backend = stdio_backend("tests.e2e.backends.crashy", env={"CRASHY_METHOD_LOG": str(method_log)}, required=True)
    with run_gateway({"backends": {"slow": backend}}) as gw:
        body = {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "hang", "_meta": META}}
        headers = modern_headers("tools/call", "hang")
        async with httpx.AsyncClient(timeout=10) as http:
            call = asyncio.create_task(http.post(gw.mcp, json=body, headers=headers))
            await asyncio.sleep(0.7)
            call.cancel()  # the client goes away: its connection closes
            with pytest.raises(asyncio.CancelledError):
                await call

        def logged(method: str) -> list[dict[str, object]]:
            if not method_log.exists():
                return []
            lines = [json.loads(line) for line in method_log.read_text().splitlines() if line.strip()]
            return [m for m in lines if m.get("method") == method]

        def cancelled() -> list[dict[str, object]]:
            return logged("notifications/cancelled")

        for _ in range(50):
            if cancelled():
                break
            await asyncio.sleep(0.1)
        notes = cancelled()
        assert notes, "the backend never heard that the call was cancelled"
        calls = logged("tools/call")
        assert notes[0]["params"]["requestId"] == calls[-1]["id"]
