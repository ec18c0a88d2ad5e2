"""The stdio carrier against a real child process, on both loops the gateway may run (asyncio, uvloop):
messages sent together reach the child in order, one line each; a child that does not read holds
its senders (the pipe is full) instead of growing the gateway's buffer; blank lines are skipped;
a dead child fails later sends."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
import uvloop

from gateway.upstreams.base import CarrierClosed
from gateway.upstreams.stdio import StdioCarrier

WAIT_S = 10.0

# Echoes each line back as {"id": ..., "result": {"seen": n}} in order, after an optional pause (to
# let a test fill the pipe), with a blank line before each answer (which the carrier must skip).
CHILD = r"""
import json, sys, time
time.sleep(float(sys.argv[1]))
n = 0
for line in sys.stdin:
    n += 1
    message = json.loads(line)
    sys.stdout.write("\n" + json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": {"seen": n}}) + "\n")
    sys.stdout.flush()
"""

LOOPS: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
    "asyncio": asyncio.new_event_loop,
    "uvloop": uvloop.new_event_loop,
}


def run(loop: str, test: Callable[[], Coroutine[Any, Any, None]]) -> None:
    with asyncio.Runner(loop_factory=LOOPS[loop]) as runner:
        runner.run(test())


def carrier(pause_s: float = 0.0) -> StdioCarrier:
    return StdioCarrier("child", sys.executable, ["-c", CHILD, str(pause_s)], {}, None, 1024 * 1024)


@pytest.mark.parametrize("loop", LOOPS)
def test_messages_sent_together_arrive_in_order_one_line_each(loop: str) -> None:
    async def body() -> None:
        received: list[dict[str, Any]] = []
        done = asyncio.Event()

        def inbound(message: dict[str, Any], _: Any) -> None:
            received.append(message)
            if len(received) == 200:
                done.set()

        child = carrier()
        await child.open(inbound)
        try:
            # 200 sends in one loop iteration (gathered into one write), then 0 .. 199 in order.
            await asyncio.gather(*(child.send({"jsonrpc": "2.0", "id": i, "method": "x"}) for i in range(200)))
            async with asyncio.timeout(WAIT_S):
                await done.wait()
        finally:
            await child.close()
        assert [m["id"] for m in received] == list(range(200))
        assert [m["result"]["seen"] for m in received] == list(range(1, 201))

    run(loop, body)


@pytest.mark.parametrize("loop", LOOPS)
def test_a_child_that_does_not_read_holds_its_senders(loop: str) -> None:
    async def body() -> None:
        received: list[dict[str, Any]] = []
        all_in = asyncio.Event()

        def inbound(message: dict[str, Any], _: Any) -> None:
            received.append(message)
            if len(received) == 100:
                all_in.set()

        child = carrier(pause_s=1.5)
        await child.open(inbound)
        big = "x" * 60_000
        try:
            sender_done = asyncio.Event()

            async def flood() -> None:
                for i in range(100):  # 6 MB, far more than a pipe holds
                    await child.send({"jsonrpc": "2.0", "id": i, "method": "x", "params": {"pad": big}})
                sender_done.set()

            task = asyncio.create_task(flood())
            await asyncio.sleep(0.5)
            # The child sleeps: the pipe is full and the sender waits on it rather than buffering 6 MB.
            assert not sender_done.is_set()
            async with asyncio.timeout(WAIT_S):
                await task
                await all_in.wait()
        finally:
            await child.close()
        assert [m["id"] for m in received] == list(range(100))

    run(loop, body)


@pytest.mark.parametrize("loop", LOOPS)
def test_sends_to_a_dead_child_fail(loop: str) -> None:
    async def body() -> None:
        child = StdioCarrier("child", sys.executable, ["-c", "pass"], {}, None, 1024 * 1024)
        await child.open(lambda message, _: None)
        try:
            async with asyncio.timeout(WAIT_S):
                reason = await child.wait_closed()
            assert "exited with code 0" in reason
            with pytest.raises(CarrierClosed):
                await child.send({"jsonrpc": "2.0", "id": 1, "method": "x"})
        finally:
            await child.close()

    run(loop, body)
