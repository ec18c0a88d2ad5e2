"""Switchboard: a multi-dialect gateway for the Model Context Protocol family."""

__version__ = "0.1.0"
