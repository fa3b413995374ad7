"""The page-aware parser on real corpora with the defects of scraped llms-full files injected.

The damaged corpora are generated here from clean files in tests/data/llms (nothing new is stored):

* **react-dev/llms-full.txt** (168 pages, each opened by front matter naming its URL). Page by page,
  in turn: (0) the page's front matter glued to the previous page's last line (```` ```--- ```` after
  a closing fence, ``text---`` after prose), blank lines between removed; (1) the closing fence of
  the previous page's last code block dropped, so a fence is left open at the page boundary; (2) one
  opener lengthened to four backticks, its three-backtick closer kept; (3) permalink markers on
  every heading (``[¶](… "Permanent link")``, ``[​](#id)``, or the heading wrapped in a link to its
  own anchor); (4) the front matter replaced by the ``# Title`` / ``Source: URL`` preamble
  llms-full generators write; (5) nothing. Shell and Python comment lines (``# …``, ``## …``) are
  inserted at the top of every well-formed fenced block left intact.
* **hono/llms-small.txt** made into a concatenation of pages: front matter with a URL before every
  H1, glued to the line above, and every other page's last fence left unclosed.
* **copilotkit/llms-full.txt** (no page boundaries at all): a permalink marker on every other
  heading and every third fence opener lengthened to four backticks, its closer kept.

Every heading of the clean file (its line mapped into the damaged file) must still be found with
the same level and text (>= 98 %), and no line inside a well-formed fence may be a heading.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from cairn_servers.blz.llmstxt import parse_lines, split_lines

_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})(.*)$")
COMMENTS = ("# install the dependencies first", "## build step", "#   indented comment text")


def fenced_blocks(lines: list[str]) -> list[tuple[int, int]]:
    """(opener, closer) indexes of the fenced blocks of a well-formed file (CommonMark pairing)."""
    out, fence, start = [], "", -1
    for i, line in enumerate(lines):
        m = _FENCE.match(line)
        if not m:
            continue
        run, info = m.group(1), m.group(2).strip()
        if not fence:
            if not (run[0] == "`" and "`" in info):
                fence, start = run, i
        elif run[0] == fence[0] and len(run) >= len(fence) and not info:
            out.append((start, i))
            fence = ""
    return out


@dataclass
class Damage:
    """Edits to a clean file, applied by :meth:`apply` with a map from clean to damaged lines."""

    lines: list[str]
    replace: dict[int, list[str]] = field(default_factory=dict)  # clean index -> lines written instead
    after: dict[int, list[str]] = field(default_factory=dict)  # clean index -> lines inserted after it
    injected: Counter[str] = field(default_factory=Counter)
    touched: set[int] = field(default_factory=set)  # openers of blocks whose fences were damaged

    def apply(self) -> tuple[list[str], list[int | None], list[int]]:
        """The damaged lines, the damaged index of each clean line (None when dropped), and the
        indexes of the comment lines inserted into fences."""
        out: list[str] = []
        where: list[int | None] = []
        comments: list[int] = []
        for i, line in enumerate(self.lines):
            new = self.replace.get(i, [line])
            where.append(len(out) if new else None)
            out.extend(new)
            for extra in self.after.get(i, []):
                if extra in COMMENTS:
                    comments.append(len(out))
                out.append(extra)
        return out, where, comments


def _front_matters(lines: list[str]) -> list[int]:
    return [i for i in range(len(lines) - 3)
            if lines[i] == "---" and lines[i + 1].startswith("title:") and lines[i + 2].startswith("url:")]


def _previous_content(lines: list[str], i: int) -> int:
    j = i - 1
    while j > 0 and not lines[j].strip():
        j -= 1
    return j


def damage_react(lines: list[str]) -> Damage:
    d = Damage(lines)
    doc = parse_lines(lines)
    heads = {h.line - 1 for h in doc.headings}
    blocks = fenced_blocks(lines)
    starts = _front_matters(lines)
    bounds = starts + [len(lines)]
    touched = d.touched
    for k, fm in enumerate(starts):
        page_end = bounds[k + 1]
        in_page = [b for b in blocks if fm < b[0] and b[1] < page_end]
        kind = k % 6
        prev = _previous_content(lines, fm)
        if kind == 0 and k and prev not in heads:
            d.replace[prev] = [lines[prev] + "---"]
            for j in range(prev + 1, fm + 1):
                d.replace[j] = []
            d.injected["front matter glued to the previous line" + (" (```---)" if lines[prev] == "```" else "")] += 1
        elif kind == 1 and k:
            prev_blocks = [b for b in blocks if bounds[k - 1] < b[0] and b[1] < fm]
            if prev_blocks:
                last = prev_blocks[-1]
                d.replace[last[1]] = []
                touched.add(last[0])
                d.injected["fence left open at the page boundary"] += 1
        elif kind == 2 and in_page:
            opener = in_page[0][0]
            if lines[opener].startswith("```") and not lines[opener].startswith("````"):
                d.replace[opener] = ["`" + lines[opener]]
                touched.add(opener)
                d.injected["four-backtick opener closed by three"] += 1
        elif kind == 3:
            for n, h in enumerate(x for x in doc.headings if fm < x.line - 1 < page_end):
                raw = lines[h.line - 1]
                hashes, _, rest = raw.partition(" ")
                slug = re.sub(r"[^a-z0-9]+", "-", h.text.lower()).strip("-")
                if n % 3 == 0:
                    d.replace[h.line - 1] = [f'{raw} [¶](https://react.dev/page#{slug} "Permanent link")']
                elif n % 3 == 1:
                    d.replace[h.line - 1] = [f'{raw}[\u200b](#{slug} "Direct link to {h.text}")']
                else:
                    d.replace[h.line - 1] = [f"{hashes} [{h.text}](https://react.dev/page\\#{slug})"]
                d.injected["permalink marker on a heading"] += 1
        elif kind == 4:
            title = lines[fm + 1].split(":", 1)[1].strip().strip('"')
            url = lines[fm + 2].split(":", 1)[1].strip().strip('"')
            d.replace[fm] = [f"# {title}", f"Source: {url}"]
            d.replace[fm + 1] = d.replace[fm + 2] = d.replace[fm + 3] = []
            d.injected["front matter replaced by a # Title / Source: URL preamble"] += 1
    for opener, closer in blocks:
        if opener not in touched and closer not in d.replace and opener not in d.replace:
            d.after[opener] = list(COMMENTS)
            d.injected["comment lines inside a well-formed fence"] += len(COMMENTS)
    return d


def damage_hono(lines: list[str]) -> Damage:
    d = Damage(lines)
    doc = parse_lines(lines)
    h1s = [h.line - 1 for h in doc.headings if h.level == 1]
    blocks = fenced_blocks(lines)
    touched = d.touched
    for k, h in enumerate(h1s[1:], 1):
        prev = _previous_content(lines, h)
        if k % 2 == 0:
            prev_blocks = [b for b in blocks if h1s[k - 1] < b[0] and b[1] < h]
            if prev_blocks and prev_blocks[-1][1] == prev:
                d.replace[prev] = []  # the last block's closer: the fence stays open into the front matter
                touched.add(prev_blocks[-1][0])
                prev = _previous_content(lines, prev)
                d.injected["fence left open at the page boundary"] += 1
        slug = re.sub(r"[^a-z0-9]+", "-", lines[h].lower()).strip("-")
        front = ["---", f'url: "https://hono.dev/docs/{slug}"', f'title: "{lines[h][2:]}"', "---", ""]
        if prev in d.replace or lines[prev].startswith("#"):
            d.after[prev] = front
        else:
            front[0] = lines[prev] + "---"
            d.replace[prev] = front
            d.injected["front matter glued to the previous line"] += 1
        for j in range(prev + 1, h):
            d.replace.setdefault(j, [])
        d.injected["page boundary (front matter naming a URL)"] += 1
    for opener, closer in blocks:
        if opener not in touched and closer not in d.replace:
            d.after[opener] = list(COMMENTS)
            d.injected["comment lines inside a well-formed fence"] += len(COMMENTS)
    return d


def damage_copilotkit(lines: list[str]) -> Damage:
    """A file without page boundaries: only the fence repair inside the one page can help."""
    d = Damage(lines)
    doc = parse_lines(lines)
    for n, h in enumerate(doc.headings):
        if n % 2:
            d.replace[h.line - 1] = [lines[h.line - 1] + ' [¶](https://docs.copilotkit.ai/x#y "Permanent link")']
            d.injected["permalink marker on a heading"] += 1
    for n, (opener, closer) in enumerate(fenced_blocks(lines)):
        if n % 3 == 0 and lines[opener].startswith("```") and not lines[opener].startswith("````"):
            d.replace[opener] = ["`" + lines[opener]]
            d.touched.add(opener)
            d.injected["four-backtick opener closed by three"] += 1
        elif opener not in d.replace:
            d.after[opener] = list(COMMENTS)
            d.injected["comment lines inside a well-formed fence"] += len(COMMENTS)
    return d


def _check(clean: list[str], damage: Damage) -> tuple[float, list[str], Counter[str]]:
    clean_doc = parse_lines(clean)
    damaged, where, comments = damage.apply()
    doc = parse_lines(damaged)
    found = {(h.line, h.level, h.text) for h in doc.headings}
    expected = [(where[h.line - 1], h.level, h.text) for h in clean_doc.headings]
    kept = [e for e in expected if e[0] is not None and (e[0] + 1, e[1], e[2]) in found]
    missed = [f"{e[0]}: {e[2]}" for e in expected if e not in kept]
    # No heading inside a fenced block whose fences were left intact.
    inside: set[int] = set()
    for opener, closer in fenced_blocks(clean):
        a, b = where[opener], where[closer]
        if opener not in damage.touched and a is not None and b is not None:
            inside.update(range(a + 1, b))
    fenced = [f"{h.line}: {h.text}" for h in doc.headings if h.line - 1 in inside]
    assert all(c in inside for c in comments)
    assert not fenced, fenced[:10]
    return len(kept) / len(expected), missed, damage.injected


@pytest.mark.parametrize("name, make, minimum", [
    ("react-dev/llms-full.txt", damage_react, {"front matter glued to the previous line (```---)": 3,
                                               "front matter glued to the previous line": 10,
                                               "fence left open at the page boundary": 15,
                                               "four-backtick opener closed by three": 15,
                                               "permalink marker on a heading": 100,
                                               "front matter replaced by a # Title / Source: URL preamble": 25,
                                               "comment lines inside a well-formed fence": 3000}),
    ("hono/llms-small.txt", damage_hono, {"page boundary (front matter naming a URL)": 30,
                                          "front matter glued to the previous line": 10,
                                          "fence left open at the page boundary": 5,
                                          "comment lines inside a well-formed fence": 500}),
    ("copilotkit/llms-full.txt", damage_copilotkit, {"permalink marker on a heading": 300,
                                                     "four-backtick opener closed by three": 50,
                                                     "comment lines inside a well-formed fence": 300}),
])
def test_damaged_corpus_keeps_its_headings(test_data: Path, name: str, make: object,
                                          minimum: dict[str, int]) -> None:
    clean = split_lines((test_data / "llms" / name).read_text(encoding="utf-8"))
    assert callable(make)
    recall, missed, injected = _check(clean, make(clean))
    for kind, least in minimum.items():  # the defects were really injected
        assert injected[kind] >= least, (kind, injected)
    assert recall >= 0.98, (recall, missed[:20])
