"""brk: Bitcoin blockchain datasets from a node's block files."""

from __future__ import annotations


def version() -> str:
    """brk's version as the servers report it (``v0.1.0``). Here, not in ``interface``: ``brk mcp`` names
    its version in the ``initialize`` reply without importing the query interface first."""
    from cairn_servers import __version__

    return f"v{__version__}"
