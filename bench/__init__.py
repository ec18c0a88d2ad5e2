"""Benchmarks (`make bench`, `bench-mcpx`, `bench-mcpl`, `bench-router`); see bench/README.md."""
