"""Ports and child processes, for the tests (tests/support.py re-exports these) and the benchmarks.

Free ports on 127.0.0.1, waiting until a port or an HTTP endpoint answers while the process that
should serve it stays alive, stopping a process (and, where a peer detaches children, its whole
tree), and reading the process table from /proc.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass

import httpx


class ProcessExited(RuntimeError):
    """The process that should have served a port or endpoint exited first."""

    def __init__(self, returncode: int, what: str) -> None:
        super().__init__(f"process exited with code {returncode} before {what}")
        self.returncode = returncode


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (the OS picks it; tiny race until it is bound)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def wait_for_port(host: str, port: int, timeout_s: float = 20.0, proc: subprocess.Popen[bytes] | None = None) -> None:
    """Blocks until host:port accepts TCP connections.

    Raises ProcessExited (a RuntimeError) as soon as `proc` exits, TimeoutError after `timeout_s`.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        if proc is not None and proc.poll() is not None:
            raise ProcessExited(proc.returncode, f"listening on {host}:{port}")
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            if time.monotonic() >= deadline:
                raise TimeoutError(f"nothing accepted connections on {host}:{port} within {timeout_s}s") from None
            time.sleep(0.05)


def wait_for_http(
    url: str, timeout_s: float = 20.0, proc: subprocess.Popen[bytes] | None = None, status: int = 200
) -> None:
    """Blocks until a GET of `url` answers `status`; ProcessExited if `proc` exits, TimeoutError after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        if proc is not None and proc.poll() is not None:
            raise ProcessExited(proc.returncode, f"{url} answered {status}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=2).status_code == status:
                return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{url} did not answer {status} within {timeout_s}s")
        time.sleep(0.05)


# ----------------------------------------------------------------------------- the process table


@dataclass
class ProcStat:
    ppid: int
    ticks: int  # utime + stime + cutime + cstime
    cmdline: str


def scan_procs() -> dict[int, ProcStat]:
    """Snapshot of every process: parent, CPU ticks (own + reaped children) and cmdline."""
    out: dict[int, ProcStat] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                raw = fh.read().decode(errors="replace")
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        rest = raw[raw.rindex(")") + 2 :].split()
        # rest[0]=state, rest[1]=ppid, rest[11..14]=utime stime cutime cstime
        out[pid] = ProcStat(int(rest[1]), sum(int(x) for x in rest[11:15]), cmd)
    return out


def descendants(root: int, procs: dict[int, ProcStat]) -> list[int]:
    """Every process below `root` in `procs`, children before grandchildren."""
    children: dict[int, list[int]] = {}
    for pid, st in procs.items():
        children.setdefault(st.ppid, []).append(pid)
    found: list[int] = []
    stack = [root]
    while stack:
        pid = stack.pop()
        for child in children.get(pid, []):
            found.append(child)
            stack.append(child)
    return found


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie does not)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            state = fh.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != b"Z"


# ----------------------------------------------------------------------------- stopping


def stop_process(proc: subprocess.Popen[bytes], grace_s: float = 5.0, *, tree: bool = False) -> None:
    """Terminates `proc` (SIGTERM, then SIGKILL after `grace_s`) and reaps it.

    With `tree`, every descendant gets the same treatment (some peers detach their children).
    """
    if proc.poll() is not None:
        return
    if not tree:
        proc.terminate()
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        return
    pids = [proc.pid, *descendants(proc.pid, scan_procs())]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        proc.poll()
        if not any(alive(pid) for pid in pids):
            break
        time.sleep(0.05)
    for pid in pids:
        if alive(pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace_s)
