"""The llms.txt parser: headings, sections, exact line ranges, and no crash on any input."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from cairn_servers.blz.llmstxt import enclosing, parse, split_lines

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


# -- page-aware parsing and fence repair (issue 16) ---------------------------------------------

def _heads(text: str) -> list[tuple[int, int, str]]:
    return [(h.line, h.level, h.text) for h in parse(text).headings]


def test_closing_fence_glued_to_the_next_pages_front_matter() -> None:
    # Scraped pages joined with nothing between them: "```---" closes the fence and opens front matter.
    text = ("---\nurl: \"https://x.dev/a\"\ntitle: \"A - X\"\n---\n\n# A\n\n```\nexport const a = 1\n"
            "```---\nurl: \"https://x.dev/b\"\ntitle: \"B - X\"\n---\n\n# B\n\n## B two\n\n[Home](/)---\n"
            "url: \"https://x.dev/c\"\ntitle: \"C\"\n---\n# C\n")
    assert _heads(text) == [(6, 1, "A"), (15, 1, "B"), (17, 2, "B two"), (23, 1, "C")]
    doc = parse(text)
    assert [(p.start, p.title) for p in doc.pages] == [(1, "A - X"), (10, "B - X"), (19, "C")]
    # A heading ends at its page's end; sections restart under the page title.
    assert [(h.text, h.end) for h in doc.headings] == [("A", 9), ("B", 18), ("B two", 18), ("C", 23)]
    assert all(s.end < 19 or s.start >= 19 for s in doc.sections)
    assert doc.sections[-1].path == ("C",)  # the page title is not repeated


def test_front_matter_with_a_site_path_url_is_a_page_boundary() -> None:
    text = "---\nurl: /guide/a.md\n---\n# A\n```ts\nopen\n---\nurl: /guide/b.md\n---\n# B\n"
    assert _heads(text) == [(4, 1, "A"), (10, 1, "B")]


def test_unclosed_fence_closes_at_the_page_boundary() -> None:
    text = ("\n---\ntitle: A\nurl: https://x.dev/a\n---\n## A\n```bash\necho never closed\n\n"
            "---\ntitle: B\nurl: https://x.dev/b\n---\n## B\n```bash\n# a shell comment\n## and another\n```\n"
            "## After\n")
    assert _heads(text) == [(6, 2, "A"), (14, 2, "B"), (19, 2, "After")]


def test_shorter_closer_heals_a_fence_that_would_run_to_the_end() -> None:
    text = "# T\n````js\nlet a\n```\n## Found\n```python\n# comment\n```\n"
    assert _heads(text) == [(1, 1, "T"), (5, 2, "Found")]
    # Well-formed nesting keeps its meaning: the inner three-backtick lines are content.
    nested = "# T\n````md\n```js\n# not a heading\n```\n````\n## Found\n"
    assert _heads(nested) == [(1, 1, "T"), (7, 2, "Found")]
    # Several four-backtick openers each closed by three, in a file without pages: the next opener
    # is a valid closer for CommonMark, but the odd count of shorter fences between says otherwise.
    several = "# T\n````\na\n```\n\n## One\n\n````\n# b\n```\n## Two\n````\nc\n```\n"
    assert _heads(several) == [(1, 1, "T"), (6, 2, "One"), (11, 2, "Two")]


def test_a_fence_nothing_can_close_ends_at_a_heading_after_a_blank_line() -> None:
    text = ("# T\n```js\nlet a\n# not after a blank line\n\n# a comment before code\nrun()\n\n## Found\n\n"
            "This section explains what was found.\n")
    assert _heads(text) == [(1, 1, "T"), (9, 2, "Found")]
    # With a fence line left to close it, the fence keeps its content (CommonMark).
    assert _heads("# T\n```js\nlet a\n\n# comment\n```\n") == [(1, 1, "T")]


def test_info_string_opener_ends_a_fence_with_no_closer_in_its_page() -> None:
    text = "# T\n````js\nlet a\n````python\n# comment\n```\n## Found\n"
    assert _heads(text) == [(1, 1, "T"), (7, 2, "Found")]


def test_h1_with_permalink_or_source_line_starts_a_page() -> None:
    text = ("# Install [¶](https://x.dev/install#install \"Permanent link\")\n\n```sh\nunclosed\n\n"
            "# Usage[¶](https://x.dev/usage#usage \"Permanent link\")\n\n## Options\n")
    assert _heads(text) == [(1, 1, "Install"), (6, 1, "Usage"), (8, 2, "Options")]
    sphinx = ("Install[¶](#install \"Link to this heading\")\n=======\n\n```sh\nunclosed\n\n"
              "Usage[¶](#usage \"Link to this heading\")\n=====\n\n## Options\n")
    assert _heads(sphinx) == [(1, 1, "Install"), (7, 1, "Usage"), (10, 2, "Options")]
    mintlify = ("# Quickstart\nSource: https://docs.x.dev/quickstart\n\n```python\nunclosed\n\n"
                "# Errors\nSource: https://docs.x.dev/errors\n\n## Codes\n")
    assert _heads(mintlify) == [(1, 1, "Quickstart"), (7, 1, "Errors"), (10, 2, "Codes")]
    summary = ("# Workflows\n\n> Durable processes.\n\nSource: https://docs.x.dev/workflows/\n```python\nopen\n\n"
               "# Agents\n\n> Tools.\n\nSource: https://docs.x.dev/agents/\n## Tools\n")
    assert _heads(summary) == [(1, 1, "Workflows"), (9, 1, "Agents"), (14, 2, "Tools")]
    doc = parse(mintlify)
    assert [(p.start, p.end, p.title, p.heading) for p in doc.pages] == [
        (1, 6, "Quickstart", True), (7, 10, "Errors", True)]
    # A YAML comment before a url key, inside a fence, is not a page boundary.
    yaml = "# Config\n\n```yaml\n# Site\nurl: https://x.dev\n```\n## Next\n"
    assert _heads(yaml) == [(1, 1, "Config"), (7, 2, "Next")]


def test_permalink_markers_are_not_heading_text() -> None:
    text = ("# Compilation[¶](https://vbt.dev/cookbook/compilation/#compilation \"Permanent link\")\n"
            "## Install[\u200b](#install \"Direct link to Install\")\n"
            "## [Standard](https://docs.copilotkit.ai/\\#standard)\n"
            "## HTTP [](https://orpc.dev/docs/http\\#http)\n"
            "### Overview [¶](https://pkg.go.dev/testing#pkg-overview)\n"
            "## [Link](https://x.dev/page) to elsewhere\n"
            "Automation nodes[¶](#automation-nodes \"Permalink to this heading\")\n"
            "=================\n")
    assert [h.text for h in parse(text).headings] == [
        "Compilation", "Install", "Standard", "HTTP", "Overview", "[Link](https://x.dev/page) to elsewhere",
        "Automation nodes"]


def test_front_matter_inside_a_fenced_sample_stays_code() -> None:
    text = "# Docs\n\n```md\n---\ntitle: Hello\n---\n# Sample page\n```\n\n## Real\n"
    assert _heads(text) == [(1, 1, "Docs"), (10, 2, "Real")]


def test_llms_ctx_doc_tags_are_pages_and_carry_glued_headings() -> None:
    text = ("<project title=\"P\">\n<docs><doc title=\"Guide\" desc=\"g\"># Guide\n\n```python\nx = 1\n"
            "```</doc><doc title=\"Ref\" desc=\"r\"># Reference\n## Calls\n"
            "end.</doc><doc title=\"Example\" desc=\"e\">from app import x\nimport os\n\n"
            "# set up the app\ndef main():\n    pass\n# run it\nclass App:\n    pass\n</doc></docs></project>\n")
    assert _heads(text) == [(2, 1, "Guide"), (6, 1, "Reference"), (7, 2, "Calls")]
    titles = [(p.start, p.title) for p in parse(text).pages]
    assert titles == [(1, ""), (2, "Guide"), (6, "Reference"), (8, "Example")]  # a pasted source file


def test_repository_dump_pages_of_source_code_hold_no_headings() -> None:
    text = "# Dump\n\n--- src/app.py ---\n# set up logging\nimport logging\n--- docs/guide.md ---\n# Guide\n"
    assert _heads(text) == [(1, 1, "Dump"), (7, 1, "Guide")]


def test_fenced_comments_stay_code_with_pages_around() -> None:
    page = ("---\ntitle: {t}\nurl: https://x.dev/{t}\n---\n\n## {t}\n\n```bash\n# install\n## build\n```\n\n"
            "```python\n# a comment\ndef f():\n    pass\n```\n")
    text = "".join(page.format(t=t) for t in ("one", "two", "three"))
    assert [h.text for h in parse(text).headings] == ["one", "two", "three"]


def test_many_long_openers_closed_by_three_backticks() -> None:
    text = "# T\n\n" + "".join(f"````js\n// {i}\n```\n\n## H{i}\n\n" for i in range(300))
    assert [h.text for h in parse(text).headings] == ["T", *(f"H{i}" for i in range(300))]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([b"a", b"\n", b"\n\n", b" ", "😀".encode(), b"\xff", b"\xe2\x82", b"\xef\xbb\xbf"]),
                max_size=40), st.sampled_from([1, 2, 3, 7, 1 << 20]))
def test_lines_decoded_a_piece_at_a_time_are_those_of_the_whole(parts: list[bytes], step: int) -> None:
    """decode_lines decodes a megabyte at a time: the lines (invalid bytes replaced, a BOM dropped) are
    those of decoding line by line, whatever the piece size."""
    from cairn_servers.blz import llmstxt

    data = b"".join(parts)
    whole = [ln.decode("utf-8", errors="replace") for ln in data.split(b"\n")]
    if len(whole) > 1 and whole[-1] == "":
        whole.pop()
    whole[0] = whole[0].removeprefix("\ufeff")
    saved = llmstxt.DECODE_STEP
    llmstxt.DECODE_STEP = step
    try:
        assert llmstxt.decode_lines(data) == whole
    finally:
        llmstxt.DECODE_STEP = saved
