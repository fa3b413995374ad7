"""PostgreSQL-only behaviour (the shared behaviour runs on both backends in the other ctx suites)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from cairn_servers.core.errors import StorageError
from cairn_servers.ctx.service import Service

from .conftest import config_file, drop_database, pg_database, write


@pytest.fixture
def pg_kb(tmp_path: Path, pg_server: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Service]:
    name, url = pg_database(pg_server)
    monkeypatch.setenv("CTX_DATABASE_URL", url)
    write(tmp_path / "docs", {"a.md": "# Herons\n\nThe heron nests by the lake.\n"})
    svc = Service.from_config(config_file(tmp_path, f'[db]\npath = "unused.sqlite"\n[connectors.filesystem.docs]\n'
                                                    f'root = "{tmp_path / "docs"}"\n'))
    svc.sync("all")
    yield svc
    svc.close()
    drop_database(pg_server, name)


def test_a_lost_connection_is_replaced_on_the_next_use(pg_kb: Service, pg_server: str) -> None:
    assert pg_kb.search("heron")[0].source_id == "a.md"
    pid = pg_kb.store.sql("SELECT pg_backend_pid()")[0][0]
    with psycopg.connect(pg_server, autocommit=True) as admin:  # what a server restart or failover does
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
    with pytest.raises(StorageError, match=r"did not answer: .*the next request connects again"):
        pg_kb.search("heron")  # the request that meets the dead connection fails with a clear error...
    assert pg_kb.search("heron")[0].source_id == "a.md"  # ...and the next one reconnects
    assert pg_kb.store.sql("SELECT pg_backend_pid()")[0][0] != pid


def test_vectors_get_an_hnsw_index_per_model(pg_kb: Service) -> None:
    import numpy as np

    store = pg_kb.store
    with store.transaction():
        store.put_vectors("test:m:4", ["h1", "h2"], [np.array([1, 0, 0, 0], np.float32).tobytes(),
                                                    np.array([0, 1, 0, 0], np.float32).tobytes()])
    (indexdef,) = store.sql("SELECT indexdef FROM pg_indexes WHERE tablename = 'vectors' AND indexdef LIKE '%hnsw%'")[0]
    assert "vector_cosine_ops" in indexdef and "(vec)::vector(4)" in indexdef and "'test:m:4'" in indexdef
    store.sql("SET enable_seqscan = off")  # two rows: the planner would rather scan them
    plan = "\n".join(r[0] for r in store.sql(
        "EXPLAIN SELECT hash FROM vectors WHERE model = 'test:m:4' ORDER BY vec::vector(4) <=> '[1,0,0,0]' LIMIT 1"))
    store.sql("RESET enable_seqscan")
    assert "Index Scan using vectors_hnsw_" in plan, plan
    assert store.vector_search("test:m:4", np.array([1, 0.1, 0, 0], np.float32).tobytes(), 1) == {}  # no chunks



def test_a_keyword_search_is_one_statement(pg_kb: Service, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The terms' counts (ranking budget), their IDF weights and the ranking go in one round trip; it was
    eight. Over the budget, the plan takes a second statement (and the rarest-term fallback a third)."""
    from cairn_servers.ctx import retrieval, store_pg

    statements: list[str] = []
    execute = store_pg._Guarded.execute

    def counted(self: store_pg._Guarded, query: object, params: object = None, **kw: object) -> object:
        statements.append(bytes(query).decode() if isinstance(query, bytes) else str(query))
        return execute(self, query, params, **kw)  # type: ignore[arg-type]

    write(tmp_path / "docs", {f"n{i}.md": f"# N{i}\n\nheron common {i}\n" for i in range(30)})
    pg_kb.sync("all")
    monkeypatch.setattr(store_pg._Guarded, "execute", counted)
    store, none = pg_kb.store, retrieval.Filters()
    for query in ("heron", "heron lake", "heron lake nests", "-- heron"):
        statements.clear()
        assert retrieval.keyword(store, query, none, 10), query
        assert len(statements) == 1, (query, statements)
    statements.clear()
    assert retrieval.keyword(store, "common lake", none, 10, budget=20)  # "common" alone is over budget
    assert len(statements) == 2
    statements.clear()
    assert len(retrieval.keyword(store, "common heron", none, 10, budget=20)) == 10  # both over: newest 20
    assert len(statements) == 4  # try, the AND's count, the newest rowid, the ranking
