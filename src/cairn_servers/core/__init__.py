"""Shared core: paths, errors, output rendering, sanitising, fetching."""
