"""The llms.txt parser: headings, sections, exact line ranges, and no crash on any input."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from cairn.blz.llmstxt import enclosing, parse, split_lines

DOC = """preamble line
# Title
intro
## Install
step one
```bash
# not a heading
## nor this
```
Setext Title
============

Sub Part
--------
body {x}
## Usage {#usage}
### Deep ###
deep body
"""


def test_headings_levels_lines_and_extents() -> None:
    doc = parse(DOC)
    got = [(h.line, h.level, h.text, h.end) for h in doc.headings]
    assert got == [
        (2, 1, "Title", 9),         # closed by the setext H1 at line 10
        (4, 2, "Install", 9),
        (10, 1, "Setext Title", 18),
        (13, 2, "Sub Part", 15),
        (16, 2, "Usage", 18),       # the {#usage} anchor is markup, not text
        (17, 3, "Deep", 18),        # closing hashes stripped
    ]


def test_sections_cover_preamble_and_carry_heading_paths() -> None:
    doc = parse(DOC)
    spans = [(s.start, s.end, s.path) for s in doc.sections]
    assert spans[0] == (1, 1, ())  # text before the first heading is indexed too
    assert (4, 9, ("Title", "Install")) in spans
    assert (13, 15, ("Setext Title", "Sub Part")) in spans
    assert (17, 18, ("Setext Title", "Usage", "Deep")) in spans
    # Sections tile the file: contiguous, no overlaps.
    for a, b in zip(doc.sections, doc.sections[1:]):
        assert b.start == a.end + 1


def test_front_matter_dashes_are_not_setext_headings() -> None:
    text = "# Doc\n\n---\ntitle: \"Quick Start\"\nurl: x\n---\n\nBody\n"
    doc = parse(text)
    assert [h.text for h in doc.headings] == ["Doc"]


def test_setext_needs_a_one_line_paragraph() -> None:
    doc = parse("Para one\nstill para\n---\n\nAlone\n---\n# H\nAfter heading\n===\n")
    assert [(h.line, h.text) for h in doc.headings] == [(5, "Alone"), (7, "H"), (8, "After heading")]


def test_headingless_file_is_windowed() -> None:
    text = "\n".join(f"line {i}" for i in range(1, 151)) + "\n"
    doc = parse(text, window=60)
    assert doc.headings == []
    assert [(s.start, s.end) for s in doc.sections] == [(1, 60), (61, 120), (121, 150)]


def test_line_numbers_follow_newlines_only() -> None:
    # \r\n, form feeds and U+2028 must not shift line numbers (str.splitlines would).
    text = "# A\r\nx\x0cy\u2028z\n## B\n"
    doc = parse(text)
    assert [(h.line, h.text) for h in doc.headings] == [(1, "A"), (3, "B")]
    assert split_lines("a\nb\n") == ["a", "b"] and split_lines("a\nb") == ["a", "b"]


def test_enclosing_section() -> None:
    doc = parse(DOC)
    assert enclosing(doc.headings, 5, 5, 18) == (4, 9)
    assert enclosing(doc.headings, 14, 14, 18) == (13, 15)
    assert enclosing(doc.headings, 1, 1, 18) == (1, 1)  # the preamble
    assert enclosing(doc.headings, 5, 12, 18) == (1, 18)  # spans two H1s: the whole file


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(
    st.sampled_from(["# H", "## H2", "```", "~~~", "---", "===", "title: x", "", "   # x", "#", "- a",
                     "\r", "# {/*a*/}", "``` js", "####### seven", "\ufeff# bom"]),
    st.text(max_size=40)), max_size=60))
def test_parser_never_crashes_and_ranges_are_sound(lines: list[str]) -> None:
    text = "\n".join(lines)
    doc = parse(text)
    total = len(doc.lines)
    prev_end = 0
    for s in doc.sections:
        assert 1 <= s.start <= s.end <= total
        assert s.start > prev_end
        prev_end = s.end
    for h in doc.headings:
        assert 1 <= h.line <= h.end <= total and 1 <= h.level <= 6 and h.text
        assert enclosing(doc.headings, h.line, h.line, total)[0] <= h.line


def test_real_corpora_parse_with_known_quirks(test_data: Path) -> None:
    llms = test_data / "llms"
    for path in sorted(llms.glob("*/*.txt")):
        raw = path.read_bytes()
        doc = parse(raw.decode("utf-8", errors="replace"))
        assert len(doc.lines) == raw.count(b"\n") + (0 if raw.endswith(b"\n") else 1), path
        assert doc.sections, path
    # No H1 at the top: langgraph starts with a blank line then "# Guides".
    assert parse((llms / "langgraph/llms.txt").read_text()).headings[0].text == "Guides"
    # The <SYSTEM> preamble before hono's first heading is indexed as its own section.
    hono = parse((llms / "hono/llms-small.txt").read_text())
    assert hono.sections[0].path == () and hono.sections[0].start == 1
    # A URL as the H1.
    assert parse((llms / "copilotkit/llms.txt").read_text()).title.startswith("http://docs.copilotkit.ai")
    # YAML front-matter in react's full file yields no spurious setext headings.
    react = parse((llms / "react-dev/llms-full.txt").read_text())
    assert not any(h.text.startswith(("title:", "url:")) for h in react.headings)
