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
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cairn.blz.llmstxt import Page

SAMPLE_CHARS = 2500  # prose read per page: enough for a stable verdict, bounded cost on huge pages
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

# Punctuation and digits become spaces, so that str.split() yields words (much faster than a regex).
_PUNCT = str.maketrans({c: " " for c in "0123456789.,;:!?()[]{}<>\"'`*_#=+/\\|~^&%$@-–—«»“”‘’…·"})
# Letters of every script but Latin (Greek to Tibetan, Hangul, kana, Han).
_OTHER = re.compile(r"[\u0370-\u03ff\u0400-\u052f\u0531-\u0fff\u1100-\u11ff\u3040-\u30ff\u3130-\u318f"
                    r"\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")
_ACCENTED = re.compile(r"[\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u024f\u1e00-\u1eff]")
_SCRIPTS = (  # (language, characters), checked in this order
    ("ko", re.compile(r"[\uac00-\ud7af\u1100-\u11ff\u3130-\u318f]")),
    ("ja", re.compile(r"[\u3040-\u30ff]")),
    ("zh", re.compile(r"[\u4e00-\u9fff\u3400-\u4dbf]")),
    ("ru", re.compile(r"[\u0400-\u04ff]")),
    ("ar", re.compile(r"[\u0600-\u06ff]")),
    ("he", re.compile(r"[\u0590-\u05ff]")),
    ("el", re.compile(r"[\u0370-\u03ff]")),
    ("th", re.compile(r"[\u0e00-\u0e7f]")),
    ("hi", re.compile(r"[\u0900-\u097f]")),
    ("bn", re.compile(r"[\u0980-\u09ff]")),
)
_LATIN = re.compile(r"[A-Za-z\u00c0-\u024f]")
_FENCE = re.compile(r" {0,3}(?:`{3,}|~{3,})")
_URL = re.compile(r"\(?https?://\S+|\[[^\]\n]*\]\([^)\n]*\)|`[^`\n]*`|<[^>\n]*>|\{[^}\n]*\}")


def page_language(lines: list[str], start: int, end: int) -> str | None:
    """The language of lines ``start..end`` (1-based), or None when there is too little prose
    (code blocks, URLs, inline code and tags are left out)."""
    parts: list[str] = []
    size, fenced = 0, False
    fence = _FENCE.match
    for j in range(start - 1, end):
        line = lines[j]
        if fence(line):
            fenced = not fenced
        elif not fenced and line:
            parts.append(line)
            size += len(line)
            if size >= SAMPLE_CHARS:
                break
    text = _URL.sub(" ", "\n".join(parts))
    if text.isascii():
        return _latin_language(text)
    latin = len(_LATIN.findall(text))
    other = len(_OTHER.findall(text))
    if latin + other < MIN_LETTERS:
        return None
    if other * 10 >= (latin + other) * 3:  # 30 % of the letters in another script
        counts = [(len(rx.findall(text)), lang) for lang, rx in _SCRIPTS]
        ko, ja, zh = counts[0][0], counts[1][0], counts[2][0]
        if ja and ja * 10 >= (ja + zh):  # Japanese mixes kana with Han; Chinese has no kana
            return "ja"
        if ko >= zh:
            return "ko" if ko else max(counts)[1]
        if zh >= max(counts)[0]:
            return "zh"
        return max(counts)[1] if max(counts)[0] else "xx"
    return _latin_language(text, len(_ACCENTED.findall(text)) * 50 >= latin)


def _latin_language(text: str, accented: bool = False) -> str | None:
    """English or another Latin-script language by function words; ``accented``: at least 2 % of
    the letters carry diacritics (rare in English), which with almost no English function words
    marks a language without a word list here."""
    if len(text) < MIN_LETTERS:
        return None
    votes: Counter[str] = Counter()
    stop = STOP_WORDS
    words = Counter(text.lower().translate(_PUNCT).split())
    for word in stop.keys() & words.keys():
        votes[stop[word]] += words[word]
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


def foreign_pages(lines: list[str], pages: list[Page]) -> list[tuple[int, int, str]]:
    """``(start, end, language)`` of the pages to leave out of the index: those in another language
    than English, when English is one of the file's main languages. Empty otherwise."""
    verdicts = [(p, None if p.code else page_language(lines, p.start, p.end)) for p in pages]
    counts = Counter(lang for _p, lang in verdicts if lang)
    english = counts.pop("en", 0)
    if not english or not counts or english * 2 < max(counts.values()):
        return []
    return [(p.start, p.end, lang) for p, lang in verdicts if lang and lang != "en"]
