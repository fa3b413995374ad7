"""Parse an llms.txt file into headings and indexable sections with exact 1-based line ranges.

Pure computation, no I/O. Lines are split on ``\\n`` only (as editors and ``sed -n`` count them), so
a citation ``alias:120-142`` always names the same bytes of the stored file. The parser never raises
on any input: at worst everything becomes body text.

Recognised headings: ATX (``# Title`` .. ``###### Title``, optional closing ``#``s) and setext (a
single-line paragraph underlined with ``===`` or ``---``), both ignored inside fenced code blocks
(```` ``` ```` or ``~~~``) and YAML front-matter blocks (``---`` / ``key: value`` / ``---``).

Real ``llms-full.txt`` files are scraped pages glued together, so the parser is page-aware and
heals the fence defects that would otherwise swallow the rest of a file:

* **Page boundaries**: front matter naming a URL or a site path (``---`` / ``url: https://…`` /
  ``title: …`` / ``---``), also when glued to the line before (````` ```--- `````, ``text---``);
  an H1 (ATX or setext) carrying a permalink marker (``# Title [¶](…)``) after a blank line; an
  H1 followed by a source-URL line (``# Title`` / ``Source: https://…``, as Mintlify and other
  generators write); llms-ctx ``<doc title="…">`` tags (also glued after text or a fence, with a
  heading glued after them); "Skip to content" links (``[Skip to content](…)``, also glued after the
  previous page's closing fence); on a site that marks its headings, a plain ``# Title`` right after
  a code block's closing fence and before a sentence; and ``--- path/to/file.ext ---`` separators of repository dumps (a
  page of source code other than Markdown holds no headings). A fenced block never crosses a
  boundary: one still open there closes, and headings end at it.
* **Fence repair**: when a fence has no valid closer before the end of its page (or a fence longer
  than three has an odd number of shorter fence lines before its closer: nested blocks come in
  pairs), the first bare fence of the same character closes it even if shorter (```` ````js ````
  closed by ```` ``` ````), and an opener with an info string (```` ```python ````) ends it and
  opens a new block; with no fence line of its character at all left in the page, the first ATX
  heading after a blank line and before a sentence ends it.
* **Glued closers**: a fence line followed by text that is no info string (a Markdown link, an ATX
  heading, a sentence) closes the open block, the text after it being text (a heading when it is
  one); with no block open it opens none.
* **Permalink markers** (``[¶](…)``, ``[​](…)``, ``[#](…)``, a heading that is only a link to its
  own anchor) are removed from heading text.

Pages (:class:`Page`) are also the unit the language filter (:mod:`cairn_servers.blz.lang`) works on.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass, field

_ATX = re.compile(r" {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*\r?$")
_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})(.*)$")
_SETEXT = re.compile(r" {0,3}(=+|-+)[ \t]*\r?$")
_FRONT_KEY = re.compile(r"[A-Za-z_][\w-]*:")
# A line inside front matter: a key, an indented continuation, a list item, a comment, or blank.
_YAMLISH = re.compile(r"[A-Za-z_][\w-]*:|[ \t-]|#|\r?$")
# A key naming an absolute URL, or url: naming a site path (vitepress-plugin-llms: "url: /guide/x.md").
_URL_VALUE = re.compile(r"[A-Za-z_][\w-]*:[ \t]*[\"']?(https?://[^\s\"']*)|url:[ \t]*[\"']?(/[^\s\"']*)")
_TITLE_KEY = re.compile(r"title:[ \t]*(.*?)[ \t]*\r?$")
# "Source: https://…", "URL: <https://…>", "**Source URL:** https://…" under an H1: a page's preamble.
_SOURCE_LINE = re.compile(
    r"[ \t]*(?:>[ \t]*)?(?:\*\*|__)?(?:Source(?:[ _-]?(?:URL|Url|url))?|URL|Url|Canonical(?:[ _-]?URL)?|"
    r"Original[ _-]?URL)[ \t]*(?:\*\*|__)?[ \t]*:[ \t]*(?:\*\*|__)?[ \t]*<?(https?://[^\s>]+)")
# Repository dumps: "--- src/app.ts ---" starts the file's text.
_PATH_SEP = re.compile(r"-{3,}[ \t]+([^\s]*[./][^\s]*)[ \t]+-{3,}[ \t]*\r?$")
_MARKUP_EXT = frozenset(("", "md", "mdx", "markdown", "mdc", "qmd", "txt", "rst", "adoc", "html", "htm"))
# llms-ctx files (llms_txt2ctx): <doc title="…" desc="…">, often glued after the previous page's text.
_DOC_START = re.compile(r'<doc\s+title="([^"]*)"[^>]*>')
_DOC_TAGS = re.compile(r"(?:</?(?:doc|docs|api|examples|optional|project)\b[^>]*>)+")
# Heading anchors that are markup, not words: {#id} (Pandoc/VitePress) and {/*id*/} (MDX).
_ANCHOR = re.compile(r"[ \t]*\{(?:#[^}]*|/\*.*?\*/)\}[ \t]*$")
# Permalink markers scrapers keep: [¶](…), [​](…) (zero-width space), [](…), [#](…), [§](…), [🔗](…).
_LINK_TARGET = r"\((?:[^()\s]|\([^()\s]*\))*(?:[ \t]+(?:\"[^\"]*\"|'[^']*'))?\)"
_MARKER = re.compile(r"[ \t]*\[(?:¶|#|\\#|§|🔗|\u200b|\ufeff|[ \t]*)\]" + _LINK_TARGET)
# A heading that is only a link to its own anchor: "[Title](https://site/page#title)".
_SELF_LINK = re.compile(r"\[([^\[\]]+)\]\((?:[^()\s]|\([^()\s]*\))*#(?:[^()\s]|\([^()\s]*\))*"
                        r"(?:[ \t]+(?:\"[^\"]*\"|'[^']*'))?\)")
# Top-level statements of a source file (Python, JavaScript/TypeScript, C): never Markdown prose.
_CODE_LINE = re.compile(r"(?:from [\w.]+ import |import (?:[\w.]+\s*$|\w+ from |\{|\* as )|def \w+\(|"
                        r"async def |class \w+(?:\(|:|\s*\{|\s+extends )|if __name__|export (?:default |const |"
                        r"function |class |\{|type |interface )|const \w+ = |function \w+\(|module\.exports|#include )")
# "Skip to content" links that site generators put at the top of every page (Starlight, MkDocs Material,
# Docusaurus): a scraped page starts there, also when glued after the previous page's closing fence.
_SKIP_WORDS = ("Skip to ",)
_SKIP = re.compile(r" {0,3}(?:`{3,}|~{3,})?[ \t]*(?:\[Skip to (?:main )?content\]\(<?([^)\s>]*)>?\)"
                   r"|Skip to (?:main )?content[ \t]*\r?$)")
# What follows a fence run but is no info string: text glued to a closing fence (a page glued to the
# last one): a Markdown link, an ATX heading, or a sentence.
_GLUED_TEXT = re.compile(r"\[[^\]]*\]\(|#{1,6}[ \t]+\S|[A-Z][a-z]*[,;]?(?:[ \t]+[\w'’,;()/-]+){3,}[.!?:]\s*$")
_NOT_PARAGRAPH = re.compile(r" {0,3}(?:[-+*>|]|\d{1,9}[.)](?:[ \t]|$)|<|$)|    |\t")

_MARKS = frozenset("#`~=-")

WINDOW = 60  # lines per window for heading-less text and for splitting long sections
MAX_FRONT_MATTER = 40  # front-matter longer than this is not front-matter

# Page boundary kinds
_FRONT, _SEP, _DOC, _H1, _SETEXT_H1, _SKIP_MARK = 1, 2, 3, 4, 5, 6


@dataclass(frozen=True, slots=True)
class Heading:
    """One heading: its line, level (1-6), text, and the last line of its section (to the next
    heading of the same or a higher level, the next page boundary, or the end of the file)."""

    line: int
    level: int
    text: str
    end: int


@dataclass(frozen=True, slots=True)
class Section:
    """An indexable span: lines ``start..end`` (1-based, inclusive) under ``path`` (enclosing headings)."""

    start: int
    end: int
    path: tuple[str, ...]
    heading: str  # the heading text when this span starts at its heading line, else ""


@dataclass(frozen=True, slots=True)
class Page:
    """One page of a concatenated file: lines ``start..end``, its title (front matter ``title:``,
    the H1 that starts it, a ``<doc title>``, a dump's file path; else ""), whether the title is a
    heading line of the page (else it only prefixes the page's heading paths), and whether the page
    is source code."""

    start: int
    end: int
    title: str
    heading: bool = False
    code: bool = False  # a pasted source file (a dump's non-Markdown file, or detected): no headings
    url: str = ""  # the page's URL from its front matter or source line, when it names one


@dataclass(frozen=True, slots=True)
class Document:
    lines: list[str]
    headings: list[Heading]
    sections: list[Section]
    pages: list[Page] = field(default_factory=list)
    skipped: list[tuple[int, int, str]] = field(default_factory=list)  # (start, end, language) not indexed

    @property
    def title(self) -> str:
        """The first H1's text, else the first heading's, else ""."""
        for h in self.headings:
            if h.level == 1:
                return h.text
        return self.headings[0].text if self.headings else ""

    @property
    def skipped_lines(self) -> int:
        return sum(end - start + 1 for start, end, _lang in self.skipped)


def split_lines(text: str) -> list[str]:
    """Lines as editors number them: split on ``\\n``; a final newline does not start a new line."""
    lines = text.split("\n")
    if len(lines) > 1 and lines[-1] == "":
        lines.pop()
    return lines


DECODE_STEP = 1 << 20  # bytes decoded at once by decode_lines


def decode_lines(data: bytes) -> list[str]:
    """The lines of UTF-8 ``data`` (invalid bytes replaced), numbered as :func:`split_lines` does.

    Decoded a megabyte at a time, each piece ending at a newline (no UTF-8 sequence holds one, so the
    lines are those of decoding the whole): a piece holding a single emoji is one transient UCS-4 copy of
    a megabyte, not of the whole file, and each line split from it is a compact string of its own. A
    quarter faster than decoding line by line (react's 92k lines: 12 ms against 16)."""
    lines: list[str] = []
    start, end = 0, len(data)
    while True:
        cut = data.find(b"\n", start + DECODE_STEP) if start + DECODE_STEP < end else -1
        if cut < 0:
            lines.extend(data[start:].decode("utf-8", errors="replace").split("\n"))
            break
        lines.extend(data[start:cut].decode("utf-8", errors="replace").split("\n"))
        start = cut + 1
    if len(lines) > 1 and lines[-1] == "":
        lines.pop()
    if lines[0].startswith("\ufeff"):
        lines[0] = lines[0][1:]
    return lines


def clean_heading(raw: str) -> str:
    """Heading text without anchors (``{#id}``), permalink markers, or a link to its own anchor."""
    text = raw.rstrip("\r")
    if "](" in text:
        text = _MARKER.sub("", text)
        m = _SELF_LINK.fullmatch(text.strip())
        if m:
            text = m.group(1)
    text = _ANCHOR.sub("", text)
    if "\u200b" in text or "¶" in text:
        text = text.replace("\u200b", "").rstrip(" ¶")
    return text.strip()


def candidates(lines: list[str]) -> list[int]:
    """Indexes of the lines :func:`find_headings` must look at: those that can open or close
    something (``#``, backticks, ``~``, ``=``, ``-`` after at most three spaces), front matter glued
    to the end of a line, and llms-ctx ``<doc>`` tags. (A comprehension beats a multiline regex
    here: 17 ms against 51 ms on react's 92k lines, whose text is UCS-4.)"""
    return _candidates(lines)[0]


def _candidates(lines: list[str]) -> tuple[list[int], set[int]]:
    marks = _MARKS
    found = [i for i, ln in enumerate(lines)
             if ln and (ln[0] in marks or (ln[0] == " " and ln.lstrip(" ")[:1] in marks))]
    extra = set(_glued(lines))
    if extra:
        found = sorted(extra.union(found))
    return found, extra


def _glued(lines: list[str]) -> list[int]:
    """Indexes of lines that end in ``---`` after other text, or hold ``<doc `` or a "Skip to content"
    page marker: found with
    ``str.find`` on the joined text, ~5x faster than testing every line in Python."""
    text = "\n".join(lines)
    find = text.find
    hits = []
    pos = find("---\n")
    while pos != -1:
        if pos and text[pos - 1] not in "-\n":
            hits.append(pos)
        pos = find("---\n", pos + 4)
    if lines and lines[-1].endswith("---"):
        hits.append(len(text) - 3)
    pos = find("<doc ")
    while pos != -1:
        hits.append(pos)
        pos = find("<doc ", pos + 5)
    for words in _SKIP_WORDS:  # page markers (checked by _SKIP in _boundaries)
        pos = find(words)
        while pos != -1:
            hits.append(pos)
            pos = find(words, pos + len(words))
    out: list[int] = []
    line = last = 0
    for pos in sorted(hits):
        line += text.count("\n", last, pos)
        last = pos
        out.append(line)
    return out


def _front_matter(lines: list[str], start: int) -> tuple[int, str, str] | None:
    """``(closing index, title, URL or "")`` of a YAML block whose opening ``---`` ends line
    ``start``, or None when the lines after it are not front matter."""
    total = len(lines)
    if start + 1 >= total or not _FRONT_KEY.match(lines[start + 1]):
        return None
    title, url = "", ""
    for j in range(start + 1, min(total, start + 1 + MAX_FRONT_MATTER)):
        line = lines[j]
        if line.rstrip("\r").strip() == "---":
            return j, title, url
        if not _YAMLISH.match(line):
            return None
        if not title and line.startswith("title:"):
            m = _TITLE_KEY.match(line)
            title = m.group(1).strip("\"'") if m else ""
        if not url:
            m = _URL_VALUE.match(line)
            if m:
                url = m.group(1) or m.group(2)
    return None


class _Mark:
    """A page boundary found before the fences are known (its patterns do not occur in code)."""

    __slots__ = ("kind", "end", "title", "code", "heading", "url")

    def __init__(self, kind: int, end: int, title: str, code: bool = False,
                 heading: tuple[int, str] | None = None, url: str = "") -> None:
        self.kind, self.end, self.title, self.code, self.heading = kind, end, title, code, heading
        self.url = url


def _boundaries(lines: list[str], cands: list[int], glued: set[int]) -> dict[int, _Mark]:
    """Line index -> the page boundary that starts there (``glued``: lines :func:`_glued` found)."""
    found: dict[int, _Mark] = {}
    total = len(lines)
    marked = False  # a heading with a permalink marker since the last boundary: the site marks its headings
    seen = 0
    for i in cands:
        line = lines[i]
        if len(found) != seen:  # a boundary was found: a new page
            marked, seen = False, len(found)
        if line[0] == "#":
            if "](" in line and _MARKER.search(line):
                marked = True
            if line[1:2] not in (" ", "\t") or (i and lines[i - 1].strip()):  # a page's H1 follows a blank line
                continue
            m = _ATX.match(line)
            if not m or not m.group(2):
                continue
            raw = m.group(2)
            if "](" in raw and _MARKER.search(raw):
                found[i] = _Mark(_H1, i, clean_heading(raw))
                continue
            for j in range(i + 1, min(total, i + 6)):  # blank lines and a "> summary" may come between
                nxt = lines[j]
                source = _SOURCE_LINE.match(nxt)
                if source:
                    found[i] = _Mark(_H1, i, clean_heading(raw), url=source.group(1))
                    break
                if nxt.strip() and not nxt.startswith(">"):
                    break
            if i not in found and marked and _after_code(lines, i) and _sentence_after(lines, i):
                # A site that marks its headings does not leave its pages' own H1s bare: a plain
                # "# Title" right after a code block, before a sentence, is the next page's title.
                found[i] = _Mark(_H1, i, clean_heading(raw))
            continue
        if line[0] == "=":  # "Title[¶](#title)" / "=====" after a blank line (Sphinx, MkDocs)
            if (i and "](" in lines[i - 1] and (i < 2 or not lines[i - 2].strip()) and _SETEXT.match(line)
                    and _MARKER.search(lines[i - 1])):
                found[i] = _Mark(_SETEXT_H1, i, clean_heading(lines[i - 1]))
            continue
        if i in glued:
            skip = _SKIP.match(line)
            if skip:  # "[Skip to content](…)" at a page's top, maybe glued after the last page's fence
                url = skip.group(1) or ""
                found[i] = _Mark(_SKIP_MARK, i, "", url=url.split("#", 1)[0] if url.startswith("http") else "")
                continue
            doc = None
            for doc in _DOC_START.finditer(line):
                pass
            if doc is not None:
                rest = line[doc.end():]
                m = _ATX.match(rest) if rest.lstrip(" ").startswith("#") else None
                text = clean_heading(m.group(2) or "") if m else ""
                found[i] = _Mark(_DOC, i, doc.group(1), heading=(len(m.group(1)), text) if m and text else None)
                continue
            # "```---" or "text---" followed by front matter naming a URL: a page glued to the last
            fm = _front_matter(lines, i)
            if fm is not None and fm[2]:
                found[i] = _Mark(_FRONT, fm[0], fm[1], url=fm[2])
                continue
        if line[-1] not in "-\r \t":
            continue
        stripped = line.rstrip("\r").rstrip(" \t")
        if stripped.lstrip(" ") == "---":
            fm = _front_matter(lines, i)
            if fm is not None and fm[2]:
                found[i] = _Mark(_FRONT, fm[0], fm[1], url=fm[2])
            continue
        if stripped.endswith("---"):
            sep = _PATH_SEP.match(line)
            if sep:
                path = sep.group(1)
                name = path.rsplit("/", 1)[-1]
                ext = name.rsplit(".", 1)[-1].lower() if "." in name else ""
                found[i] = _Mark(_SEP, i, path, code=ext not in _MARKUP_EXT)
    return found


def _after_code(lines: list[str], i: int) -> bool:
    """Whether the last non-blank line before ``i`` (within three lines) is a bare fence: a code block's end."""
    for j in range(i - 1, max(-1, i - 4), -1):
        if lines[j].strip():
            m = _FENCE.match(lines[j])
            return m is not None and not m.group(2).strip()
    return False


def _sentence_after(lines: list[str], i: int) -> bool:
    """Whether the first non-blank line within three after ``i`` is a sentence: prose, not code."""
    for j in range(i + 1, min(len(lines), i + 4)):
        text = lines[j].strip()
        if text:
            return len(text.split()) >= 5 and text[-1] in ".:!?)" and text[0] not in "#`~$>"
    return False


def find_headings(lines: list[str]) -> list[tuple[int, int, str]]:
    """``(line_number, level, text)`` for every heading outside code fences and front-matter."""
    return outline(lines)[0]


def outline(lines: list[str]) -> tuple[list[tuple[int, int, str]], list[Page]]:
    """Headings (as :func:`find_headings`) and the pages the file is made of (one page, line 1 to
    the end, when no boundary is found).

    Only candidate lines (:func:`candidates`) are visited; the state a setext underline needs is
    read from the lines above it. On a 92k-line file this is ~4x faster than a loop over every line.
    """
    total = len(lines)
    found: list[tuple[int, int, str]] = []
    cands, glued = _candidates(lines)
    marks = _boundaries(lines, cands, glued)
    stops = sorted(marks)
    # Bare fence lines (possible closers) per fence character: positions and run lengths.
    bare: dict[str, tuple[list[int], list[int]]] = {"`": ([], []), "~": ([], [])}
    fencey: list[int] = []  # every line that can open or close a fence
    fences_of: dict[str, list[int]] = {"`": [], "~": []}  # the same, per fence character
    fence_match: dict[int, re.Match[str]] = {}  # line index -> its fence match (read again below)
    for i in cands:
        line = lines[i]
        c = line.lstrip(" ")[:1]
        if c == "`" or c == "~":
            m = _FENCE.match(line)
            if m:
                fence_match[i] = m
                fencey.append(i)
                fences_of[c].append(i)
                if not m.group(2).strip():
                    bare[c][0].append(i)
                    bare[c][1].append(len(m.group(1)))
    starts: list[tuple[int, str, bool]] = []  # (index, title, title is this line's heading)
    urls: dict[int, str] = {}  # index of a page start -> the page's URL
    code_pages: set[int] = set()  # indexes of dump separators naming a source file
    text_pages: set[int] = set()  # ... naming a Markdown or text file (MDX starts with imports)
    tag_titles: dict[int, str] = {}  # <doc title="…"> of pages whose title is the heading glued to it

    def page_end(i: int) -> int:
        k = bisect_right(stops, i)
        return stops[k] if k < len(stops) else total

    # long[c][k]: the index in bare[c] of the first bare fence at or after k longer than three
    long: dict[str, list[int]] = {}
    for c, (_pos, lens) in bare.items():
        nxt, acc = len(lens), [0] * len(lens)
        for k in range(len(lens) - 1, -1, -1):
            if lens[k] > 3:
                nxt = k
            acc[k] = nxt
        long[c] = acc

    def closes_in_page(i: int, run: str) -> bool:
        """Whether the fence ``run`` opened at ``i`` has a valid closer before its page ends, and,
        for a fence longer than three, an even number of shorter fence lines before that closer
        (nested blocks come in pairs; an odd count means the first shorter one was its closer)."""
        pos, lens = bare[run[0]]
        end, need = page_end(i), len(run)
        k = bisect_right(pos, i)
        while k < len(pos) and pos[k] < end:
            if need > 3:  # skip the shorter closers at once (many ````js openers closed by ```)
                k = long[run[0]][k]
                if k == len(pos) or pos[k] >= end:
                    return False
            if lens[k] >= need:
                if need == 3:
                    return True
                every = fences_of[run[0]]
                return (bisect_right(every, pos[k] - 1) - bisect_right(every, i)) % 2 == 0
            k += 1
        return False

    def runaway(i: int, run: str) -> bool:
        """Whether no fence line of ``run``'s character follows ``i`` in its page: nothing can close it."""
        pos = fences_of[run[0]]
        k = bisect_right(pos, i)
        return k == len(pos) or pos[k] >= page_end(i)

    def prose_after(i: int) -> bool:
        """Whether a sentence (five words or more, ending like one) or a list of links follows line
        ``i`` within two lines: a heading of the text, not a comment of the code around it."""
        for j in range(i + 1, min(total, i + 4)):
            text = lines[j].strip()
            if text:
                return text.startswith(("- [", "* [")) or (  # a sentence, or a list of links
                    len(text.split()) >= 5 and text[-1] in ".:!?)" and text[0] not in "#`~$>")
        return False

    boundary: set[int] = set()  # lines ending a block (headings, fence closes): a paragraph may follow
    used: set[int] = set()  # heading lines and fence openers: never paragraph text

    def blank_before(j: int) -> bool:
        return j == 0 or not lines[j - 1].strip() or (j - 1) in boundary

    def one_line_paragraph(j: int) -> bool:
        # A setext heading's text must be a one-line paragraph: after a blank line or a closed block.
        # (CommonMark also allows multi-line paragraphs; in llms.txt files "text\n---" is far more
        # often a sloppy thematic break, so we stay conservative.)
        if j < 0 or j in used or j in boundary:
            return False
        text = lines[j]
        return bool(text.strip()) and not _NOT_PARAGRAPH.match(text) and blank_before(j)

    def glued_heading(i: int, text: str) -> None:
        """A fence line closing a block, with ``text`` glued after it: a heading when it is one."""
        boundary.add(i)
        used.add(i)
        m = _ATX.match(text) if text[:1] == "#" else None
        heading = clean_heading(m.group(2) or "") if m else ""
        if m and heading:
            found.append((i + 1, len(m.group(1)), heading))

    fence: str | None = None  # the opening fence's run of ` or ~ while inside a fenced block
    heal = False  # the open fence has no valid closer in its page: repair rules apply
    loose = False  # nor any fence line at all: a heading after a blank line ends it
    skip_until = -1
    for i in cands:
        if i <= skip_until:
            continue
        mark = marks.get(i)
        if mark is not None:
            fence = None  # a fence never crosses a page boundary
            if mark.url:
                urls[i] = mark.url
            kind = mark.kind
            if kind == _SETEXT_H1:  # the page starts at the title line above; the underline is read below
                starts.append((i - 1, mark.title, True))
                boundary.add(i - 2)
            else:
                boundary.add(i - 1)
            if kind == _FRONT:
                starts.append((i, mark.title, False))
                skip_until = mark.end
                boundary.add(mark.end)
                continue
            if kind == _SEP:
                starts.append((i, mark.title, False))
                if mark.code:  # source code: no headings until the next page
                    skip_until = page_end(i) - 1
                    code_pages.add(i)
                else:
                    text_pages.add(i)
                boundary.add(i)
                continue
            if kind == _DOC:
                starts.append((i, mark.heading[1] if mark.heading else mark.title, mark.heading is not None))
                if mark.heading:
                    found.append((i + 1, mark.heading[0], mark.heading[1]))
                    tag_titles[i] = mark.title
                    used.add(i)
                boundary.add(i)
                continue
            if kind == _H1:
                starts.append((i, mark.title, True))  # the heading itself is read below
            if kind == _SKIP_MARK:
                starts.append((i, "", False))
                boundary.add(i)
                continue
        line = lines[i]
        first = line.lstrip(" ")[:1]
        if fence is not None:
            if first == fence[0]:
                m = fence_match.get(i)
                if m and m.group(1)[0] == fence[0]:
                    run, info = m.group(1), m.group(2).strip()
                    if info and len(run) >= len(fence) and _GLUED_TEXT.match(info):
                        # "```[Next page](…)", "```# Title": a closing fence with the next text glued to it
                        fence = None
                        glued_heading(i, info)
                        continue
                    if not info:
                        if heal or len(run) >= len(fence):
                            fence = None
                            boundary.add(i)
                    elif heal and not (run[0] == "`" and "`" in info):
                        # An opener where the broken fence should have closed: close it, open this one.
                        fence, heal = run, not closes_in_page(i, run)
                        loose = heal and runaway(i, run)
                        used.add(i)
                continue
            if not (loose and first == "#" and blank_before(i) and _ATX.match(line) and prose_after(i)):
                continue
            fence = None  # an unclosable fence: the first heading after a blank line, before prose, ends it
        if first in ("`", "~"):
            m = fence_match.get(i)
            if m and _GLUED_TEXT.match(m.group(2).strip()):
                glued_heading(i, m.group(2).strip())  # a closer glued to text, its opener unseen: no opener
                continue
            # A backtick fence's info string may not contain backticks (CommonMark).
            if m and not (m.group(1)[0] == "`" and "`" in m.group(2)):
                fence = m.group(1)
                heal = not closes_in_page(i, fence)
                loose = heal and runaway(i, fence)
                used.add(i)
            continue
        if first == "#":
            m = _ATX.match(line)
            if m:
                text = clean_heading(m.group(2) or "")
                if text:
                    found.append((i + 1, len(m.group(1)), text))
                boundary.add(i)
                used.add(i)
            continue
        if _SETEXT.match(line):
            if one_line_paragraph(i - 1):
                text = clean_heading(lines[i - 1])
                if text:
                    found.append((i, 1 if first == "=" else 2, text))
                    boundary.add(i)
                    used.add(i - 1)
            elif first == "-" and blank_before(i) and line.strip() == "---":
                fm = _front_matter(lines, i)
                if fm is not None:  # front matter without a URL: a page boundary outside fences only
                    starts.append((i, fm[1], False))
                    if fm[2]:
                        urls[i] = fm[2]
                    skip_until = fm[0]
                    boundary.add(fm[0])
    pages: list[Page] = []
    if not starts or starts[0][0] > 0:
        starts.insert(0, (0, "", False))
    code: list[tuple[int, int]] = []
    for k, (i, title, is_heading) in enumerate(starts):
        end = starts[k + 1][0] if k + 1 < len(starts) else total
        is_code = i in code_pages
        if not is_code and i not in text_pages and len(starts) > 1 and _is_code(lines, i, end, fencey):
            code.append((i + 1, end))
            is_code = True
            if is_heading:
                title, is_heading = tag_titles.get(i, title), False
        pages.append(Page(i + 1, max(i + 1, end), title, is_heading, is_code, urls.get(i, "")))
    if code:  # comment lines of a source file pasted as a page are not headings
        found = [h for h in found if not any(a <= h[0] <= b for a, b in code)]
    return found, pages


def _is_code(lines: list[str], start: int, end: int, fencey: list[int]) -> bool:
    """Whether lines ``start..end-1`` (0-based) are a source file pasted without a fence: no fence
    line, and top-level statements on at least 3 lines and a tenth of the non-blank ones, two of
    them definitions (MDX pages start with imports). Markdown outside fences never starts a line
    with ``def f(`` or ``class A:``."""
    k = bisect_right(fencey, start - 1)
    if k < len(fencey) and fencey[k] < end:
        return False
    hits = filled = defs = 0
    match = _CODE_LINE.match
    for j in range(start, end):
        line = lines[j]
        if line.strip():
            filled += 1
            m = match(line)
            if m:
                hits += 1
                defs += not m.group().startswith(("import", "from"))
    return hits >= 3 and defs >= 2 and hits * 10 >= filled


def parse(text: str, window: int = WINDOW, *, all_languages: bool = True) -> Document:
    """Headings and sections of ``text``. Never raises."""
    if text.startswith("\ufeff"):
        text = text[1:]
    return parse_lines(split_lines(text), window, all_languages=all_languages)


def parse_lines(lines: list[str], window: int = WINDOW, *, all_languages: bool = True) -> Document:
    """Headings and sections of a file already split into lines (see :func:`decode_lines`).

    With ``all_languages=False``, pages that are copies in another language than English
    (:func:`cairn_servers.blz.lang.foreign_pages`) are left out of the headings and sections; the lines
    themselves keep their numbers (``Document.skipped`` lists the ranges left out)."""
    total = len(lines)
    raw, pages = outline(lines)
    skipped: list[tuple[int, int, str]] = []
    if not all_languages and len(pages) > 1:
        from cairn_servers.blz.lang import foreign_pages

        skipped = foreign_pages(lines, pages)
        if skipped:
            drop = {(s, e) for s, e, _lang in skipped}
            kept = [p for p in pages if (p.start, p.end) not in drop]
            raw = _outside(raw, skipped)
            pages = kept
    # Section extents: a heading runs to just before the next heading of the same or higher level,
    # or to the end of its page.
    ends = [total] * len(raw)
    open_stack: list[int] = []  # indexes of headings still open
    starts = sorted([p.start for p in pages[1:]] + [s for s, _e, _lang in skipped])
    ps = 0
    for idx, (line, level, _text) in enumerate(raw):
        while ps < len(starts) and starts[ps] <= line:
            for k in open_stack:
                ends[k] = min(ends[k], starts[ps] - 1)
            open_stack.clear()
            ps += 1
        while open_stack and raw[open_stack[-1]][1] >= level:
            ends[open_stack.pop()] = line - 1
        open_stack.append(idx)
    if ps < len(starts):
        for k in open_stack:
            ends[k] = starts[ps] - 1
    headings = [Heading(line, level, txt, ends[k]) for k, (line, level, txt) in enumerate(raw)]
    return Document(lines, headings, _sections(lines, raw, pages, skipped, window), pages, skipped)


def _outside(raw: list[tuple[int, int, str]], ranges: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    out, k = [], 0
    for h in raw:
        while k < len(ranges) and ranges[k][1] < h[0]:
            k += 1
        if k < len(ranges) and ranges[k][0] <= h[0] <= ranges[k][1]:
            continue
        out.append(h)
    return out


def _sections(lines: list[str], raw: list[tuple[int, int, str]], pages: list[Page],
              skipped: list[tuple[int, int, str]], window: int) -> list[Section]:
    """Spans between consecutive cut points: headings, page starts, and the ends of skipped pages.
    At a page start the heading path restarts, under the page's title when it has one."""
    total = len(lines)
    # (line, kind, level, text): kind 0 = page start, 1 = heading, 2 = skipped range (no section)
    cuts: list[tuple[int, int, int, str]] = [(p.start, 0, 0, "" if p.heading else p.title) for p in pages[1:]]
    cuts += [(line, 1, level, text) for line, level, text in raw]
    cuts += [(s, 2, 0, "") for s, _e, _lang in skipped]
    cuts.sort()
    skip_end = {s: e for s, e, _lang in skipped}
    sections: list[Section] = []
    stack: list[tuple[int, str]] = []
    pos = 1
    current: tuple[tuple[str, ...], str] = ((), "")
    for k, (line, kind, level, text) in enumerate(cuts):
        if line > pos:
            _add_windows(sections, lines, pos, line - 1, current[0], current[1], window)
        if kind == 2:
            pos = skip_end[line] + 1
            stack = []
            current = ((), "")
            continue
        if kind == 0:
            stack = [(0, text)] if text else []
            current = (tuple(t for _, t in stack), "")
        else:
            while stack and stack[-1][0] >= level:
                stack.pop()
            if stack and stack[-1] == (0, text):  # the page title again, as the page's heading
                stack.pop()
            stack.append((level, text))
            current = (tuple(t for _, t in stack), text)
        pos = max(pos, line)
    if pos <= total:
        _add_windows(sections, lines, pos, total, current[0], current[1], window)
    return sections


def _add_windows(out: list[Section], lines: list[str], start: int, end: int, path: tuple[str, ...],
                 heading: str, window: int) -> None:
    """Append ``start..end`` as one section, or as windows when it is longer than ``window`` lines.
    Spans holding only blank lines are skipped (nothing to find there)."""
    pos = start
    while pos <= end:
        stop = min(end, pos + window - 1)
        # Do not leave a tiny tail window: fold it into this one.
        if end - stop < window // 4:
            stop = end
        if any(lines[j].strip() for j in range(pos - 1, stop)):
            out.append(Section(pos, stop, path, heading if pos == start else ""))
        pos = stop + 1


def enclosing(headings: list[Heading], start: int, end: int, total: int) -> tuple[int, int]:
    """The line range of the innermost heading section holding ``start..end``; the preamble when the
    range lies before the first heading; the whole file when no single section holds it."""
    best: tuple[int, int] | None = None
    for h in headings:
        if h.line > start:
            break
        if h.end >= end:
            best = (h.line, h.end)  # later matches are nested deeper
    if best is not None:
        return best
    if not headings:
        return (1, total)
    first = headings[0].line
    if end < first:
        return (1, first - 1)
    return (1, total)
