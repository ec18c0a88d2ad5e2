"""``python -m tests.e2e.backends.mcpl_server``: runs the command line of :mod:`.cli`."""

from tests.e2e.backends.mcpl_server.cli import main

if __name__ == "__main__":
    main()
