"""Cairn: local context servers for AI agents (blz, ctx, brk)."""

__version__ = "0.1.0"
