"""A deliberately fragile MCP server on stdio: plain Python, newline-delimited JSON-RPC, no SDK.

Tools:
  ok    answers at once with the text "ok"
  die   exits the process (os._exit(3)) without answering
  hang  never answers
  flood {count, size, pause_s, burst} sends `count` progress notifications of about `size` bytes each
        (pausing `pause_s` after each, or all in one write with `burst`), then answers

Environment (all optional):
  CRASHY_METHOD_LOG  append one JSON line {"method", "id", "params"} per received message to this file
  CRASHY_PID_FILE    write the process id here at start
  CRASHY_JUNK        print a non-JSON line on stdout at start and before every response
  CRASHY_STUBBORN    ignore SIGTERM and keep running after stdin closes (only SIGKILL ends it)
  CRASHY_GRANDCHILD_PID_FILE  start a long-sleeping child process and write its pid here
  CRASHY_START_DELAY_S  sleep this long before reading anything (a backend slow to start)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

TOOLS = [
    {"name": name, "description": text, "inputSchema": {"type": "object", "properties": {}}}
    for name, text in (
        ("ok", "Answers ok."),
        ("die", "Exits without answering."),
        ("hang", "Never answers."),
        ("flood", "Floods progress notifications, then answers."),
    )
]


def log_received(message: object) -> None:
    path = os.environ.get("CRASHY_METHOD_LOG")
    if not path or not isinstance(message, dict):
        return
    entry = {"method": message.get("method"), "id": message.get("id"), "params": message.get("params")}
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(entry) + "\n")


def write(message: dict) -> None:
    if os.environ.get("CRASHY_JUNK"):
        sys.stdout.write("this line is not JSON-RPC at all\n")
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def answer(rpc_id: object, result: dict) -> None:
    write({"jsonrpc": "2.0", "id": rpc_id, "result": result})


def handle(message: dict) -> None:
    method = message.get("method")
    rpc_id = message.get("id")
    params = message.get("params") or {}
    if method is None or rpc_id is None:
        return  # a response or a notification: nothing to say
    if method == "initialize":
        answer(
            rpc_id,
            {
                "protocolVersion": params.get("protocolVersion", "2025-06-18"),
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "crashy", "version": "0.0.1"},
            },
        )
    elif method == "ping":
        answer(rpc_id, {})
    elif method == "tools/list":
        answer(rpc_id, {"tools": TOOLS})
    elif method == "tools/call":
        name = params.get("name")
        if name == "ok":
            answer(rpc_id, {"content": [{"type": "text", "text": f"ok from pid {os.getpid()}"}]})
        elif name == "die":
            os._exit(3)
        elif name == "hang":
            return
        elif name == "flood":
            args = params.get("arguments") or {}
            count, size = int(args.get("count", 100)), int(args.get("size", 1000))
            pause_s, burst = float(args.get("pause_s", 0)), bool(args.get("burst"))
            token = (params.get("_meta") or {}).get("progressToken")
            filler = "x" * size
            lines = []
            for i in range(1, count + 1):
                if token is not None:
                    progress = {"progressToken": token, "progress": i, "total": count, "message": filler}
                    note = {"jsonrpc": "2.0", "method": "notifications/progress", "params": progress}
                    if burst:
                        lines.append(json.dumps(note) + "\n")
                    else:
                        write(note)
                        time.sleep(pause_s)
            if lines:  # all in one write, so that the gateway reads them in one chunk
                sys.stdout.write("".join(lines))
                sys.stdout.flush()
            answer(rpc_id, {"content": [{"type": "text", "text": f"flooded {count}"}]})
        else:
            write({"jsonrpc": "2.0", "id": rpc_id, "error": {"code": -32602, "message": f"Unknown tool: {name}"}})
    else:
        write({"jsonrpc": "2.0", "id": rpc_id, "error": {"code": -32601, "message": f"Method not found: {method}"}})


def main() -> None:
    stubborn = bool(os.environ.get("CRASHY_STUBBORN"))
    if stubborn:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    pid_file = os.environ.get("CRASHY_PID_FILE")
    if pid_file:
        with open(pid_file, "w", encoding="utf-8") as f:
            f.write(str(os.getpid()))
    grandchild_file = os.environ.get("CRASHY_GRANDCHILD_PID_FILE")
    if grandchild_file:
        child = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
        )
        with open(grandchild_file, "w", encoding="utf-8") as f:
            f.write(str(child.pid))
    time.sleep(float(os.environ.get("CRASHY_START_DELAY_S", "0")))
    if os.environ.get("CRASHY_JUNK"):
        sys.stdout.write("crashy starting up (not JSON)\n")
        sys.stdout.flush()
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            message = json.loads(line)
        except ValueError:
            continue
        log_received(message)
        if isinstance(message, dict):
            handle(message)
    while stubborn:
        time.sleep(1)


if __name__ == "__main__":
    main()
