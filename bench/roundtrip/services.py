"""The processes the driver starts and must stop (every one, with its children), and their CPU time.

Ports, waiting and stopping come from tools/procs.py, which the tests use as well.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from bench.roundtrip.common import ROOT, StartError, log
from tools.procs import ProcessExited, descendants, scan_procs, stop_process, wait_for_port

BACKEND_MARKERS = ("echo_backend.py", "sdk_echo_server.py")
CLK_TCK = os.sysconf("SC_CLK_TCK")
_MINIMAL_ENV = frozenset({"PATH", "HOME", "LANG", "LC_ALL", "TMPDIR"})


@dataclass
class Service:
    """One process the driver starts (and must stop)."""

    name: str
    argv: list[str]
    port: int
    role: str  # "proxy" or "backend"
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)
    # False: only PATH, HOME and the locale, then `env` (a peer that can hand its environment to any caller,
    # as server-everything's get-env tool does, must not see the driver's)
    inherit_env: bool = True
    popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        base = os.environ if self.inherit_env else {k: v for k, v in os.environ.items() if k in _MINIMAL_ENV}
        env = {**base, "PYTHONDONTWRITEBYTECODE": "1", **self.env}
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        logfile = open(self.log_path, "wb")
        try:
            self.popen = subprocess.Popen(
                self.argv,
                cwd=ROOT,
                env=env,
                stdin=subprocess.DEVNULL,  # supergateway stops when a stdin pipe closes
                stdout=logfile,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:
            raise StartError(f"{self.name}: cannot execute {self.argv[0]}: {exc}") from exc
        finally:
            logfile.close()
        _LIVE.append(self)

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(errors="replace").rstrip().splitlines()
        except OSError:
            return ""
        return "\n".join("    | " + line for line in text[-lines:])

    def wait_ready(self, timeout: float) -> None:
        """Wait until the port accepts connections while the process stays alive."""
        assert self.popen is not None
        try:
            wait_for_port("127.0.0.1", self.port, timeout, self.popen)
        except ProcessExited as exc:
            raise StartError(
                f"{self.name} exited with code {exc.returncode} during start-up\n{self.log_tail()}"
            ) from None
        except TimeoutError:
            raise StartError(
                f"{self.name} did not listen on 127.0.0.1:{self.port} within {timeout:.0f}s\n{self.log_tail()}"
            ) from None

    def stop(self) -> None:
        """Stop the process and every descendant (some peers detach their children)."""
        if self.popen is None:
            return
        popen, self.popen = self.popen, None
        with contextlib.suppress(ValueError):
            _LIVE.remove(self)
        stop_process(popen, tree=True)


_LIVE: list[Service] = []  # started and not yet stopped


def stop_all() -> None:
    """Stop every service still running (the driver's last word, also on Ctrl-C)."""
    for svc in reversed(list(_LIVE)):
        try:
            svc.stop()
        except Exception as exc:  # best effort clean-up
            log(f"failed to stop {svc.name}: {exc}")


# ----------------------------------------------------------------------------- CPU accounting


@dataclass
class CpuSnapshot:
    proxy: int
    backend: int
    machine_busy: int  # all CPUs, from /proc/stat: everything but idle and iowait


def machine_busy_ticks() -> int:
    with open("/proc/stat") as fh:
        fields = [int(x) for x in fh.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    # guest time is already included in user/nice
    return sum(fields[:8]) - idle


def cpu_snapshot(services: list[Service]) -> CpuSnapshot:
    """CPU ticks of each role's process trees.

    Inside a proxy's tree, processes running the echo backend (stdio topologies)
    count as backend, everything else (node, sh wrapper, ...) as proxy.
    """
    procs = scan_procs()
    ticks = {"proxy": 0, "backend": 0}
    for svc in services:
        if svc.popen is None:
            continue
        root = svc.popen.pid
        for pid in [root, *descendants(root, procs)]:
            st = procs.get(pid)
            if st is None:
                continue
            role = svc.role
            # The proxy's own command line names the backend (it is an argument), so
            # only descendants are re-classified.
            if role == "proxy" and pid != root and any(m in st.cmdline for m in BACKEND_MARKERS):
                role = "backend"
            ticks[role] += st.ticks
    return CpuSnapshot(ticks["proxy"], ticks["backend"], machine_busy_ticks())
