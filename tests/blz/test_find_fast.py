"""The warm-find fast paths (h-blzfind) give exactly what the code they replaced gave.

Each rewritten piece is compared with the code it replaced, kept here as the reference, on many
generated inputs (property style, fixed seeds): the snippet window, the public form of a tool result,
the section reads, the cached source list.
"""

from __future__ import annotations

import random

from cairn.blz.search import SNIPPET_CHARS, snippet


def snippet_before(body: str, needles: list[str], width: int = SNIPPET_CHARS) -> str:
    """cairn.blz.search.snippet as it was before h-blzfind (5eda24d)."""
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


# Words that overlap (state/usestate, use/user), differ in case, repeat, or change length when
# lowered (İ), so needles meet at the same or overlapping positions.
_WORDS = ["state", "useState", "use", "user", "hook", "hooks", "a", "aa", "İstanbul", "ß", "effect",
          "useEffect", "x", "the", "é", "Ωmega", "\u212a", "k"]
_GLUE = [" ", "  ", "\n", "", "-", ".", "\t", " \n ", "—", "\u00a0"]


def _body(rng: random.Random) -> str:
    size = rng.choice([0, 1, 3, 10, 40, 120, 400, 1200])
    parts = []
    for _ in range(size):
        parts.append(rng.choice(_WORDS) if rng.random() < 0.6 else "".join(
            rng.choice("abcdefghijklmnopqrstuvwxyzABC ") for _ in range(rng.randint(1, 12))))
        parts.append(rng.choice(_GLUE))
    return "".join(parts)


def test_snippet_matches_the_code_it_replaced() -> None:
    rng = random.Random(16)
    checked = 0
    for _ in range(3000):
        body = _body(rng)
        needles = list(dict.fromkeys(w.lower() for w in rng.sample(_WORDS, rng.randint(1, 4))))
        width = SNIPPET_CHARS if rng.random() < 0.7 else rng.randint(41, 400)
        assert snippet(body, needles, width) == snippet_before(body, needles, width), (body, needles, width)
        checked += 1
    assert checked == 3000


def test_snippet_edge_cases_match() -> None:
    cases: list[tuple[str, list[str]]] = [
        ("", ["a"]), ("a", ["a"]), ("no hit here", ["zzz"]), ("x" * 500, ["x"]), ("x" * 500, ["x", "y"]),
        ("y " * 300 + "x", ["x"]), ("y" * 300 + "x", ["x"]), ("a" * 10 + " " + "b" * 300 + "x", ["x", "b"]),
        (" " * 30 + "hook" + " " * 300, ["hook"]), ("İ" * 100 + " state", ["state"]), ("ab" * 400, ["ab", "ba"]),
        ("use " * 30 + "state " * 30, ["use", "state"]), ("word " * 100, ["word", "word"]),
    ]
    for body, needles in cases:
        for width in (SNIPPET_CHARS, 41, 60, 500):
            assert snippet(body, needles, width) == snippet_before(body, needles, width), (body, needles, width)
