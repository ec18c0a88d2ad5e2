"""The ``switchboard`` command: ``run`` serves, ``check`` explains what is wrong with a config (``--probe``:
and what its backends offer, gateway/probe.py), ``schema`` prints the config's JSON Schema."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gateway import __version__
from gateway.config import Config, ConfigError, default_config, load_config
from gateway.config_auth import auth_warnings
from gateway.config_schema import schema_text
from gateway.reload_status import config_changes, describe_issues

if TYPE_CHECKING:
    from gateway.workers import WorkerRole


def _load(path: str | None) -> Config:
    return default_config() if path is None else load_config(path)


def _check(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        for issue in exc.issues:
            print(f"error: {issue}", file=sys.stderr)
        print(f"{len(exc.issues)} error(s) in {args.config}", file=sys.stderr)
        return 1
    problems = static_problems(config)
    if args.workers is not None:
        from gateway.workers import refusal, resolve

        refused = refusal(args.workers, resolve(args.workers), config.bus.kind)
        if refused is not None:
            problems.append(refused)
    for warning in config_warnings(config):
        print(f"warning: {args.config}: {warning}", file=sys.stderr)
    for problem in problems:
        print(f"error: {args.config}: {problem}", file=sys.stderr)
    if problems:
        return 1
    if args.probe:
        return _probe(config, args)
    virtual = f", {len(config.virtual_servers)} virtual server(s)" if config.virtual_servers else ""
    print(f"{args.config}: ok ({len(config.backends)} backend(s){virtual}, prefix mode {config.federation.prefix})")
    return 0


def _probe(config: Config, args: argparse.Namespace) -> int:
    """``check --probe``: connect to every backend (gateway/probe.py) and print what it found."""
    from gateway.probe import probe

    if not args.verbose:
        # The gateway's own log lines (a backend down, a collision) are in the report already.
        logging.basicConfig(level=logging.CRITICAL + 1)
    else:
        _log_to_stderr(config)
    report = asyncio.run(probe(config, args.timeout))
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        print(f"{args.config}: valid; probed {len(report.backends)} backend(s) within {args.timeout:g}s each")
        for line in report.lines():
            print(line)
    return 0 if report.ok else 1


def static_problems(config: Config) -> list[str]:
    """What can be known to be wrong without contacting any backend."""
    problems = []
    if not config.loopback and config.auth is None:
        problems.append(
            f"listen.host {config.listen.host!r} is not a loopback address and there is no auth section: "
            "anonymous callers would have every capability. Configure auth (principals, jwt; "
            "auth.anonymous to admit unauthenticated callers with chosen capabilities) or bind 127.0.0.1"
        )
    # Prefixed names always split back unambiguously: the model already refuses backend names that
    # contain the separator (see config.Config._separator_vs_names).
    from gateway.upstreams.egress import egress_problems

    problems.extend(egress_problems(config.egress, config.backends)[0])  # proxies, TLS files (issue 17)
    problems.extend(_assertion_key_problems(config))
    return problems


def _assertion_key_problems(config: Config) -> list[str]:
    """Upstream auth (issue 17): a private_key_jwt key that cannot be read would stop the gateway at start."""
    from gateway.upstreams.oauth_client import load_assertion_key

    problems = []
    for name, backend in config.backends.items():
        assertion = getattr(backend.auth, "client_assertion", None)
        if assertion is not None:
            try:
                load_assertion_key(assertion)
            except ValueError as exc:
                problems.append(f"backends.{name}.auth.{exc}")
    return problems


# Fields that mean something only for some transports; set elsewhere they are ignored, which is
# worth a warning (a stdio backend with a url is usually a typo for transport: http).
_TRANSPORT_FIELDS = {
    "command": {"stdio"},
    "args": {"stdio"},
    "env": {"stdio"},
    "cwd": {"stdio"},
    "url": {"http", "sse", "ws"},
    "headers": {"http", "sse", "ws"},
    "proxy": {"http", "sse", "ws"},
    "tls": {"http", "sse", "ws"},
    "server": {"builtin"},
}


def config_warnings(config: Config) -> list[str]:
    warnings = []
    for name, backend in config.backends.items():
        for field in sorted(backend.model_fields_set & set(_TRANSPORT_FIELDS)):
            if backend.transport not in _TRANSPORT_FIELDS[field]:
                warnings.append(f"backends.{name}.{field} is ignored for transport {backend.transport!r}")
    from gateway.upstreams.egress import egress_problems

    warnings.extend(egress_problems(config.egress, config.backends)[1])  # tls.verify: false (issue 17)
    warnings += _pool_warnings(config)
    return warnings + auth_warnings(config.auth)


def _pool_warnings(config: Config) -> list[str]:
    """per-principal backends (issue 17): entries no principal can use are most likely typos."""
    jwt = config.auth is not None and config.auth.jwt is not None
    warnings = []
    for name, backend in config.backends.items():
        if backend.sharing != "per-principal":
            continue
        if not jwt:  # principals come from the config alone: an unknown name is never anyone
            for unknown in sorted(set(backend.principal_env) - set(config.principals)):
                warnings.append(
                    f"backends.{name}.principal_env.{unknown} names no principal of this config: it is never used"
                )
            if not config.principals:
                warnings.append(
                    f"backends.{name} runs one child per principal, but only anonymous callers (who never get "
                    "one) can reach it: configure principals or auth.jwt"
                )
    return warnings


def _seconds(text: str) -> float:
    value = float(text)
    if not value > 0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, not {text}")
    return value


def _schema(args: argparse.Namespace) -> int:
    text = schema_text()
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


def _load_or_report(path: str | None) -> Config | None:
    try:
        return _load(path)
    except ConfigError as exc:
        for issue in exc.issues:
            print(f"error: {issue}", file=sys.stderr)
        return None


def _log_to_stderr(config: Config, who: str = "") -> None:
    from gateway import logs

    # stderr only: stdout is for the listening banner, or for JSON-RPC with stdio (gateway/logs.py).
    logs.configure(config, who)


def _run_loop(main: Any) -> int:
    try:
        import uvloop
    except ImportError:
        return int(asyncio.run(main))
    # uvicorn's own loop setting only applies when uvicorn creates the loop; here we do.
    return int(uvloop.run(main))


def _run(args: argparse.Namespace) -> int:
    from gateway.workers import WorkerRole, refusal, resolve

    config = _load_or_report(args.config)
    if config is None:
        return 1
    if args.host:
        config.listen.host = args.host
    if args.port is not None:
        config.listen.port = args.port
    problems = static_problems(config)
    if problems:
        for problem in problems:
            print(f"error: {problem}", file=sys.stderr)
        return 1
    if args.worker:  # one of the processes a supervisor started (gateway/workers.py)
        role = WorkerRole.parse(args.worker)
        _log_to_stderr(config, f"[{role.label}] ")
        return _run_loop(_serve(config, args.config, role))
    count = resolve(args.workers)
    refused = refusal(args.workers, count, config.bus.kind)
    if refused is not None:
        print(f"error: {refused}", file=sys.stderr)
        return 2
    _log_to_stderr(config)
    if count == 1:
        return _run_loop(_serve(config, args.config))
    return _supervise(config, args.config, count)


def _supervise(config: Config, config_path: str | None, count: int) -> int:
    """``--workers N`` with N > 1: this process holds the port and keeps N workers serving it."""
    from gateway.app import front_doors
    from gateway.workers import Supervisor, reserve_port

    try:
        hold = reserve_port(config.listen.host, config.listen.port)
    except OSError as exc:
        print(f"error: cannot listen on {config.listen.host}:{config.listen.port}: {exc.strerror}", file=sys.stderr)
        return 1
    host, port = hold.getsockname()[:2]
    command = [sys.executable, "-m", "gateway", "run", "--host", host, "--port", str(port)]
    if config_path is not None:
        command += ["-c", config_path]
    shown = f"[{host}]" if ":" in host else host
    base = f"http://{shown}:{port}"

    def banner() -> None:
        print(f"Switchboard {__version__} listening on {base} ({count} worker processes)", flush=True)
        for line in front_doors(base, config):
            print(f"  {line}", flush=True)

    with hold:
        return _run_loop(Supervisor(count, command, on_all_ready=banner).run())


async def _serve(config: Config, config_path: str | None = None, role: WorkerRole | None = None) -> int:
    import uvicorn

    from gateway.app import build_app, front_doors
    from gateway.collector import tune_collector
    from gateway.transports.http_protocol import CoalescingHttpToolsProtocol
    from gateway.transports.ws_server import SafeWebSocketProtocol
    from gateway.workers import gateway_server, listening_socket

    # A worker shares the port with its siblings (SO_REUSEPORT); a single process owns it.
    sock = listening_socket(config.listen.host, config.listen.port, reuse_port=role is not None)
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    base = f"http://{shown}:{port}"
    from gateway.upstreams.egress import EgressError

    try:
        app = build_app(config)
    except EgressError as exc:  # a proxy variable or TLS file that cannot be used (issue 17)
        print(f"error: {exc}", file=sys.stderr)
        return 1
    tune_collector()  # after the app is built: what it holds is frozen (gateway/collector.py)
    server_config = uvicorn.Config(
        app,
        log_level=config.logging.level or config.log_level,
        log_config=None,  # uvicorn's lines go through gateway/logs.py's handler (text or JSON)
        access_log=False,
        proxy_headers=False,
        server_header=False,
        loop="none",
        http=CoalescingHttpToolsProtocol,
        ws=SafeWebSocketProtocol,
        lifespan="on",
        timeout_graceful_shutdown=5,
        timeout_keep_alive=config.limits.keep_alive_timeout_s,  # transports/http_protocol.py's idle timer
        ws_max_size=config.limits.max_message_bytes,
    )
    background = []
    if role is None:
        server = gateway_server(server_config)
        print(f"Switchboard {__version__} listening on {base}", flush=True)
        for line in front_doors(base, config):
            print(f"  {line}", flush=True)
    else:  # the supervisor prints the banner once for all workers
        server = gateway_server(server_config, role.announce_ready)

        def supervisor_gone() -> None:
            server.should_exit = True  # as SIGTERM does: stop accepting, drain, stop the gateway

        background.append(asyncio.create_task(role.watch_lifeline(supervisor_gone)))
    if config_path:
        background.append(asyncio.create_task(_watch_config(app.state.gateway, config_path)))
    try:
        await server.serve(sockets=[sock])
    finally:
        for task in background:
            task.cancel()
    return 0


async def _watch_config(gateway: Any, path: str, interval_s: float = 2.0) -> None:
    """Reload on SIGHUP and when the file changes. A broken file is reported (one WARNING line, the
    gateway's ``reload_status``, the reload metrics) and the running config stays."""
    import os

    loop = asyncio.get_running_loop()
    wake = asyncio.Event()
    with contextlib.suppress(NotImplementedError, RuntimeError):
        loop.add_signal_handler(signal.SIGHUP, wake.set)
    gateway.reload_status.source = path

    def stamp() -> float | None:
        try:
            return os.stat(path).st_mtime
        except OSError:
            return None

    seen = stamp()
    while True:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(interval_s):
                await wake.wait()
        current = stamp()
        if not wake.is_set() and current == seen:
            continue
        wake.clear()
        seen = current
        try:
            new = await asyncio.to_thread(load_config, path)
        except ConfigError as exc:
            _reload_refused(gateway, describe_issues(path, exc.issues))
            continue
        reload_config(gateway, new, path)


def reload_config(gateway: Any, new: Config, path: str) -> bool:
    """Apply ``new`` (read from ``path``) to the running gateway, or refuse it and say why."""
    # Judged where the gateway really listens (run --host/--port may override the file's listen).
    problems = static_problems(new.model_copy(update={"listen": gateway.config.listen}))
    if problems:
        _reload_refused(gateway, f"{path}: {'; '.join(problems)}")
        return False
    before = gateway.config
    try:
        gateway.reload(new)
    except Exception as exc:  # the watcher must outlive any reload: it is the only way to fix the file live
        _reload_refused(gateway, f"{path}: could not apply: {type(exc).__name__}: {exc}")
        return False
    changes = config_changes(before, new, gateway.config)
    gateway.reload_status.applied(changes)
    _reload_log.info("config reload of %s applied: %s", path, "; ".join(changes) or "no change")
    return True


_reload_log = logging.getLogger("switchboard.reload")


def _reload_refused(gateway: Any, reason: str) -> None:
    _reload_log.warning("config reload refused, keeping the running config: %s", reason)
    gateway.reload_status.failed(reason)


def _stdio(args: argparse.Namespace) -> int:
    """``switchboard stdio``: serve one client on stdin/stdout (a host spawns the gateway)."""
    import os

    config = _load_or_report(args.config)
    if config is None:
        return 1
    _log_to_stderr(config)
    token = args.token or os.environ.get("SWITCHBOARD_TOKEN") or None
    return _run_loop(_serve_stdio(config, args.server, token, args.config))


async def _serve_stdio(config: Config, server: str | None, token: str | None, config_path: str | None) -> int:
    from gateway.core import Gateway
    from gateway.transports import stdio
    from policies.auth import AuthError
    from policies.introspection import IntrospectionUnavailable

    gateway = Gateway(config)
    view = gateway.view_named(server) if server else gateway.federated
    if view is None:
        print(f"error: no backend or virtual server named {server!r}", file=sys.stderr)
        return 2
    try:
        credentials = await gateway.authenticator.authenticate_async(token)  # a JWKS or introspection first
    except AuthError as exc:
        print(f"error: {exc.reason} (give a token with --token or SWITCHBOARD_TOKEN)", file=sys.stderr)
        return 1
    except IntrospectionUnavailable as exc:
        print(f"error: {exc.reason}; try again later", file=sys.stderr)
        return 1
    reader, send, feeder = await stdio.open_std_streams()
    await gateway.start()
    watcher = asyncio.create_task(_watch_config(gateway, config_path)) if config_path else None
    door = stdio.StdioDoor(
        open_session=gateway.open_session,
        router=gateway.router,
        sessions=gateway.sessions,
        limits=gateway.config.limits,
        metrics=gateway.metrics,
    )
    serving = asyncio.create_task(door.serve(view, credentials, reader, send))
    for signum in (signal.SIGTERM, signal.SIGINT):
        # A host stopping its server: end the session and stop the backends (their process groups).
        asyncio.get_running_loop().add_signal_handler(signum, serving.cancel)
    try:
        with contextlib.suppress(asyncio.CancelledError):
            await serving
    finally:
        for task in (watcher, feeder):
            if task is not None:
                task.cancel()
        await gateway.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    from gateway.workers import parse_workers

    parser = argparse.ArgumentParser(prog="switchboard", description="A gateway for the MCP protocol family.")
    parser.add_argument("--version", action="version", version=f"switchboard {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="serve (with no -c: the embedded default with a demo backend)")
    run.add_argument("-c", "--config", help="YAML config file")
    run.add_argument("--host", help="override listen.host")
    run.add_argument("--port", type=int, help="override listen.port (0: any free port)")
    run.add_argument(
        "--workers",
        type=parse_workers,
        default=1,
        metavar="N|auto",
        help="serve the port from N processes (auto: one per usable core); N > 1 needs bus: {kind: redis}",
    )
    run.add_argument("--worker", help=argparse.SUPPRESS)  # internal: set by the supervisor on each worker
    run.set_defaults(func=_run)
    stdio = sub.add_parser("stdio", help="serve one client on stdin/stdout (for hosts that spawn their servers)")
    stdio.add_argument("-c", "--config", help="YAML config file")
    stdio.add_argument("--server", help="serve only this backend (as /servers/NAME/ does), not the federation")
    stdio.add_argument("--token", help="the caller's token when auth is configured (or SWITCHBOARD_TOKEN)")
    stdio.set_defaults(func=_stdio)
    check = sub.add_parser("check", help="validate a config file and explain every error")
    check.add_argument("-c", "--config", required=True, help="YAML config file")
    check.add_argument(
        "--workers", type=parse_workers, metavar="N|auto", help="also check that `run --workers N` can use this config"
    )
    check.add_argument("--probe", action="store_true", help="also connect to every backend and report what it offers")
    check.add_argument(
        "--timeout",
        type=_seconds,
        default=10.0,
        metavar="S",
        help="--probe: longest wait for each backend to connect, and again for its lists (default 10)",
    )
    check.add_argument("--json", action="store_true", help="--probe: print the report as JSON")
    check.add_argument("-v", "--verbose", action="store_true", help="--probe: show the gateway's log on stderr")
    check.set_defaults(func=_check)
    schema = sub.add_parser("schema", help="print the JSON Schema of the config file (for editors and CI)")
    schema.add_argument("-o", "--output", help="write it to this file instead of stdout")
    schema.set_defaults(func=_schema)
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
