"""The WebSocket server protocol: uvicorn's sans-I/O implementation, with its two gaps toward hostile clients closed.

1. An upgrade request that websockets cannot parse (a header line over 8 KiB, more than 128 headers, a request
   line too long, a malformed request) makes websockets queue its 4xx answer (or an EOF) without producing an
   event, and uvicorn only writes what events produce: the answer never left and the client hung until it gave up.
   Here it is written and the connection closed.
2. A text message that is not valid UTF-8 was closed with 1007 (right) after logging a full traceback at ERROR
   (wrong: any client could fill the log with them). Here it is one INFO line.

Everything else is uvicorn's own behaviour, and the protocol puts itself in the scope (``PROTOCOL_KEY``): the MCPx
door writes finished frames straight to its transport (gateway/mcpx/outbox.py).
"""

from __future__ import annotations

from typing import Any, cast

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

PROTOCOL_KEY = "switchboard.ws_protocol"


class SafeWebSocketProtocol(WebSocketsSansIOProtocol):
    async def run_asgi(self) -> None:
        # The scope is a plain dict at runtime; uvicorn's TypedDict lists only the ASGI spec's keys.
        cast(dict[str, Any], self.scope)[PROTOCOL_KEY] = self
        await super().run_asgi()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.handshake_initiated or self.conn.handshake_exc is None or self.transport.is_closing():
            return
        # websockets refused the handshake request while parsing it: send its answer (431, 414 or nothing)
        # and hang up, as it does itself when it owns the connection.
        self.logger.info("WebSocket handshake refused: %s", self.conn.handshake_exc)
        self.transport.write(b"".join(self.conn.data_to_send()))
        self.close_sent = True
        self.transport.close()

    def send_receive_event_to_app(self) -> None:
        if self.curr_msg_data_type == "text" and not self.close_sent and self.frames:
            data = self.frames[0] if len(self.frames) == 1 else b"".join(self.frames)
            if isinstance(data, memoryview):
                data = bytes(data)
            # isascii() is a fast scan; only text with non-ASCII bytes is decoded an extra time.
            if not data.isascii():
                try:
                    data.decode()
                except UnicodeDecodeError as exc:
                    self.frames = []
                    self.logger.info("WebSocket text message is not valid UTF-8 (%s): closing with 1007", exc.reason)
                    self.conn.send_close(1007, "invalid UTF-8")
                    self.handle_parser_exception()
                    return
            self.frames = [data]
        super().send_receive_event_to_app()
