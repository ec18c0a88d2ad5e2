"""Helpers that the tests and the benchmarks share (not part of the installed gateway)."""
