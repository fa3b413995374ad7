from __future__ import annotations

import sqlite3

from hypothesis import given, settings
from hypothesis import strategies as st

from cairn_servers.search.query import fts_match, terms


def _db() -> sqlite3.Connection:
    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE t USING fts5(body)")
    db.executemany("INSERT INTO t(body) VALUES (?)", [("use the useEffect hook",), ("Привет мир",), ("a: b (c)",)])
    return db


def test_terms_and_phrases() -> None:
    assert terms('react "use effect" - * :') == ["react", "use effect"]
    assert terms('unbalanced "quote here') == ["unbalanced", "quote here"]


def test_operator_characters_are_literal() -> None:
    db = _db()
    for text, expected in [("useEffect", 1), ("use-effect", 0), ("мир", 1), ("a: b (c)", 1), ('"the useEffect"', 1)]:
        match = fts_match(text)
        assert match is not None
        assert db.execute("SELECT count(*) FROM t WHERE t MATCH ?", (match,)).fetchone()[0] == expected, text


def test_nothing_searchable() -> None:
    assert fts_match("- * ( ) :") is None


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_any_text_is_a_valid_query(text: str) -> None:
    db = _db()
    for op in ("AND", "OR"):
        match = fts_match(text, operator=op, prefix_last=True)
        if match is not None:
            db.execute("SELECT count(*) FROM t WHERE t MATCH ?", (match,)).fetchone()
