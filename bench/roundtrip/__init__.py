"""The tools/call round-trip benchmark that bench/run.py drives (`make bench`), one idea a module."""
