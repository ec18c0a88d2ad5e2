"""Entry point of the MCP conformance fixture backend (the fixture itself: tests/conformance/fixture/).

    python -m tests.conformance.fixture_server --port PORT [--host 127.0.0.1] [--era ERA]  # HTTP at /mcp
    python -m tests.conformance.fixture_server --stdio [--era ERA]                         # over stdio

See the docstring of `tests.conformance.fixture` for the fixture's wire behaviour.
"""

from __future__ import annotations

import sys

from tests.conformance.fixture.cli import main as main
from tests.conformance.fixture.http_app import build_http_app as build_http_app, serve_http as serve_http
from tests.conformance.fixture.server import build_server as build_server
from tests.conformance.fixture.stdio import serve_stdio as serve_stdio

if __name__ == "__main__":
    sys.exit(main())
