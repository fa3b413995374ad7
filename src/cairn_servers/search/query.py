"""Safe SQLite FTS5 queries from any user text.

Raw user text in ``MATCH`` breaks on ``-``, ``"``, ``:``, ``*``, ``(`` and the bareword operators
``AND``/``OR``/``NOT``/``NEAR``. We never pass it through: the text is split into terms (whitespace-
separated words, or ``"quoted phrases"``), every term becomes an FTS5 string literal, and the terms
are joined with ``AND`` or ``OR``. Inside a string literal FTS5 applies its own tokenizer, so
``use-effect`` becomes the phrase ``use effect`` and non-Latin scripts work as the tokenizer allows.
"""

from __future__ import annotations

import re

MAX_TERMS = 256  # distinct words in one query (see check_terms)
MAX_QUERY_WORDS = 4096  # words in a query's distinct terms, each word of a quoted phrase counted (check_terms)

_TERM = re.compile(r'"([^"]*)"?|(\S+)')
_WORD = re.compile(r"\w+", re.UNICODE)
_WORDLIKE = re.compile(r"\w", re.UNICODE)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def terms(text: str) -> list[str]:
    """The user's terms: quoted phrases kept whole, other words split on whitespace.

    Terms without a letter or digit (``-``, ``*``, ``::``) carry no searchable token and are dropped.
    An unbalanced quote runs to the end of the text.
    """
    out: list[str] = []
    # SQLite ends a string at NUL ("unterminated string"); other control characters are never tokens.
    text = _CONTROL.sub(" ", text)
    for match in _TERM.finditer(text):
        term = match.group(1) if match.group(1) is not None else match.group(2)
        term = term.strip()
        if term and _WORDLIKE.search(term):
            out.append(term)
    return out


def check_terms(text: str) -> None:
    """Refuse (``InvalidInput``) a query of more than :data:`MAX_TERMS` distinct words.

    Each word costs a lookup (its document count, a typo correction) and a phrase in the index's query,
    and the index's parser copies its whole expression for every ``OR`` it adds: 100,000 words took
    40 s. A question or a pasted paragraph is far below the cap; a repeated word counts once. Words are
    runs of letters, digits and ``_``, case folded, as the index splits them; the count is one pass.

    A quoted phrase is checked word by word at every position it may start, so the words of the query's
    distinct terms, each word of a phrase counted, are capped too (:data:`MAX_QUERY_WORDS`): a phrase of
    one word repeated 4,000 times cost 8 CPU-seconds on 8,000 chunks, and a 1 MiB one would cost minutes.
    """
    words = {w.casefold() for w in _WORD.findall(text)}
    if len(words) > MAX_TERMS:
        from cairn_servers.core.errors import InvalidInput

        raise InvalidInput(f"The query has {len(words):,} distinct words; the limit is {MAX_TERMS}. "
                           "Keep the words that matter.", details={"parameter": "query", "limit": MAX_TERMS})
    if '"' in text:  # a phrase repeats words at no cost to the count above, but each word is checked
        total = sum(len(_WORD.findall(t)) for t in dict.fromkeys(terms(text)))  # at every position
        if total > MAX_QUERY_WORDS:
            from cairn_servers.core.errors import InvalidInput

            raise InvalidInput(f"The query's phrases hold {total:,} words; the limit is {MAX_QUERY_WORDS:,}. "
                               "Quote shorter phrases.", details={"parameter": "query", "limit": MAX_QUERY_WORDS})


def literal(term: str) -> str:
    """``term`` as an FTS5 string literal (double quotes, inner quotes doubled)."""
    return '"' + term.replace('"', '""') + '"'


def fts_match(text: str, *, operator: str = "AND", prefix_last: bool = False) -> str | None:
    """An FTS5 ``MATCH`` expression for ``text``, or None when it holds no searchable term.

    :param operator: ``AND`` (every term must occur) or ``OR`` (any term).
    :param prefix_last: make the last unquoted term a prefix query (search-as-you-type).
    """
    if operator not in ("AND", "OR"):
        raise ValueError(f"operator must be AND or OR, not {operator!r}")
    found = list(dict.fromkeys(terms(text)))  # a repeated term adds nothing but work (AND or OR alike)
    if not found:
        return None
    parts = [literal(t) for t in found]
    if prefix_last and not text.rstrip().endswith('"'):
        parts[-1] += "*"
    return f" {operator} ".join(parts)
