"""Search every source in one FTS5 table (one BM25 scale) with a typo-tolerant fallback."""

from __future__ import annotations

import json
import re
from typing import Any

from cairn.blz.citation import check_alias
from cairn.blz.store import WEIGHTS, Store
from cairn.core.errors import InvalidInput, NotFound
from cairn.search.query import fts_match, terms

MAX_LIMIT = 50
SNIPPET_TOKENS = 32
_WORD = re.compile(r"\w+", re.UNICODE)

_SQL = (
    "SELECT alias, first_line, last_line, hpath, snippet(sections, 2, '', '', '…', {tokens}), "
    "bm25(sections, {w0}, {w1}, {w2}) AS rank FROM sections WHERE sections MATCH ?{filter} "
    "ORDER BY rank LIMIT ? OFFSET ?"
)


def search(store: Store, query: str, sources: list[str] | None = None, limit: int = 10,
           page: int = 1) -> dict[str, Any]:
    """Ranked hits for ``query`` across ``sources`` (all installed sources when empty).

    Every term must match; when that finds nothing, any term may match; when that finds nothing
    either, unknown words are replaced by the closest indexed word (typo tolerance). ``fallback``
    in the result says which of these produced the hits.
    """
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidInput(f"limit must be between 1 and {MAX_LIMIT}, not {limit}.")
    if page < 1:
        raise InvalidInput(f"page must be 1 or more, not {page}.")
    urls = dict(store.db.execute("SELECT alias, url FROM sources").fetchall())
    aliases = sorted({check_alias(s) for s in sources}) if sources else []
    for alias in aliases:
        if alias not in urls:
            raise NotFound(f"No source named {alias!r}. Installed: {', '.join(sorted(urls)) or 'none'}. "
                           f"Add it with `blz add {alias}`.")
    result: dict[str, Any] = {"query": query, "sources": aliases or sorted(urls), "page": page,
                              "limit": limit, "fallback": None, "hits": [], "hasMore": False}
    if not terms(query):
        return result
    attempts: list[tuple[str | None, str | None]] = [(None, fts_match(query, operator="AND"))]
    words = _WORD.findall(query)
    if len(terms(query)) > 1 or len(words) > 1:
        # Any word may match; hyphenated or quoted terms are split into their words here.
        attempts.append(("any-term", fts_match(" ".join(words), operator="OR")))
    for label, match in attempts:
        rows, top = _run(store, match, aliases, limit, page)
        if rows or page > 1 and label is None and top is not None:
            result["fallback"] = label
            break
    else:
        corrected = correct(store, query)
        if corrected and corrected != query:
            match = fts_match(corrected, operator="OR")
            rows, top = _run(store, match, aliases, limit, page)
            result["fallback"] = "corrected"
            result["correctedQuery"] = corrected
    result["hasMore"] = len(rows) > limit
    rows = rows[:limit]
    hits = []
    for alias, first, last, hpath, snippet, rank in rows:
        score = 100.0 * rank / top if top else 0.0
        hits.append({"alias": alias, "lines": f"{first}-{last}", "headingPath": json.loads(hpath),
                     "snippet": " ".join(snippet.split()), "score": round(score, 1),
                     "sourceUrl": urls.get(alias)})
    result["hits"] = hits
    return result


def _run(store: Store, match: str | None, aliases: list[str], limit: int,
         page: int) -> tuple[list[tuple[Any, ...]], float | None]:
    if match is None:
        return [], None
    where = f" AND alias IN ({','.join('?' * len(aliases))})" if aliases else ""
    sql = _SQL.format(tokens=SNIPPET_TOKENS, w0=WEIGHTS[0], w1=WEIGHTS[1], w2=WEIGHTS[2], filter=where)
    rows = store.db.execute(sql, (match, *aliases, limit + 1, (page - 1) * limit)).fetchall()
    if page == 1:
        top = rows[0][5] if rows else None
    else:
        first = store.db.execute(sql, (match, *aliases, 1, 0)).fetchone()
        top = first[5] if first else None
    return rows, top


def correct(store: Store, query: str) -> str | None:
    """``query`` with each word absent from the index replaced by the closest indexed word."""
    import difflib

    words = _WORD.findall(query.lower())
    if not words:
        return None
    db = store.db
    out = []
    changed = False
    for word in words:
        if db.execute("SELECT 1 FROM sections_vocab WHERE term = ?", (word,)).fetchone() or len(word) < 3:
            out.append(word)
            continue
        # Candidates share the first letter (typos there are rare) and have a similar length.
        pool = [t for (t,) in db.execute(
            "SELECT term FROM sections_vocab WHERE term >= ? AND term < ? AND length(term) BETWEEN ? AND ?",
            (word[0], word[0] + "\U0010ffff", len(word) - 2, len(word) + 2))]
        best = difflib.get_close_matches(word, pool, n=1, cutoff=0.75)
        if best:
            out.append(best[0])
            changed = True
        else:
            out.append(word)
    return " ".join(out) if changed else None
