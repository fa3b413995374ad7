"""Search every source in one FTS5 table (one BM25 scale) with a typo-tolerant fallback."""

from __future__ import annotations

import re
from typing import Any

from cairn_servers.blz.citation import check_alias
from cairn_servers.blz.limits import MAX_DEPTH, MAX_LIMIT
from cairn_servers.blz.store import ANCHOR_SEP, PATH_SEP, SID_SHIFT, Store
from cairn_servers.core.errors import InvalidInput, NotFound
from cairn_servers.blz.query import Term, any_words, match, parse, written

SNIPPET_CHARS = 240
_WORD = re.compile(r"\w+", re.UNICODE)

def search(store: Store, query: str, sources: list[str] | str | None = None, limit: int = 10,
           page: int = 1, *, headings_only: bool = False, levels: tuple[int, ...] | None = None) -> dict[str, Any]:
    """Ranked hits for ``query`` across ``sources`` (all installed sources when empty; a list, or
    aliases separated by commas).

    The query syntax is :mod:`cairn_servers.blz.query`'s: ``+word`` required, ``-word`` excluded,
    ``"a phrase"``, ``title:word`` in the section's own heading. Every plain term must match; when
    that finds nothing, any of their words may; when that finds nothing either, unknown words are
    replaced by the closest indexed word (typo tolerance). Required and excluded terms hold at every
    stage. ``fallback`` in the result says which stage produced the hits. All sources share one FTS5
    table, so BM25 scores from different sources are on one scale; ``score`` is 0-100 relative to the
    top hit. ``headings_only`` matches the words in each section's own heading only; ``levels`` (see
    :func:`heading_levels`) keeps sections under headings of those levels (a heading's section
    runs to its first sub-heading).
    """
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidInput(f"limit must be between 1 and {MAX_LIMIT}, not {limit}.")
    if page < 1:
        raise InvalidInput(f"page must be 1 or more, not {page}.")
    q = parse(query)  # at most MAX_TERMS distinct words: bounded work on every surface
    by_sid = store.aliases_by_sid()
    sid_of = {alias: sid for sid, (alias, _url) in by_sid.items()}
    given = source_list(sources)
    aliases = sorted(set(resolve(store, given))) if given else []
    if aliases and not sid_of.keys() >= set(aliases):  # other names of sources (blz add --alias)
        others = store.other_names()
        aliases = sorted({others.get(alias, alias) for alias in aliases})
    for alias in aliases:
        if alias not in sid_of:
            raise NotFound(f"No source named {alias!r} (source: {', '.join(given)}). Installed: "
                           f"{', '.join(sorted(sid_of)) or 'none'}. Add it with `blz add {alias}`.")
    result: dict[str, Any] = {"query": query, "sources": aliases or sorted(sid_of), "page": page,
                              "limit": limit, "fallback": None, "hits": [], "hasMore": False}
    if headings_only:
        result["headingsOnly"] = True
    if levels is not None:
        result["headingLevels"] = list(levels)
    if not q.plain and not q.required:
        return result
    sids = [sid_of[a] for a in aliases] if aliases and len(aliases) < len(sid_of) else []
    want = page * limit + 1
    needles = q.needles()
    ranked = _rank(store, match(q, headings_only=headings_only), sids, want, levels)
    if not ranked and (len(q.plain) > 1 or q.plain_words() > 1):
        # Any word may match; hyphenated or quoted terms are split into their words here.
        ranked = _rank(store, match(q, any_words(q), any_plain=True, headings_only=headings_only), sids, want,
                       levels)
        result["fallback"] = "any-term" if ranked else None
    if not ranked and q.plain:
        corrected = correct(store, any_words(q))
        if corrected:
            ranked = _rank(store, match(q, corrected, any_plain=True, headings_only=headings_only), sids, want,
                           levels)
            result["fallback"] = "corrected"
            result["correctedQuery"] = written(q, corrected)
            needles = q._replace(plain=corrected).needles()
    if result["fallback"]:
        result["note"] = fallback_note(result)
        if result["fallback"] == "any-term" and (q.required or q.excluded):
            result["note"] += "; +required and -excluded terms still apply"
    top = ranked[0][1] if ranked else None
    window = ranked[(page - 1) * limit:page * limit + 1]
    result["hasMore"] = len(window) > limit
    hits = []
    shown = window[:limit]
    versions = store.current_versions(just_checked=True) if shown else {}
    legacy: dict[str, list[tuple[int, int, str, list[str], bool]]] = {}
    for (rowid, rank), (first, last, hpath, body) in zip(shown, store.sections([r for r, _ in shown])):
        alias, url = by_sid[rowid >> SID_SHIFT]
        path, sep, anchor = hpath.partition(ANCHOR_SEP)
        if not sep:  # indexed before anchors were stored with each section: computed (once per source)
            if alias not in legacy:
                legacy[alias] = store.anchored(alias)
            anchor = anchor_at(legacy[alias], int(first))
        hits.append({"alias": alias, "lines": f"{first}-{last}",
                     "headingPath": path.split(PATH_SEP) if path else [],
                     "snippet": snippet(body, needles), "score": round(100.0 * rank / top, 1) if top else 0.0,
                     "sourceUrl": url, "anchor": f"{alias}#{anchor}" if anchor else None,
                     "version": versions.get(alias)})
    result["hits"] = hits
    return result


def anchor_at(runs: list[tuple[int, int, str, list[str], bool]], line: int) -> str:
    """The anchor of the run (:meth:`Store.anchored`) holding ``line``, else ""."""
    from bisect import bisect_right

    k = bisect_right([r[0] for r in runs], line) - 1
    return runs[k][2] if k >= 0 and runs[k][1] >= line else ""


def fallback_note(result: dict[str, Any]) -> str | None:
    """What a fallback search did, in words: the hits do not match the query as written."""
    if result.get("fallback") == "corrected":
        return f"no exact match; showing results for {result['correctedQuery']!r}"
    if result.get("fallback") == "any-term":
        return (f"nothing matches all of {result['query']!r} (as a phrase or every word); "
                "showing sections with any of its words")
    return None


def _rank(store: Store, match: str | None, sids: list[int], want: int,
          levels: tuple[int, ...] | None = None) -> list[tuple[int, float]]:
    """``(rowid, bm25)`` best first (nothing when the query has no searchable term)."""
    if match is None:
        return []
    return store.rank(match, sids, want, levels)


def source_list(sources: list[str] | str | None) -> list[str]:
    """The aliases a ``source`` parameter names: one alias, a list, or aliases separated by commas
    (``react,bun``; ``--source react,bun`` on the command line), in the order given; empty for all."""
    if not sources:
        return []
    items = [sources] if isinstance(sources, str) else sources
    return [a.strip() for item in items for a in item.split(",") if a.strip()]


def resolve(store: Store, given: list[str]) -> list[str]:
    """The aliases ``given`` names, checked: each an alias, or ``tag:NAME`` for every source tagged NAME
    (NotFound naming the tags in use when no source carries it)."""
    out: list[str] = []
    tags: dict[str, list[str]] | None = None
    for item in given:
        if item[:4].lower() != "tag:":
            out.append(check_alias(item))
            continue
        if tags is None:
            tags = store.tags()
        name = item[4:].strip().lower()
        if name not in tags:
            raise NotFound(f"No source is tagged {name!r} (source: {', '.join(given)}). Tags: "
                           f"{', '.join(sorted(tags)) or 'none'}. Tag a source with `blz add ALIAS URL --tag "
                           f"{name or 'NAME'} --force`.")
        out += tags[name]
    return out


def heading_levels(spec: str | int | list[str | int] | None) -> tuple[int, ...] | None:
    """The heading levels (1-6) a heading-level filter keeps, sorted; None when ``spec`` is None.

    ``spec`` is a level (``2``), a range (``"1-3"``), a comparison (``"<=2"``, ``"<3"``, ``">=2"``,
    ``">1"``, ``"=2"``), levels separated by commas (``"1,3"``), or a list of any of these (the
    union). Raises ValueError with the reason for anything else (``"3-1"``, ``"0"``, ``"7"``)."""
    if spec is None:
        return None
    items = spec if isinstance(spec, list) else [spec]
    if not items:
        raise ValueError("give at least one level (1-6), e.g. 2, \"1-2\" or \"<=2\"")
    kept: set[int] = set()
    for item in items:
        parts = [item] if isinstance(item, int) else item.split(",")
        for part in parts:
            kept |= _level_set(part)
    return tuple(sorted(kept))


_RANGE = re.compile(r"^\s*(\d+)\s*-\s*(\d+)\s*$")
_COMPARE = re.compile(r"^\s*(<=|>=|<|>|=)?\s*(\d+)\s*$")


def _level_set(part: str | int) -> set[int]:
    if isinstance(part, bool):
        raise ValueError(f"{part!r} is not a heading level (1-{MAX_DEPTH})")
    if isinstance(part, int):
        return {_level(part, str(part))}
    text = part.strip()
    if not text:
        raise ValueError("an empty level; use levels 1-6, e.g. 2, \"1-2\" or \"<=2\"")
    found = _RANGE.match(text)
    if found:
        low, high = _level(int(found[1]), text), _level(int(found[2]), text)
        if low > high:
            raise ValueError(f"{text!r} is an empty range: the first level must not be greater than the "
                             f"last (e.g. \"{high}-{low}\")")
        return set(range(low, high + 1))
    found = _COMPARE.match(text)
    if not found:
        raise ValueError(f"{text!r} is not a heading level filter; use a level (2), a range (\"1-2\"), "
                         f"a comparison (\"<=2\") or levels separated by commas (\"1,3\")")
    op, number = found[1] or "=", int(found[2])
    if op in ("<", ">"):  # <1 and >6 keep nothing; <7 and >0 are odd but clear
        levels = set(range(1, number)) if op == "<" else set(range(number + 1, MAX_DEPTH + 1))
        if not levels:
            raise ValueError(f"{text!r} keeps no heading level (levels are 1-{MAX_DEPTH})")
        return levels
    level = _level(number, text)
    return {level} if op == "=" else set(range(1, level + 1)) if op == "<=" else set(range(level, MAX_DEPTH + 1))


def _level(number: int, text: str) -> int:
    if not 1 <= number <= MAX_DEPTH:
        raise ValueError(f"{text!r}: heading levels are 1-{MAX_DEPTH}, not {number}")
    return number


def snippet(body: str, needles: list[str], width: int = SNIPPET_CHARS) -> str:
    """About ``width`` characters of ``body`` (``width`` > 40) around the densest cluster of query
    words: the window of ``width - 40`` characters starting at a hit that holds the most distinct
    needles (the first such hit), from 40 characters (and a word boundary) before it.

    Hits are the first 20 non-overlapping occurrences of each needle in ``body.lower()`` (positions
    in the lowered text index ``body``). Runs once per hit shown, ten per warm find: usually the first
    occurrence of each needle is all it looks at."""
    low = body.lower()
    start = 0
    span = width - 40
    find = low.find
    firsts = [at for at in map(find, needles) if at != -1]
    found = bool(firsts)
    if found:
        start = min(firsts)
        # The first hit's window holds every needle that occurs (all first occurrences are in it):
        # nothing beats it. Else look at every window.
        if span <= 0 or max(firsts) >= start + span:
            found, start = _densest(low, needles, span)
    if found:
        start = max(0, start - 40)
        if start:  # a space among the 19 characters before the start begins the snippet after it
            space = body.rfind(" ", max(0, start - 19), start)
            start = space + 1 if space != -1 or start < 19 else start
    end = min(len(body), start + width)
    if end < len(body):
        space = body.rfind(" ", start + width // 2, end)
        end = space if space > 0 else end
    text = " ".join(body[start:end].split())
    return ("…" if start > 0 else "") + text + ("…" if end < len(body) else "")


def _densest(low: str, needles: list[str], span: int) -> tuple[bool, int]:
    """``(any hit, start)``: the position of the first hit whose window ``[pos, pos + span)`` holds
    the most distinct needles (one sliding pass over the hits in position order)."""
    hits: list[tuple[int, int]] = []  # (position, needle index)
    find = low.find
    append = hits.append
    for k, word in enumerate(needles):
        step = len(word)
        pos = find(word)
        count = 0
        while pos != -1 and count < 20:
            append((pos, k))
            pos = find(word, pos + step)
            count += 1
    if not hits:
        return False, 0
    hits.sort()
    # A window holding every needle that occurs at all cannot be beaten: stop at the first one.
    total = len({k for _pos, k in hits})
    counts = [0] * len(needles)  # needle index -> hits in the window
    distinct, best, ahead, start, n = 0, -1, 0, 0, len(hits)
    for pos, k in hits:
        limit = pos + span
        while ahead < n and hits[ahead][0] < limit:
            j = hits[ahead][1]
            if not counts[j]:
                distinct += 1
            counts[j] += 1
            ahead += 1
        if distinct > best:
            best, start = distinct, pos
            if best == total:
                break
        counts[k] -= 1
        if not counts[k]:
            distinct -= 1
    return True, start


def correct(store: Store, words: tuple[Term, ...]) -> tuple[Term, ...] | None:
    """``words`` (single words) with each word absent from the index replaced by the closest indexed
    word, or None when none was replaced."""
    import difflib

    out: dict[Term, None] = {}
    changed = False
    for term in words:
        word = term.text.lower()
        if len(word) < 3 or store.has_term(word):
            out[term._replace(text=word, words=(word,))] = None
            continue
        # Candidates share the first letter (typos there are rare) and have a similar length.
        pool = store.terms_near(word, 2)
        best = difflib.get_close_matches(word, pool, n=1, cutoff=0.75)
        if best:
            out[term._replace(text=best[0], words=(best[0],))] = None
            changed = True
        else:
            out[term._replace(text=word, words=(word,))] = None
    return tuple(out) if changed else None
