"""Id search: vec ids ranked by the words of the id and of its one-line definition
(``cairn_servers.brk.definitions``), so "long term holder realized price" finds ``lth_realized_price`` and
"spent output profit ratio" finds ``sopr``.

Words are normalized the same way on both sides: lower-cased, split on anything that is not a letter or
a digit (``_`` included, so an id's parts are words), plurals and ``-ed``/``-ing`` endings stripped
(step 1 of Porter's stemmer: "transactions" = "transaction", "mined" = "mining" = "mine"), and small
words ("the", "of", "per") dropped. :data:`EQUIVALENTS` is the one table of abbreviations and synonyms
the ids use: where a text holds the short form or one of its phrases, it holds all of them, on the id's
side and on the question's alike (``lth`` <-> "long term holder", ``tx`` <-> "transaction").

Ranking: each word of the question is a concept; a concept found in an id scores its rarity (an inverse
document frequency over the catalogue) times where it was found: in the id's own words 3, in an
expansion of them 2, in the definition 1. The sum is scaled by the square of the share of concepts
found, so an id matching every word beats one matching a rare word alone; ties go to the id with fewer
words the question did not ask for (``realized_price`` before ``realized_price_avg``), then the shorter. The words
of a UTXO cohort's name (``empty_outputs`` in ``empty_outputs_sopr``) weigh as a definition's: they qualify the
metric, so "profit ratio of spent outputs" is ``sopr``. A page sorts only the matches that can reach it.

The index is built once per catalogue (1,602 ids on a store with prices: about 33 ms) and kept while the
catalogue object is the same; a query then reads only the postings of its words.
"""

from __future__ import annotations

import math
import re
import threading

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    from cairn_servers.brk.interface import Interface

MAX_QUERY = 500  # characters
MAX_LIMIT = 100  # results a page

# Short form -> the phrases meaning the same (each phrase is normalized like any text). One table, used in
# both directions; extend it when a new family of ids brings new abbreviations.
EQUIVALENTS: dict[str, tuple[str, ...]] = {
    "lth": ("long term holder",),
    "sth": ("short term holder",),
    "utxo": ("unspent transaction output", "unspent output"),
    "mvrv": ("market value to realized value",),
    "sopr": ("spent output profit ratio",),
    "nupl": ("net unrealized profit and loss", "net unrealized profit loss"),
    "cdd": ("coin days destroyed", "coindays destroyed"),
    "coindays": ("coin days",),
    "coinblocks": ("coin blocks",),
    "hodl": ("hold",),
    "ohlc": ("open high low close",),
    "tx": ("transaction",),
    "txid": ("transaction id", "transaction hash"),
    "btc": ("bitcoin",),
    "usd": ("dollar", "us dollar"),
    "sats": ("satoshi", "sat"),
    "avg": ("average", "mean"),
    "min": ("minimum", "lowest", "smallest"),
    "max": ("maximum", "highest", "largest", "biggest"),
    "sum": ("total",),
    "cumulative": ("running total", "all time", "since genesis"),
    "cap": ("capitalization", "capitalisation", "valuation"),
    "count": ("number", "how many"),
    "vbytes": ("virtual bytes", "vbyte"),
    "vsize": ("virtual size",),
    "hash_rate": ("hashrate",),
    "p10": ("10th percentile",),
    "p25": ("25th percentile", "first quartile", "lower quartile"),
    "p75": ("75th percentile", "third quartile", "upper quartile"),
    "p90": ("90th percentile",),
    "lt": ("less than", "under", "below", "younger than"),
    "gt": ("more than", "over", "above", "older than"),
    "d": ("day", "daily"),
    "w": ("week", "weekly"),
    "m": ("month", "monthly"),
    "y": ("year", "yearly", "annual"),
    "k": ("thousand",),
    "opreturn": ("op return", "op_return"),
    "multisig": ("p2ms",),
    "segwit": ("witness",),
}
STOPWORDS = frozenset("a an and are as at by for from in into is it its of on or per that the their them this to "
                      "was were what which with how does do did been be".split())
_WORD = re.compile(r"[a-z0-9]+")
_BAND = re.compile(r"^(\d+)([dwmyk])$")  # 1d, 10y, 1k: a number and its unit, as the band ids spell them
_VOWELS = frozenset("aeiou")


# -- words --------------------------------------------------------------------------------------------
def _has_vowel(word: str) -> bool:
    return any(c in _VOWELS or (c == "y" and i > 0) for i, c in enumerate(word))


def _cvc(word: str) -> bool:
    """Consonant-vowel-consonant ending, the last not w, x or y (Porter's *o): "min" of "mining"."""
    if len(word) < 3:
        return False
    a, b, c = word[-3], word[-2], word[-1]
    return a not in _VOWELS and b in _VOWELS and c not in _VOWELS and c not in "wxy"


def _measure(word: str) -> int:
    """Porter's m: the number of vowel-consonant sequences."""
    m, vowel = 0, False
    for i, c in enumerate(word):
        v = c in _VOWELS or (c == "y" and i > 0 and word[i - 1] not in _VOWELS)
        if vowel and not v:
            m += 1
        vowel = v
    return m


def stem(word: str) -> str:
    """Step 1 of Porter's stemmer: plurals and -ed/-ing (addresses -> address, mined -> mine)."""
    if len(word) <= 3 or word.isdigit():
        return word
    if word.endswith("sses") or word.endswith("ies"):
        word = word[:-2]
    elif word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    word = _step_1b(word)
    if word.endswith("y") and len(word) > 2 and _has_vowel(word[:-1]):  # step 1c: empty = emptied (empti)
        word = word[:-1] + "i"
    return word


def _step_1b(word: str) -> str:
    for suffix in ("eed", "ed", "ing"):
        if not word.endswith(suffix):
            continue
        head = word[:-len(suffix)]
        if suffix == "eed":
            return head + "ee" if _measure(head) > 0 else word
        if len(head) < 3 or not _has_vowel(head):
            return word
        if head.endswith(("at", "bl", "iz")):
            return head + "e"
        if len(head) > 1 and head[-1] == head[-2] and head[-1] not in "lsz":
            return head[:-1]
        if _measure(head) == 1 and _cvc(head):
            return head + "e"
        return head
    return word


def words(text: str) -> list[str]:
    """``text`` as normalized words: lower-cased, split, stemmed, small words dropped; ``10y`` is also
    ``10`` and ``y`` (year)."""
    out: list[str] = []
    for raw in _WORD.findall(text.lower().replace("_", " ")):
        if raw in STOPWORDS:
            continue
        band = _BAND.match(raw)
        if band:
            out += [raw, band.group(1), band.group(2)]
        else:
            out.append(stem(raw))
    return out


def _phrases() -> tuple[dict[str, list[tuple[str, ...]]], dict[tuple[str, ...], str]]:
    """The table normalized: short form -> its phrases' words, and phrase words -> short form."""
    expand: dict[str, list[tuple[str, ...]]] = {}
    collapse: dict[tuple[str, ...], str] = {}
    for short, phrases in EQUIVALENTS.items():
        key = tuple(words(short))
        name = " ".join(key)
        for phrase in phrases:
            seq = tuple(words(phrase))
            if seq and seq != key:
                if len(seq) == 1:  # a synonym: each stands for the other. A phrase only gives its short
                    expand.setdefault(name, []).append(seq)  # form: "time" alone is not "all time"
                collapse[seq] = name
        if len(key) > 1:  # hash_rate: the id's two words stand for the short form too
            collapse[key] = name
    return expand, collapse


_table: tuple[dict[str, list[tuple[str, ...]]], dict[tuple[str, ...], str], int] | None = None


def _tables() -> tuple[dict[str, list[tuple[str, ...]]], dict[tuple[str, ...], str], int]:
    """The table normalized, made on first use (the CLI imports this module to declare the operations)."""
    global _table
    if _table is None:
        expand, collapse = _phrases()
        _table = (expand, collapse, max(len(k) for k in collapse))
    return _table


def concepts(text: str) -> list[set[str]]:
    """The concepts of a text: one set per word (the word, and what the table says it also is), a phrase
    of the table adding its short form to each of its words' sets."""
    expand, collapse, longest = _tables()
    seq = words(text)
    out = [{w} for w in seq]
    for i in range(len(seq)):
        for n in range(min(longest, len(seq) - i), 0, -1):
            short = collapse.get(tuple(seq[i:i + n]))
            if short is not None:
                for j in range(i, i + n):
                    out[j].add(short)
    for group in out:
        for w in list(group):
            for phrase in expand.get(w, ()):
                group.update(phrase)
    return out


# -- the index ---------------------------------------------------------------------------------------
class IdIndex:
    """Postings of every normalized word: word -> {id: weight}, and each id's own words."""

    __slots__ = ("postings", "own", "idf", "n")

    def __init__(self, definitions: Mapping[str, str]) -> None:
        self.postings: dict[str, dict[str, float]] = {}
        self.own: dict[str, frozenset[str]] = {}
        parts: dict[str, set[str]] = {}
        qualifiers = _cohort_prefixes()
        for vec_id, text in definitions.items():
            weights: dict[str, float] = {}
            own: set[str] = set()
            for group in concepts(vec_id):
                own |= group
            direct = set(words(vec_id))
            for w in own:
                weights[w] = 3.0 if w in direct else 2.0
            cohort = _cohort_of(vec_id, qualifiers)
            if cohort:  # a cohort's name qualifies the metric: its words weigh as a definition's
                for group in concepts(cohort):
                    for w in group:
                        if w in weights and w not in set(words(vec_id[len(cohort):])):
                            weights[w] = 1.0
            for part in text.split("; "):  # a base's line, then its statistic's: each worked out once
                found = parts.get(part)
                if found is None:
                    found = parts[part] = {w for group in concepts(part) for w in group}
                for w in found:
                    weights.setdefault(w, 1.0)
            self.own[vec_id] = frozenset(direct)
            for w, weight in weights.items():
                self.postings.setdefault(w, {})[vec_id] = weight
        self.n = len(definitions)
        self.idf = {w: math.log(1.0 + self.n / len(ids)) for w, ids in self.postings.items()}

    def search(self, query: str, want: int | None = None) -> list[str]:
        """Ids matching at least one concept of ``query``, best first (with ``want``: at least the first
        ``want`` of them in order, the rest left out: a page needs no full sort of thousands of matches)."""
        groups = concepts(query)
        if not groups:
            return []
        scores: dict[str, float] = {}
        found: dict[str, int] = {}
        asked: set[str] = set()
        for group in groups:
            asked |= group
            best: dict[str, float] = {}
            for w in group:
                posting = self.postings.get(w)
                if not posting:
                    continue
                idf = self.idf[w]
                for vec_id, weight in posting.items():
                    value = idf * weight
                    if value > best.get(vec_id, 0.0):
                        best[vec_id] = value
            for vec_id, value in best.items():
                scores[vec_id] = scores.get(vec_id, 0.0) + value
                found[vec_id] = found.get(vec_id, 0) + 1
        n = len(groups)
        primary = {v: -score * (found[v] / n) ** 2 for v, score in scores.items()}
        candidates: Any = primary
        if want is not None and want < len(primary):
            import heapq

            cut = heapq.nsmallest(want, primary.values())[-1]
            candidates = [v for v, p in primary.items() if p <= cut]  # ties at the cut are kept
        ranked = sorted(candidates, key=lambda v: (primary[v], len(self.own[v] - asked), len(v), v))
        return ranked


def _cohort_prefixes() -> tuple[str, ...]:
    """The UTXO and address cohorts' names (``cairn_servers.brk.cohorts``, ``.addrcohorts``), longest first."""
    from cairn_servers.brk.addrcohorts import COHORTS as ADDR_COHORTS
    from cairn_servers.brk.cohorts import COHORTS

    return tuple(sorted((*COHORTS, *ADDR_COHORTS), key=len, reverse=True))


def _cohort_of(vec_id: str, prefixes: tuple[str, ...]) -> str:
    """The cohort an id is about (``empty_outputs`` of ``empty_outputs_sopr``), else ''."""
    for c in prefixes:
        if vec_id.startswith(c + "_"):
            return c
    return ""


_cache: tuple[object, IdIndex] | None = None
_cache_lock = threading.Lock()


def index_for(catalogue: Mapping[str, object]) -> IdIndex:
    """The index of ``catalogue`` (id -> anything: the ids are its keys), kept while the same catalogue
    object is passed (the query interface swaps it whole when prices arrive)."""
    global _cache
    hit = _cache
    if hit is not None and hit[0] is catalogue:
        return hit[1]
    from cairn_servers.brk.definitions import definition

    built = IdIndex({vec_id: definition(vec_id) or "" for vec_id in catalogue})
    with _cache_lock:
        _cache = (catalogue, built)  # holds the catalogue, so its id() cannot be reused by another
    return built


def search(iface: Interface, q: Any, index: Any = None, limit: Any = 10, page: Any = 0) -> list[dict[str, Any]]:
    """The ``search_vecids`` operation: a page of ``{id, definition, indexes}``, best first."""
    from cairn_servers.brk.definitions import definition
    from cairn_servers.brk.interface import _int
    from cairn_servers.core.errors import InvalidInput

    size = _int(limit, "limit", minimum=1)
    if size > MAX_LIMIT:
        raise InvalidInput(f"limit must be {MAX_LIMIT} or less, got {size}.")
    first = _int(page, "page", minimum=0) * size
    text = str(q)
    if len(text) > MAX_QUERY:
        raise InvalidInput(f"q is {len(text):,} characters long; the limit is {MAX_QUERY}. Use fewer words.")
    if not concepts(text):
        raise InvalidInput(f"Nothing to search for in {text[:80]!r}: give words describing the data, "
                           "e.g. 'realized price' or 'fee rate median'.")
    catalogue = iface.id_indexes()
    ranked = index_for(catalogue).search(text, None if index is not None else first + size)
    if index is not None:
        on = iface.resolve_index(index)
        ranked = [vec_id for vec_id in ranked if on in catalogue[vec_id]]
    return [{"id": vec_id, "definition": definition(vec_id) or "", "indexes": list(catalogue[vec_id])}
            for vec_id in ranked[first:first + size]]
