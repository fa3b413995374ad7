"""The user documentation speaks about the product: no issue numbers, no "the seed", no names of the
engineers' working branches (``h-parse``). Checked over README.md, docs/*.md and examples/**/*.md.

docs/benchmarks.md is not covered: it is the log of measured runs, each naming the code it measured
(a branch, a commit), which is what makes a figure checkable."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = sorted([REPO / "README.md", REPO / "CHANGELOG.md",
               *(p for p in (REPO / "docs").glob("*.md") if p.name != "benchmarks.md"),
               *(REPO / "examples").rglob("*.md")])
# "issue 16", "issues 12 and 20", "the seed's", "h-brkscale" (a random seed, `--seed`, is a product word)
INTERNAL = re.compile(r"\bissues? #?\d+|\bthe seeds?\b(?! is printed)|\bseeds?'s?\b(?= (?:parameter|client|names|calls))"
                      r"|\bh-[a-z]+\b", re.IGNORECASE)


def test_the_pattern_finds_internal_words() -> None:
    for text in ("fixed in issue 16", "as the seed calls it", "on branch h-parse", "Issues 12 and 20"):
        assert INTERNAL.search(text), text
    for text in ("Deterministic for a seed", "--seed 7", "the seed is printed and SEED=N repeats it", "branch = main"):
        assert not INTERNAL.search(text), text


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_docs_name_no_issue_seed_or_branch(doc: Path) -> None:
    found = [(n, line.strip()) for n, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1)
             if INTERNAL.search(line)]
    assert found == []
