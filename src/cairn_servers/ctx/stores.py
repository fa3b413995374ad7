"""Choosing the knowledge base's store at start: SQLite (``[db] path``) or PostgreSQL (``[db] url``).

Its own module so that neither store imports the other (:mod:`cairn_servers.ctx.store_pg` uses the shared
records and the interface from :mod:`cairn_servers.ctx.store`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cairn_servers.ctx.config import DbConfig
    from cairn_servers.ctx.store import KnowledgeStore


def open_store(db: "DbConfig", *, create: bool = True) -> "KnowledgeStore":
    """The store ``db`` configures: PostgreSQL when it has a ``url``, else the SQLite file at ``path``.
    Pending schema migrations are applied on open."""
    if db.url:
        from cairn_servers.ctx.store_pg import PostgresStore

        return PostgresStore(db.url, vector_index=db.vector_index)
    from cairn_servers.ctx.store import SqliteStore

    return SqliteStore(db.path, create=create)
