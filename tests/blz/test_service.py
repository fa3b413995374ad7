"""Store, search and retrieval against real files: exact lines, global ranking, context modes."""

from __future__ import annotations

import re

import hashlib
from pathlib import Path

import pytest

from cairn_servers.blz import search as searching
from cairn_servers.blz import service, sources
from cairn_servers.blz.citation import check_alias, parse_citation
from cairn_servers.blz.store import Store
from cairn_servers.core.errors import Conflict, InvalidInput, NotFound, StorageError

ALPHA = """# Alpha Guide

Intro text about alpha.

## Installing

Run the installer with pip.
Then check the version.

## Widgets

Widgets are frobnicated here.
```
## not a heading
```

### Widget options

Options control widgets.
"""

BETA = """Preamble about zebra crossings before any heading.

# Beta

## Widgets in beta

Beta has widgets and more widgets: widgets everywhere, widgets widgets.
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_bytes(text.encode())
    return path


def test_add_local_file_stores_bytes_verbatim_and_counts(store: Store, tmp_path: Path) -> None:
    raw = ALPHA.replace("\n", "\r\n").encode() + b"\xff tail without newline"
    path = tmp_path / "alpha.txt"
    path.write_bytes(raw)
    info = sources.add(store, "Alpha", str(path))
    assert info["alias"] == "alpha" and info["lines"] == ALPHA.count("\n") + 1
    row = store.source("alpha")
    assert row is not None
    assert store.file_path(row).read_bytes() == raw
    assert row.sha256 == hashlib.sha256(raw).hexdigest()
    # Retrieval returns lines without their \r, exactly as numbered.
    got = service.get(store, ["alpha:5-7"])["snippets"][0]
    assert got["content"] == "## Installing\n\nRun the installer with pip."
    assert got["headingPath"] == ["Alpha Guide", "Installing"]


def test_add_refuses_existing_alias_without_force(store: Store, tmp_path: Path) -> None:
    path = write(tmp_path, "a.txt", ALPHA)
    sources.add(store, "alpha", str(path))
    with pytest.raises(Conflict) as err:
        sources.add(store, "alpha", str(path))
    assert err.value.message == ("Source 'alpha' already exists. Use --force to replace it, or "
                                 "`blz update alpha` to refresh it.")
    sources.add(store, "alpha", str(path), force=True)


@pytest.mark.parametrize("bad", ["", "-x", ".x", "a/b", "a..b/c", "x" * 65, "a b", "a\x00b", "ü"])
def test_alias_validation(bad: str) -> None:
    with pytest.raises(InvalidInput):
        check_alias(bad)


def test_citations_parse_case_insensitively() -> None:
    assert parse_citation("ReAct:1-3,5-9") == ("react", [(1, 3), (5, 9)])
    assert parse_citation("bun:7") == ("bun", [(7, 7)])
    for bad in ("bun", "bun:0-2", "bun:5-2", "bun:x-y", ":1-2"):
        with pytest.raises(InvalidInput):
            parse_citation(bad)


def test_search_weights_headings_and_cites_lines(store: Store, tmp_path: Path) -> None:
    sources.add(store, "alpha", str(write(tmp_path, "a.txt", ALPHA)))
    res = searching.search(store, "installer")
    hit = res["hits"][0]
    assert (hit["alias"], hit["lines"], hit["headingPath"]) == ("alpha", "5-9", ["Alpha Guide", "Installing"])
    assert "installer" in hit["snippet"] and hit["score"] == 100.0
    assert hit["sourceUrl"].startswith("file://")
    # Headings inside code fences are not headings: the widgets section runs through the fence.
    assert searching.search(store, "frobnicated")["hits"][0]["lines"] == "10-16"
    # Heading text outranks body text: "options" is the heading of 17-20 and a body word elsewhere.
    assert searching.search(store, "options")["hits"][0]["lines"] == "17-19"


def test_preamble_is_searchable(store: Store, tmp_path: Path) -> None:
    sources.add(store, "beta", str(write(tmp_path, "b.txt", BETA)))
    hit = searching.search(store, "zebra")["hits"][0]
    assert hit["lines"] == "1-2" and hit["headingPath"] == []


def test_multi_source_ranking_is_on_one_scale(store: Store, tmp_path: Path) -> None:
    sources.add(store, "alpha", str(write(tmp_path, "a.txt", ALPHA)))
    sources.add(store, "beta", str(write(tmp_path, "b.txt", BETA)))
    both = searching.search(store, "widgets")["hits"]
    scores = [h["score"] for h in both]
    assert scores == sorted(scores, reverse=True) and scores[0] == 100.0
    # beta's section says "widgets" six times in a short body: it must beat alpha on the shared scale.
    assert both[0]["alias"] == "beta"
    only = searching.search(store, "widgets", ["ALPHA"])["hits"]
    assert {h["alias"] for h in only} == {"alpha"}
    with pytest.raises(NotFound):
        searching.search(store, "widgets", ["gamma"])


@pytest.mark.parametrize("query", ['-', '"unbalanced', 'a:b', '*', '(x', 'NOT AND OR', 'NEAR(a b)',
                                   'Виджеты', '日本語', "c'est", '\x00', 'x' * 2000])
def test_any_query_text_is_accepted(store: Store, tmp_path: Path, query: str) -> None:
    sources.add(store, "alpha", str(write(tmp_path, "a.txt", ALPHA)))
    assert isinstance(searching.search(store, query)["hits"], list)


def test_phrases_fallbacks_and_typos(store: Store, tmp_path: Path) -> None:
    sources.add(store, "alpha", str(write(tmp_path, "a.txt", ALPHA)))
    assert searching.search(store, '"check the version"')["hits"][0]["lines"] == "5-9"
    assert searching.search(store, '"version the check"')["hits"] == [] or \
        searching.search(store, '"version the check"')["fallback"] == "any-term"
    res = searching.search(store, "installer zzzqqq")
    assert res["fallback"] == "any-term" and res["hits"][0]["lines"] == "5-9"
    typo = searching.search(store, "frobnicatd")
    assert typo["fallback"] == "corrected" and typo["correctedQuery"] == "frobnicated"
    assert typo["hits"][0]["lines"] == "10-16"


def test_paging(store: Store, tmp_path: Path) -> None:
    text = "".join(f"# Part {i}\n\nshared word here {i}\n\n" for i in range(25))
    sources.add(store, "many", str(write(tmp_path, "m.txt", text)))
    p1 = searching.search(store, "shared", limit=10)
    p3 = searching.search(store, "shared", limit=10, page=3)
    assert len(p1["hits"]) == 10 and p1["hasMore"] and len(p3["hits"]) == 5 and not p3["hasMore"]
    assert not {h["lines"] for h in p1["hits"]} & {h["lines"] for h in p3["hits"]}
    with pytest.raises(InvalidInput):
        searching.search(store, "shared", limit=51)


def test_get_ranges_context_and_cap(store: Store, tmp_path: Path) -> None:
    sources.add(store, "alpha", str(write(tmp_path, "a.txt", ALPHA)))
    lines = ALPHA.split("\n")
    snips = service.get(store, ["alpha:1-1,3-3", "ALPHA:7"])["snippets"]
    assert [(s["lines"], s["content"]) for s in snips] == [
        ("1-1", lines[0]), ("3-3", lines[2]), ("7-7", lines[6])]
    sym = service.get(store, ["alpha:7-7"], "symmetric", 2)["snippets"][0]
    assert sym["lines"] == "5-9" and sym["content"] == "\n".join(lines[4:9])
    whole = service.get(store, ["alpha:12-12"], "all")["snippets"][0]
    assert whole["lines"] == "10-19"  # ## Widgets up to the end (its ### child included)
    merged = service.get(store, ["alpha:1-3,2-5"])["snippets"]
    assert [s["lines"] for s in merged] == ["1-5"]
    capped = service.get(store, ["alpha:1-20"], max_lines=4)["snippets"][0]
    assert capped["lines"] == "1-4" and capped["truncated"] is True
    clamped = service.get(store, ["alpha:18-999"])["snippets"][0]
    assert clamped["lines"] == "18-19"
    with pytest.raises(InvalidInput):
        service.get(store, ["alpha:500-501"])
    with pytest.raises(InvalidInput):
        service.get(store, ["alpha:1-2"], "symmetric", 51)


def test_failed_replace_leaves_previous_source_intact(store: Store, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, "a.txt", ALPHA)
    sources.add(store, "alpha", str(path))
    before = store.source("alpha")
    assert before is not None
    path.write_text(BETA)

    def boom(*args: object) -> None:
        raise StorageError("disk full (simulated)")

    # _log runs inside the swap transaction, after the new rows were inserted: a real rollback.
    monkeypatch.setattr(store, "_log", boom)
    with pytest.raises(StorageError):
        sources.add(store, "alpha", str(path), force=True)
    monkeypatch.undo()
    assert store.source("alpha") == before
    assert [p.name for p in (store.root / "sources" / "alpha").iterdir()] == [before.file]
    assert searching.search(store, "installer")["hits"][0]["alias"] == "alpha"
    assert searching.search(store, "zebra")["hits"] == []
    assert service.validate(store)["ok"]


def test_validate_detects_tampering_and_remove_cleans_up(store: Store, tmp_path: Path) -> None:
    sources.add(store, "alpha", str(write(tmp_path, "a.txt", ALPHA)))
    assert service.validate(store, "alpha")["ok"]
    row = store.source("alpha")
    assert row is not None
    store.file_path(row).write_text(ALPHA + "tampered\n")
    report = service.validate(store, "alpha")
    assert not report["ok"] and any("checksum" in p for p in report["sources"][0]["problems"])
    sources.remove(store, "alpha")
    assert store.source("alpha") is None and not store.file_path(row).exists()
    assert searching.search(store, "installer")["hits"] == []
    assert [e["action"] for e in service.history(store)["events"]] == ["remove", "add"]
    with pytest.raises(NotFound):
        sources.remove(store, "alpha")


def test_inspect_stats_and_list(store: Store, tmp_path: Path) -> None:
    sources.add(store, "alpha", str(write(tmp_path, "a.txt", ALPHA)))
    sources.add(store, "beta", str(write(tmp_path, "b.txt", BETA)))
    info = service.inspect(store, "alpha")
    assert info["file"].startswith("sources/alpha/") and info["headingLevels"] == {"h1": 1, "h2": 2, "h3": 1}
    stats = service.stats(store)
    assert stats["sources"] == 2 and stats["totalLines"] == ALPHA.count("\n") + BETA.count("\n")
    listed = service.list_sources(store, "BET", include_registry=True)["sources"]
    assert [s["alias"] for s in listed if s["kind"] == "installed"] == ["beta"]
    full = service.list_sources(store, include_registry=True)["sources"]
    assert any(s["kind"] == "registry" and s["suggestedCommand"] == "blz add react" for s in full)


def test_local_directory_prefers_full_variant(store: Store, tmp_path: Path) -> None:
    write(tmp_path, "llms.txt", BETA)
    write(tmp_path, "llms-full.txt", ALPHA)
    assert sources.add(store, "d", str(tmp_path))["url"].endswith("/llms-full.txt")
    assert sources.add(store, "e", str(tmp_path / "llms.txt"))["url"].endswith("/llms-full.txt")
    assert sources.add(store, "f", str(tmp_path / "llms.txt"), exact=True)["url"].endswith("/llms.txt")
    assert sources.add(store, "g", (tmp_path / "llms.txt").as_uri(), exact=True)["lines"] == BETA.count("\n")
    with pytest.raises(NotFound):
        sources.add(store, "h", str(tmp_path / "missing.txt"))


def test_react_full_corpus(store: Store, test_data: Path) -> None:
    path = test_data / "llms/react-dev/llms-full.txt"
    info = sources.add(store, "react", str(path))
    assert info["lines"] == 92453
    hit = searching.search(store, "useState", ["react"])["hits"][0]
    start, end = (int(x) for x in hit["lines"].split("-"))
    real = path.read_text().split("\n")
    got = service.get(store, [f"react:{hit['lines']}"])["snippets"][0]["content"]
    assert got == "\n".join(real[start - 1:end])
    assert "usestate" in got.lower()


def test_line_budget_spans_citations(store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The answer's line budget (DEFAULT_MAX_LINES, 2000) is shared by every span: each gets lines (the
    short ones first, whole when they fit), a cut one names the rest; with more spans than lines, a span
    without any is still listed, empty, with its citation as ``remaining`` (never left out silently)."""
    sources.add(store, "alpha", str(write(tmp_path, "a.txt", ALPHA)))
    monkeypatch.setattr(service, "DEFAULT_MAX_LINES", 5)
    snips = service.get(store, ["alpha:1-3", "alpha:5-9", "alpha:12-13"])["snippets"]
    assert [(s["lines"], s.get("truncated", False), s.get("remaining")) for s in snips] == [
        ("1-2", True, "alpha:3-3"), ("5-6", True, "alpha:7-9"), ("12-12", True, "alpha:13-13")]
    monkeypatch.setattr(service, "DEFAULT_MAX_LINES", 8)
    snips = service.get(store, ["alpha:1-3", "alpha:5-9", "alpha:12-13"])["snippets"]
    assert [s["lines"] for s in snips] == ["1-3", "5-7", "12-13"]  # the short spans whole
    monkeypatch.setattr(service, "DEFAULT_MAX_LINES", 2)
    snips = service.get(store, ["alpha:1-3", "alpha:5-9", "alpha:12-13"])["snippets"]
    lines = ALPHA.split("\n")
    assert [(s["lines"], s["content"], s.get("remaining")) for s in snips] == [
        ("1-1", lines[0], "alpha:2-3"), ("5-5", lines[4], "alpha:6-9"), ("12-11", "", "alpha:12-13")]


def test_max_lines_caps_each_span(store: Store, tmp_path: Path) -> None:
    """Issue 16: maxLines caps every span (not the answer), and says what was cut as a citation."""
    sources.add(store, "alpha", str(write(tmp_path, "a.txt", ALPHA)))
    lines = ALPHA.splitlines()
    snips = service.get(store, ["alpha:1-3", "alpha:5-9", "alpha:12-13"], max_lines=2)["snippets"]
    assert [(s["lines"], s.get("truncated", False), s.get("remaining")) for s in snips] == [
        ("1-2", True, "alpha:3-3"), ("5-6", True, "alpha:7-9"), ("12-13", False, None)]
    assert snips[1]["content"] == "\n".join(lines[4:6])
    # The cap applies after context: the expanded span is cut, the citation of the rest follows it.
    whole = service.get(store, ["alpha:12-12"], "all", max_lines=3)["snippets"][0]
    assert (whole["lines"], whole["remaining"]) == ("10-12", "alpha:13-19")
    assert service.get(store, ["alpha:1-3"], max_lines=3)["snippets"][0].keys() == {
        "alias", "lines", "content", "headingPath"}
    with pytest.raises(InvalidInput, match="maxLines must be at least 1, not 0"):
        service.get(store, ["alpha:1-3"], max_lines=0)


def test_context_before_and_after(store: Store, tmp_path: Path) -> None:
    """Issue 16: -B / -A (linesBefore / linesAfter) pad one side; -C pads both and is overridden
    per side; alone, either means symmetric context with nothing on the other side."""
    sources.add(store, "alpha", str(write(tmp_path, "a.txt", ALPHA)))

    def span(**kw: object) -> str:
        return str(service.get(store, ["alpha:7-7"], **kw)["snippets"][0]["lines"])  # type: ignore[arg-type]

    assert span(after=2) == "7-9"
    assert span(before=2) == "5-7"
    assert span(before=1, after=3) == "6-10"
    assert span(padding=2) == "5-9"  # -C unchanged
    assert span(padding=2, after=0) == "5-7"
    assert span(padding=1, before=4) == "3-8"
    assert span(context="symmetric") == "2-12"  # symmetric alone: 5 lines each side, as before
    assert span(context="symmetric", after=1) == "7-8"
    assert span(context="none", after=3) == "7-7"  # as -C: no expansion when the mode says none
    assert span(before=50, after=50) == "1-19"  # clamped to the file
    whole = service.get(store, ["alpha:7-7"], "all", before=1)["snippets"][0]
    assert whole["lines"] == "5-9"  # all: the heading section, whatever the padding
    with pytest.raises(InvalidInput, match="Lines after must be between 0 and 50, not 51"):
        service.get(store, ["alpha:7-7"], after=51)
    with pytest.raises(InvalidInput, match="Lines before must be between 0 and 50, not -1"):
        service.get(store, ["alpha:7-7"], before=-1)


def test_search_accepts_any_text_property(store: Store, tmp_path: Path) -> None:
    from hypothesis import example, given, settings
    from hypothesis import strategies as st

    sources.add(store, "alpha", str(write(tmp_path, "a.txt", ALPHA)))

    @settings(max_examples=200, deadline=None)
    @given(st.text(max_size=60))
    @example("\x08-0")  # a control character separates words: only an excluded word is left
    def check(query: str) -> None:
        try:
            res = searching.search(store, query, limit=3)
        except InvalidInput as exc:
            # the one refusal: words to exclude (-word) and none to search for
            assert "only excludes words" in exc.message
            spaced = re.sub(r"[\x00-\x1f\x7f]", " ", query)  # control characters separate words
            rest = re.sub(r'(^|\s)-(?=[\w"])(?:"[^"]*"?|\S+)', " ", spaced)  # the excluded terms taken out
            assert not re.search(r"\w", rest), (query, rest)
            return
        assert len(res["hits"]) <= 3
        for hit in res["hits"]:
            assert 0.0 <= hit["score"] <= 100.0

    check()


PAGES = """Preamble before any heading.

# Site

Intro.

## Part one

Text one.

---
url: https://example.com/a
title: Page A
---

# Page A

Body A.

### Deep in A

Deeper.

---
url: https://example.com/b
title: Page B
---

## Page B

Body B.
"""


@pytest.mark.parametrize("corpus", ["react", "pages"])
def test_citation_heading_paths_read_only_the_enclosing_headings(store: Store, test_data: Path, tmp_path: Path,
                                                                 corpus: str) -> None:
    """A citation's headingPath and its "all" context come from the headings whose sections hold it
    (issue 16: reading react's 1,912 headings cost every cited range ~2.6 ms), with the answers the
    whole outline gives: checked at every line of a paged file and at 600 lines of react."""
    import random

    from cairn_servers.blz import llmstxt

    path = test_data / "llms/react-dev/llms-full.txt" if corpus == "react" else write(tmp_path, "p.txt", PAGES)
    total = sources.add(store, "doc", str(path))["lines"]
    outline = store.headings("doc")
    heads = [llmstxt.Heading(*h) for h in outline]
    assert heads
    lines = list(range(1, total + 1)) if total < 1000 else random.Random(16).sample(range(1, total + 1), 600)
    for line in lines:
        assert service.heading_path(store, "doc", line) == service.path_of(outline, line), line
        end = min(total, line + (line % 7) * 40)
        whole = service.get(store, [f"doc:{line}-{end}"], "all", max_lines=1)["snippets"][0]
        first, last = llmstxt.enclosing(heads, line, end, total)
        assert (whole["lines"], whole.get("remaining")) == (
            f"{first}-{first}", f"doc:{first + 1}-{last}" if last > first else None), (line, end)
        assert whole["headingPath"] == service.path_of(outline, first)
    if corpus == "pages":  # page boundaries end "Site" and "Page A": no ancestors of what follows them
        assert service.heading_path(store, "doc", 1) == []
        assert service.get(store, ["doc:1-1"], "all")["snippets"][0]["lines"] == "1-2"  # the preamble
        assert service.get(store, ["doc:7-16"], "all")["snippets"][0]["lines"] == f"1-{total}"  # two pages
        assert service.heading_path(store, "doc", 9) == ["Site", "Part one"]
        assert service.heading_path(store, "doc", 14) == []
        assert service.heading_path(store, "doc", 23) == ["Page A", "Deep in A"]
        assert service.heading_path(store, "doc", 31) == ["Page B"]  # not under the H1 "Page A" before it


def test_citation_heading_paths_follow_a_replaced_source(store: Store, tmp_path: Path) -> None:
    """Nothing of an outline outlives the source it came from: after `add --force` and after `update`
    with new content, the same Store answers citations with the new headings."""
    doc = write(tmp_path, "g.txt", "# Guide\n\n## Hooks\n\nHooks text.\n")
    sources.add(store, "g", str(doc))
    assert service.get(store, ["g:5-5"])["snippets"][0]["headingPath"] == ["Guide", "Hooks"]
    sources.add(store, "g", str(write(tmp_path, "g2.txt", "# Manual\n\n## Effects\n\nEffect text.\n")), force=True)
    assert service.get(store, ["g:5-5"])["snippets"][0]["headingPath"] == ["Manual", "Effects"]
    doc.write_text("# Handbook\n\nIntro.\n\n## State\n\nState text.\n")
    sources.add(store, "h", str(doc))
    doc.write_text("# Handbook\n\n## Refs\n\nRefs text.\n\n## State\n\nState text.\n")
    assert sources.update(store, "h")["status"] == "updated"
    assert service.get(store, ["h:4-4"])["snippets"][0]["headingPath"] == ["Handbook", "Refs"]
    assert service.get(store, ["h:8-8"], "all")["snippets"][0]["lines"] == "7-9"
