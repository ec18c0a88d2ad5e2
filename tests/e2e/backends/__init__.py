"""Tiny scripted MCP backends that the robustness tests spawn as real processes."""
