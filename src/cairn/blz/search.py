"""Search every source in one FTS5 table (one BM25 scale) with a typo-tolerant fallback."""

from __future__ import annotations

import re
from typing import Any

from cairn.blz.citation import check_alias
from cairn.blz.limits import MAX_LIMIT
from cairn.blz.store import PATH_SEP, SID_SHIFT, Store
from cairn.core.errors import InvalidInput, NotFound
from cairn.search.query import fts_match, terms

SNIPPET_CHARS = 240
_WORD = re.compile(r"\w+", re.UNICODE)

def search(store: Store, query: str, sources: list[str] | None = None, limit: int = 10,
           page: int = 1) -> dict[str, Any]:
    """Ranked hits for ``query`` across ``sources`` (all installed sources when empty).

    Every term must match; when that finds nothing, any word may match; when that finds nothing
    either, unknown words are replaced by the closest indexed word (typo tolerance). ``fallback``
    in the result says which of these produced the hits. All sources share one FTS5 table, so
    BM25 scores from different sources are on one scale; ``score`` is 0-100 relative to the top hit.
    """
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidInput(f"limit must be between 1 and {MAX_LIMIT}, not {limit}.")
    if page < 1:
        raise InvalidInput(f"page must be 1 or more, not {page}.")
    by_sid = store.aliases_by_sid()
    sid_of = {alias: sid for sid, (alias, _url) in by_sid.items()}
    aliases = sorted({check_alias(s) for s in sources}) if sources else []
    for alias in aliases:
        if alias not in sid_of:
            raise NotFound(f"No source named {alias!r}. Installed: {', '.join(sorted(sid_of)) or 'none'}. "
                           f"Add it with `blz add {alias}`.")
    result: dict[str, Any] = {"query": query, "sources": aliases or sorted(sid_of), "page": page,
                              "limit": limit, "fallback": None, "hits": [], "hasMore": False}
    if not terms(query):
        return result
    sids = [sid_of[a] for a in aliases] if aliases and len(aliases) < len(sid_of) else []
    want = page * limit + 1
    words = _WORD.findall(query)
    ranked = _rank(store, fts_match(query, operator="AND"), sids, want)
    if not ranked and (len(terms(query)) > 1 or len(words) > 1):
        # Any word may match; hyphenated or quoted terms are split into their words here.
        ranked = _rank(store, fts_match(" ".join(words), operator="OR"), sids, want)
        result["fallback"] = "any-term" if ranked else None
    if not ranked:
        corrected = correct(store, query)
        if corrected:
            ranked = _rank(store, fts_match(corrected, operator="OR"), sids, want)
            result["fallback"] = "corrected"
            result["correctedQuery"] = corrected
            words = corrected.split()
    top = ranked[0][1] if ranked else None
    window = ranked[(page - 1) * limit:page * limit + 1]
    result["hasMore"] = len(window) > limit
    needles = list(dict.fromkeys(w.lower() for w in words))  # each word once: "a a a ..." is one needle
    hits = []
    section = store.section
    for rowid, rank in window[:limit]:
        first, last, hpath, body = section(rowid)
        alias, url = by_sid[rowid >> SID_SHIFT]
        hits.append({"alias": alias, "lines": f"{first}-{last}",
                     "headingPath": hpath.split(PATH_SEP) if hpath else [],
                     "snippet": snippet(body, needles), "score": round(100.0 * rank / top, 1) if top else 0.0,
                     "sourceUrl": url})
    result["hits"] = hits
    return result


def _rank(store: Store, match: str | None, sids: list[int], want: int) -> list[tuple[int, float]]:
    """``(rowid, bm25)`` best first (nothing when the query has no searchable term)."""
    return [] if match is None else store.rank(match, sids, want)


def snippet(body: str, needles: list[str], width: int = SNIPPET_CHARS) -> str:
    """About ``width`` characters of ``body`` around the densest cluster of query words."""
    low = body.lower()
    hits: list[tuple[int, int]] = []  # (position, word index)
    for k, word in enumerate(needles):
        pos = low.find(word)
        count = 0
        while pos != -1 and count < 20:
            hits.append((pos, k))
            pos = low.find(word, pos + len(word))
            count += 1
    start = 0
    if hits:
        hits.sort()
        # The window starting at each hit that covers the most distinct words: one sliding pass
        # (a long query repeating a word used to make this quadratic in the hits: seconds per snippet).
        best, ahead = -1, 0
        inside: dict[int, int] = {}  # word index -> hits in the window
        for pos, k in hits:
            while ahead < len(hits) and hits[ahead][0] < pos + width - 40:
                inside[hits[ahead][1]] = inside.get(hits[ahead][1], 0) + 1
                ahead += 1
            if len(inside) > best:
                best, start = len(inside), pos
            if inside[k] == 1:
                del inside[k]
            else:
                inside[k] -= 1
        start = max(0, start - 40)
        if start:
            space = body.rfind(" ", 0, start)
            start = space + 1 if space > start - 20 else start
    end = min(len(body), start + width)
    if end < len(body):
        space = body.rfind(" ", start + width // 2, end)
        end = space if space > 0 else end
    text = " ".join(body[start:end].split())
    return ("…" if start > 0 else "") + text + ("…" if end < len(body) else "")


def correct(store: Store, query: str) -> str | None:
    """``query`` with each word absent from the index replaced by the closest indexed word."""
    import difflib

    words = list(dict.fromkeys(_WORD.findall(query.lower())))  # each word is looked up once
    if not words:
        return None
    out = []
    changed = False
    for word in words:
        if store.has_term(word) or len(word) < 3:
            out.append(word)
            continue
        # Candidates share the first letter (typos there are rare) and have a similar length.
        pool = store.terms_near(word, 2)
        best = difflib.get_close_matches(word, pool, n=1, cutoff=0.75)
        if best:
            out.append(best[0])
            changed = True
        else:
            out.append(word)
    return " ".join(out) if changed else None
