"""Unit tests of bench/roundtrip/."""
