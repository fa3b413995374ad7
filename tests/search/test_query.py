from __future__ import annotations

import sqlite3

from hypothesis import given, settings
from hypothesis import strategies as st
import pytest

from cairn_servers.core.errors import InvalidInput
from cairn_servers.search.query import MAX_QUERY_WORDS, check_terms, fts_match, terms


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


def test_phrase_words_are_capped_repeats_included() -> None:
    """One distinct word passes the distinct-word cap, but a phrase is checked at every position."""
    check_terms(" ".join(["zz"] * 100_000))  # unquoted repeats are one term
    check_terms('"' + " ".join(["zz"] * MAX_QUERY_WORDS) + '"')
    check_terms('"a b" "a b" ' * 3000)  # a repeated phrase is one term
    for query in ('"' + " ".join(["zz"] * (MAX_QUERY_WORDS + 1)) + '"',
                  '"' + " ".join(["zz"] * 3000) + '" "' + " ".join(["zz"] * 3000) + ' b"',
                  '"' + " ".join(["zz"] * 5000)):  # an unbalanced quote runs to the end
        with pytest.raises(InvalidInput, match=r"The query's phrases hold [\d,]+ words; the limit is 4,096"):
            check_terms(query)
