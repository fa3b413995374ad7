"""Which pages of a multilingual llms-full file are copies in another language than English.

Many documentation sites publish one llms-full.txt holding every page once per language. Indexing
all of them fills search results with the same answer in six languages, so by default blz leaves
the non-English copies out of the index (the file itself is stored whole, and line numbers keep
referring to it). Pure computation, standard library only, no model: a page's language is read
from its letters' scripts (Han, kana, Hangul, Cyrillic, Arabic, ...) and, for Latin-script text,
from its most frequent function words (English against French, German, Spanish, Portuguese,
Italian, Dutch, Polish, Turkish, Vietnamese, Indonesian).

A file is treated as a set of language copies only when English pages are among its main languages
(at least half as many as the most frequent other language): a Japanese-only file, or one with a
single English page, is indexed whole.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from typing import Protocol


class Page(Protocol):
    """What is read of a :class:`cairn_servers.blz.llmstxt.Page` (not imported: llmstxt imports this module)."""

    @property
    def start(self) -> int: ...
    @property
    def end(self) -> int: ...
    @property
    def code(self) -> bool: ...
    @property
    def url(self) -> str: ...

SAMPLE_CHARS = 1200  # prose read per page: enough for a stable verdict, bounded cost on huge pages
MIN_LETTERS = 40  # fewer letters than this: no verdict (the page is kept)
MIN_WORDS = 6  # fewer function words than this in Latin script: no verdict

# Function words frequent in prose and rare in English text (and in code identifiers).
_STOP = {
    "en": "the and of to is in that it for are with as this be on by you can from not or an which your "
          "will if when have has use was how what these there its into all also more than only should do",
    "fr": "le la les des une est dans pour sur pas avec sont vous nous cette qui aux ces peut être "
          "du et au ou mais comme plus fait leur très elle ils sans donc lors ainsi votre",
    "de": "der die das und ist nicht mit den dem sie ein eine für auf auch sich werden wird kann "
          "oder wenn zu von im bei nach aus wie nur diese einen sind durch über können dann",
    "es": "el los las del una por para con es que se su al como más pero sus este esta puede "
          "también cuando muy hay sin sobre entre ser todo ya desde donde",
    "pt": "os das dos uma para com não que se por mais como ao pelo pela você são este esta pode "
          "também quando muito há sem sobre entre ser ou já até seu sua",
    "it": "il lo gli della delle dei che di per con non una sono questo questa può anche quando "
          "molto ci sul nel alla come più essere tutti ogni",
    "nl": "het een van dat niet zijn voor met op ook als deze kan wordt worden bij uit naar maar "
          "je jouw dan wel hoe door",
    "pl": "nie się jest że na do jak jeśli dla oraz lub czy może być są przez który która jego",
    "tr": "ve bir bu için ile olarak daha çok gibi olan ancak veya kadar sonra şekilde",
    "vi": "của và các là có được trong cho những này không với một để khi người bạn",
    "id": "dan yang untuk dengan ini itu dari dalam tidak akan pada juga atau dapat adalah",
    "sv": "och att är för som på med det inte av till om har eller kan ska vara",
    "da": "og er til af med på som det ikke har kan jeg eller skal være",
    "cs": "je se na že to jako pro nebo být jsou jak také již které který",
}
# A word shared with English (or with another list) says nothing: drop it from every list.
_owners: dict[str, set[str]] = {}
for _lang, _words in _STOP.items():
    for _w in _words.split():
        _owners.setdefault(_w, set()).add(_lang)
STOP_WORDS: dict[str, str] = {w: next(iter(ls)) for w, ls in _owners.items() if len(ls) == 1}
del _owners, _lang, _words, _w

_STRIP = ".,;:!?()[]{}<>\"'`*_#=+/\\|~^&%$@-–—«»“”‘’…·"  # around a word: str.split() keeps it
# Scripts are told apart by the lead bytes of their UTF-8 encoding (bytes.count is C-fast, and regex
# character classes spanning these ranges cost ~30 ms to compile in every process).
_LEADS = {  # language -> UTF-8 lead bytes (or two-byte prefixes) of its letters
    "ko": (b"\xea", b"\xeb", b"\xec", b"\xed"),  # U+A000-U+DFFF: Hangul syllables
    "ja": (b"\xe3\x81", b"\xe3\x82", b"\xe3\x83"),  # U+3040-U+30FF: hiragana, katakana
    "zh": (b"\xe4", b"\xe5", b"\xe6", b"\xe7", b"\xe8", b"\xe9"),  # U+4000-U+9FFF: Han
    "ru": (b"\xd0", b"\xd1", b"\xd2", b"\xd3"),  # Cyrillic
    "ar": (b"\xd8", b"\xd9", b"\xda", b"\xdb"),  # Arabic
    "he": (b"\xd7",),  # Hebrew
    "el": (b"\xce", b"\xcf"),  # Greek
    "hi": (b"\xe0\xa4", b"\xe0\xa5"),  # Devanagari
    "bn": (b"\xe0\xa6", b"\xe0\xa7"),  # Bengali
    "th": (b"\xe0\xb8", b"\xe0\xb9"),  # Thai
}
_OTHER_LEADS = tuple(bytes([n]) for n in (*range(0xCD, 0xE1), *range(0xE3, 0xEE)))  # every other script
# Accented Latin letters: Latin-1 to Latin Extended-B, and Vietnamese (Latin Extended Additional).
_ACCENT_LEADS = tuple(bytes([n]) for n in range(0xC3, 0xCA)) + (b"\xe1\xba", b"\xe1\xbb")
_NOT_LETTER = bytes(n for n in range(256) if not (65 <= n <= 90 or 97 <= n <= 122))
_FENCE = re.compile(r" {0,3}(?:`{3,}|~{3,})")
_URL = re.compile(r"\(?https?://\S+|\[[^\]\n]*\]\([^)\n]*\)|`[^`\n]*`|<[^>\n]*>|\{[^}\n]*\}")


def page_language(lines: list[str], start: int, end: int) -> str | None:
    """The language of lines ``start..end`` (1-based), or None when there is too little prose
    (code blocks, tags and images are left out; URLs and inline code too when they matter)."""
    text, more = _sample(lines, start, end, SAMPLE_CHARS)
    verdict = _language(text)
    if verdict is None and more:  # links and markup filled the sample: read further, without them
        text, _more = _sample(lines, start, end, SAMPLE_CHARS * 4)
        verdict = _language(_URL.sub(" ", text))
    return verdict


def _sample(lines: list[str], start: int, end: int, limit: int) -> tuple[str, bool]:
    """Up to ``limit`` characters of the prose lines of ``start..end``, and whether there is more."""
    parts: list[str] = []
    size, fenced = 0, False
    fence = _FENCE.match
    for j in range(start - 1, end):
        line = lines[j]
        if not line:
            continue
        if line[0] in "`~ " and fence(line):
            fenced = not fenced
        elif not fenced and line[0] != "<" and not line.startswith(("![", "[![")):  # tags, images, badges
            parts.append(line)
            size += len(line)
            if size >= limit:
                return "\n".join(parts), True
    return "\n".join(parts), False


def _language(text: str) -> str | None:
    if text.isascii():
        return _latin_language(text)
    data = text.encode("utf-8", "replace")
    other = sum(map(data.count, _OTHER_LEADS))
    if other * 20 >= len(text):  # 5 % of the characters: look again without URLs, code and tags
        data = _URL.sub(" ", text).encode("utf-8", "replace")
        other = sum(map(data.count, _OTHER_LEADS))
    accented = sum(map(data.count, _ACCENT_LEADS))
    latin = len(data.translate(None, _NOT_LETTER)) + accented
    if latin + other < MIN_LETTERS:
        return None
    if other * 10 >= (latin + other) * 3:  # 30 % of the letters in another script
        counts = {lang: sum(map(data.count, leads)) for lang, leads in _LEADS.items()}
        if counts["ja"] * 10 >= counts["ja"] + counts["zh"] > 0 and counts["ja"]:
            return "ja"  # Japanese mixes kana with Han; Chinese has no kana
        best = max(counts, key=lambda lang: counts[lang])
        return best if counts[best] else "xx"
    return _latin_language(data.decode("utf-8", "replace"), accented * 50 >= latin)


def _latin_language(text: str, accented: bool = False) -> str | None:
    """English or another Latin-script language by function words; ``accented``: at least 2 % of
    the letters carry diacritics (rare in English), which with almost no English function words
    marks a language without a word list here."""
    if len(text) < MIN_LETTERS:
        return None
    votes: Counter[str] = Counter()
    stop = STOP_WORDS
    words = Counter(text.lower().split())
    strip, get = _STRIP, stop.get
    for token, n in words.items():
        lang = get(token)
        if lang is None:
            bare = token.strip(strip)
            if bare is token:  # nothing to strip (most words): no second look-up
                continue
            lang = get(bare)
            if lang is None:
                continue
        votes[lang] += n
    english = votes.get("en", 0)
    best, n = max(((lang, c) for lang, c in votes.items() if lang != "en"), key=lambda x: x[1],
                  default=("xx", 0))
    if n >= 4 and n > english * 2:  # another language must clearly lead
        return best
    total = sum(words.values())
    if accented and total >= 30 and english * 20 < total:
        return best
    if sum(votes.values()) < MIN_WORDS:
        return None
    return "en"


# A language folder in a page's URL ("/ja/docs/…", "/zh-CN/guide/…"): a hint for pages without prose.
_LOCALE = re.compile(r"/(ja|zh|ko|fr|de|es|pt|it|ru|pl|tr|vi|nl|ar|he|th|hi|bn|uk|cs|sv|da|fi|el)"
                     r"(?:[-_][A-Za-z]{2,4})?/", re.IGNORECASE)


def url_language(url: str) -> str | None:
    """The language a page's URL names by its folder, or None."""
    path = url.split("://", 1)[1].partition("/")[2] if "://" in url else url.lstrip("/")
    m = _LOCALE.search(f"/{path}/")
    return m.group(1).lower() if m else None


def foreign_pages(lines: list[str], pages: Sequence[Page]) -> list[tuple[int, int, str]]:
    """``(start, end, language)`` of the pages to leave out of the index: those in another language
    than English, when English is one of the file's main languages. Empty otherwise. A page with
    too little prose to judge (code only) goes by the language folder of its URL, if any."""
    verdicts = [(p, None if p.code else page_language(lines, p.start, p.end) or url_language(p.url))
                for p in pages]
    counts = Counter(lang for _p, lang in verdicts if lang)
    english = counts.pop("en", 0)
    if not english or not counts or english * 2 < max(counts.values()):
        return []
    return [(p.start, p.end, lang) for p, lang in verdicts if lang and lang != "en"]
