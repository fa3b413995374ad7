"""Limits and enums shared by blz's service and its adapters (a leaf module: cheap to import)."""

from __future__ import annotations

MAX_LIMIT = 50  # search hits per page (maxResults)
MAX_PADDING = 50  # context lines each side (linePadding / -C)
CONTEXT_MODES = ("none", "symmetric", "all")
DEFAULT_MAX_LINES = 2000  # lines one `get` returns at most
WHITELIST = ("stats", "history", "list", "validate", "inspect", "schema")  # run-command
TOC_DEFAULT_LIMIT = 100  # outline entries per page (toc)
TOC_MAX_LIMIT = 1000
MAX_DEPTH = 6  # heading levels: H1-H6
