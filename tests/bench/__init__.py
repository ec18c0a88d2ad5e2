"""Unit tests of the benchmark driver's pure parts (bench/)."""
