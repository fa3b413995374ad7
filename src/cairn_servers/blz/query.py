"""blz's query syntax: ``+required``, ``-excluded``, ``"phrases"`` and ``title:``/``heading:`` terms,
turned into SQLite FTS5 ``MATCH`` expressions for :mod:`cairn_servers.blz.search`.

A query is split into terms: a ``"quoted phrase"`` (an unbalanced quote runs to the end) or a run of
non-space characters. A term may start with ``+`` (required: it must match at every stage, the
fallbacks included, and is never replaced by a typo correction) or ``-`` (excluded: no section
holding it is a hit), then ``title:`` or ``heading:`` (only the section's own heading may hold it),
each written directly before the word or the opening quote. ``--force`` or ``C++`` are plain terms:
a sign is one ``+`` or ``-`` followed by a letter, digit, ``_`` or quote. Everything else is a plain
term: every plain term must match, and when that finds nothing, any of their words may
(:func:`match`). Terms without a letter or a digit are dropped; each term is an FTS5 string literal,
so no user text reaches FTS5's own syntax (see :mod:`cairn_servers.search.query`).
"""

from __future__ import annotations

import re
from typing import NamedTuple

from cairn_servers.core.errors import InvalidInput
from cairn_servers.search.query import MAX_QUERY_WORDS, check_terms, literal

# sign, field, then a quoted phrase; or any run of non-space characters (split further in parse)
_TOKEN = re.compile(r'([+-]?)((?i:title|heading):)?"([^"]*)"?|(\S+)')
_SIGNED = re.compile(r"([+-])(?=[\w\"])((?i:title|heading):(?=\S))?(.*)", re.S)
_FIELD = re.compile(r"((?i:title|heading):)(?=\S)(.*)", re.S)
_WORD = re.compile(r"\w+", re.UNICODE)
_SYNTAX = re.compile(r'["+-]|(?i:title|heading):')  # what the tokenizer is needed for
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


class Term(NamedTuple):
    text: str  # the word(s), without sign, field or quotes
    heading: bool = False  # title: / heading: the section's own heading only
    quoted: bool = False
    words: tuple[str, ...] = ()  # its words (runs of letters, digits and _), as the index splits them

    def expr(self) -> str:
        """The term as an FTS5 expression: a string literal, under a heading column filter if asked."""
        lit = literal(self.text)
        return f"heading : {lit}" if self.heading else lit

    def show(self, sign: str = "") -> str:
        """The term written back in the query syntax."""
        body = f'"{self.text}"' if self.quoted or " " in self.text else self.text
        return sign + ("title:" if self.heading else "") + body


class Query(NamedTuple):
    plain: tuple[Term, ...]
    required: tuple[Term, ...]
    excluded: tuple[Term, ...]

    def needles(self) -> list[str]:
        """The words a hit's snippet is centred on (lower case, each once): those of the terms searched for."""
        return list(dict.fromkeys(w.lower() for t in (*self.plain, *self.required) for w in t.words))

    def plain_words(self) -> int:
        return sum(len(t.words) for t in self.plain)


_last: tuple[str, Query] = ("", Query((), (), ()))  # the last query parsed: MCP's validation, then the search


def parse(text: str) -> Query:
    """``text``'s terms by kind. Refuses (``InvalidInput``) more than MAX_TERMS distinct words, phrases
    holding more than MAX_QUERY_WORDS words in all, and a query that only excludes."""
    global _last
    last = _last
    if last[0] == text and text:
        return last[1]
    q = _parse(text)
    if len(text) <= 4096:  # a pasted page is not kept
        _last = (text, q)
    return q


def _parse(text: str) -> Query:
    check_terms(text)  # distinct words, and plain quoted phrases
    text = _CONTROL.sub(" ", text)  # SQLite ends a string at NUL; control characters are never tokens
    if not _SYNTAX.search(text):  # plain words only (most queries): no tokenizer needed
        found = [Term(t, False, False, tuple(_WORD.findall(t))) for t in dict.fromkeys(text.split())]
        kept = tuple(t for t in found if t.words)
        total = sum(len(t.words) for t in kept)
        if total > MAX_QUERY_WORDS:  # "a.b.c" is a phrase too
            _too_many(total)
        return Query(kept, (), ())
    plain: dict[Term, None] = {}
    required: dict[Term, None] = {}
    excluded: dict[Term, None] = {}
    for m in _TOKEN.finditer(text):
        if m.group(4) is None:  # [sign][field]"phrase"
            sign, field, body, quoted = m.group(1), m.group(2), m.group(3), True
        else:
            sign, field, body, quoted = "", None, m.group(4), False
            signed = _SIGNED.fullmatch(body)
            if signed:
                sign, field, body = signed.group(1), signed.group(2), signed.group(3)
            else:
                fielded = _FIELD.fullmatch(body)
                if fielded:
                    field, body = fielded.group(1), fielded.group(2)
        body = body.strip()
        term = Term(body, field is not None, quoted, tuple(_WORD.findall(body)))
        if not term.words:
            continue
        (required if sign == "+" else excluded if sign == "-" else plain)[term] = None
    for t in required:  # a required term is required once: no need to also require it as a plain term
        plain.pop(t, None)
    # Each quoted word is checked at every position its phrase may start (check_terms counts those
    # of plain phrases; +"..." and title:"..." are counted here, the same way).
    total = sum(len(t.words) for kind in (plain, required, excluded) for t in kind)
    if total > MAX_QUERY_WORDS:
        _too_many(total)
    if excluded and not plain and not required:
        raise InvalidInput(f"The query {text.strip()!r} only excludes words (-word); add a word to search for, "
                           "e.g. 'hooks -class'.", details={"parameter": "query"})
    return Query(tuple(plain), tuple(required), tuple(excluded))


def _too_many(total: int) -> None:
    raise InvalidInput(f"The query's phrases hold {total:,} words; the limit is {MAX_QUERY_WORDS:,}. "
                       "Quote shorter phrases.", details={"parameter": "query", "limit": MAX_QUERY_WORDS})


def match(q: Query, plain: tuple[Term, ...] | None = None, *, any_plain: bool = False,
          headings_only: bool = False) -> str | None:
    """The FTS5 expression for ``q`` (None when nothing is searched for): its ``plain`` terms (``q``'s
    own unless given: the words of a fallback) all (or, with ``any_plain``, any of them) AND every
    required term, NOT any excluded term. ``headings_only`` puts what is searched for under a
    column filter on the section's own heading; an excluded word is excluded wherever it is."""
    terms = q.plain if plain is None else plain
    parts = []
    if terms:
        joined = (" OR " if any_plain else " AND ").join(t.expr() for t in terms)
        parts.append(f"({joined})" if any_plain and len(terms) > 1 and q.required else joined)
    parts += [t.expr() for t in q.required]
    if not parts:
        return None
    expr = " AND ".join(parts)
    if headings_only:
        expr = f"heading : ({expr})"
    if q.excluded:  # NOT binds tighter than AND and OR in FTS5: both sides in parentheses
        expr = f"({expr}) NOT ({' OR '.join(t.expr() for t in q.excluded)})"
    return expr


def any_words(q: Query) -> tuple[Term, ...]:
    """The plain terms' words one by one (a phrase split, each word keeping its term's field), each once:
    the any-term fallback's terms."""
    return tuple(dict.fromkeys(Term(w, t.heading, False, (w,)) for t in q.plain for w in t.words))


def written(q: Query, plain: tuple[Term, ...]) -> str:
    """``q`` with ``plain`` for its plain terms, in the query syntax (a corrected query to run again)."""
    return " ".join([t.show() for t in plain] + [t.show("+") for t in q.required]
                    + [t.show("-") for t in q.excluded])
