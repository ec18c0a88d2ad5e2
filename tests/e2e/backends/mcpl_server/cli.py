"""The MCPL test server's command line: ``python -m tests.e2e.backends.mcpl_server --role ROLE [options]``."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import sys

from tests.e2e.backends import mcpl_server
from tests.e2e.backends.mcpl_server.catalog import ROLES
from tests.e2e.backends.mcpl_server.server import Options
from tests.e2e.backends.mcpl_server.transports import run_http, run_stdio

# --help shows the first line of the package's docstring, as it did when the server was one module.
DESCRIPTION = mcpl_server.__doc__.splitlines()[0] if mcpl_server.__doc__ else None


def parse_args(argv: list[str] | None = None) -> tuple[Options, int | None]:
    parser = argparse.ArgumentParser(prog="python -m tests.e2e.backends.mcpl_server", description=DESCRIPTION)
    parser.add_argument("--role", required=True, choices=ROLES)
    parser.add_argument("--http", type=int, metavar="PORT", help="serve Streamable HTTP on 127.0.0.1:PORT/mcp")
    parser.add_argument("--name", help="serverInfo.name and push origin.server (default: the role)")
    parser.add_argument("--hook-delay", type=float, default=0.0, metavar="SECONDS")
    parser.add_argument("--tag", metavar="FEATURESET", help="featureSet to tag hook responses with")
    parser.add_argument("--infer-in-hook", action="store_true", help="send inference/request inside beforeInference")
    parser.add_argument("--redact", action="append", default=[], metavar="WORD", help="compliance: redact WORD too")
    parser.add_argument("--ask-timeout", type=float, default=10.0, metavar="SECONDS")
    parser.add_argument("--mcpl-version", help="MCPL version to declare (0.5: updates come as requests)")
    ns = parser.parse_args(argv)
    options = Options(
        role=ns.role,
        name=ns.name or ns.role,
        hook_delay=ns.hook_delay,
        tag=ns.tag,
        infer_in_hook=ns.infer_in_hook,
        redact=ns.redact,
        ask_timeout=ns.ask_timeout,
        mcpl_version=ns.mcpl_version,
    )
    return options, ns.http


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="mcpl_server %(levelname)s %(message)s")
    options, port = parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run_http(options, port) if port is not None else run_stdio(options))
