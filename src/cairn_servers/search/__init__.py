"""Text search engine shared by blz and ctx: SQLite FTS5, embeddings, vectors, fusion."""
