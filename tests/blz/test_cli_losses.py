"""Nothing blz leaves out or changes is left unsaid: a citation the line budget could not fit, a search
that fell back to any of the words, an llms-full.txt taken for the llms.txt asked for."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


from .conftest import blz


@pytest.fixture
def sources(tmp_path: Path, data_root: Path) -> None:
    big = tmp_path / "big.txt"  # one section of 3,000 lines: --context all on it alone fills the line budget
    big.write_text("# Big\n\n" + "\n".join(f"line {i} about effects" for i in range(3000)) + "\n")
    small = tmp_path / "small.txt"
    small.write_text("# Small\n\n## Routing\n\nRoutes map paths to handlers.\nMore routing.\n")
    assert blz("add", "big", str(big))[0] == 0
    assert blz("add", "small", str(small))[0] == 0


@pytest.mark.usefixtures("sources")
def test_get_keeps_every_citation_within_the_line_budget() -> None:
    code, out, _ = blz("get", "big:120-142,200-210", "small:1-6", "--context", "all", "--json")
    assert code == 0
    snippets = json.loads(out)["snippets"]
    assert [s["alias"] for s in snippets] == ["big", "small"]
    assert snippets[1]["lines"] == "1-6" and "Routes map paths" in snippets[1]["content"]
    assert snippets[0]["truncated"] and snippets[0]["remaining"] == "big:1995-3002"
    assert sum(len(s["content"].split("\n")) for s in snippets) == 2000  # the budget, all of it used
    code, text, _ = blz("get", "big:120-142,200-210", "small:1-6", "--context", "all", "--text")
    assert "--- big:1-1994  Big  (truncated; the rest: big:1995-3002)" in text and "--- small:1-6" in text


@pytest.mark.usefixtures("sources")
def test_an_any_term_fallback_is_told_in_every_format() -> None:
    query = '"routes effects"'  # no section has the phrase; each word is somewhere
    code, out, err = blz("search", query, "--json")
    assert code == 0 and json.loads(out)["fallback"] == "any-term" and err == ""
    note = ("nothing matches all of '\"routes effects\"' (as a phrase or every word); "
            "showing sections with any of its words")
    code, out, err = blz("search", query, "--text")
    assert out.startswith(f"({note})\n") and err == ""
    for fmt in ("jsonl", "csv", "tsv", "md"):
        code, out, err = blz("search", query, "--format", fmt)
        assert code == 0 and out and err == f"blz: note: {note}\n", (fmt, err)
    code, out, err = blz("search", "routes", "--format", "csv")  # a plain match: no note
    assert code == 0 and err == ""


def test_add_says_when_it_took_llms_full_for_llms_txt(tmp_path: Path, data_root: Path) -> None:
    (tmp_path / "llms.txt").write_text("# Index\n\n- [Guide](guide.md)\n")
    (tmp_path / "llms-full.txt").write_text("# Full\n\n## Guide\n\nThe whole guide.\n")
    asked = tmp_path / "llms.txt"
    code, out, _ = blz("add", "docs", str(asked), "--json")
    data = json.loads(out)
    assert code == 0 and data["substituted"] == {"asked": asked.as_uri(), "used": (tmp_path / "llms-full.txt").as_uri()}
    assert data["message"].endswith(f"from {(tmp_path / 'llms-full.txt').as_uri()}, the complete text beside the "
                                    f"llms.txt given (--exact adds {asked.as_uri()} itself)")
    code, out, _ = blz("add", "exact", str(asked), "--exact", "--json")
    assert code == 0 and "substituted" not in json.loads(out) and "beside" not in json.loads(out)["message"]
