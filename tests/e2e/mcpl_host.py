"""A test MCPL host (an MCP client speaking the MCPL 0.4 extension) over a real WebSocket, raw JSON-RPC.

The gateway's clients are MCPL hosts. The e2e tests need one that behaves like a real host: it
advertises ``experimental.mcpl`` (or not), answers the server→host requests MCPL defines (push/event,
inference/request with streamed inference/chunk, model/info, scope/elevate, channels/*) with
overridable handlers, and records every notification and request it receives so tests can wait on them.

Usage::

    async with McplHost.connect(url, token=token) as host:      # or: host = await McplHost.connect(url)
        host.handlers["scope/elevate"] = approve
        answer = await host.call_tool("push", {"eventId": "e1", "text": "hi"})
        event = await host.wait_request("push/event")

A handler receives the whole request message (``id``, ``method``, ``params``) and returns the result
object, or raises :class:`HostError` to answer with a JSON-RPC error.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import logging
from collections.abc import Awaitable, Callable, Generator
from typing import Any, Self

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed
from websockets.typing import Subprotocol

from tests.support import PeerError, initialize_params

log = logging.getLogger("mcpl_host")

JsonObj = dict[str, Any]
Handler = Callable[[JsonObj], Awaitable[JsonObj]]


# §5.2 host shape plus channels (§14.1).
HOST_CAPABILITIES: JsonObj = {
    "version": "0.4",
    "pushEvents": True,
    "contextHooks": {"beforeInference": True, "afterInference": {"blocking": True}},
    "inferenceRequest": {"streaming": True},
    "featureSets": True,
    "channels": {"register": True, "publish": True, "observe": True, "lifecycle": True, "streaming": True},
}

CHUNK_DELTAS = ("Consolidated ", "memory ", "summary")


HostError = PeerError  # raised by a handler to answer the server's request with a JSON-RPC error


class McplHost:
    """One connected host. Build it with :meth:`connect`; close it with ``async with`` or :meth:`close`."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.init_result: JsonObj = {}
        self.notifications: list[JsonObj] = []
        self.requests: list[JsonObj] = []
        self.handlers: dict[str, Handler] = {
            "push/event": self._push_event,
            "inference/request": self._inference_request,
            "model/info": self._model_info,
            "scope/elevate": self._scope_elevate,
            "channels/incoming": self._channels_incoming,
            "channels/list": self._channels_list,
            "channels/register": self._channels_register,
        }
        self._next_id = 0
        self._pending: dict[int, asyncio.Future[JsonObj]] = {}
        self._arrived = asyncio.Condition()
        self._taken_notifications: set[int] = set()
        self._taken_requests: set[int] = set()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._pushes = 0
        self.closed = False
        self._reader = asyncio.create_task(self._read())

    # ------------------------------------------------------------------------------------ lifecycle

    @staticmethod
    def connect(url: str, *, mcpl: JsonObj | None = HOST_CAPABILITIES, token: str | None = None) -> _Connecting:
        """Connects and runs the MCP handshake; await it, or use it directly in ``async with``."""
        return _Connecting(McplHost._open(url, mcpl, token))

    @classmethod
    async def _open(cls, url: str, mcpl: JsonObj | None, token: str | None) -> McplHost:
        headers = {"Authorization": f"Bearer {token}"} if token else None
        ws = await connect(
            url,
            subprotocols=[Subprotocol("mcp")],
            additional_headers=headers,
            open_timeout=10,
            proxy=None,
            max_size=64 * 1024 * 1024,
        )
        host = cls(ws)
        try:
            capabilities: JsonObj = {"sampling": {}}
            if mcpl is not None:
                capabilities["experimental"] = {"mcpl": copy.deepcopy(mcpl)}
            response = await host.request(
                "initialize",
                initialize_params(capabilities=capabilities, client="mcpl-test-host"),
            )
            if "error" in response:
                raise AssertionError(f"initialize failed: {response['error']}")
            host.init_result = response["result"]
            await host.notify("notifications/initialized")
        except BaseException:
            await host.close()
            raise
        return host

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        self.closed = True
        for task in [self._reader, *self._tasks]:
            task.cancel()
        for task in [self._reader, *self._tasks]:
            with contextlib.suppress(BaseException):
                await task
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.ws.close(), 5)

    @property
    def server_mcpl(self) -> JsonObj | None:
        """The server's ``capabilities.experimental.mcpl`` from the initialize result, if any."""
        return ((self.init_result.get("capabilities") or {}).get("experimental") or {}).get("mcpl")

    # ------------------------------------------------------------------------------------ sending

    async def send(self, message: JsonObj | list[Any] | str) -> None:
        """Sends a raw message (a dict/list is JSON-encoded; a str goes as is)."""
        await self.ws.send(message if isinstance(message, str) else json.dumps(message))

    async def request(self, method: str, params: JsonObj | None = None, timeout: float = 10) -> JsonObj:
        """Sends a request; returns the whole response message (with ``result`` or ``error``)."""
        self._next_id += 1
        rpc_id = self._next_id
        future: asyncio.Future[JsonObj] = asyncio.get_running_loop().create_future()
        self._pending[rpc_id] = future
        message: JsonObj = {"jsonrpc": "2.0", "id": rpc_id, "method": method}
        if params is not None:
            message["params"] = params
        try:
            await self.send(message)
            return await asyncio.wait_for(future, timeout)
        finally:
            self._pending.pop(rpc_id, None)

    async def notify(self, method: str, params: JsonObj | None = None) -> None:
        message: JsonObj = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        await self.send(message)

    async def call_tool(self, name: str, arguments: JsonObj | None = None, timeout: float = 20, **extra: Any) -> Any:
        """tools/call; ``extra`` adds params fields (``scope``, ``state``, ``checkpoint``...).

        Returns the parsed JSON of the first content item when it is JSON text, else the whole result.
        """
        params: JsonObj = {"name": name, "arguments": arguments or {}, **extra}
        response = await self.request("tools/call", params, timeout)
        if "error" in response:
            raise AssertionError(f"tools/call {name} failed: {response['error']}")
        result = response.get("result")
        content = result.get("content") if isinstance(result, dict) else None
        if isinstance(content, list) and content and isinstance(content[0], dict) and content[0].get("type") == "text":
            with contextlib.suppress(ValueError, TypeError):
                return json.loads(content[0]["text"])
        return result

    # ------------------------------------------------------------------------------------ waiting

    async def wait_notification(
        self, method: str, predicate: Callable[[JsonObj], bool] | None = None, timeout: float = 10
    ) -> JsonObj:
        """The first notification of `method` (matching `predicate`, given the message) not yet returned."""
        return await self._wait(self.notifications, self._taken_notifications, method, predicate, timeout)

    async def wait_request(
        self, method: str, timeout: float = 10, predicate: Callable[[JsonObj], bool] | None = None
    ) -> JsonObj:
        """The first server→host request of `method` (the whole message) not yet returned."""
        return await self._wait(self.requests, self._taken_requests, method, predicate, timeout)

    async def _wait(
        self,
        messages: list[JsonObj],
        taken: set[int],
        method: str,
        predicate: Callable[[JsonObj], bool] | None,
        timeout: float,
    ) -> JsonObj:
        def find() -> int | None:
            for index, message in enumerate(messages):
                if index not in taken and message.get("method") == method and (predicate is None or predicate(message)):
                    return index
            return None

        async with self._arrived:
            try:
                await asyncio.wait_for(self._arrived.wait_for(lambda: find() is not None or self.closed), timeout)
            except TimeoutError:
                seen = [m.get("method") for m in messages]
                raise TimeoutError(f"no {method} within {timeout}s (received: {seen})") from None
            index = find()
            if index is None:
                raise ConnectionError(f"connection closed while waiting for {method}")
            taken.add(index)
            return messages[index]

    # ------------------------------------------------------------------------------------ reading

    async def _read(self) -> None:
        try:
            async for raw in self.ws:
                try:
                    data = json.loads(raw)
                except ValueError:
                    log.warning("unparseable frame: %r", raw)
                    continue
                for message in data if isinstance(data, list) else [data]:
                    if isinstance(message, dict):
                        await self._dispatch(message)
        except ConnectionClosed:
            pass
        finally:
            self.closed = True
            for future in self._pending.values():
                if not future.done():
                    future.set_exception(ConnectionError("WebSocket closed"))
            async with self._arrived:
                self._arrived.notify_all()

    async def _dispatch(self, message: JsonObj) -> None:
        method = message.get("method")
        if isinstance(method, str):
            if message.get("id") is not None:
                self.requests.append(message)
                task = asyncio.create_task(self._answer(message))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            else:
                self.notifications.append(message)
            async with self._arrived:
                self._arrived.notify_all()
            return
        future = self._pending.get(message.get("id"))  # type: ignore[arg-type]
        if future is not None and not future.done():
            future.set_result(message)
        else:
            log.warning("response to nothing pending: %s", message)

    async def _answer(self, message: JsonObj) -> None:
        method = str(message.get("method"))
        handler = self.handlers.get(method)
        reply: JsonObj = {"jsonrpc": "2.0", "id": message["id"]}
        try:
            if handler is None:
                raise HostError(-32601, f"Method not found: {method}")
            reply["result"] = await handler(message)
        except HostError as exc:
            reply["error"] = exc.to_json()
        except Exception as exc:
            log.exception("host handler for %s failed", method)
            reply["error"] = {"code": -32603, "message": f"host handler failed: {exc}"}
        with contextlib.suppress(ConnectionClosed):
            await self.send(reply)

    # ------------------------------------------------------------------------------------ default handlers

    async def _push_event(self, message: JsonObj) -> JsonObj:
        self._pushes += 1
        return {"accepted": True, "inferenceId": f"inf_{self._pushes}"}

    async def _inference_request(self, message: JsonObj) -> JsonObj:
        params = message.get("params") or {}
        if params.get("stream"):
            for index, delta in enumerate(CHUNK_DELTAS):
                await self.notify("inference/chunk", {"requestId": message["id"], "index": index, "delta": delta})
        return {
            "content": "Consolidated memory summary",
            "model": "test-model",
            "finishReason": "end_turn",
            "usage": {"inputTokens": 10, "outputTokens": 5},
        }

    async def _model_info(self, message: JsonObj) -> JsonObj:
        return {"id": "test-model", "vendor": "test", "contextWindow": 200000, "capabilities": ["tools"]}

    async def _scope_elevate(self, message: JsonObj) -> JsonObj:
        return {"approved": False, "reason": "user declined"}

    async def _channels_incoming(self, message: JsonObj) -> JsonObj:
        messages = (message.get("params") or {}).get("messages") or []
        return {
            "results": [
                {"messageId": m.get("messageId"), "accepted": True, "conversationId": "conv_ch"}
                for m in messages
                if isinstance(m, dict)
            ]
        }

    async def _channels_list(self, message: JsonObj) -> JsonObj:
        return {"channels": []}

    async def _channels_register(self, message: JsonObj) -> JsonObj:
        return {}  # the host advertises channels.register; §14.3 defines no result fields


class _Connecting:
    """What :meth:`McplHost.connect` returns: awaitable, and usable directly as ``async with``."""

    def __init__(self, opening: Awaitable[McplHost]) -> None:
        self._opening = opening
        self._host: McplHost | None = None

    def __await__(self) -> Generator[Any, None, McplHost]:
        return self._opening.__await__()

    async def __aenter__(self) -> McplHost:
        self._host = await self._opening
        return self._host

    async def __aexit__(self, *exc: object) -> None:
        if self._host is not None:
            await self._host.close()
